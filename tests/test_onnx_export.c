/* ONNX export: graphs built with the builder API (a CNN, depthwise convolutions, ReduceMean, the
 * remaining ONNX ops, BatchNormalizations that must not fold, the tiny CNN with its
 * SoftmaxCrossEntropyLoss and int64 labels) are written at opsets 13, 14 and 17, with and without
 * BatchNormalization folding, then
 *   (a) imported again and run: the outputs must match the original graph's (1e-5 relative), and
 *   (b) checked with onnx.checker (full_check) and run with ONNX Runtime (tests/ort_check.py):
 *       ORT's outputs must match ours (1e-5 relative).
 * Also: refused opsets, com.compress nodes and unwritable paths fail and leave no file behind.
 * Files go to $CX_EXPORT_DIR (kept: the CLI test uses cnn.onnx from there) or a temporary folder.
 * Missing python3 / onnx / onnxruntime is a failure that points at scripts/install-deps.sh. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/npy.h"
#include "../core/op.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../core/graph_shapes.h"
#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "../kernels/cpu/cpu.h"
#include "../models/tiny_cnn.h"
#include "op_check.h"
#include "check.h"

#ifndef CX_ORT_CHECK
#define CX_ORT_CHECK "tests/ort_check.py"
#endif
#define PYTHON CX_PYTHON

enum { BATCH = 3, MAX_OUT = 8, MAX_IN = 4 };
static const double TOL = 1e-5;

static char dir[1024];
static bool have_ort;

/* ---- building ---- */

static int init_uniform(cx_graph *g, cx_value_kind kind, const char *name, const cx_shape *s,
                        float lo, float hi, uint64_t seed) {
  int64_t n = cx_shape_numel(s);
  float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++)
    v[i] = lo + (hi - lo) * cx_rng_uniform(cx_rng_key(seed, 7, 0), (uint64_t)i);
  int id = cx_graph_init(g, kind, name, CX_F32, s, v);
  free(v);
  return id;
}

static int conv(cx_graph *g, const char *name, int x, int cin, int cout, int group, int stride,
                int dilation, bool bias, uint64_t seed) {
  char wn[128], bn[128];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  int in[3] = {x, oc_param(g, wn, &S(cout, cin / group, 3, 3), -0.4f, 0.4f, seed),
               bias ? oc_param(g, bn, &S(cout), -0.3f, 0.3f, seed + 1) : -1};
  int n = cx_graph_node(g, "Conv", name, in, bias ? 3 : 2, 1);
  int64_t p = dilation;
  cx_node_set_ints(g, n, "pads", (int64_t[]){p, p, p, p}, 4);
  cx_node_set_ints(g, n, "strides", (int64_t[]){stride, stride}, 2);
  cx_node_set_ints(g, n, "kernel_shape", (int64_t[]){3, 3}, 2);
  if (dilation != 1) cx_node_set_ints(g, n, "dilations", (int64_t[]){dilation, dilation}, 2);
  if (group != 1) cx_node_set_int(g, n, "group", group);
  return cx_node_output(g, n, 0);
}

/* Statistics far from (0, 1) so that folding them is visible. */
static int batch_norm(cx_graph *g, const char *name, int x, int c, uint64_t seed) {
  char n[4][128];
  const char *suffix[4] = {"weight", "bias", "running_mean", "running_var"};
  for (int k = 0; k < 4; k++) snprintf(n[k], sizeof n[k], "%s.%s", name, suffix[k]);
  int in[5] = {x, init_uniform(g, CX_VALUE_PARAM, n[0], &S(c), 0.5f, 1.5f, seed),
               init_uniform(g, CX_VALUE_PARAM, n[1], &S(c), -0.5f, 0.5f, seed + 1),
               init_uniform(g, CX_VALUE_STATE, n[2], &S(c), -0.5f, 0.5f, seed + 2),
               init_uniform(g, CX_VALUE_STATE, n[3], &S(c), 0.5f, 2.0f, seed + 3)};
  int node = cx_graph_node(g, "BatchNormalization", name, in, 5, 1);
  cx_node_set_float(g, node, "epsilon", 1e-3f);
  return cx_node_output(g, node, 0);
}

static int pool(cx_graph *g, const char *op, const char *name, int x) {
  int n = cx_graph_node(g, op, name, &x, 1, 1);
  cx_node_set_ints(g, n, "kernel_shape", (int64_t[]){2, 2}, 2);
  cx_node_set_ints(g, n, "strides", (int64_t[]){2, 2}, 2);
  return cx_node_output(g, n, 0);
}

static int scalar(cx_graph *g, const char *name, float v) {
  return cx_graph_const_f32(g, name, &(cx_shape){0}, &v);
}

/* conv-BN-ReLU-maxpool, conv-BN-HardSwish and depthwise conv-BN-Clip branches added, scaled,
 * average- and global-pooled, concatenated, Gemm-BN, Softmax. */
