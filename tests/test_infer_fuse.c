/* Inference programs' fusions (core/infer_fuse.h): BatchNormalization folded into the conv
 * before it, Conv / Gemm / MatMul with the residual or bias Add and the activation after them as
 * one ConvFused / GemmFused / MatMulFused node (core/ops/fused.c, oneDNN post-ops on the CPU),
 * and the exporters' GELU and LayerNorm decompositions as one op (core/infer_patterns.h).
 *
 * 1. The fused ops' CPU kernels against the double reference (op harness), for every activation,
 *    with and without the summed input and the bias, grouped and depthwise, strided.
 * 2. Where the pass applies and where it must not: node counts of compiled programs, the last
 *    value's name kept; a conv output that is a graph output or read twice, a Clip with computed
 *    bounds, training programs, CX_FUSE=off and params_copied_in (no BN fold) keep nodes; a
 *    folded program refuses cx_program_copy_params. ConvFused reorders its weights once where
 *    the program's parameters are frozen (not params_copied_in), and at every run elsewhere.
 * 3. The planner gives a fused conv its residual's buffer where the residual dies there, and
 *    not where the conv also reads it as X; the results stay right.
 * 4. Whole models: the zoo's ResNet-20, MobileNetV2 and EfficientNet-B0 and the torchvision
 *    exports of tests/fixtures/torch (ResNet-18, MobileNetV2, MobileNetV3-small, EfficientNet-B0,
 *    BN kept, with trained-looking statistics) give the same logits fused and with CX_FUSE=off,
 *    within 1e-5 relative, and the fused programs did fuse. (That the fused programs match
 *    PyTorch within 1e-4 is test_onnx_import's check, and ONNX Runtime test_infer_ort.sh's.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "check.h"
#include "model_compare.h"
#include "op_check.h"

/* ---- 1. the fused kernels against the reference --------------------------------------------- */

typedef struct act_case {
  const char *act; /* NULL: none */
  float alpha, beta, lo, hi; /* NAN: attribute absent */
} act_case;

static const act_case acts[] = {
    {NULL, NAN, NAN, NAN, NAN},         {"Relu", NAN, NAN, NAN, NAN},
    {"LeakyRelu", 0.1f, NAN, NAN, NAN}, {"Clip", NAN, NAN, 0, 6},
    {"Clip", NAN, NAN, -0.5f, NAN},     {"Sigmoid", NAN, NAN, NAN, NAN},
    {"HardSigmoid", 0.3f, 0.4f, NAN, NAN}, {"HardSwish", NAN, NAN, NAN, NAN},
    {"Tanh", NAN, NAN, NAN, NAN},       {"Swish", NAN, NAN, NAN, NAN},
    {"Gelu", NAN, NAN, NAN, NAN},
};

static void set_act(cx_graph *g, int node, const act_case *a) {
  if (!a->act) return;
  cx_node_set_string(g, node, "activation", a->act);
  if (!isnan(a->alpha)) cx_node_set_float(g, node, "act_alpha", a->alpha);
  if (!isnan(a->beta)) cx_node_set_float(g, node, "act_beta", a->beta);
  if (!isnan(a->lo)) cx_node_set_float(g, node, "act_min", a->lo);
  if (!isnan(a->hi)) cx_node_set_float(g, node, "act_max", a->hi);
}

/* ConvFused on [2, c, 6, 6] to m channels, k x k, stride s, group gr; S and B optional. */
static int check_conv_fused(const act_case *a, int64_t c, int64_t m, int64_t k, int64_t s,
                            int64_t gr, bool bias, bool sum) {
  cx_graph *g = cx_graph_new();
  int64_t oh = (6 + 2 * (k / 2) - k) / s + 1;
  int in[4] = {oc_const(g, "x", &S(2, c, 6, 6), -1, 1, 1),
               oc_const(g, "w", &S(m, c / gr, k, k), -0.5f, 0.5f, 2),
               bias ? oc_const(g, "b", &S(m), -0.5f, 0.5f, 3) : -1,
               sum ? oc_const(g, "s", &S(2, m, oh, oh), -1, 1, 4) : -1};
  int node = cx_graph_node(g, "ConvFused", "conv", in, sum ? 4 : bias ? 3 : 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){k, k}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){k / 2, k / 2, k / 2, k / 2}, 4);
  cx_node_set_ints(g, node, "strides", (int64_t[]){s, s}, 2);
  if (gr != 1) cx_node_set_int(g, node, "group", gr);
  set_act(g, node, a);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[160];
  snprintf(label, sizeof label, "ConvFused %s c%lld->%lld k%lld s%lld g%lld%s%s",
           a->act ? a->act : "(none)", (long long)c, (long long)m, (long long)k, (long long)s,
           (long long)gr, bias ? " bias" : "", sum ? " +S" : "");
  int f = oc_check(label, g, &(oc_opts){.seed = 5, .fwd_tol = 1e-5});
  cx_graph_free(g);
  return f;
}

