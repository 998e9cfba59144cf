/* QuantizeLinear, DequantizeLinear, FakeQuantize and FakeQuantizeGrad (core/ops/quant.c).
 *
 * 1. Forward of all four against the references (kernels/ref/quant.c): per tensor and per axis,
 *    INT8 narrow [-127, 127] and full [-128, 127], UINT8 [0, 255], int32 into DequantizeLinear,
 *    and FakeQuantize(Grad) between convolutions, where its tensors are channels-last.
 * 2. Edge cases checked against values written here, not the reference: ties round half to
 *    even, values beyond the range saturate, a NaN, and scales that are zero, negative or NaN
 *    are refused with a message naming the node and channel (never divided by).
 * 3. The gradient rule. Finite differences of a staircase are zero almost everywhere, so the
 *    straight-through estimator cannot be checked by them: dX is compared exactly with the
 *    reference's mask rule (dY where the rounded value lies inside the range, else 0), and LSQ's
 *    dScale with the reference's formula and the grad_scale written out below. Finite
 *    differences do apply where the function is smooth, in the saturated region: there
 *    Y = (qmin - z)·s or (qmax - z)·s, so dY/dX = 0 and dY/ds = qmin - z or qmax - z, which LSQ
 *    uses unchanged (times grad_scale). */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/ref/ref.h"
#include "op_check.h"

static const oc_opts fwd_opts = {.seed = 3, .fwd_tol = 1e-6};

/* ---- building blocks ---- */

/* A constant of dtype t with integers uniform in [lo, hi]. */
static int int_const(cx_graph *g, const char *name, cx_dtype t, const cx_shape *s, int64_t lo,
                     int64_t hi, uint64_t seed) {
  int64_t n = cx_shape_numel(s);
  void *d = calloc((size_t)(n ? n : 1), cx_dtype_size(t));
  for (int64_t i = 0; i < n; i++) {
    double v = (double)lo + floor(cx_rng_uniform(seed, (uint64_t)i) * (double)(hi - lo + 1));
    cx_dtype_store(t, d, (size_t)i, v > (double)hi ? (double)hi : v);
  }
  int id = cx_graph_init(g, CX_VALUE_CONST, name, t, s, d);
  free(d);
  return id;
}

/* Scales in [lo, hi) of shape [] (per tensor, channels 0) or [channels]. */
static int scale_const(cx_graph *g, const char *name, int64_t channels, float lo, float hi,
                       uint64_t seed) {
  cx_shape s = channels ? S(channels) : (cx_shape){0};
  return oc_const(g, name, &s, lo, hi, seed);
}

static int node1(cx_graph *g, const char *op, const int *in, int n_in, int64_t axis) {
  int node = cx_graph_node(g, op, op, in, n_in, 1);
  if (axis != 1) cx_node_set_int(g, node, "axis", axis);
  return node;
}

static void set_range(cx_graph *g, int node, int64_t qmin, int64_t qmax) {
  cx_node_set_int(g, node, "qmin", qmin);
  cx_node_set_int(g, node, "qmax", qmax);
}

static int check_and_free(const char *label, cx_graph *g, const oc_opts *o) {
  int f = oc_check(label, g, o);
  cx_graph_free(g);
  return f;
}

/* ---- 1. forward against the references ---- */

/* QuantizeLinear of X in [-3, 3) (so that a scale of 0.02 saturates); zero point of type zt
 * (CX_F32: none, uint8 by default), per axis when channels > 0. */
static int quantize(cx_dtype zt, int64_t zlo, int64_t zhi, cx_shape xs, int64_t axis,
                    int64_t channels) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_const(g, "x", &xs, -3, 3, 11), scale_const(g, "scale", channels, 0.01f, 0.03f, 12),
               -1};
  cx_shape ps = channels ? S(channels) : (cx_shape){0};
  if (zt != CX_F32) in[2] = int_const(g, "zero", zt, &ps, zlo, zhi, 13);
  int node = node1(g, "QuantizeLinear", in, zt != CX_F32 ? 3 : 2, axis);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[160], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "QuantizeLinear %s zero point %s, %s axis %lld", cx_shape_str(&xs, sh),
           zt == CX_F32 ? "none" : cx_dtype_name(zt), channels ? "per" : "per-tensor",
           (long long)axis);
  return check_and_free(label, g, &fwd_opts);
}