static cx_graph *cnn(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 3, 8, 8));
  x = conv(g, "conv1", x, 3, 8, 1, 1, 1, true, 10);
  x = batch_norm(g, "bn1", x, 8, 20);
  x = cx_graph_op(g, "Relu", "relu1", &x, 1);
  x = pool(g, "MaxPool", "maxpool", x);
  int a = conv(g, "conv2", x, 8, 8, 1, 1, 1, false, 30);
  a = batch_norm(g, "bn2", a, 8, 40);
  a = cx_graph_op(g, "HardSwish", "hswish", &a, 1);
  int b = conv(g, "dw", x, 8, 8, 8, 1, 1, true, 50);
  b = batch_norm(g, "bn3", b, 8, 60);
  b = cx_graph_op(g, "Clip", "relu6", (int[]){b, scalar(g, "zero", 0), scalar(g, "six", 6)}, 3);
  int c = cx_graph_op(g, "Add", "add", (int[]){a, b}, 2);
  int scale = oc_const(g, "scale", &S(1, 8, 1, 1), 0.5f, 1.5f, 70);
  c = cx_graph_op(g, "Mul", "mul", (int[]){c, scale}, 2);
  int e = pool(g, "AveragePool", "avgpool", c);
  e = cx_graph_op(g, "Flatten", "flatten", &e, 1);
  int f = cx_graph_op(g, "GlobalAveragePool", "gap", &c, 1);
  int shape = cx_graph_const_s64(g, "flat_shape", 2, (int64_t[]){0, -1});
  f = cx_graph_op(g, "Reshape", "reshape", (int[]){f, shape}, 2);
  int cat = cx_graph_node(g, "Concat", "concat", (int[]){e, f}, 2, 1);
  cx_node_set_int(g, cat, "axis", 1);
  int w = oc_param(g, "fc.weight", &S(10, 40), -0.3f, 0.3f, 80);
  int bias = oc_param(g, "fc.bias", &S(10), -0.3f, 0.3f, 81);
  int fc = cx_graph_node(g, "Gemm", "fc", (int[]){cx_node_output(g, cat, 0), w, bias}, 3, 1);
  cx_node_set_int(g, fc, "transB", 1);
  cx_node_set_float(g, fc, "beta", 0.5f);
  int logits = batch_norm(g, "bn_fc", cx_node_output(g, fc, 0), 10, 90);
  int probs = cx_graph_op(g, "Softmax", "softmax", &logits, 1);
  cx_graph_mark_output(g, logits);
  cx_graph_mark_output(g, probs);
  return g;
}

/* Depthwise convolutions: stride 2 with bias, and dilation 2 without. */
static cx_graph *depthwise(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "image", CX_F32, &S(-1, 6, 9, 9));
  int a = conv(g, "dw1", x, 6, 6, 6, 2, 1, true, 100);
  a = batch_norm(g, "dw1_bn", a, 6, 110);
  int clip = cx_graph_node(g, "Clip", "dw1_relu6", &a, 1, 1);
  cx_node_set_float(g, clip, "min", 0.0f); /* the opset-6 attribute form */
  cx_node_set_float(g, clip, "max", 6.0f);
  int b = conv(g, "dw2", x, 6, 6, 6, 1, 2, false, 120);
  b = batch_norm(g, "dw2_bn", b, 6, 130);
  b = cx_graph_op(g, "Relu", "dw2_relu", &b, 1);
  cx_graph_mark_output(g, cx_node_output(g, clip, 0));
  cx_graph_mark_output(g, b);
  return g;
}

static int reduce_mean(cx_graph *g, const char *name, int x, int n_axes, const int64_t *axes,
                       bool as_input, int keepdims) {
  static const int64_t none[1] = {0};
  if (!axes) axes = none;
  char an[128];
  snprintf(an, sizeof an, "%s.axes", name);
  int in[2] = {x, as_input ? cx_graph_const_s64(g, an, n_axes, axes) : -1};
  int n = cx_graph_node(g, "ReduceMean", name, in, as_input ? 2 : 1, 1);
  if (!as_input && n_axes) cx_node_set_ints(g, n, "axes", axes, n_axes);
  cx_node_set_int(g, n, "keepdims", keepdims);
  return cx_node_output(g, n, 0);
}

/* ReduceMean with axes as an input (opset 18's form, an attribute in 13-17) and as attribute. */
static cx_graph *reduce(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4, 5, 6));
  cx_graph_mark_output(g, reduce_mean(g, "mean_hw", x, 2, (int64_t[]){2, 3}, true, 1));
  cx_graph_mark_output(g, reduce_mean(g, "mean_last", x, 1, (int64_t[]){-1}, true, 0));
  cx_graph_mark_output(g, reduce_mean(g, "mean_c", x, 1, (int64_t[]){1}, false, 0));
  cx_graph_mark_output(g, reduce_mean(g, "mean_all", x, 0, NULL, false, 1));
  int noop = reduce_mean(g, "mean_none", x, 0, NULL, true, 1); /* an Identity before opset 18 */
  cx_node_set_int(g, g->values[noop].producer, "noop_with_empty_axes", 1);
  cx_graph_mark_output(g, noop);
  return g;
}

/* What must not fold: two Convs sharing weights (folding one BN would change the other), and a
 * Conv whose output a second node also reads. */
