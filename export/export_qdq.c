/* FakeQuantize → QDQ. The graph's FakeQuantize (core/ops/quant.c) is
 *   Y = (clamp(round_half_even(X / scale) + zero_point, qmin, qmax) - zero_point) · scale,
 * which ONNX writes as DequantizeLinear(QuantizeLinear(X)) when [qmin, qmax] is the range of the
 * quantized type (QuantizeLinear saturates to it). On a weight (X an initializer) the rounding is
 * done here, once: an INT8 (or UINT8) initializer and one DequantizeLinear, per axis when the
 * scale is; narrow ranges such as [-127, 127] hold since the clamp happens here. On an
 * activation, every reader gets its own QuantizeLinear→DequantizeLinear pair with its own scale
 * and zero-point initializers (equal values): ONNX Runtime merges Q nodes whose inputs are the
 * same values (common-subexpression elimination), and a Q read by several DQs fuses into
 * neither QLinearConv nor QLinearAdd (docs/quantize.md, "Export").
 *
 * Names, for Netron: node N with output O writes "N/int8" (or "N/uint8": the INT8 weight or
 * the Q output), "N/scale", nodes "N/Q" (QuantizeLinear) and "N/DQ" (DequantizeLinear); the
 * first DequantizeLinear writes O itself, later pairs "O_1", "N/int8_1", ... Names are short
 * and zero points shared because on a small model they are a visible part of the file (the
 * full example's student: 3% of the INT8 file). A zero point that is all zeros (every one, in
 * the default symmetric mode) is one initializer per type and size, "zero_point/int8" or
 * "zero_point/int8[C]", read by every weight's DequantizeLinear and every value's first
 * activation pair; it stays written, not omitted as ONNX allows, because TensorRT 8's parser
 * requires the input. A value's later pairs keep their own ("N/zero_point_1", ...): with one
 * zero point for all, ONNX Runtime merged the two Q nodes in front of a residual Add and fused
 * no QLinearAdd (measured on the full example's student). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "export_internal.h"

/* What a FakeQuantize node quantizes with, checked for writing. */
typedef struct qparams {
  const cx_node *n;
  cx_dtype q;            /* CX_S8 or CX_U8 */
  int64_t qmin, qmax;
  bool per_axis;
  int axis;              /* normalised, when per_axis */
  int64_t count;         /* scale and zero-point elements */
  const float *scale, *zero; /* zero NULL: 0 */
} qparams;

static bool is_init(const cx_value *x) {
  return (x->kind == CX_VALUE_PARAM || x->kind == CX_VALUE_STATE || x->kind == CX_VALUE_CONST) &&
         x->init;
}

static cx_status qfail(const cx_node *n, const char *why) {
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (FakeQuantize) cannot be written as "
                 "QuantizeLinear/DequantizeLinear: %s", n->name, why);
}

static int producer_fq(const cx_graph *g, int v) {
  int p = v >= 0 ? g->values[v].producer : -1;
  return p >= 0 && !strcmp(g->nodes[p].op->name, "FakeQuantize") ? p : -1;
}

bool cx_ex_is_activation_fq(const cx_exporter *ex, int v) {
  int p = producer_fq(ex->g, v);
  return p >= 0 && !is_init(&ex->g->values[ex->g->nodes[p].in[0]]);
}

/* The scale or zero point (input k): an f32 initializer of `count` elements. */
static cx_status param_input(const cx_graph *g, const cx_node *n, int k, const char *what,
                             int64_t count, const float **data) {
  *data = NULL;
  if (k >= n->n_in || n->in[k] < 0) return CX_OK;
  const cx_value *x = &g->values[n->in[k]];
  char why[1200];
  snprintf(why, sizeof why, "its %s '%s' is %s; expected an f32 initializer of %lld values",
           what, x->name, is_init(x) ? "of another type or size" : "computed by the graph",
           (long long)count);
  if (!is_init(x) || x->dtype != CX_F32 || cx_shape_numel(&x->shape) != count)
    return qfail(n, why);
  *data = x->init;
  return CX_OK;
}

static cx_status check_values(const qparams *p) {
  char why[300];
  for (int64_t j = 0; j < p->count; j++) {
    float s = p->scale[j], z = p->zero ? p->zero[j] : 0.0f;
    if (!(s > 0.0f) || !isfinite(s)) {
      snprintf(why, sizeof why, "scale[%lld] is %g; expected a positive finite number",
               (long long)j, (double)s);
      return qfail(p->n, why);
    }
    double lo = p->q == CX_S8 ? -128 : 0, hi = p->q == CX_S8 ? 127 : 255;
    if (z != nearbyintf(z) || z < lo || z > hi) {
      snprintf(why, sizeof why, "zero_point[%lld] is %g; expected an integer in [%g, %g]",
               (long long)j, (double)z, lo, hi);
      return qfail(p->n, why);
    }
  }
  return CX_OK;
}