static int dequantize(cx_dtype t, int64_t lo, int64_t hi, bool zero, cx_shape xs, int64_t axis,
                      int64_t channels) {
  cx_graph *g = cx_graph_new();
  cx_shape ps = channels ? S(channels) : (cx_shape){0};
  int in[3] = {int_const(g, "x", t, &xs, lo, hi, 21),
               scale_const(g, "scale", channels, 0.001f, 0.05f, 22),
               zero ? int_const(g, "zero", t, &ps, t == CX_U8 ? 100 : -5, t == CX_U8 ? 150 : 5, 23)
                    : -1};
  int node = node1(g, "DequantizeLinear", in, zero ? 3 : 2, axis);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[160], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "DequantizeLinear %s %s%s, %s axis %lld", cx_dtype_name(t),
           cx_shape_str(&xs, sh), zero ? " with zero point" : "", channels ? "per" : "per-tensor",
           (long long)axis);
  return check_and_free(label, g, &fwd_opts);
}

typedef struct fq_range {
  const char *name;
  int64_t qmin, qmax;
  float zlo, zhi; /* zero points drawn from [zlo, zhi], rounded (0, 0: none) */
} fq_range;

static const fq_range ranges[] = {
    {"int8 narrow", -127, 127, 0, 0},
    {"int8", -128, 127, -3, 3},
    {"uint8", 0, 255, 100, 156},
};

/* A zero point of integers (stored as f32) for range r, or -1. */
static int fq_zero(cx_graph *g, const fq_range *r, int64_t channels, uint64_t seed) {
  if (r->zlo == 0 && r->zhi == 0) return -1;
  int64_t n = channels ? channels : 1;
  float *z = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    z[i] = roundf(r->zlo + (r->zhi - r->zlo) * cx_rng_uniform(seed, (uint64_t)i));
  cx_shape s = channels ? S(channels) : (cx_shape){0};
  int id = cx_graph_const_f32(g, "zero", &s, z);
  free(z);
  return id;
}

static int fake_quantize(const fq_range *r, cx_shape xs, int64_t axis, int64_t channels) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_const(g, "x", &xs, -3, 3, 31), scale_const(g, "scale", channels, 0.01f, 0.03f, 32),
               fq_zero(g, r, channels, 33)};
  int node = node1(g, "FakeQuantize", in, in[2] >= 0 ? 3 : 2, axis);
  set_range(g, node, r->qmin, r->qmax);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[160], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "FakeQuantize %s %s, %s axis %lld", r->name, cx_shape_str(&xs, sh),
           channels ? "per" : "per-tensor", (long long)axis);
  return check_and_free(label, g, &fwd_opts);
}

/* FakeQuantizeGrad on its own from constants: dX and dScale against the reference. */
static int fake_quantize_grad(const fq_range *r, cx_shape xs, int64_t axis, int64_t channels) {
  cx_graph *g = cx_graph_new();
  int in[4] = {oc_const(g, "dy", &xs, -1, 1, 41), oc_const(g, "x", &xs, -3, 3, 42),
               scale_const(g, "scale", channels, 0.01f, 0.03f, 43), fq_zero(g, r, channels, 44)};
  int node = cx_graph_node(g, "FakeQuantizeGrad", "fqg", in, in[3] >= 0 ? 4 : 3, 2);
  if (axis != 1) cx_node_set_int(g, node, "axis", axis);
  set_range(g, node, r->qmin, r->qmax);
  cx_node_set_float(g, node, "grad_scale", 0.37f);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  cx_graph_mark_output(g, cx_node_output(g, node, 1));
  char label[160], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "FakeQuantizeGrad %s %s, %s axis %lld", r->name,
           cx_shape_str(&xs, sh), channels ? "per" : "per-tensor", (long long)axis);
  /* dScale sums thousands of terms: f32 against double */
  return check_and_free(label, g, &(oc_opts){.seed = 4, .fwd_tol = 1e-5});
}