static cx_graph *unfoldable(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4, 5, 5));
  int w = oc_param(g, "shared.weight", &S(4, 4, 3, 3), -0.4f, 0.4f, 300);
  int y[2];
  for (int k = 0; k < 2; k++) {
    char name[32];
    snprintf(name, sizeof name, "tied%d", k);
    int n = cx_graph_node(g, "Conv", name, (int[]){k ? y[0] : x, w}, 2, 1);
    cx_node_set_ints(g, n, "pads", (int64_t[]){1, 1, 1, 1}, 4);
    snprintf(name, sizeof name, "tied%d_bn", k);
    y[k] = batch_norm(g, name, cx_node_output(g, n, 0), 4, 310 + 10 * (uint64_t)k);
  }
  int c = conv(g, "branch", y[1], 4, 4, 1, 1, 1, true, 330);
  int bn = batch_norm(g, "branch_bn", c, 4, 340);
  cx_graph_mark_output(g, cx_graph_op(g, "Add", "residual", (int[]){bn, c}, 2));
  return g;
}

static int node1(cx_graph *g, const char *op, const char *name, const int *in, int n_in) {
  return cx_graph_node(g, op, name, in, n_in, 1);
}

/* The ONNX ops the CNN leaves out: MatMul, Transpose, element-wise and activation ops, Split
 * (the opset-18 num_outputs form with an uneven last part), Pad, Slice (input and attribute
 * forms), ReduceSum, Expand, LogSoftmax, Dropout, Identity. */
static cx_graph *misc(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 4, 6));
  int t = node1(g, "Transpose", "transpose", &x, 1);
  cx_node_set_ints(g, t, "perm", (int64_t[]){0, 2, 1}, 3);
  int m = cx_graph_op(g, "MatMul", "matmul",
                      (int[]){cx_node_output(g, t, 0), oc_param(g, "w", &S(4, 5), -1, 1, 200)}, 2);
  int lr = node1(g, "LeakyRelu", "leaky", &m, 1);
  cx_node_set_float(g, lr, "alpha", 0.2f);
  int l = cx_node_output(g, lr, 0);
  int s = cx_graph_op(g, "Sigmoid", "sigmoid", &l, 1), th = cx_graph_op(g, "Tanh", "tanh", &l, 1);
  int sum = cx_graph_op(g, "Sum", "sum", (int[]){s, th, l}, 3);
  sum = cx_graph_op(g, "Sub", "sub", (int[]){sum, oc_const(g, "offset", &S(5), -1, 1, 201)}, 2);
  sum = cx_graph_op(g, "Div", "div", (int[]){sum, scalar(g, "two", 2)}, 2);
  sum = cx_graph_op(g, "Neg", "neg", &sum, 1);
  sum = cx_graph_op(g, "Exp", "exp", &sum, 1);
  sum = cx_graph_op(g, "Add", "add1", (int[]){sum, scalar(g, "one", 1)}, 2);
  sum = cx_graph_op(g, "Sqrt", "sqrt", &sum, 1);
  int lg = cx_graph_op(g, "Log", "log", &sum, 1); /* [N, 6, 5] */
  int sp = cx_graph_node(g, "Split", "split", &lg, 1, 3);
  cx_node_set_int(g, sp, "axis", 1);
  cx_node_set_int(g, sp, "num_outputs", 3); /* 6 = 2 + 2 + 2 */
  int sp2 = cx_graph_node(g, "Split", "split_uneven", &lg, 1, 3);
  cx_node_set_int(g, sp2, "axis", 2);
  cx_node_set_int(g, sp2, "num_outputs", 3); /* 5 = 2 + 2 + 1 */
  int pads = cx_graph_const_s64(g, "pads", 4, (int64_t[]){1, 0, 0, 2});
  int axes = cx_graph_const_s64(g, "pad_axes", 2, (int64_t[]){1, 2});
  int pad = cx_graph_op(g, "Pad", "pad", (int[]){cx_node_output(g, sp, 0), pads,
                                                  scalar(g, "pad_value", 0.5f), axes}, 4);
  /* [N, 3, 7] */
  int sl = cx_graph_op(g, "Slice", "slice",
                       (int[]){pad, cx_graph_const_s64(g, "starts", 1, (int64_t[]){1}),
                               cx_graph_const_s64(g, "ends", 1, (int64_t[]){7}),
                               cx_graph_const_s64(g, "slice_axes", 1, (int64_t[]){2}),
                               cx_graph_const_s64(g, "steps", 1, (int64_t[]){2})}, 5);
  /* [N, 3, 3] */
  int sl2 = node1(g, "Slice", "slice_attr", &sl, 1);
  cx_node_set_ints(g, sl2, "starts", (int64_t[]){0}, 1);
  cx_node_set_ints(g, sl2, "ends", (int64_t[]){2}, 1);
  cx_node_set_ints(g, sl2, "axes", (int64_t[]){1}, 1); /* [N, 2, 3] */
  int rs = node1(g, "ReduceSum", "reduce_sum", &(int){cx_node_output(g, sl2, 0)}, 1);
  cx_node_set_ints(g, rs, "axes", (int64_t[]){1}, 1); /* [N, 1, 3] */
  int ex = cx_graph_op(g, "Expand", "expand",
                       (int[]){cx_node_output(g, rs, 0),
                               cx_graph_const_s64(g, "expand_shape", 3, (int64_t[]){1, 4, 3})}, 2);
  int ls = cx_graph_op(g, "LogSoftmax", "log_softmax", &ex, 1);
  int hs = node1(g, "HardSigmoid", "hard_sigmoid", &ls, 1);
  cx_node_set_float(g, hs, "alpha", 0.3f);
  int dr = cx_graph_op(g, "Dropout", "dropout", &(int){cx_node_output(g, hs, 0)}, 1);
  int id = cx_graph_op(g, "Identity", "identity", &dr, 1);
  cx_graph_mark_output(g, id);
  cx_graph_mark_output(g, cx_node_output(g, sp, 2));
  cx_graph_mark_output(g, cx_node_output(g, sp2, 2));
  return g;
}