static cx_status read_qparams(const cx_exporter *ex, int node, qparams *p) {
  const cx_graph *g = ex->g;
  const cx_node *n = &g->nodes[node];
  *p = (qparams){.n = n, .qmin = cx_node_int(n, "qmin", 0), .qmax = cx_node_int(n, "qmax", 0)};
  if (p->qmin >= 0 && p->qmax <= 255) p->q = CX_U8;
  else if (p->qmin >= -128 && p->qmax <= 127) p->q = CX_S8;
  else return qfail(n, "[qmin, qmax] fits neither int8 nor uint8");
  const cx_shape *xs = &ex->shape[0][n->in[0]], *ss = &g->values[n->in[1]].shape;
  p->count = cx_shape_numel(ss);
  if (ss->ndim == 1 && p->count > 1) {
    p->per_axis = true;
    CX_TRY(cx_axis_normalize(n, cx_node_int(n, "axis", 1), xs->ndim, &p->axis));
  }
  CX_TRY(param_input(g, n, 1, "scale", p->count, &p->scale));
  if (!p->scale) return qfail(n, "it has no scale");
  CX_TRY(param_input(g, n, 2, "zero point", p->count, &p->zero));
  return check_values(p);
}

static const char *type_name(cx_dtype q) { return q == CX_U8 ? "uint8" : "int8"; }

/* "<N>/<what><sfx>", unique. */
static const char *part_name(cx_exporter *ex, const cx_node *n, const char *what,
                             const char *sfx) {
  char base[1200];
  snprintf(base, sizeof base, "%s/%s%s", n->name, what, sfx);
  return cx_ex_unique_name(ex, base);
}

static bool all_zero(const qparams *p) {
  for (int64_t j = 0; p->zero && j < p->count; j++)
    if (p->zero[j] != 0.0f) return false;
  return true;
}

/* The one all-zero zero point of p's type and size, written the first time it is needed. */
static const char *shared_zero(cx_exporter *ex, const qparams *p, const cx_shape *s,
                               const int8_t *z) {
  for (int i = 0; i < ex->n_zeros; i++)
    if (ex->zeros[i].q == p->q && ex->zeros[i].count == p->count) return ex->zeros[i].name;
  if (ex->n_zeros == ex->cap_zeros) {
    int cap = ex->cap_zeros ? 2 * ex->cap_zeros : 16;
    struct cx_ex_zero *more = cx_ex_alloc(ex, sizeof *more * (size_t)cap);
    if (!more) return NULL;
    if (ex->n_zeros) memcpy(more, ex->zeros, sizeof *more * (size_t)ex->n_zeros);
    ex->zeros = more;
    ex->cap_zeros = cap;
  }
  char base[64];
  const char *type = type_name(p->q);
  if (p->per_axis) snprintf(base, sizeof base, "zero_point/%s[%lld]", type, (long long)p->count);
  else snprintf(base, sizeof base, "zero_point/%s", type); /* a weight quantized per tensor */
  const char *name = cx_ex_unique_name(ex, base);
  if (!name || !(name = cx_ex_add_init(ex, name, p->q, s, z))) return NULL;
  ex->zeros[ex->n_zeros++] = (struct cx_ex_zero){.q = p->q, .count = p->count, .name = name};
  return name;
}

/* The scale (f32) and zero point (the quantized type) as initializers: scalars when per tensor,
 * [count] when per axis. */
static cx_status write_params(cx_exporter *ex, const qparams *p, const char *sfx, bool share,
                              const char **scale, const char **zero) {
  cx_shape s = p->per_axis ? (cx_shape){.ndim = 1, .d = {p->count}} : (cx_shape){0};
  int8_t *z = cx_ex_alloc(ex, (size_t)p->count);
  if (!z) return cx_ex_nomem();
  for (int64_t j = 0; j < p->count; j++) {
    int zi = p->zero ? (int)p->zero[j] : 0;
    if (p->q == CX_U8) ((uint8_t *)z)[j] = (uint8_t)zi;
    else z[j] = (int8_t)zi;
  }
  const char *sn = part_name(ex, p->n, "scale", sfx);
  *scale = sn ? cx_ex_add_init(ex, sn, CX_F32, &s, p->scale) : NULL;
  if (share && all_zero(p)) {
    *zero = shared_zero(ex, p, &s, z);
  } else {
    const char *zn = part_name(ex, p->n, "zero_point", sfx);
    *zero = zn ? cx_ex_add_init(ex, zn, p->q, &s, z) : NULL;
  }
  return *scale && *zero ? CX_OK : cx_ex_nomem();
}

static cx_status dequantize_node(cx_exporter *ex, const qparams *p, const char *sfx,
                                 const char *in, const char *scale, const char *zero,
                                 const char *out) {
  const char *name = part_name(ex, p->n, "DQ", sfx);
  if (!name) return cx_ex_nomem();
  const char *ins[3] = {in, scale, zero};
  Onnx__NodeProto *dq = cx_ex_node(ex, "DequantizeLinear", name, ins, 3, &out, 1);
  if (!dq) return cx_ex_nomem();
  return p->per_axis ? cx_ex_attr_int(ex, dq, "axis", p->axis) : CX_OK;
}

