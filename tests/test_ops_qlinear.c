/* The INT8 runtime's ops, QLinearConvFused, QLinearGemmFused and QLinearAddFused
 * (core/ops/qlinear.c): the CPU
 * kernels (oneDNN int8) against the integer reference, through oc_check; the signed-source
 * cases (x_signed = 1) where the CPU backend runs them (oneDNN with VNNI), a "skip" line else. Scales are chosen so
 * that outputs saturate (max |ref| is 127 or 128), so the relative tolerance 0.0079 admits at
 * most one LSB, where float rounding of the scale product meets a tie. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/backend.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

static const double ONE_LSB = 1.01 / 128;

/* An int8 constant with uniform integers in [lo, hi]. */
static int s8_const(cx_graph *g, const char *name, const cx_shape *s, int lo, int hi,
                    uint64_t seed) {
  int64_t n = cx_shape_numel(s);
  signed char *d = malloc((size_t)n + 1);
  for (int64_t i = 0; i < n; i++) {
    int v = lo + (int)floorf(cx_rng_uniform(seed, (uint64_t)i) * (float)(hi - lo + 1));
    d[i] = (signed char)(v > hi ? hi : v);
  }
  int id = cx_graph_init(g, CX_VALUE_CONST, name, CX_S8, s, d);
  free(d);
  return id;
}

typedef struct qcase {
  const char *label;
  int64_t n, c, h, w, m, k, group, stride, pad;
  bool bias, per_channel, quantized;
  float lo, hi;  /* act_min, act_max; NAN: absent */
  bool x_signed; /* X in [-128, 127] (x_signed = 1), else [0, 127] */
} qcase;

/* X's constant, signed or not as the case says, and the node's x_signed. */
static int x_const(cx_graph *g, const cx_shape *s, const qcase *c, uint64_t seed) {
  return s8_const(g, "x", s, c->x_signed ? -128 : 0, 127, seed);
}

/* Whether the CPU backend runs node n of graph g (a signed source needs VNNI); a line if not. */
static bool runs(const cx_graph *g, int n, const char *label) {
  if (cx_backend_supports_op(cx_backend_cpu(), &g->nodes[n], NULL, 0)) return true;
  printf("skip %s: the CPU backend does not run int8 sources that may be negative here (oneDNN "
         "without VNNI would halve the weights)\n", label);
  return false;
}

/* Scales that bring a typical accumulator (taps·127·64) to about ±200 output units. */
static void set_quant_attrs(cx_graph *g, int node, const qcase *c, int64_t taps) {
  float base = 200.0f / (127.0f * 64.0f * sqrtf((float)taps)), sc[64];
  for (int64_t i = 0; i < c->m; i++) sc[i] = base * (c->per_channel ? 0.5f + (float)(i % 5) / 4 : 1);
  cx_node_set_floats(g, node, "scales", sc, c->per_channel ? (int)c->m : 1);
  if (!isnan(c->lo)) cx_node_set_float(g, node, "act_min", c->lo);
  if (!isnan(c->hi)) cx_node_set_float(g, node, "act_max", c->hi);
  cx_node_set_int(g, node, "quantized_output", c->quantized);
  if (c->x_signed) cx_node_set_int(g, node, "x_signed", 1);
}

static int check_qconv(const qcase *c) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(c->n, c->c, c->h, c->w), ws = S(c->m, c->c / c->group, c->k, c->k), bs = S(c->m);
  int in[3] = {x_const(g, &xs, c, 1), s8_const(g, "w", &ws, -127, 127, 2),
               c->bias ? oc_const(g, "b", &bs, -3000, 3000, 3) : -1};
  int node = cx_graph_node(g, "QLinearConvFused", "qconv", in, c->bias ? 3 : 2, 1);
  if (c->group != 1) cx_node_set_int(g, node, "group", c->group);
  cx_node_set_ints(g, node, "strides", (int64_t[]){c->stride, c->stride}, 2);
  cx_node_set_ints(g, node, "pads", (int64_t[]){c->pad, c->pad, c->pad, c->pad}, 4);
  set_quant_attrs(g, node, c, c->c / c->group * c->k * c->k);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int fails = !runs(g, node, c->label) ? 0 :
      oc_check(c->label, g, &(oc_opts){.seed = 5, .fwd_tol = c->quantized ? ONE_LSB : 1e-5});
  cx_graph_free(g);
  return fails;
}