static int check_gemm_fused(const act_case *a, bool trans_b) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_const(g, "a", &S(3, 7), -1, 1, 6),
               oc_const(g, "b", trans_b ? &S(5, 7) : &S(7, 5), -1, 1, 7),
               oc_const(g, "c", &S(5), -1, 1, 8)};
  int node = cx_graph_node(g, "GemmFused", "gemm", in, 3, 1);
  if (trans_b) cx_node_set_int(g, node, "transB", 1);
  set_act(g, node, a);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[96];
  snprintf(label, sizeof label, "GemmFused %s%s", a->act ? a->act : "(none)",
           trans_b ? " transB" : "");
  int f = oc_check(label, g, &(oc_opts){.seed = 9, .fwd_tol = 1e-5});
  cx_graph_free(g);
  return f;
}

/* MatMulFused: A of rank `rank` ([2, 3, 7] or [2, 2, 3, 7]) times B [7, 5], Bias [5] optional. */
static int check_matmul_fused(const act_case *a, int rank, bool bias) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_const(g, "a", rank == 3 ? &S(2, 3, 7) : &S(2, 2, 3, 7), -1, 1, 10),
               oc_const(g, "b", &S(7, 5), -1, 1, 11),
               bias ? oc_const(g, "c", &S(5), -1, 1, 12) : -1};
  int node = cx_graph_node(g, "MatMulFused", "mm", in, bias ? 3 : 2, 1);
  set_act(g, node, a);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[96];
  snprintf(label, sizeof label, "MatMulFused %s rank %d%s", a->act ? a->act : "(none)", rank,
           bias ? " bias" : "");
  int f = oc_check(label, g, &(oc_opts){.seed = 13, .fwd_tol = 1e-5});
  cx_graph_free(g);
  return f;
}

static void test_kernels(void) {
  for (size_t i = 0; i < sizeof acts / sizeof *acts; i++) {
    fails += check_conv_fused(&acts[i], 8, 16, 3, 1, 1, true, i % 2 == 0);
    fails += check_gemm_fused(&acts[i], i % 2 == 1);
    fails += check_matmul_fused(&acts[i], 3 + (int)(i % 2), i % 3 != 0);
  }
  fails += check_conv_fused(&acts[1], 8, 16, 3, 1, 1, true, true);
  fails += check_conv_fused(&acts[1], 8, 16, 1, 2, 1, false, true);
  fails += check_conv_fused(&acts[3], 16, 16, 3, 1, 16, true, false); /* depthwise + ReLU6 */
  fails += check_conv_fused(&acts[9], 16, 16, 3, 2, 16, true, true);  /* depthwise, stride 2 */
  fails += check_conv_fused(&acts[7], 8, 12, 3, 1, 4, false, false);  /* grouped */
}

/* ---- 2. where it applies -------------------------------------------------------------------- */

