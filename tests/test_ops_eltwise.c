/* Add, Sub, Mul, Div, Sum, Neg, ReduceSumTo, BroadcastTo: forward against the reference, gradients
 * against finite differences, over broadcasting patterns, odd sizes, batch 1 and sizes large
 * enough for the threaded paths; every case once with AVX-512 (where present) and once portable. */

#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "op_check.h"

static const oc_opts grad_opts = {.grad = true, .seed = 11};

static void label_shapes(char *buf, size_t n, const char *what, const cx_shape *a,
                         const cx_shape *b) {
  char sa[CX_SHAPE_STR], sb[CX_SHAPE_STR];
  snprintf(buf, n, "%s %s %s", what, cx_shape_str(a, sa), b ? cx_shape_str(b, sb) : "");
}

/* op(a, b) with both operands trained; b in [lo, hi) (kept away from 0 for Div) */
static int binary(const char *op, cx_shape a, cx_shape b, float lo, float hi) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "a", &a, -2, 2, 1), oc_param(g, "b", &b, lo, hi, 2)};
  cx_graph_mark_output(g, cx_graph_op(g, op, "y", in, 2));
  char label[256];
  label_shapes(label, sizeof label, op, &a, &b);
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int all_binary(cx_shape a, cx_shape b) {
  return binary("Add", a, b, -2, 2) + binary("Sub", a, b, -2, 2) + binary("Mul", a, b, -2, 2) +
         binary("Div", a, b, 0.5f, 2);
}

static int broadcasting(void) {
  int f = 0;
  f += all_binary(S(3, 5, 7), S(3, 5, 7));      /* equal shapes */
  f += all_binary(S(2, 3, 4), S(4));            /* trailing vector */
  f += all_binary(S(2, 1, 4), S(3, 1));         /* both sides broadcast */
  f += all_binary(S(2, 3, 5, 7), S(1, 3, 1, 1)); /* per channel */
  f += all_binary(S(1, 3, 1, 1), S(2, 3, 5, 7));
  f += all_binary(S(1, 3, 5, 7), S(1, 3, 1, 1)); /* batch 1 */
  f += all_binary((cx_shape){0}, S(3, 4));      /* scalar */
  f += all_binary(S(3, 4), (cx_shape){0});
  f += all_binary(S(1), S(1));
  f += all_binary(S(3, 37, 301), S(37, 1));     /* threaded, odd rows */
  f += binary("Mul", S(3, 37, 301), S(3, 37, 301), -2, 2);
  return f;
}

/* Sum of n operands; shared != 0 feeds the same parameter twice (gradient accumulation) */
static int sum(int n, const cx_shape *shapes, bool shared) {
  cx_graph *g = cx_graph_new();
  int in[4];
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", i);
    in[i] = shared && i > 0 ? in[0] : oc_param(g, name, &shapes[i], -2, 2, 10 + (uint64_t)i);
  }
  cx_graph_mark_output(g, cx_graph_op(g, "Sum", "y", in, n));
  char what[64], label[256];
  snprintf(what, sizeof what, "Sum of %d%s", n, shared ? " (one operand twice)" : "");
  label_shapes(label, sizeof label, what, &shapes[0], n > 1 ? &shapes[n - 1] : NULL);
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int sums(void) {
  cx_shape same[3] = {S(3, 5, 7), S(3, 5, 7), S(3, 5, 7)};
  cx_shape mixed[3] = {S(2, 3, 4), S(4), S(2, 1, 1)};
  cx_shape big[4] = {S(5, 4099), S(5, 4099), S(5, 4099), S(5, 4099)};
  return sum(1, same, false) + sum(2, same, false) + sum(3, same, false) + sum(3, mixed, false) +
         sum(2, same, true) + sum(4, big, false);
}

static int neg(cx_shape s) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &s, -2, 2, 3);
  cx_graph_mark_output(g, cx_graph_op(g, "Neg", "y", &x, 1));
  char label[256];
  label_shapes(label, sizeof label, "Neg", &s, NULL);
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

/* ReduceSumTo or BroadcastTo of x to `to`, with optional axes and scale */
static int reduce_or_broadcast(const char *op, cx_shape x, cx_shape to, int n_axes,
                               const int64_t *axes, float scale) {
  cx_graph *g = cx_graph_new();
  int in = oc_param(g, "x", &x, -2, 2, 4);
  int node = cx_graph_node(g, op, "y", &in, 1, 1);
  cx_node_set_ints(g, node, "shape", to.d, to.ndim);
  if (n_axes) cx_node_set_ints(g, node, "axes", axes, n_axes);
  if (scale != 1.0f) cx_node_set_float(g, node, "scale", scale);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256];
  label_shapes(label, sizeof label, op, &x, &to);
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int reduce_to_cases(void) {
  int f = 0;
  int64_t ax1[] = {1}, ax02[] = {0, 2};
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 4), S(3, 1), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 4), (cx_shape){0}, 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 4), S(2, 1, 4), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 4), S(2, 4), 1, ax1, 0.5f);
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 4), S(3), 2, ax02, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(2, 3, 5, 7), S(1, 3, 1, 1), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(1, 3, 5, 7), S(3, 1, 1), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(64, 37, 17), S(37, 1), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(4099, 10), S(10), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(3, 4099, 11), S(3, 1, 11), 0, NULL, 1);
  f += reduce_or_broadcast("ReduceSumTo", S(3, 5), S(3, 5), 0, NULL, 2);
  f += reduce_or_broadcast("BroadcastTo", S(3, 1), S(2, 3, 4), 0, NULL, 1);
  f += reduce_or_broadcast("BroadcastTo", S(2, 4), S(2, 3, 4), 1, ax1, 0.25f);
  f += reduce_or_broadcast("BroadcastTo", (cx_shape){0}, S(3, 5), 0, NULL, 1);
  f += reduce_or_broadcast("BroadcastTo", S(1, 3, 1, 1), S(2, 3, 5, 7), 0, NULL, 1);
  return f;
}

/* A shape that does not broadcast fails at compile time, naming the node and both shapes. */
static int bad_broadcast(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "a", &S(2, 3), -1, 1, 1), oc_param(g, "b", &S(4), -1, 1, 2)};
  cx_graph_mark_output(g, cx_graph_op(g, "Add", "bad_add", in, 2));
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_program *p = NULL;
  cx_status s = cx_program_compile(g, &co, &p);
  bool ok = s == CX_ERR_SHAPE && strstr(cx_last_error(), "bad_add") &&
            strstr(cx_last_error(), "[2,3]") && strstr(cx_last_error(), "[4]");
  printf("%s Add [2,3] + [4] is refused at compile time: %s\n", ok ? "ok  " : "FAIL",
         cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

static int all_cases(void) { return broadcasting() + sums() + neg(S(3, 5)) + reduce_to_cases(); }

int main(void) {
  int fails = all_cases() + bad_broadcast();
  cx_cpu_force_portable(true);
  printf("-- portable paths --\n");
  fails += all_cases();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