/* The transformer teachers' ops: LayerNormalization (last axis with a bias, two axes without;
 * composed below opset 17), Gelu (both approximations; composed below opset 20), Erf,
 * Reciprocal, Pow, Where with a constant mask, a computed mask (Less, Cast), Gather and GatherND
 * of activations, ReduceMax, and ViT's
 * class token expanded to the batch (ExpandBatch, written as Shape, Slice, Concat, Expand). */
static cx_graph *transformer(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 5, 8));
  int tok = cx_graph_node(g, "ExpandBatch", "class_token",
                          (int[]){oc_param(g, "token", &S(1, 1, 8), -1, 1, 300),
                                  cx_graph_const_s64(g, "token_shape", 3, (int64_t[]){1, 1, 8}),
                                  x}, 3, 1);
  cx_node_set_ints(g, tok, "batch_axes", (int64_t[]){0}, 1);
  int cat = node1(g, "Concat", "concat", (int[]){cx_node_output(g, tok, 0), x}, 2);
  cx_node_set_int(g, cat, "axis", 1); /* [N, 6, 8] */
  int ln = node1(g, "LayerNormalization", "ln1",
                 (int[]){cx_node_output(g, cat, 0),
                         oc_param(g, "ln1.scale", &S(8), 0.5f, 1.5f, 301),
                         oc_param(g, "ln1.bias", &S(8), -0.5f, 0.5f, 302)}, 3);
  cx_node_set_float(g, ln, "epsilon", 1e-3f);
  int ge = node1(g, "Gelu", "gelu", &(int){cx_node_output(g, ln, 0)}, 1);
  int ln2 = node1(g, "LayerNormalization", "ln2",
                  (int[]){cx_node_output(g, ge, 0), oc_param(g, "ln2.scale", &S(6, 8), 0.5f, 1.5f,
                                                             303)}, 2);
  cx_node_set_int(g, ln2, "axis", 1);
  int gt = node1(g, "Gelu", "gelu_tanh", &(int){cx_node_output(g, ln2, 0)}, 1);
  cx_node_set_string(g, gt, "approximate", "tanh");
  int y = cx_graph_op(g, "Erf", "erf", &(int){cx_node_output(g, gt, 0)}, 1);
  int sq = cx_graph_op(g, "Pow", "pow", (int[]){y, scalar(g, "two", 2)}, 2);
  int rc = cx_graph_op(g, "Reciprocal", "reciprocal",
                       &(int){cx_graph_op(g, "Add", "add1", (int[]){sq, scalar(g, "one", 1)}, 2)},
                       1);
  uint8_t mask[8] = {1, 0, 1, 1, 0, 0, 1, 0};
  int m = cx_graph_init(g, CX_VALUE_CONST, "mask", CX_BOOL, &S(8), mask);
  int wh = cx_graph_op(g, "Where", "where", (int[]){m, rc, y}, 3);
  int ga = node1(g, "Gather", "gather", (int[]){wh, cx_graph_const_s64(g, "rows", 3,
                                                                       (int64_t[]){0, -1, 2})}, 2);
  cx_node_set_int(g, ga, "axis", 1); /* [N, 3, 8] */
  int64_t pick[4] = {1, 0, 2, 2};
  int ix = cx_graph_init(g, CX_VALUE_CONST, "pick", CX_S64, &S(2, 2), pick);
  int tr = node1(g, "Transpose", "to_rows", &(int){cx_node_output(g, ga, 0)}, 1);
  cx_node_set_ints(g, tr, "perm", (int64_t[]){1, 2, 0}, 3); /* [3, 8, N] */
  int gn = node1(g, "GatherND", "gather_nd", (int[]){cx_node_output(g, tr, 0), ix}, 2); /* [2, N] */
  int lt = cx_graph_op(g, "Less", "less", (int[]){rc, scalar(g, "threshold", 0.6f)}, 2);
  int ltf = node1(g, "Cast", "mask_float", &lt, 1);
  cx_node_set_int(g, ltf, "to", 1);
  wh = cx_graph_op(g, "Mul", "masked", (int[]){wh, cx_node_output(g, ltf, 0)}, 2);
  int mx = node1(g, "ReduceMax", "reduce_max", &wh, 1);
  cx_node_set_ints(g, mx, "axes", (int64_t[]){-1}, 1);
  cx_node_set_int(g, mx, "keepdims", 0); /* [N, 6] */
  cx_graph_mark_output(g, cx_node_output(g, gn, 0));
  cx_graph_mark_output(g, cx_node_output(g, ga, 0));
  cx_graph_mark_output(g, cx_node_output(g, mx, 0));
  return g;
}

