/* Gemm, MatMul and MatMulT: every transpose combination, Gemm's C broadcast shapes, batched and
 * broadcast MatMul, 1-D operands (forward), and the gradients. */
#include <stdio.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

/* Gradients that reduce broadcast axes or scale by beta use ReduceSumTo and Mul, which other
 * families provide; until they are registered those operands are checked forward only. */
static bool have_ops(const char *a, const char *b) {
  return cx_op_find(a) && (!b || cx_op_find(b));
}

typedef struct gemm_case {
  int64_t m, k, n;
  bool ta, tb;
  float alpha, beta; /* 0: attribute absent */
  cx_shape c;        /* ndim < 0: no C */
  bool beta_zero;    /* sets beta = 0 */
} gemm_case;

static int run_gemm(const char *label, gemm_case t, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  cx_shape as = t.ta ? S(t.k, t.m) : S(t.m, t.k), bs = t.tb ? S(t.n, t.k) : S(t.k, t.n);
  int in[3] = {oc_param(g, "A", &as, -1, 1, seed), oc_param(g, "B", &bs, -1, 1, seed + 1), -1};
  int n_in = 2;
  if (t.c.ndim >= 0) {
    bool full = t.c.ndim == 2 && t.c.d[0] == t.m && t.c.d[1] == t.n;
    bool trainable = (full || have_ops("ReduceSumTo", NULL)) &&
                     ((t.beta == 0 && !t.beta_zero) || t.beta == 1 || have_ops("Mul", NULL));
    in[n_in++] = trainable ? oc_param(g, "C", &t.c, -1, 1, seed + 2)
                           : oc_const(g, "C", &t.c, -1, 1, seed + 2);
    if (!trainable) printf("note %s: C checked forward only (ReduceSumTo/Mul not registered)\n", label);
  }
  int node = cx_graph_node(g, "Gemm", "gemm", in, n_in, 1);
  if (t.ta) cx_node_set_int(g, node, "transA", 1);
  if (t.tb) cx_node_set_int(g, node, "transB", 1);
  if (t.alpha != 0) cx_node_set_float(g, node, "alpha", t.alpha);
  if (t.beta != 0 || t.beta_zero) cx_node_set_float(g, node, "beta", t.beta);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int f = oc_check(label, g, &(oc_opts){.grad = true, .seed = seed});
  cx_graph_free(g);
  return f;
}

static int gemm_cases(void) {
  int f = 0;
  char label[128];
  const cx_shape none = {.ndim = -1};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      snprintf(label, sizeof label, "gemm M3 K5 N4 transA %d transB %d", ta, tb);
      f += run_gemm(label, (gemm_case){3, 5, 4, ta, tb, 0, 0, none, false}, 10 + (uint64_t)(2 * ta + tb));
      snprintf(label, sizeof label, "gemm M3 K5 N4 transA %d transB %d C [3,4] alpha 0.5", ta, tb);
      f += run_gemm(label, (gemm_case){3, 5, 4, ta, tb, 0.5f, 0, S(3, 4), false}, 20 + (uint64_t)(2 * ta + tb));
      snprintf(label, sizeof label, "gemm M4 K3 N5 transA %d transB %d C [5] alpha 2 beta 0.5",
               ta, tb);
      f += run_gemm(label, (gemm_case){4, 3, 5, ta, tb, 2, 0.5f, S(5), false}, 30 + (uint64_t)(2 * ta + tb));
    }
  f += run_gemm("gemm C [1,4]", (gemm_case){3, 5, 4, false, false, 0, 0, S(1, 4), false}, 40);
  f += run_gemm("gemm C [3,1] beta 1.5", (gemm_case){3, 5, 4, false, false, 0, 1.5f, S(3, 1), false}, 41);
  f += run_gemm("gemm C scalar []", (gemm_case){3, 5, 4, false, true, 0, 0, {.ndim = 0}, false}, 42);
  f += run_gemm("gemm C [1,1] beta -2", (gemm_case){3, 5, 4, true, false, 0, -2, S(1, 1), false}, 43);
  f += run_gemm("gemm C [3,4] beta 0", (gemm_case){3, 5, 4, false, false, 0, 0, S(3, 4), true}, 44);
  f += run_gemm("gemm fc batch 1: [1,7] x [5,7]^T + [5]",
                (gemm_case){1, 7, 5, false, true, 0, 0, S(5), false}, 45);
  f += run_gemm("gemm fc [17,64] x [33,64]^T + [33]",
                (gemm_case){17, 64, 33, false, true, 0, 0, S(33), false}, 46);
  return f;
}

/* a @ b with both operands PARAMs (or CONSTs when grad is false). */
static int run_matmul(const char *label, const char *op, cx_shape a, cx_shape b, bool ta, bool tb,
                      bool grad, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "A", &a, -1, 1, seed), oc_param(g, "B", &b, -1, 1, seed + 1)};
  int node = cx_graph_node(g, op, "mm", in, 2, 1);
  if (ta) cx_node_set_int(g, node, "transA", 1);
  if (tb) cx_node_set_int(g, node, "transB", 1);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int f = oc_check(label, g, &(oc_opts){.grad = grad, .seed = seed});
  cx_graph_free(g);
  return f;
}