static int check_qgemm(const qcase *c) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(c->n, c->c), ws = S(c->m, c->c), bs = S(c->m);
  int in[3] = {x_const(g, &xs, c, 4), s8_const(g, "w", &ws, -127, 127, 5),
               c->bias ? oc_const(g, "b", &bs, -3000, 3000, 6) : -1};
  int node = cx_graph_node(g, "QLinearGemmFused", "qgemm", in, c->bias ? 3 : 2, 1);
  set_quant_attrs(g, node, c, c->c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int fails = !runs(g, node, c->label) ? 0 :
      oc_check(c->label, g, &(oc_opts){.seed = 7, .fwd_tol = c->quantized ? ONE_LSB : 1e-5});
  cx_graph_free(g);
  return fails;
}

/* QLinearAddFused on [2, 8, 5, 5], optionally with a Relu; the scales make sums saturate. Its
 * f32 arithmetic is the reference's, operation for operation, so it must agree exactly (the
 * vector loop and the scalar tail alike: 400 elements). */
static int check_qadd(const char *label, bool relu) {
  cx_graph *g = cx_graph_new();
  cx_shape s = S(2, 8, 5, 5);
  int in[2] = {s8_const(g, "a", &s, -128, 127, 8), s8_const(g, "b", &s, -128, 127, 9)};
  int node = cx_graph_node(g, "QLinearAddFused", "qadd", in, 2, 1);
  cx_node_set_float(g, node, "a_scale", 0.031f);
  cx_node_set_float(g, node, "b_scale", 0.017f);
  cx_node_set_float(g, node, "y_scale", 0.029f);
  if (relu) cx_node_set_float(g, node, "act_min", 0);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int fails = oc_check(label, g, &(oc_opts){.seed = 9, .fwd_tol = 1e-9});
  cx_graph_free(g);
  return fails;
}

int main(void) {
  const qcase convs[] = {
      {"qconv 3x3 relu per-channel", 2, 8, 6, 6, 16, 3, 1, 1, 1, true, true, true, 0, NAN, false},
      {"qconv 3x3 stride 2 clip per-tensor", 2, 16, 7, 7, 8, 3, 1, 2, 1, true, false, true, 0, 60, false},
      {"qconv depthwise 3x3 relu", 2, 16, 6, 6, 16, 3, 16, 1, 1, true, true, true, 0, NAN, false},
      {"qconv depthwise 3x3 stride 2", 1, 24, 8, 8, 24, 3, 24, 2, 1, false, true, true, NAN, NAN, false},
      {"qconv grouped 3x3", 2, 8, 5, 5, 12, 3, 4, 1, 1, true, true, true, NAN, NAN, false},
      {"qconv 1x1 wide", 2, 64, 4, 4, 32, 1, 1, 1, 0, true, true, true, 0, NAN, false},
      {"qconv 1x1 f32 output", 2, 16, 4, 4, 8, 1, 1, 1, 0, true, true, false, NAN, NAN, false},
      {"qconv 3x3 signed source", 2, 8, 6, 6, 16, 3, 1, 1, 1, true, true, true, 0, NAN, true},
      {"qconv 1x1 signed source", 2, 64, 4, 4, 32, 1, 1, 1, 0, true, true, true, NAN, NAN, true},
      {"qconv depthwise signed source", 2, 16, 6, 6, 16, 3, 16, 1, 1, true, true, true, 0, 6, true},
  };
  const qcase gemms[] = {
      {"qgemm relu per-channel", 5, 24, 0, 0, 10, 0, 1, 0, 0, true, true, true, 0, NAN, false},
      {"qgemm no bias per-tensor", 3, 40, 0, 0, 7, 0, 1, 0, 0, false, false, true, NAN, NAN, false},
      {"qgemm f32 logits", 4, 32, 0, 0, 10, 0, 1, 0, 0, true, true, false, NAN, NAN, false},
      {"qgemm signed source", 5, 24, 0, 0, 10, 0, 1, 0, 0, true, true, true, NAN, NAN, true},
  };
  int fails = 0;
  for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) fails += check_qconv(&convs[i]);
  for (size_t i = 0; i < sizeof gemms / sizeof *gemms; i++) fails += check_qgemm(&gemms[i]);
  fails += check_qadd("qadd", false) + check_qadd("qadd relu", true);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