/* A QDQ graph as ONNX Runtime's quantize_static writes one: activations through
 * QuantizeLinear → DequantizeLinear (uint8 with zero point 128 in, int8 with a scalar scale out),
 * the convolution's weight an int8 initializer behind a per-channel DequantizeLinear (axis 0), its
 * bias an int32 one behind another. The exporter must write the integer initializers and the
 * axis attributes back, and the importer must keep the DequantizeLinear nodes (not fold them
 * into f32 weights: the INT8 runtime matches DequantizeLinear(int8 weight) → Conv). */
static int qdq_pair(cx_graph *g, const char *name, int x, cx_dtype t, float scale, double zero) {
  char sn[128], zn[128], qn[128], dn[128];
  snprintf(sn, sizeof sn, "%s.scale", name);
  snprintf(zn, sizeof zn, "%s.zero", name);
  snprintf(qn, sizeof qn, "%s.q", name);
  snprintf(dn, sizeof dn, "%s.dq", name);
  uint8_t z[1];
  cx_dtype_store(t, z, 0, zero);
  int sc = scalar(g, sn, scale), zp = cx_graph_init(g, CX_VALUE_CONST, zn, t, &(cx_shape){0}, z);
  int q = cx_graph_op(g, "QuantizeLinear", qn, (int[]){x, sc, zp}, 3);
  return cx_graph_op(g, "DequantizeLinear", dn, (int[]){q, sc, zp}, 3);
}

static cx_graph *qdq(void) {
  cx_graph *g = cx_graph_new();
  int x = cx_graph_input(g, "x", CX_F32, &S(-1, 3, 8, 8));
  x = qdq_pair(g, "x", x, CX_U8, 0.02f, 128);
  int8_t w[4 * 27];
  int32_t b[4];
  float ws[4], bs[4];
  for (int i = 0; i < 4 * 27; i++) w[i] = (int8_t)((i * 37) % 255 - 127);
  for (int c = 0; c < 4; c++) ws[c] = 0.002f * (float)(c + 1), bs[c] = 0.02f * ws[c];
  for (int c = 0; c < 4; c++) b[c] = 500 * (c - 2);
  int wq = cx_graph_init(g, CX_VALUE_CONST, "w.int8", CX_S8, &S(4, 3, 3, 3), w);
  int bq = cx_graph_init(g, CX_VALUE_CONST, "b.int32", CX_S32, &S(4), b);
  int wd = cx_graph_node(g, "DequantizeLinear", "w.dq",
                         (int[]){wq, cx_graph_const_f32(g, "w.scale", &S(4), ws)}, 2, 1);
  cx_node_set_int(g, wd, "axis", 0);
  int bd = cx_graph_node(g, "DequantizeLinear", "b.dq",
                         (int[]){bq, cx_graph_const_f32(g, "b.scale", &S(4), bs)}, 2, 1);
  cx_node_set_int(g, bd, "axis", 0);
  int cv = cx_graph_node(g, "Conv", "conv",
                         (int[]){x, cx_node_output(g, wd, 0), cx_node_output(g, bd, 0)}, 3, 1);
  cx_node_set_ints(g, cv, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, cv, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  int y = cx_graph_op(g, "Relu", "relu", &(int){cx_node_output(g, cv, 0)}, 1);
  cx_graph_mark_output(g, qdq_pair(g, "y", y, CX_S8, 0.01f, 0));
  return g;
}

/* ---- running ---- */

typedef struct outputs {
  int n;
  char name[MAX_OUT][256];
  cx_shape shape[MAX_OUT];
  float *data[MAX_OUT];
} outputs;

static void outputs_free(outputs *o) {
  for (int k = 0; k < o->n; k++) free(o->data[k]);
  o->n = 0;
}

/* The graph's inputs for batch BATCH: f32 ones from a fixed normal pattern, int64 ones (class
 * labels) cycling through 0..4; also written as .npy for ONNX Runtime. */
typedef struct feeds {
  int n;
  const char *name[MAX_IN];
  cx_dtype dtype[MAX_IN];
  cx_shape shape[MAX_IN];
  void *data[MAX_IN];
  char path[MAX_IN][1200];
} feeds;

static void feeds_free(feeds *f) {
  for (int k = 0; k < f->n; k++) free(f->data[k]);
}

static void make_feeds(const cx_graph *g, const char *label, feeds *f) {
  for (int v = 0; v < g->n_values && f->n < MAX_IN; v++) {
    const cx_value *x = &g->values[v];
    if (x->kind != CX_VALUE_INPUT) continue;
    int k = f->n++;
    f->name[k] = x->name;
    f->dtype[k] = x->dtype;
    f->shape[k] = x->shape;
    f->shape[k].d[0] = BATCH;
    int64_t n = cx_shape_numel(&f->shape[k]);
    f->data[k] = malloc(cx_dtype_size(x->dtype) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      if (x->dtype == CX_S64) ((int64_t *)f->data[k])[i] = i % 5;
      else ((float *)f->data[k])[i] = 2 * cx_rng_normal(cx_rng_key(5, 6, (uint64_t)k), (uint64_t)i);
    }
    snprintf(f->path[k], sizeof f->path[k], "%s/%s_input%d.npy", dir, label, k);
    CHECK(cx_npy_write(f->path[k], x->dtype, &f->shape[k], f->data[k]) == CX_OK, "%s",
          cx_last_error());
  }
}

static cx_status forward(const cx_graph *g, const feeds *f, outputs *o) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = BATCH, .backend = cx_backend_cpu()};
  CX_TRY(cx_program_compile(g, &co, &p));
  for (int k = 0; k < f->n; k++) {
    cx_tensor *t = cx_program_tensor(p, f->name[k]);
    memcpy(t->data, f->data[k], cx_tensor_nbytes(t));
  }
  cx_status s = cx_program_forward(p);
  o->n = 0;
  for (int k = 0; s == CX_OK && k < g->n_outputs && k < MAX_OUT; k++) {
    const char *name = g->values[g->outputs[k]].name;
    cx_tensor *t = cx_program_tensor(p, name);
    snprintf(o->name[o->n], sizeof o->name[0], "%s", name);
    o->shape[o->n] = t->shape;
    o->data[o->n] = malloc(cx_tensor_nbytes(t) + 1);
    memcpy(o->data[o->n++], t->data, cx_tensor_nbytes(t));
  }
  cx_program_free(p);
  return s;
}