static int forwards(void) {
  int f = 0;
  cx_shape big = S(3, 37, 301); /* threaded: more than 2^15 elements */
  f += quantize(CX_S8, -3, 3, S(3, 7, 11), 1, 0);
  f += quantize(CX_S8, 0, 0, big, 1, 0);
  f += quantize(CX_U8, 120, 136, S(3, 7, 11), 1, 0);
  f += quantize(CX_F32, 0, 0, S(3, 7, 11), 1, 0); /* no zero point: uint8, zero 0 */
  f += quantize(CX_S8, -3, 3, S(4, 3, 5, 5), 0, 4);
  f += quantize(CX_S8, -3, 3, S(4, 3, 5, 5), 1, 3);
  f += quantize(CX_U8, 120, 136, S(4, 3, 5, 5), -1, 5);
  f += quantize(CX_S8, -3, 3, big, 2, 301);
  f += dequantize(CX_S8, -128, 127, true, S(3, 7, 11), 1, 0);
  f += dequantize(CX_S8, -128, 127, false, big, 1, 0);
  f += dequantize(CX_U8, 0, 255, true, S(3, 7, 11), 1, 0);
  f += dequantize(CX_S8, -127, 127, true, S(4, 3, 5, 5), 0, 4);
  f += dequantize(CX_U8, 0, 255, true, S(4, 3, 5, 5), 1, 3);
  f += dequantize(CX_S32, -100000, 100000, false, S(16), 0, 16); /* a bias */
  f += dequantize(CX_S32, -100000, 100000, true, S(2, 16), 1, 0);
  for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
    f += fake_quantize(&ranges[r], S(3, 7, 11), 1, 0);
    f += fake_quantize(&ranges[r], big, 1, 0);
    f += fake_quantize(&ranges[r], S(8, 3, 3, 3), 0, 8);
    f += fake_quantize(&ranges[r], S(2, 6, 5, 5), 1, 6);
    f += fake_quantize(&ranges[r], S(3, 37, 301), -1, 301);
    f += fake_quantize_grad(&ranges[r], S(3, 7, 11), 1, 0);
    f += fake_quantize_grad(&ranges[r], big, 1, 0);
    f += fake_quantize_grad(&ranges[r], S(8, 3, 3, 3), 0, 8);
    f += fake_quantize_grad(&ranges[r], S(2, 6, 5, 5), 1, 6);
    f += fake_quantize_grad(&ranges[r], S(3, 37, 301), 1, 37);
  }
  return f;
}

/* ---- FakeQuantize and FakeQuantizeGrad between convolutions: channels-last ---- */

static int conv(cx_graph *g, const char *name, int x, int64_t c_in, int64_t c_out, uint64_t seed) {
  char wn[64];
  snprintf(wn, sizeof wn, "%s.w", name);
  int w = oc_const(g, wn, &S(c_out, c_in, 3, 3), -0.5f, 0.5f, seed);
  int node = cx_graph_node(g, "Conv", name, (int[]){x, w}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){3, 3}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  return cx_node_output(g, node, 0);
}

/* Whether value `name` is channels-last in g compiled for inference. */
static bool nhwc_in_program(const cx_graph *g, const char *name) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &o, &p) != CX_OK) {
    printf("FAIL compile: %s\n", cx_last_error());
    return false;
  }
  int v = cx_graph_find_value(cx_program_graph(p), name);
  bool nhwc = v >= 0 && cx_tensor_nhwc(cx_program_value_tensor(p, v));
  cx_program_free(p);
  return nhwc;
}

/* conv → FakeQuantize (per axis `axis` or per tensor) → conv, and conv, conv → FakeQuantizeGrad
 * → conv with its dScale an output. */