static int conv_node(cx_graph *g, const char *name, int x, int64_t c_in, int64_t c_out,
                     uint64_t seed) {
  char wn[64];
  snprintf(wn, sizeof wn, "%s.w", name);
  int w = oc_param(g, wn, &S(c_out, c_in, 3, 3), -0.3f, 0.3f, seed);
  int node = cx_graph_node(g, "Conv", name, (int[]){x, w}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  return cx_node_output(g, node, 0);
}

static int bn(cx_graph *g, const char *name, int x, int64_t c, uint64_t seed) {
  char n[64];
  int in[5] = {x};
  const char *parts[] = {"scale", "B", "mean", "var"};
  for (int k = 0; k < 4; k++) {
    snprintf(n, sizeof n, "%s.%s", name, parts[k]);
    in[k + 1] = k < 2 ? oc_param(g, n, &S(c), 0.5f, 1.5f, seed + (uint64_t)k)
                      : oc_const(g, n, &S(c), k == 3 ? 0.5f : -0.5f, k == 3 ? 1.5f : 0.5f,
                                 seed + (uint64_t)k);
  }
  return cx_graph_op(g, "BatchNormalization", name, in, 5);
}

/* x -> conv a -> BN -> Relu -> conv b -> BN -> Add(x) -> act: Relu, or with a gate op the value
 * times gate(value) (Sigmoid: Swish; HardSigmoid(1/6, 1/2): HardSwish). */
static cx_graph *block(const char *gate) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 8, 6, 6));
  int x1 = cx_graph_op(g, "Relu", "in_relu", &x, 1);
  int a = bn(g, "bn_a", conv_node(g, "conv_a", x1, 8, 8, 10), 8, 20);
  a = cx_graph_op(g, "Relu", "relu_a", &a, 1);
  int b = bn(g, "bn_b", conv_node(g, "conv_b", a, 8, 8, 30), 8, 40);
  int s = cx_graph_op(g, "Add", "add", (int[]){x1, b}, 2);
  if (gate) {
    int sig = cx_graph_op(g, gate, "sig", &s, 1);
    if (!strcmp(gate, "HardSigmoid")) {
      cx_node_set_float(g, g->n_nodes - 1, "alpha", 1.0f / 6);
      cx_node_set_float(g, g->n_nodes - 1, "beta", 0.5f);
    }
    cx_graph_mark_output(g, cx_graph_op(g, "Mul", "out", (int[]){s, sig}, 2));
  } else {
    cx_graph_mark_output(g, cx_graph_op(g, "Relu", "out", &s, 1));
  }
  return g;
}

static int count_op(const cx_program *p, const char *op) {
  const cx_graph *g = cx_program_graph(p);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op->name, op);
  return n;
}

static cx_program *compile(const cx_graph *g, bool train, bool copied_in) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 2, .training = train, .backend = cx_backend_cpu(),
                       .params_copied_in = copied_in};
  CHECK(cx_program_compile(g, &o, &p) == CX_OK, "compile: %s", cx_last_error());
  return p;
}

static double fused_vs_off(const cx_graph *g, int64_t batch, cx_program **fused_out);