cx_status cx_ex_qdq_pair(cx_exporter *ex, int v, const char **name) {
  int node = producer_fq(ex->g, v);
  const cx_node *n = &ex->g->nodes[node];
  qparams p;
  CX_TRY(read_qparams(ex, node, &p));
  int64_t lo = p.q == CX_S8 ? -128 : 0, hi = p.q == CX_S8 ? 127 : 255;
  if (p.qmin != lo || p.qmax != hi) {
    char why[300];
    snprintf(why, sizeof why, "an activation's [qmin, qmax] is [%lld, %lld], but QuantizeLinear "
             "saturates to [%lld, %lld]", (long long)p.qmin, (long long)p.qmax, (long long)lo,
             (long long)hi);
    return qfail(n, why);
  }
  int j = ex->qdq_pairs[v]++;
  char sfx[32] = "";
  if (j) snprintf(sfx, sizeof sfx, "_%d", j);
  const char *scale, *zero;
  CX_TRY(write_params(ex, &p, sfx, j == 0, &scale, &zero));
  const char *q_name = part_name(ex, n, "Q", sfx), *q_out;
  if (!q_name || !(q_out = part_name(ex, n, type_name(p.q), sfx))) return cx_ex_nomem();
  const char *x = ex->g->values[n->in[0]].name;
  if (cx_ex_is_activation_fq(ex, n->in[0])) CX_TRY(cx_ex_qdq_pair(ex, n->in[0], &x)); /* FQ(FQ) */
  const char *ins[3] = {x, scale, zero};
  ex->used[n->in[0]] = true;
  Onnx__NodeProto *q = cx_ex_node(ex, "QuantizeLinear", q_name, ins, 3, &q_out, 1);
  if (!q) return cx_ex_nomem();
  if (p.per_axis) CX_TRY(cx_ex_attr_int(ex, q, "axis", p.axis));
  char base[1200];
  snprintf(base, sizeof base, "%s%s", ex->g->values[v].name, sfx);
  *name = j ? cx_ex_unique_name(ex, base) : ex->g->values[v].name;
  if (!*name) return cx_ex_nomem();
  return dequantize_node(ex, &p, sfx, q_out, scale, zero, *name);
}

/* q = clamp(round_half_even(w / s) + z, qmin, qmax), in f32 as the FakeQuantize kernel
 * computes it, so the file's weights are bit for bit what the graph ran. */
static cx_status quantize_weight(cx_exporter *ex, const qparams *p, const cx_value *w,
                                 void **out) {
  int64_t numel = cx_shape_numel(&w->shape), inner = 1;
  for (int k = p->axis + 1; p->per_axis && k < w->shape.ndim; k++) inner *= w->shape.d[k];
  uint8_t *q = cx_ex_alloc(ex, (size_t)numel);
  if (!q) return cx_ex_nomem();
  const float *x = w->init;
  for (int64_t i = 0; i < numel; i++) {
    int64_t c = p->per_axis ? (i / inner) % p->count : 0;
    float z = p->zero ? p->zero[c] : 0.0f;
    float r = nearbyintf(x[i] / p->scale[c]) + z; /* the default rounding: half to even */
    r = fminf(fmaxf(r, (float)p->qmin), (float)p->qmax);
    if (p->q == CX_U8) q[i] = (uint8_t)r;
    else ((int8_t *)q)[i] = (int8_t)r;
  }
  *out = q;
  return CX_OK;
}

cx_status cx_ex_lower_fake_quantize(cx_exporter *ex, int node) {
  const cx_node *n = &ex->g->nodes[node];
  const cx_value *w = &ex->g->values[n->in[0]];
  if (!is_init(w)) return CX_OK; /* an activation: each reader writes its pair */
  if (w->dtype != CX_F32) return qfail(n, "the weight is not f32");
  qparams p;
  CX_TRY(read_qparams(ex, node, &p));
  void *q = NULL;
  CX_TRY(quantize_weight(ex, &p, w, &q));
  const char *qn = part_name(ex, n, type_name(p.q), ""), *scale, *zero;
  if (!qn || !cx_ex_add_init(ex, qn, p.q, &w->shape, q)) return cx_ex_nomem();
  CX_TRY(write_params(ex, &p, "", true, &scale, &zero));
  return dequantize_node(ex, &p, "", qn, scale, zero, ex->g->values[n->out[0]].name);
}

cx_status cx_ex_check_qdq_opset(const cx_graph *g, int64_t opset, const char *path) {
  if (opset >= 13) return CX_OK;
  for (int i = 0; i < g->n_nodes; i++)
    if (!strcmp(g->nodes[i].op->name, "FakeQuantize"))
      return cx_fail(CX_ERR_UNSUPPORTED, "%s: opset %lld cannot carry the quantized graph: node "
                     "'%s' (FakeQuantize) becomes QuantizeLinear/DequantizeLinear with per-axis "
                     "scales, which need opset 13 or later", path, (long long)opset,
                     g->nodes[i].name);
  return CX_OK;
}