static int between_convs(bool grad, int64_t axis, bool per_axis) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(2, 3, 6, 7);
  int64_t dims[4] = {2, 5, 6, 7}, a = axis < 0 ? axis + 4 : axis;
  int x = oc_const(g, "x", &xs, -1, 1, 51), h = conv(g, "c1", x, 3, 5, 52);
  int scale = scale_const(g, "scale", per_axis ? dims[a] : 0, 0.02f, 0.05f, 53);
  int node;
  if (grad) {
    int dy = conv(g, "c2", x, 3, 5, 54);
    node = cx_graph_node(g, "FakeQuantizeGrad", "fq", (int[]){dy, h, scale}, 3, 2);
    cx_node_set_float(g, node, "grad_scale", 0.5f);
    cx_graph_mark_output(g, cx_node_output(g, node, 1));
  } else {
    node = cx_graph_node(g, "FakeQuantize", "fq", (int[]){h, scale}, 2, 1);
  }
  if (axis != 1) cx_node_set_int(g, node, "axis", axis);
  set_range(g, node, -128, 127);
  int y = conv(g, "c3", cx_node_output(g, node, 0), 5, 4, 55);
  cx_graph_mark_output(g, y);
  char label[160];
  snprintf(label, sizeof label, "%s between convolutions, %s axis %lld",
           grad ? "FakeQuantizeGrad" : "FakeQuantize", per_axis ? "per" : "per-tensor",
           (long long)axis);
  int f = 0;
  if (!nhwc_in_program(g, grad ? "fq:0" : "fq")) {
    printf("FAIL %s: the FakeQuantize output is not channels-last\n", label);
    f++;
  }
  return f + check_and_free(label, g, &(oc_opts){.seed = 5, .fwd_tol = 1e-5});
}

static int channels_last(void) {
  int f = 0;
  for (int grad = 0; grad < 2; grad++) {
    f += between_convs(grad, 1, false);
    for (int64_t axis = -1; axis < 4; axis++) f += between_convs(grad, axis, true);
  }
  return f;
}

/* ---- 2. edge cases against values written here ---- */

/* Compiles g for inference and runs it forward; output 0 into y (n values). */
static cx_status run_forward(const cx_graph *g, double *y, int64_t n) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  CX_TRY(cx_program_compile(g, &o, &p));
  cx_status s = cx_program_forward(p);
  if (s == CX_OK) {
    const cx_graph *pg = cx_program_graph(p);
    const cx_tensor *t = cx_program_value_tensor(
        p, cx_graph_find_value(pg, g->values[g->outputs[0]].name));
    for (int64_t i = 0; i < n; i++) y[i] = cx_dtype_load(t->dtype, t->data, (size_t)i);
  }
  cx_program_free(p);
  return s;
}

static int expect_values(const char *label, const double *got, const double *want, int64_t n) {
  int f = 0;
  for (int64_t i = 0; i < n; i++) {
    bool same = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i] && signbit(got[i]) == signbit(want[i]);
    if (!same) {
      printf("FAIL %s: element %lld is %.9g; expected %.9g\n", label, (long long)i, got[i], want[i]);
      f++;
    }
  }
  if (!f) printf("ok   %s: %lld values as expected\n", label, (long long)n);
  return f;
}

/* x / 0.25 is exact: ties at ±0.5, ±1.5, ±2.5 and at the ends of the range (127.5, -128.5),
 * then far beyond the range, infinities and a NaN. */
#define N_EDGE 13
static const float edge_x[N_EDGE] = {0.125f,  0.375f,  0.625f, -0.125f, -0.375f,    -0.625f, 31.875f,
                                     -32.125f, 1e6f,   -1e6f,  INFINITY, -INFINITY, NAN};