static void test_patterns(void) {
  cx_graph *g = block(NULL);
  cx_program *p = compile(g, false, false);
  if (p) {
    const cx_graph *pg = cx_program_graph(p);
    int conv_b = -1;
    for (int i = 0; i < pg->n_nodes; i++)
      if (!strcmp(pg->nodes[i].name, "conv_b")) conv_b = i;
    CHECK(count_op(p, "ConvFused") == 2 && count_op(p, "BatchNormalization") == 0 &&
              count_op(p, "Add") == 0 && count_op(p, "Relu") == 1 && pg->n_nodes == 3,
          "block: %d nodes, %d ConvFused; expected in_relu and two ConvFused", pg->n_nodes,
          count_op(p, "ConvFused"));
    CHECK(conv_b >= 0 && pg->nodes[conv_b].n_in == 4 &&
              !strcmp(pg->values[pg->nodes[conv_b].out[0]].name, "out") &&
              !strcmp(cx_node_string(&pg->nodes[conv_b], "activation", ""), "Relu"),
          "conv_b: the Add's other operand as input 3, Relu, writing 'out'");
  }
  cx_program_free(p);
  p = compile(g, false, true); /* params_copied_in: BN stays, the activations still fuse */
  CHECK(p && count_op(p, "BatchNormalization") == 2 && count_op(p, "Conv") == 2 &&
            count_op(p, "Relu") == 3,
        "params_copied_in: BN kept (and the convs, and the Relus behind the BNs, stay)");
  cx_program *folded = compile(g, false, false);
  if (p && folded)
    CHECK(cx_program_copy_params(folded, p) != CX_OK && strstr(cx_last_error(), "folded"),
          "copy_params into a folded program is refused: %s", cx_last_error());
  cx_program_free(folded);
  cx_program_free(p);
  p = compile(g, true, false);
  CHECK(p && count_op(p, "ConvFused") == 0, "a training program has no ConvFused");
  cx_program_free(p);
  setenv("CX_FUSE", "off", 1);
  p = compile(g, false, false);
  unsetenv("CX_FUSE");
  CHECK(p && count_op(p, "ConvFused") == 0 && count_op(p, "BatchNormalization") == 2,
        "CX_FUSE=off: nothing fused");
  cx_program_free(p);
  cx_graph_free(g);

  const char *gates[] = {"Sigmoid", "HardSigmoid"}, *acts_of[] = {"Swish", "HardSwish"};
  for (int k = 0; k < 2; k++) {
    g = block(gates[k]);
    double e = fused_vs_off(g, 2, &p);
    const cx_graph *pg = p ? cx_program_graph(p) : NULL;
    const char *act = NULL;
    for (int i = 0; pg && i < pg->n_nodes; i++)
      if (!strcmp(pg->nodes[i].name, "conv_b"))
        act = cx_node_string(&pg->nodes[i], "activation", "");
    CHECK(p && count_op(p, "ConvFused") == 2 && count_op(p, gates[k]) == 0 &&
              count_op(p, "Mul") == 0 && act && !strcmp(act, acts_of[k]) && e >= 0 && e <= 1e-5,
          "Add then x * %s(x): one ConvFused with %s, relative error %.2e", gates[k], acts_of[k],
          e);
    cx_program_free(p);
    cx_graph_free(g);
  }
  g = block("Sigmoid");
  /* the sum also a graph output: the fused conv writes it, the Swish after it stays */
  cx_graph_mark_output(g, cx_graph_find_value(g, "add"));
  p = compile(g, false, false);
  CHECK(p && count_op(p, "Add") == 0 && count_op(p, "Sigmoid") == 1 && count_op(p, "Mul") == 1 &&
            cx_program_tensor(p, "add"),
        "a graph output ends the chain");
  cx_program_free(p);
  cx_graph_free(g);

  /* a conv output read twice, and a Clip whose bound is computed, stay */
  g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4, 5, 5));
  int y = conv_node(g, "conv", x, 4, 4, 50);
  int r = cx_graph_op(g, "Relu", "r", &y, 1);
  int t = cx_graph_op(g, "Tanh", "t", &y, 1);
  int zero = cx_graph_const_f32(g, "zero", &(cx_shape){0}, (float[]){0});
  int hi = cx_graph_op(g, "Exp", "hi", &zero, 1); /* computed in the program: not a constant */
  int c = cx_graph_op(g, "Clip", "clip", (int[]){conv_node(g, "conv2", x, 4, 4, 60), zero, hi}, 3);
  cx_graph_mark_output(g, cx_graph_op(g, "Add", "sum", (int[]){r, t}, 2));
  cx_graph_mark_output(g, c);
  p = compile(g, false, false);
  CHECK(p && count_op(p, "ConvFused") == 0 && count_op(p, "Conv") == 2,
        "a value read twice, a computed Clip bound: not fused (%s)", cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
}

/* The exporters' decompositions (core/infer_patterns.h), as torchvision's ConvNeXt and ViT
 * export at opset 13: x -> LayerNorm over the last axis (nine nodes) -> MatMul -> GELU (five
 * nodes, Div by sqrt(2) or Mul by 1/sqrt(2), operands in either order) -> output. */