static double rel_diff(const float *a, const float *ref, int64_t n) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - ref[i]);
    if (!(d <= diff)) diff = d; /* NaN sticks */
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  }
  return diff / (scale > 0 ? scale : 1e-30);
}

static void compare(const char *what, const outputs *got, const outputs *ref) {
  CHECK(got->n == ref->n, "%s: %d outputs, expected %d", what, got->n, ref->n);
  double worst = 0;
  for (int k = 0; k < got->n && k < ref->n; k++) {
    char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
    bool same = cx_shape_equal(&got->shape[k], &ref->shape[k]);
    CHECK(same, "%s: output %d ('%s') has shape %s, expected %s", what, k, ref->name[k],
          cx_shape_str(&got->shape[k], a), cx_shape_str(&ref->shape[k], b));
    if (!same) continue;
    double r = rel_diff(got->data[k], ref->data[k], cx_shape_numel(&ref->shape[k]));
    CHECK(r <= TOL, "%s: output '%s' differs by %.3g relative (tolerance %.0e)", what,
          ref->name[k], r, TOL);
    if (!(r <= worst)) worst = r;
  }
  if (worst <= TOL) printf("ok   %s: outputs within %.1e relative\n", what, worst);
}

/* ---- ONNX Runtime ---- */

static bool python_has_ort(void) {
  int rc = system(PYTHON " -c 'import onnx, onnxruntime, numpy' 2>/dev/null");
  if (rc == 0) return true;
  fails++;
  printf("FAIL: %s cannot import onnx, onnxruntime and numpy, so exported models cannot be "
         "checked against ONNX Runtime; run scripts/install-deps.sh (as root) to install them\n",
         PYTHON);
  return false;
}

static void ort_compare(const char *model, const feeds *f, const outputs *ref) {
  char out_dir[1300], cmd[8000];
  snprintf(out_dir, sizeof out_dir, "%s.ort", model);
  mkdir(out_dir, 0755);
  int at = snprintf(cmd, sizeof cmd, "%s '%s' '%s' '%s'", PYTHON, CX_ORT_CHECK, model, out_dir);
  for (int k = 0; k < f->n && at < (int)sizeof cmd; k++)
    at += snprintf(cmd + at, sizeof cmd - (size_t)at, " '%s'", f->path[k]);
  if (at < (int)sizeof cmd) snprintf(cmd + at, sizeof cmd - (size_t)at, " >/dev/null");
  int rc = system(cmd);
  CHECK(rc == 0, "%s: tests/ort_check.py failed (exit %d); see its message above", model, rc);
  if (rc != 0) return;
  outputs got = {0};
  for (int k = 0; k < ref->n; k++) {
    char path[1400];
    snprintf(path, sizeof path, "%s/output_%d.npy", out_dir, k);
    cx_dtype dt;
    void *data = NULL;
    cx_status s = cx_npy_read(path, &dt, &got.shape[k], &data);
    CHECK(s == CX_OK && dt == CX_F32, "%s: %s", path, s ? cx_last_error() : "not f32");
    got.data[got.n++] = data;
    snprintf(got.name[k], sizeof got.name[k], "%s", ref->name[k]);
    if (s != CX_OK) break;
  }
  char what[1400];
  snprintf(what, sizeof what, "ONNX Runtime on %s", model);
  if (got.n == ref->n) compare(what, &got, ref);
  outputs_free(&got);
}

/* ---- the export matrix ---- */

static int count_op(const cx_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op->name, op);
  return n;
}

static const cx_onnx_metadata metadata[] = {{"preprocess", "{\"mean\":[0.5],\"std\":[0.25]}"},
                                             {"source", "test_onnx_export"}};