static int edges(cx_dtype qt, const char *op, int64_t qmin, int64_t qmax, float zero,
                 const double *want) {
  cx_graph *g = cx_graph_new();
  float scale = 0.25f;
  int x = cx_graph_const_f32(g, "x", &S(N_EDGE), edge_x);
  int in[3] = {x, cx_graph_const_f32(g, "scale", &(cx_shape){0}, &scale), -1};
  if (strcmp(op, "QuantizeLinear") == 0) {
    int8_t z8 = (int8_t)zero;
    uint8_t zu = (uint8_t)zero;
    in[2] = cx_graph_init(g, CX_VALUE_CONST, "zero", qt, &(cx_shape){0},
                          qt == CX_S8 ? (const void *)&z8 : (const void *)&zu);
  } else {
    in[2] = cx_graph_const_f32(g, "zero", &(cx_shape){0}, &zero);
  }
  int node = node1(g, op, in, 3, 1);
  if (strcmp(op, "FakeQuantize") == 0) set_range(g, node, qmin, qmax);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  double got[N_EDGE];
  char label[128];
  snprintf(label, sizeof label, "%s %s [%lld, %lld] zero %g: ties to even, saturation", op,
           cx_dtype_name(qt), (long long)qmin, (long long)qmax, (double)zero);
  int f;
  if (run_forward(g, got, N_EDGE) != CX_OK) {
    printf("FAIL %s: %s\n", label, cx_last_error());
    f = 1;
  } else {
    f = expect_values(label, got, want, N_EDGE);
  }
  cx_graph_free(g);
  return f;
}

static int edge_cases(void) {
  /* QuantizeLinear: a NaN saturates to the bottom of the range, as in ONNX Runtime */
  static const double q_s8[N_EDGE] = {0, 2, 2, 0, -2, -2, 127, -128, 127, -128, 127, -128, -128};
  static const double q_u8[N_EDGE] = {128, 130, 130, 128, 126, 126, 255, 0, 255, 0, 255, 0, 0};
  /* FakeQuantize narrow range, zero point 0: -0.125 / 0.25 rounds to -0, and -0 + 0 is +0 */
  static const double fq_narrow[N_EDGE] = {0,     0.5,    0.5,   0,     -0.5,   -0.5, 31.75,
                                           -31.75, 31.75, -31.75, 31.75, -31.75, NAN};
  /* uint8 with zero point 128: (clamp(q + 128, 0, 255) - 128) · 0.25 */
  static const double fq_u8[N_EDGE] = {0,   0.5, 0.5,   0,     -0.5, -0.5, 31.75,
                                       -32, 31.75, -32, 31.75, -32,  NAN};
  return edges(CX_S8, "QuantizeLinear", -128, 127, 0, q_s8) +
         edges(CX_U8, "QuantizeLinear", 0, 255, 128, q_u8) +
         edges(CX_F32, "FakeQuantize", -127, 127, 0, fq_narrow) +
         edges(CX_F32, "FakeQuantize", 0, 255, 128, fq_u8);
}

/* A scale of zero, a negative or a NaN one: shape inference cannot see it, so the kernel refuses
 * it when it runs, naming the node and the channel. */
static int bad_scale(const char *op, const float *scale, int64_t channels, const char *want) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(2, 3, 4);
  cx_shape ss = channels ? S(channels) : (cx_shape){0};
  int x = oc_const(g, "x", &xs, -1, 1, 61), s = cx_graph_const_f32(g, "scale", &ss, scale);
  int node;
  if (strcmp(op, "FakeQuantizeGrad") == 0) {
    int dy = oc_const(g, "dy", &xs, -1, 1, 62);
    node = cx_graph_node(g, op, op, (int[]){dy, x, s}, 3, 2);
  } else {
    node = cx_graph_node(g, op, op, (int[]){x, s}, 2, 1);
  }
  if (strcmp(op, "QuantizeLinear") != 0) set_range(g, node, -128, 127);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  double got[24];
  cx_status st = run_forward(g, got, 24);
  int f = 0;
  if (st != CX_ERR_ARG || !strstr(cx_last_error(), want)) {
    printf("FAIL %s with a bad scale: status %d, message '%s'; expected '%s'\n", op, (int)st,
           st ? cx_last_error() : "", want);
    f = 1;
  } else {
    printf("ok   %s with a bad scale refused: %s\n", op, cx_last_error());
  }
  cx_graph_free(g);
  return f;
}