static cx_graph *transformer_mlp(bool mul_form, bool swapped) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 5, 16));
  int m = cx_graph_op(g, "ReduceMean", "ln/mean", &x, 1);
  cx_node_set_ints(g, g->n_nodes - 1, "axes", (int64_t[]){-1}, 1);
  int d = cx_graph_op(g, "Sub", "ln/sub", (int[]){x, m}, 2);
  int two = cx_graph_const_f32(g, "two", &(cx_shape){0}, (float[]){2});
  int v = cx_graph_op(g, "ReduceMean", "ln/var",
                      (int[]){cx_graph_op(g, "Pow", "ln/pow", (int[]){d, two}, 2)}, 1);
  cx_node_set_ints(g, g->n_nodes - 1, "axes", (int64_t[]){2}, 1);
  int eps = cx_graph_const_f32(g, "eps", &(cx_shape){0}, (float[]){1e-6f});
  int sd = cx_graph_op(g, "Sqrt", "ln/sqrt",
                       (int[]){cx_graph_op(g, "Add", "ln/add", (int[]){eps, v}, 2)}, 1);
  int nrm = cx_graph_op(g, "Div", "ln/div", (int[]){d, sd}, 2);
  int gamma = oc_param(g, "ln.weight", &S(16), 0.5f, 1.5f, 70);
  int beta = oc_param(g, "ln.bias", &S(16), -0.5f, 0.5f, 71);
  int y = cx_graph_op(g, "Add", "ln/out",
                      (int[]){beta, cx_graph_op(g, "Mul", "ln/mul", (int[]){nrm, gamma}, 2)}, 2);
  int w = oc_param(g, "fc.weight", &S(16, 24), -0.5f, 0.5f, 72);
  int fc_b = oc_param(g, "fc.bias", &S(24), -0.5f, 0.5f, 73);
  int h = cx_graph_op(g, "Add", "fc/add",
                      (int[]){fc_b, cx_graph_op(g, "MatMul", "fc", (int[]){y, w}, 2)}, 2);
  int c = cx_graph_const_f32(g, "c", &(cx_shape){0},
                             (float[]){mul_form ? 0.70710678f : 1.41421356f});
  int e = cx_graph_op(g, "Erf", "gelu/erf",
                      (int[]){cx_graph_op(g, mul_form ? "Mul" : "Div", "gelu/scale",
                                          (int[]){h, c}, 2)}, 1);
  int one = cx_graph_const_f32(g, "one", &(cx_shape){0}, (float[]){1});
  int a = cx_graph_op(g, "Add", "gelu/add", swapped ? (int[]){one, e} : (int[]){e, one}, 2);
  int t = cx_graph_op(g, "Mul", "gelu/mul", swapped ? (int[]){a, h} : (int[]){h, a}, 2);
  int half = cx_graph_const_f32(g, "half", &(cx_shape){0}, (float[]){0.5f});
  cx_graph_mark_output(g, cx_graph_op(g, "Mul", "out", swapped ? (int[]){half, t}
                                                               : (int[]){t, half}, 2));
  return g;
}

static void test_exporter_patterns(void) {
  for (int k = 0; k < 2; k++) {
    cx_graph *g = transformer_mlp(k == 1, k == 1);
    cx_program *p = NULL;
    double e = fused_vs_off(g, 3, &p);
    const cx_graph *pg = p ? cx_program_graph(p) : NULL;
    const char *act = NULL;
    for (int i = 0; pg && i < pg->n_nodes; i++)
      if (!strcmp(pg->nodes[i].op->name, "MatMulFused"))
        act = cx_node_string(&pg->nodes[i], "activation", "");
    CHECK(p && count_op(p, "LayerNormalization") == 1 && act && !strcmp(act, "Gelu") &&
              pg->n_nodes == 2 && pg->nodes[1].n_in == 3 && e >= 0 && e <= 1e-5,
          "%s GELU: LayerNorm, then MatMulFused with the bias and Gelu (%d nodes), relative "
          "error %.2e", k ? "Mul-form, swapped" : "Div-form", pg ? pg->n_nodes : -1, e);
    cx_program_free(p);
    /* a value inside the pattern read elsewhere too: left as it is */
    cx_graph_mark_output(g, cx_graph_find_value(g, "gelu/add"));
    p = compile(g, false, false);
    CHECK(p && count_op(p, "Gelu") == 0 && count_op(p, "Erf") == 1 &&
              count_op(p, "LayerNormalization") == 1 && count_op(p, "MatMulFused") == 1,
          "a GELU whose inner value is a graph output stays decomposed (the bias still fuses)");
    cx_program_free(p);
    cx_graph_free(g);
  }
}

/* Frozen weights (core/infer_fuse.h): a program compiled without params_copied_in marks its
 * ConvFused frozen_weights and gives the same output on every run (the weights reordered once,
 * kept); one compiled with params_copied_in does not, and sees weights written between runs. */