static int matmul_cases(void) {
  int f = 0;
  bool reduce = have_ops("ReduceSumTo", NULL);
  if (!reduce) printf("note: broadcast-batch MatMul checked forward only (no ReduceSumTo yet)\n");
  f += run_matmul("matmul [3,5] x [5,4]", "MatMul", S(3, 5), S(5, 4), 0, 0, true, 1);
  f += run_matmul("matmul [1,7] x [7,1]", "MatMul", S(1, 7), S(7, 1), 0, 0, true, 2);
  f += run_matmul("matmul batched [2,3,5] x [2,5,4]", "MatMul", S(2, 3, 5), S(2, 5, 4), 0, 0, true, 3);
  f += run_matmul("matmul batched [2,2,3,5] x [2,2,5,4]", "MatMul", S(2, 2, 3, 5), S(2, 2, 5, 4), 0,
                  0, true, 4);
  f += run_matmul("matmul broadcast [2,1,3,5] x [3,5,4]", "MatMul", S(2, 1, 3, 5), S(3, 5, 4), 0, 0,
                  reduce, 5);
  f += run_matmul("matmul broadcast [3,5] x [2,5,4]", "MatMul", S(3, 5), S(2, 5, 4), 0, 0, reduce, 6);
  f += run_matmul("matmul broadcast [2,3,3,5] x [5,4]", "MatMul", S(2, 3, 3, 5), S(5, 4), 0, 0,
                  reduce, 7);
  f += run_matmul("matmul broadcast [1,3,5] x [2,5,4]", "MatMul", S(1, 3, 5), S(2, 5, 4), 0, 0,
                  reduce, 8);
  f += run_matmul("matmul [33,70] x [70,45]", "MatMul", S(33, 70), S(70, 45), 0, 0, true, 9);
  /* a sequence-first projection: the kernel folds A's batch rows into one product, as it does
   * when B's batch dims are all 1 */
  f += run_matmul("matmul rows folded [6,1,5] x [5,4]", "MatMul", S(6, 1, 5), S(5, 4), 0, 0, reduce,
                  14);
  f += run_matmul("matmul rows folded [2,3,5] x [1,5,4]", "MatMul", S(2, 3, 5), S(1, 5, 4), 0, 0,
                  reduce, 15);
  /* 1-D operands: forward only */
  f += run_matmul("matmul 1-D [5] x [5,4]", "MatMul", S(5), S(5, 4), 0, 0, false, 10);
  f += run_matmul("matmul 1-D [2,3,5] x [5]", "MatMul", S(2, 3, 5), S(5), 0, 0, false, 11);
  f += run_matmul("matmul 1-D [5] x [5]", "MatMul", S(5), S(5), 0, 0, false, 12);
  f += run_matmul("matmul 1-D [5] x [2,5,4]", "MatMul", S(5), S(2, 5, 4), 0, 0, false, 13);
  /* MatMulT: transposes read in place */
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      char label[96];
      snprintf(label, sizeof label, "matmulT batched transA %d transB %d", ta, tb);
      cx_shape a = ta ? S(2, 5, 3) : S(2, 3, 5), b = tb ? S(2, 4, 5) : S(2, 5, 4);
      f += run_matmul(label, "MatMulT", a, b, ta, tb, true, 20 + (uint64_t)(2 * ta + tb));
      snprintf(label, sizeof label, "matmulT broadcast transA %d transB %d", ta, tb);
      cx_shape a2 = ta ? S(5, 3) : S(3, 5), b2 = tb ? S(3, 1, 4, 5) : S(3, 1, 5, 4);
      f += run_matmul(label, "MatMulT", a2, b2, ta, tb, reduce, 30 + (uint64_t)(2 * ta + tb));
      snprintf(label, sizeof label, "matmulT rows transA %d transB %d", ta, tb);
      cx_shape a3 = ta ? S(2, 5, 3) : S(2, 3, 5), b3 = tb ? S(4, 5) : S(5, 4);
      f += run_matmul(label, "MatMulT", a3, b3, ta, tb, reduce, 40 + (uint64_t)(2 * ta + tb));
    }
  return f;
}

/* The graph must fail to compile (training when train is set) with a message containing want. */
static int reject_case(const char *label, cx_shape a, cx_shape b, bool train, const char *want) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "A", &a, -1, 1, 1), oc_param(g, "B", &b, -1, 1, 2)};
  cx_graph_mark_output(g, cx_graph_op(g, "MatMul", "mm", in, 2));
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .training = train, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), want);
  printf("%s %s: rejected: %s\n", ok ? "ok  " : "FAIL", label,
         s == CX_OK ? "(compiled)" : cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = gemm_cases() + matmul_cases();
  f += reject_case("matmul gradient of a 1-D operand", S(5), S(5, 4), true, "1-D");
  f += reject_case("matmul K mismatch", S(3, 5), S(4, 4), false, "inner dimensions");
  f += reject_case("matmul batch mismatch", S(2, 3, 5), S(3, 5, 4), false, "batch");
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