static int bad_scales(void) {
  float zero = 0, three[3] = {0.1f, -0.1f, 0.2f}, nan3[3] = {0.1f, 0.2f, NAN};
  return bad_scale("QuantizeLinear", &zero, 0, "scale[0] is 0; expected a positive finite") +
         bad_scale("FakeQuantize", &zero, 0, "scale[0] is 0;") +
         bad_scale("FakeQuantize", three, 3, "scale[1] is -0.1") +
         bad_scale("FakeQuantizeGrad", nan3, 3, "scale[2] is nan") +
         bad_scale("FakeQuantizeGrad", &zero, 0, "scale[0] is 0;");
}

/* ---- 3. the gradient rule ---- */

/* A training program's tensor as doubles (plain layout: these tests have no convolutions). */
static cx_ref_tensor load(const cx_tensor *t) {
  int64_t n = cx_shape_numel(&t->shape);
  cx_ref_tensor r = {.shape = t->shape, .data = calloc((size_t)(n ? n : 1), sizeof(double)),
                     .dtype = t->dtype};
  for (int64_t i = 0; i < n; i++) r.data[i] = cx_dtype_load(t->dtype, t->data, (size_t)i);
  return r;
}

/* The training program's FakeQuantizeGrad node (which must exist), run through the reference on
 * the program's own inputs after a backward pass. */
static cx_status reference_of_grad(cx_program *p, const cx_node **node, cx_ref_tensor *out) {
  const cx_graph *pg = cx_program_graph(p);
  *node = NULL;
  for (int i = 0; i < pg->n_nodes; i++)
    if (strcmp(pg->nodes[i].op->name, "FakeQuantizeGrad") == 0) *node = &pg->nodes[i];
  if (!*node) return cx_fail(CX_ERR_ARG, "no FakeQuantizeGrad node in the training program");
  const cx_node *n = *node;
  cx_ref_tensor in[4] = {{.data = NULL}};
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0) in[k] = load(cx_program_value_tensor(p, n->in[k]));
  for (int k = 0; k < n->n_out; k++) out[k] = load(cx_program_value_tensor(p, n->out[k]));
  for (int k = 0; k < n->n_out; k++)
    memset(out[k].data, 0, sizeof(double) * (size_t)cx_shape_numel(&out[k].shape));
  cx_ref_args a = {.node = n, .in = in, .n_in = n->n_in, .out = out, .n_out = n->n_out};
  cx_status s = cx_ref_find("FakeQuantizeGrad")(&a);
  for (int k = 0; k < n->n_in; k++) free(in[k].data);
  return s;
}

/* Compiles g (output "FakeQuantize") for training, seeds dY with numbers in [-1, 1), runs
 * forward and backward. */
static cx_status train_step(const cx_graph *g, cx_program **p) {
  cx_compile_opts o = {.batch = 1, .training = true, .backend = cx_backend_cpu(), .seed = 7};
  CX_TRY(cx_program_compile(g, &o, p));
  cx_tensor *seed = cx_program_tensor(*p, "FakeQuantize@grad");
  if (!seed) return cx_fail(CX_ERR_ARG, "no fed gradient FakeQuantize@grad");
  for (int64_t i = 0; i < cx_tensor_numel(seed); i++)
    ((float *)seed->data)[i] = 2 * cx_rng_uniform(71, (uint64_t)i) - 1;
  CX_TRY(cx_program_forward(*p));
  return cx_program_backward(*p);
}

static const cx_tensor *grad_of(cx_program *p, const char *name) {
  for (int k = 0; k < cx_program_param_count(p); k++)
    if (strcmp(cx_program_param_name(p, k), name) == 0) return cx_program_param_grad(p, k);
  return NULL;
}

/* dX against the mask rule, exactly; with LSQ, dScale against the reference and grad_scale
 * against LSQ's g = 1 / sqrt(numel(X) / numel(scale) · qmax) written out here. The check also
 * requires that X has elements inside the range and beyond it, so both branches are tested. */