static int frozen_count(const cx_program *p) {
  const cx_graph *g = cx_program_graph(p);
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += !strcmp(g->nodes[i].op->name, "ConvFused") &&
         cx_node_int(&g->nodes[i], "frozen_weights", 0) == 1;
  return n;
}

static bool run_out(cx_program *p, float *out, size_t n) {
  const cx_tensor *y = cx_program_tensor(p, "r");
  return cx_program_forward(p) == CX_OK && y && cx_tensor_numel(y) == (int64_t)n &&
         cx_program_read(p, y, out) == CX_OK;
}

static void test_frozen_weights(void) {
  enum { N = 2 * 8 * 6 * 6 };
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 8, 6, 6));
  int y = conv_node(g, "conv", x, 8, 8, 70);
  cx_graph_mark_output(g, cx_graph_op(g, "Relu", "r", &y, 1));
  float in[N], a[N], b[N], c[N];
  for (int i = 0; i < N; i++) in[i] = (float)sin(0.7 * i);
  for (int copied = 0; copied < 2; copied++) {
    cx_program *p = compile(g, false, copied);
    if (!p) continue;
    cx_tensor *w = cx_program_tensor(p, "conv.w");
    int64_t nw = w ? cx_tensor_numel(w) : 0;
    float *wv = malloc(sizeof(float) * (size_t)(nw + 1));
    bool ok = w && wv && cx_program_write(p, cx_program_tensor(p, "x"), in) == CX_OK &&
              run_out(p, a, N) && run_out(p, b, N) && cx_program_read(p, w, wv) == CX_OK;
    for (int64_t i = 0; ok && i < nw; i++) wv[i] *= -1; /* flips which outputs the Relu keeps */
    ok = ok && cx_program_write(p, w, wv) == CX_OK && run_out(p, c, N);
    bool same = ok && !memcmp(a, b, sizeof a), changed = ok && memcmp(a, c, sizeof a) != 0;
    if (copied)
      CHECK(frozen_count(p) == 0 && same && changed,
            "params_copied_in: no frozen ConvFused (%d), reruns agree, new weights seen (%s)",
            frozen_count(p), changed ? "yes" : "no");
    else
      CHECK(frozen_count(p) == 1 && same && !memcmp(a, c, sizeof a),
            "frozen ConvFused (%d): reruns agree, and a later weight write is not seen", 
            frozen_count(p));
    free(wv);
    cx_program_free(p);
  }
  cx_graph_free(g);
}

/* ---- 3. the residual's buffer --------------------------------------------------------------- */

/* Runs g fused and unfused on one input; returns the relative error of output 0 (-1: failure). */
static double fused_vs_off(const cx_graph *g, int64_t batch, cx_program **fused_out) {
  cx_program *p[2] = {NULL, NULL};
  double err = -1;
  for (int k = 0; k < 2; k++) {
    if (k) setenv("CX_FUSE", "off", 1);
    cx_compile_opts o = {.batch = batch, .backend = cx_backend_cpu()};
    cx_status s = cx_program_compile(g, &o, &p[k]);
    if (k) unsetenv("CX_FUSE");
    if (s != CX_OK) {
      printf("FAIL compile: %s\n", cx_last_error());
      goto done;
    }
    const cx_graph *pg = cx_program_graph(p[k]);
    int input = 0;
    while (pg->values[input].kind != CX_VALUE_INPUT) input++; /* the one fed input */
    cx_tensor *in = (cx_tensor *)cx_program_value_tensor(p[k], input);
    float *x = in->data;
    for (int64_t i = 0; i < cx_tensor_numel(in); i++) x[i] = sinf(0.37f * (float)i);
    if (cx_program_forward(p[k]) != CX_OK) {
      printf("FAIL forward: %s\n", cx_last_error());
      goto done;
    }
  }
  const cx_tensor *a = cx_program_value_tensor(p[0], cx_program_graph(p[0])->outputs[0]),
                  *b = cx_program_value_tensor(p[1], cx_program_graph(p[1])->outputs[0]);
  double d = 0, m = 1e-12;
  for (int64_t i = 0; i < cx_tensor_numel(b); i++) {
    d = fmax(d, fabs(cx_f32(a)[i] - (double)cx_f32(b)[i]));
    m = fmax(m, fabs((double)cx_f32(b)[i]));
  }
  err = d / m;
done:
  if (fused_out && err >= 0) *fused_out = p[0];
  else cx_program_free(p[0]);
  cx_program_free(p[1]);
  return err;
}