static void check_reimport(const char *path, int opset, int bn_left, const feeds *x,
                           const outputs *ref) {
  cx_graph *back = NULL;
  cx_onnx_info info;
  cx_status s = cx_onnx_import(path, &back, &info);
  CHECK(s == CX_OK, "%s: import: %s", path, cx_last_error());
  if (s != CX_OK) return;
  CHECK(info.opset == opset && !strcmp(info.producer, "compress") &&
            !strcmp(info.producer_version, "9.9.9") && info.n_metadata == 2 &&
            !strcmp(info.metadata[0][0], "preprocess"),
        "%s: opset %lld producer '%s' '%s', %d metadata", path, (long long)info.opset,
        info.producer, info.producer_version, info.n_metadata);
  CHECK(count_op(back, "BatchNormalization") == bn_left, "%s: %d BatchNormalization nodes, "
        "expected %d", path, count_op(back, "BatchNormalization"), bn_left);
  bool symbolic = false;
  for (int v = 0; v < back->n_values; v++)
    if (back->values[v].kind == CX_VALUE_INPUT) symbolic = back->values[v].shape.d[0] == -1;
  CHECK(symbolic, "%s: the input's batch dimension is not symbolic", path);
  outputs got = {0};
  s = forward(back, x, &got);
  CHECK(s == CX_OK, "%s: forward after import: %s", path, cx_last_error());
  char what[1400];
  snprintf(what, sizeof what, "%s imported again", path);
  if (s == CX_OK) compare(what, &got, ref);
  outputs_free(&got);
  cx_graph_free(back);
}

/* n_bn BatchNormalization nodes, of which n_kept cannot be folded. */
static void check_graph(const char *label, cx_graph *g, int n_bn, int n_kept) {
  CHECK(cx_graph_status(g) == CX_OK, "%s: building: %s", label, cx_last_error());
  if (g->status) return;
  feeds x = {0};
  make_feeds(g, label, &x);
  outputs ref = {0};
  cx_status s = forward(g, &x, &ref);
  CHECK(s == CX_OK, "%s: forward: %s", label, cx_last_error());
  static const int opsets[] = {13, 14, 17}; /* 14: HardSwish and Reshape's allowzero arrive */
  for (int i = 0; s == CX_OK && i < 3; i++)
    for (int fold = 0; fold < 2; fold++) {
      int opset = opsets[i];
      char path[1200];
      snprintf(path, sizeof path, "%s/%s_op%d%s.onnx", dir, label, opset, fold ? "_fold" : "");
      cx_onnx_export_opts o = {.opset = opset, .fold_bn = fold, .producer_version = "9.9.9",
                               .doc_string = "exported by test_onnx_export",
                               .metadata = metadata, .n_metadata = 2};
      cx_status e = cx_onnx_export(g, path, &o);
      CHECK(e == CX_OK, "%s: export: %s", path, cx_last_error());
      if (e != CX_OK) continue;
      printf("ok   exported %s\n", path);
      check_reimport(path, opset, fold ? n_kept : n_bn, &x, &ref);
      if (have_ort) ort_compare(path, &x, &ref);
    }
  outputs_free(&ref);
  feeds_free(&x);
}

/* The QDQ graph came back with its Q/DQ nodes and integer initializers as they were. */
static void check_qdq_kept(void) {
  char path[1200];
  snprintf(path, sizeof path, "%s/qdq_op17.onnx", dir);
  cx_graph *back = NULL;
  cx_onnx_info info;
  if (cx_onnx_import(path, &back, &info) != CX_OK) return; /* check_reimport reported it */
  int w = cx_graph_find_value(back, "w.int8"), b = cx_graph_find_value(back, "b.int32");
  CHECK(count_op(back, "QuantizeLinear") == 2 && count_op(back, "DequantizeLinear") == 4,
        "%s: %d QuantizeLinear and %d DequantizeLinear nodes; expected 2 and 4", path,
        count_op(back, "QuantizeLinear"), count_op(back, "DequantizeLinear"));
  CHECK(w >= 0 && back->values[w].kind == CX_VALUE_CONST && back->values[w].dtype == CX_S8 &&
            ((const int8_t *)back->values[w].init)[1] == 37 - 127,
        "%s: the int8 weight did not come back as an int8 initializer", path);
  CHECK(b >= 0 && back->values[b].dtype == CX_S32 &&
            ((const int32_t *)back->values[b].init)[0] == -1000,
        "%s: the int32 bias did not come back as an int32 initializer", path);
  for (int i = 0; i < back->n_nodes; i++)
    if (!strcmp(back->nodes[i].name, "w.dq"))
      CHECK(cx_node_int(&back->nodes[i], "axis", 1) == 0, "%s: w.dq lost its axis", path);
  printf("ok   %s: Q/DQ nodes, integer initializers and axes kept\n", path);
  cx_graph_free(back);
}

/* ---- fails ---- */

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* No "<name>.tmp.<pid>" may be left in dir. */
static void check_no_tmp(const char *what) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));)
    CHECK(!strstr(e->d_name, ".tmp."), "%s: left %s/%s behind", what, dir, e->d_name);
  closedir(d);
}