static int ste_lsq(const fq_range *r, cx_shape xs, int64_t axis, int64_t channels, bool lsq) {
  cx_graph *g = cx_graph_new();
  cx_shape ss = channels ? S(channels) : (cx_shape){0};
  int in[3] = {oc_param(g, "x", &xs, -4, 4, 81),
               lsq ? oc_param(g, "scale", &ss, 0.01f, 0.03f, 82)
                   : oc_const(g, "scale", &ss, 0.01f, 0.03f, 82),
               fq_zero(g, r, channels, 83)};
  int node = node1(g, "FakeQuantize", in, in[2] >= 0 ? 3 : 2, axis);
  set_range(g, node, r->qmin, r->qmax);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[160], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "FakeQuantize backward %s %s %s, %s axis %lld", lsq ? "LSQ" : "STE",
           r->name, cx_shape_str(&xs, sh), channels ? "per" : "per-tensor", (long long)axis);
  cx_program *p = NULL;
  const cx_node *gn = NULL;
  cx_ref_tensor ref[2] = {{.data = NULL}};
  cx_status s = train_step(g, &p);
  if (s == CX_OK) s = reference_of_grad(p, &gn, ref);
  int f = 0;
  if (s != CX_OK) {
    printf("FAIL %s: %s\n", label, cx_last_error());
    f = 1;
    goto done;
  }
  if (gn->n_out != (lsq ? 2 : 1)) {
    printf("FAIL %s: FakeQuantizeGrad has %d outputs; expected %d\n", label, gn->n_out, lsq ? 2 : 1);
    f++;
  }
  const cx_tensor *dx = grad_of(p, "x");
  int64_t n = cx_tensor_numel(dx), inside = 0, outside = 0, bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double ours = ((const float *)dx->data)[i];
    bad += ours != ref[0].data[i];
    if (ref[0].data[i] != 0) inside++;
    else outside++;
  }
  if (bad || !inside || !outside) {
    printf("FAIL %s: dX differs from the mask rule at %lld of %lld elements (%lld inside, %lld "
           "clipped)\n", label, (long long)bad, (long long)n, (long long)inside, (long long)outside);
    f++;
  } else {
    printf("ok   %s: dX is the mask rule exactly (%lld inside, %lld clipped)\n", label,
           (long long)inside, (long long)outside);
  }
  if (lsq && gn->n_out == 2) {
    double want_g = 1 / sqrt((double)n / (double)(channels ? channels : 1) * (double)r->qmax);
    float got_g = cx_node_float(gn, "grad_scale", -1);
    const cx_tensor *ds = grad_of(p, "scale");
    double err = 0, top = 1e-6;
    for (int64_t c = 0; c < cx_tensor_numel(ds); c++) {
      err = fmax(err, fabs(((const float *)ds->data)[c] - ref[1].data[c]));
      top = fmax(top, fabs(ref[1].data[c]));
    }
    bool ok = fabs(got_g - want_g) <= 1e-6 * want_g && err / top <= 1e-5;
    printf("%s %s: grad_scale %.6g (LSQ's g %.6g), dScale error %.2e\n", ok ? "ok  " : "FAIL",
           label, (double)got_g, want_g, err / top);
    f += !ok;
  }
done:
  for (int k = 0; k < 2; k++) free(ref[k].data);
  cx_program_free(p);
  cx_graph_free(g);
  return f;
}

/* X beyond the range, where FakeQuantize is smooth: dX against finite differences by the
 * harness (both 0), and dScale / grad_scale against central differences of the reference's
 * L = Σ R·Y in the scale, which is exact there (Y is linear in s). */