/* Whether the ConvFused node `name` writes into its S input's buffer. */
static bool shares_buffer(const cx_program *p, const char *name) {
  const cx_graph *g = cx_program_graph(p);
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].name, name) && g->nodes[i].n_in == 4)
      return cx_program_value_tensor(p, g->nodes[i].in[3])->data ==
             cx_program_value_tensor(p, g->nodes[i].out[0])->data;
  return false;
}

static void test_in_place(void) {
  cx_graph *g = block(NULL);
  cx_program *p = NULL;
  double e = fused_vs_off(g, 2, &p);
  CHECK(e >= 0 && e <= 1e-5, "block fused vs unfused: relative error %.2e", e);
  CHECK(p && shares_buffer(p, "conv_b"), "conv_b adds into the residual's buffer");
  cx_program_free(p);
  cx_graph_free(g);
  /* y = conv(x) + x: the conv reads x, so it must not write over it */
  g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 8, 6, 6));
  int x1 = cx_graph_op(g, "Relu", "in_relu", &x, 1);
  int y = conv_node(g, "conv", x1, 8, 8, 70);
  cx_graph_mark_output(g, cx_graph_op(g, "Add", "add", (int[]){y, x1}, 2));
  p = NULL;
  e = fused_vs_off(g, 2, &p);
  CHECK(e >= 0 && e <= 1e-5 && p && count_op(p, "ConvFused") == 1 && !shares_buffer(p, "conv"),
        "conv(x) + x: fused, its own buffer, relative error %.2e", e);
  cx_program_free(p);
  cx_graph_free(g);
}

/* ---- 4. whole models ------------------------------------------------------------------------ */

static void test_zoo(void) {
  const char *specs[] = {"resnet20:input=3x32x32",
                         "mobilenet_v2:width=0.5,classes=10,input=3x32x32",
                         "efficientnet_b0:classes=10,input=3x32x32"};
  for (int i = 0; i < 3; i++) {
    cx_program *a = mc_run(specs[i], false, NULL, NULL, 2);
    cx_program *b = mc_run(specs[i], false, "CX_FUSE", "off", 2);
    if (a && b) {
      fails += mc_compare_inference(specs[i], a, b, 1e-5);
      CHECK(count_op(a, "ConvFused") > 0 && count_op(a, "BatchNormalization") == 0,
            "%s: fused (%d ConvFused)", specs[i], count_op(a, "ConvFused"));
    } else {
      fails++;
    }
    cx_program_free(a);
    cx_program_free(b);
  }
}

static void test_torchvision(void) {
  const char *archs[] = {"resnet18", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"};
  for (int i = 0; i < 4; i++) {
    char path[256];
    snprintf(path, sizeof path, "fixtures/torch/%s_op13_bnkept.onnx", archs[i]);
    cx_graph *g = NULL;
    if (cx_onnx_import(path, &g, NULL) != CX_OK) {
      CHECK(0, "%s: %s", path, cx_last_error());
      continue;
    }
    cx_program *p = NULL;
    double e = fused_vs_off(g, 2, &p);
    int fused = p ? count_op(p, "ConvFused") : 0, bn = p ? count_op(p, "BatchNormalization") : -1;
    bool ok = e >= 0 && e <= 1e-5 && fused > 0 && bn == 0;
    printf("%s %s: fused vs CX_FUSE=off relative error %.2e, %d ConvFused, %d BN left\n",
           ok ? "ok  " : "FAIL", path, e, fused, bn);
    fails += !ok;
    cx_program_free(p);
    cx_graph_free(g);
  }
}

int main(void) {
  test_kernels();
  test_patterns();
  test_exporter_patterns();
  test_frozen_weights();
  test_in_place();
  test_zoo();
  test_torchvision();
  if (fails) printf("FAIL: %d failure(s)\n", fails);
  else printf("ok: 0 failure(s)\n");
  return fails ? 1 : 0;
}