static void expect_failure(const char *what, const cx_graph *g, const char *path, int opset,
                           const char *needle) {
  remove(path);
  cx_onnx_export_opts o = {.opset = opset};
  cx_status s = cx_onnx_export(g, path, &o);
  bool ok = s != CX_OK && strstr(cx_last_error(), needle) && !exists(path);
  CHECK(ok, "%s: expected a failure naming '%s'; got %s: %s", what, needle,
        s == CX_OK ? "success" : "failure", cx_last_error());
  if (ok) printf("ok   %s: %s\n", what, cx_last_error());
  check_no_tmp(what);
}

static void test_failures(void) {
  cx_graph *g = cnn();
  char path[1200];
  snprintf(path, sizeof path, "%s/refused.onnx", dir);
  expect_failure("opset 12", g, path, 12, "opset 12");
  expect_failure("opset 18", g, path, 18, "opset 18");
  expect_failure("missing folder", g, "/nonexistent-folder/cnn.onnx", 13, "/nonexistent-folder");
  cx_graph_free(g);
  g = cx_graph_new();
  int a = cx_graph_input(g, "a", CX_F32, &S(-1, 5)), b = cx_graph_input(g, "b", CX_F32, &S(-1, 5));
  int kd = cx_graph_op(g, "KLDivTemperature", "distill_loss", (int[]){a, b}, 2);
  cx_graph_mark_output(g, kd);
  expect_failure("com.compress node", g, path, 13, "'distill_loss'");
  cx_graph_free(g);
}

static void test_symbolic_shapes(void) {
  cx_graph *g = cnn();
  cx_shape *s = calloc((size_t)g->n_values, sizeof *s);
  cx_dtype *t = calloc((size_t)g->n_values, sizeof *t);
  CHECK(cx_graph_symbolic_shapes(g, s, t) == CX_OK, "symbolic shapes: %s", cx_last_error());
  char b[CX_SHAPE_STR];
  int probs = g->outputs[1], flat = cx_graph_find_value(g, "flatten");
  CHECK(s[probs].ndim == 2 && s[probs].d[0] == -1 && s[probs].d[1] == 10 && t[probs] == CX_F32,
        "softmax output: %s, expected [-1,10]", cx_shape_str(&s[probs], b));
  CHECK(flat >= 0 && s[flat].d[0] == -1 && s[flat].d[1] == 32, "flatten: %s, expected [-1,32]",
        flat >= 0 ? cx_shape_str(&s[flat], b) : "missing");
  free(s);
  free(t);
  cx_graph_free(g);
}

/* Files for tests/test_cli.sh: the CNN at opset 13 with an input, and an input of the wrong
 * dtype. */
static void write_cli_fixtures(void) {
  cx_graph *g = cnn();
  char path[1200];
  snprintf(path, sizeof path, "%s/cnn.onnx", dir);
  cx_onnx_export_opts o = {.opset = 13, .producer_version = "9.9.9"};
  CHECK(cx_onnx_export(g, path, &o) == CX_OK, "%s", cx_last_error());
  cx_shape s = S(2, 3, 8, 8);
  float x[2 * 3 * 8 * 8];
  int64_t bad[2 * 3 * 8 * 8];
  for (int i = 0; i < 2 * 3 * 8 * 8; i++) x[i] = cx_rng_normal(9, (uint64_t)i), bad[i] = i;
  snprintf(path, sizeof path, "%s/cnn_input.npy", dir);
  CHECK(cx_npy_write(path, CX_F32, &s, x) == CX_OK, "%s", cx_last_error());
  snprintf(path, sizeof path, "%s/cnn_input_s64.npy", dir);
  CHECK(cx_npy_write(path, CX_S64, &s, bad) == CX_OK, "%s", cx_last_error());
  cx_graph_free(g);
}

int main(void) {
  const char *env = getenv("CX_EXPORT_DIR");
  if (env && *env) {
    snprintf(dir, sizeof dir, "%s", env);
    mkdir(dir, 0755);
  } else {
    snprintf(dir, sizeof dir, "/tmp/cx_export_XXXXXX");
    if (!mkdtemp(dir)) return printf("FAIL: cannot make a temporary folder\n"), 1;
  }
  have_ort = python_has_ort();
  cx_graph *g;
  check_graph("cnn", g = cnn(), 4, 0);
  cx_graph_free(g);
  check_graph("depthwise", g = depthwise(), 2, 0);
  cx_graph_free(g);
  check_graph("reduce", g = reduce(), 0, 0);
  cx_graph_free(g);
  check_graph("misc", g = misc(), 0, 0);
  cx_graph_free(g);
  check_graph("transformer", g = transformer(), 0, 0);
  cx_graph_free(g);
  check_graph("unfoldable", g = unfoldable(), 3, 3);
  cx_graph_free(g);
  check_graph("tiny_cnn", g = cx_tiny_cnn(1, 16, 10, 1), 1, 0); /* SoftmaxCrossEntropyLoss */
  cx_graph_free(g);
  check_graph("qdq", g = qdq(), 0, 0);
  cx_graph_free(g);
  check_qdq_kept();
  test_failures();
  test_symbolic_shapes();
  write_cli_fixtures();
  if (!env || !*env) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", dir);
  }
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