static int saturated(const fq_range *r, int64_t channels) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(4, 6, 5), ss = channels ? S(channels) : (cx_shape){0};
  float x[120];
  for (int i = 0; i < 120; i++) /* |x| in [1, 2): beyond 255 · 0.003 */
    x[i] = (i % 2 ? 1.0f : -1.0f) * (1 + cx_rng_uniform(91, (uint64_t)i));
  int in[3] = {cx_graph_param(g, "x", &xs, x), oc_param(g, "scale", &ss, 0.002f, 0.003f, 92),
               fq_zero(g, r, channels, 93)};
  int node = node1(g, "FakeQuantize", in, in[2] >= 0 ? 3 : 2, 1);
  set_range(g, node, r->qmin, r->qmax);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[128];
  snprintf(label, sizeof label, "FakeQuantize saturated %s, %s", r->name,
           channels ? "per axis" : "per tensor");
  cx_program *p = NULL;
  int f = 0;
  if (train_step(g, &p) != CX_OK) {
    printf("FAIL %s: %s\n", label, cx_last_error());
    f = 1;
    goto done;
  }
  const cx_graph *pg = cx_program_graph(p);
  const cx_node *fq = NULL, *gn = NULL;
  for (int i = 0; i < pg->n_nodes; i++) {
    if (strcmp(pg->nodes[i].op->name, "FakeQuantize") == 0) fq = &pg->nodes[i];
    if (strcmp(pg->nodes[i].op->name, "FakeQuantizeGrad") == 0) gn = &pg->nodes[i];
  }
  cx_ref_tensor rin[3] = {{.data = NULL}}, ry = load(cx_program_value_tensor(p, fq->out[0]));
  for (int k = 0; k < fq->n_in; k++)
    if (fq->in[k] >= 0) rin[k] = load(cx_program_value_tensor(p, fq->in[k]));
  cx_ref_tensor R = load(cx_program_tensor(p, "FakeQuantize@grad"));
  const cx_tensor *ds = grad_of(p, "scale");
  double gs = cx_node_float(gn, "grad_scale", 1), h = 1e-6, err = 0, top = 1e-9;
  cx_ref_args a = {.node = fq, .in = rin, .n_in = fq->n_in, .out = &ry, .n_out = 1};
  for (int64_t c = 0; c < cx_tensor_numel(ds); c++) {
    double keep = rin[1].data[c], L[2];
    for (int side = 0; side < 2; side++) {
      rin[1].data[c] = keep + (side ? -h : h);
      cx_ref_find("FakeQuantize")(&a);
      L[side] = 0;
      for (int64_t i = 0; i < 120; i++) L[side] += R.data[i] * ry.data[i];
    }
    rin[1].data[c] = keep;
    double fd = (L[0] - L[1]) / (2 * h), ours = ((const float *)ds->data)[c] / gs;
    err = fmax(err, fabs(fd - ours));
    top = fmax(top, fabs(fd));
  }
  bool ok = err / top <= 1e-4;
  printf("%s %s: dScale / grad_scale against finite differences: error %.2e\n",
         ok ? "ok  " : "FAIL", label, err / top);
  f += !ok;
  for (int k = 0; k < 3; k++) free(rin[k].data);
  free(ry.data);
  free(R.data);
done:
  cx_program_free(p);
  cx_graph_free(g);
  return f;
}

/* The harness's finite differences in X where FakeQuantize is smooth (saturated). */
static int saturated_dx(void) {
  cx_graph *g = cx_graph_new();
  float x[60];
  for (int i = 0; i < 60; i++) x[i] = (i % 2 ? 1.0f : -1.0f) * (1 + cx_rng_uniform(95, (uint64_t)i));
  float scale = 0.004f;
  int in[2] = {cx_graph_param(g, "x", &S(6, 10), x),
               cx_graph_const_f32(g, "scale", &(cx_shape){0}, &scale)};
  int node = node1(g, "FakeQuantize", in, 2, 1);
  set_range(g, node, -127, 127);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  return check_and_free("FakeQuantize saturated, dX against finite differences", g,
                        &(oc_opts){.grad = true, .seed = 9});
}

static int gradients(void) {
  int f = 0;
  for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++) {
    for (int lsq = 0; lsq < 2; lsq++) {
      f += ste_lsq(&ranges[r], S(3, 7, 11), 1, 0, lsq);
      f += ste_lsq(&ranges[r], S(8, 3, 3, 3), 0, 8, lsq);
      f += ste_lsq(&ranges[r], S(2, 5, 4, 4), 1, 5, lsq);
      f += ste_lsq(&ranges[r], S(3, 37, 301), 1, 0, lsq); /* threaded */
    }
    f += saturated(&ranges[r], 0);
    f += saturated(&ranges[r], 6);
  }
  return f + saturated_dx();
}

int main(void) {
  int fails = forwards() + channels_last() + edge_cases() + bad_scales() + gradients();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
