#include "quant_fuse.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "op.h"

bool cx_quant_fuse_enabled(void) {
  const char *e = getenv("CX_INT8");
  return !(e && !strcmp(e, "off"));
}

/* ---- reading the graph ------------------------------------------------------------------------ */

typedef struct qf {
  cx_graph *g;
  bool frozen_weights; /* the fused nodes may reorder their weights once (quant_fuse.h) */
  bool signed_conv, signed_gemm; /* the backend runs int8 sources that may be negative */
  int *readers; /* by value: inputs that read it, graph outputs counted */
  int *reader;  /* by value: the last node found reading it */
  bool *dead;   /* by node */
  int n_nodes0; /* nodes before the pass: only they are matched */
} qf;

static const cx_node *producer(const qf *q, int v) {
  int p = v >= 0 ? q->g->values[v].producer : -1;
  return p >= 0 ? &q->g->nodes[p] : NULL;
}

static bool has_in(const cx_node *n, int k) { return k < n->n_in && n->in[k] >= 0; }

/* An initializer (constant or, in an inference program, a parameter that cannot change) of type
 * dt; its element count in *numel. */
static const void *init_of(const qf *q, int v, cx_dtype dt, int64_t *numel) {
  if (v < 0) return NULL;
  const cx_value *x = &q->g->values[v];
  if (x->kind == CX_VALUE_ACT || x->kind == CX_VALUE_INPUT || x->kind == CX_VALUE_STATE ||
      !x->init || x->dtype != dt)
    return NULL;
  *numel = cx_shape_numel(&x->shape);
  return x->init;
}

/* A quantization's scale (input 1, f32, all positive) and zero point (input 2: absent, or int8
 * and all zero), for node n. *n_scale: 1 or the per-axis count. */
static const float *qparams(const qf *q, const cx_node *n, int64_t *n_scale) {
  const float *s = init_of(q, n->in[1], CX_F32, n_scale);
  if (!s) return NULL;
  for (int64_t i = 0; i < *n_scale; i++)
    if (!(s[i] > 0) || !isfinite(s[i])) return NULL;
  if (!has_in(n, 2)) return s;
  int64_t nz;
  const signed char *z = init_of(q, n->in[2], CX_S8, &nz);
  if (!z) return NULL;
  for (int64_t i = 0; i < nz; i++)
    if (z[i]) return NULL;
  return s;
}

/* The bounds of Relu or Clip (constant bounds) node a. */
static bool clamp_of(const qf *q, const cx_node *a, float *lo, float *hi) {
  int64_t n;
  *lo = -INFINITY, *hi = INFINITY;
  if (!strcmp(a->op->name, "Relu")) {
    *lo = 0;
    return true;
  }
  if (strcmp(a->op->name, "Clip") != 0) return false;
  if (a->n_in == 1) {
    *lo = cx_node_float(a, "min", -INFINITY);
    *hi = cx_node_float(a, "max", INFINITY);
    return *lo <= *hi;
  }
  for (int k = 1; k < 3; k++) {
    if (!has_in(a, k)) continue;
    const float *b = init_of(q, a->in[k], CX_F32, &n);
    if (!b || n != 1) return false;
    *(k == 1 ? lo : hi) = b[0];
  }
  return *lo <= *hi;
}

static bool nonneg_q(const qf *q, int v, int depth);

/* Is f32 value v known to be >= 0? */
static bool nonneg_f(const qf *q, int v, int depth) {
  const cx_node *p = producer(q, v);
  float lo, hi;
  if (!p || depth > 32) return false;
  const char *op = p->op->name;
  if (clamp_of(q, p, &lo, &hi)) return lo >= 0;
  if (!strcmp(op, "DequantizeLinear")) {
    int64_t ns;
    return qparams(q, p, &ns) && nonneg_q(q, p->in[0], depth + 1);
  }
  if (!strcmp(op, "MaxPool") || !strcmp(op, "AveragePool") || !strcmp(op, "GlobalAveragePool") ||
      !strcmp(op, "Flatten") || !strcmp(op, "Reshape") || !strcmp(op, "Dropout"))
    return nonneg_f(q, p->in[0], depth + 1);
  return false;
}

/* Is int8 value v (zero point 0) known to be >= 0? */
static bool nonneg_q(const qf *q, int v, int depth) {
  const cx_node *p = producer(q, v);
  if (!p || depth > 32) return false;
  if (!strcmp(p->op->name, "QLinearConvFused") || !strcmp(p->op->name, "QLinearGemmFused") ||
      !strcmp(p->op->name, "QLinearAddFused"))
    return cx_node_int(p, "quantized_output", 1) && cx_node_float(p, "act_min", -INFINITY) >= 0;
  int64_t ns;
  return !strcmp(p->op->name, "QuantizeLinear") && qparams(q, p, &ns) && ns == 1 &&
         nonneg_f(q, p->in[0], depth + 1);
}

/* ---- one match -------------------------------------------------------------------------------- */

typedef struct qmatch {
  int node, kind;        /* kind: 0 Conv, 1 Gemm (W [N, K]), 2 Gemm transB = 0 or MatMul (W [K, N]) */
  int x_q, w_q, bias;    /* value ids; bias -1 when absent */
  bool x_signed;         /* x_q may be negative */
  float x_scale;
  const float *w_scale;  /* n_w_scale values */
  int64_t n_w_scale, c_out;
  int act, quant;        /* node ids of the fused activation and QuantizeLinear, or -1 */
  float lo, hi;          /* the activation's bounds (f32 units) */
  float y_scale;
  int out;               /* the value the fused node writes */
  const float *b_f32;    /* the bias, f32; or */
  const int32_t *b_q;    /* int32 with b_scale (n_b_scale values) */
  const float *b_scale;
  int64_t n_b_scale;
} qmatch;

static int kind_of(const cx_node *n) {
  if (!strcmp(n->op->name, "Conv")) return 0;
  if (!strcmp(n->op->name, "MatMul")) return 2;
  if (strcmp(n->op->name, "Gemm") != 0 || cx_node_int(n, "transA", 0) ||
      cx_node_float(n, "alpha", 1) != 1 || cx_node_float(n, "beta", 1) != 1)
    return -1;
  return cx_node_int(n, "transB", 0) ? 1 : 2;
}

/* The activation input: DequantizeLinear(int8 x_q, scalar scale, zero point 0), x_q known to be
 * >= 0 or the backend running signed sources for this kind of node. */
static bool match_x(const qf *q, qmatch *m, int v) {
  const cx_node *d = producer(q, v);
  int64_t ns;
  if (!d || strcmp(d->op->name, "DequantizeLinear") || q->g->values[d->in[0]].dtype != CX_S8)
    return false;
  const float *s = qparams(q, d, &ns);
  if (!s || ns != 1) return false;
  m->x_signed = !nonneg_q(q, d->in[0], 0);
  if (m->x_signed && !(m->kind == 0 ? q->signed_conv : q->signed_gemm)) return false;
  m->x_q = d->in[0];
  m->x_scale = s[0];
  return true;
}

/* The weight input: DequantizeLinear(int8 initializer, scale per output channel or scalar). */
static bool match_w(const qf *q, qmatch *m, int v) {
  const cx_node *d = producer(q, v);
  int64_t nw;
  if (!d || strcmp(d->op->name, "DequantizeLinear") || !init_of(q, d->in[0], CX_S8, &nw))
    return false;
  const cx_shape *ws = &q->g->values[d->in[0]].shape;
  if ((m->kind == 0 && ws->ndim != 4) || (m->kind > 0 && ws->ndim != 2)) return false;
  int out_axis = m->kind == 2 ? 1 : 0;
  m->c_out = ws->d[out_axis];
  m->w_scale = qparams(q, d, &m->n_w_scale);
  if (!m->w_scale) return false;
  if (m->n_w_scale != 1) {
    int axis = (int)cx_node_int(d, "axis", 1);
    if (axis < 0) axis += ws->ndim;
    if (axis != out_axis || m->n_w_scale != m->c_out) return false;
  }
  m->w_q = d->in[0];
  return true;
}

/* The bias: an f32 initializer [C_out], or (ONNX Runtime's quantize_static writes it so) the
 * DequantizeLinear of an int32 initializer with scalar or per-channel scales, zero point 0. */
static bool match_bias(const qf *q, qmatch *m, const cx_node *n) {
  int64_t nb, ns = 1;
  m->bias = has_in(n, 2) ? n->in[2] : -1;
  if (m->bias < 0) return true;
  if (q->g->values[m->bias].shape.ndim != 1) return false;
  if ((m->b_f32 = init_of(q, m->bias, CX_F32, &nb))) return nb == m->c_out;
  const cx_node *d = producer(q, m->bias);
  if (!d || strcmp(d->op->name, "DequantizeLinear") || !(m->b_q = init_of(q, d->in[0], CX_S32, &nb)))
    return false;
  m->b_scale = init_of(q, d->in[1], CX_F32, &ns);
  if (has_in(d, 2)) {
    int64_t nz;
    const int32_t *z = init_of(q, d->in[2], CX_S32, &nz);
    for (int64_t i = 0; z && i < nz; i++)
      if (z[i]) z = NULL;
    if (!z) return false;
  }
  m->n_b_scale = ns;
  return m->b_scale && nb == m->c_out && (ns == 1 || ns == m->c_out);
}

/* The single reader of v, when v has one and it is a node reading v as input 0. */
static int only_reader(const qf *q, int v) {
  if (q->readers[v] != 1) return -1;
  int r = q->reader[v];
  return r >= 0 && q->g->nodes[r].n_in > 0 && q->g->nodes[r].in[0] == v ? r : -1;
}

/* After the product: [Relu | Clip] [QuantizeLinear(scalar scale, int8 zero point 0)]. */
static void match_tail(const qf *q, qmatch *m) {
  int v = q->g->nodes[m->node].out[0], r = only_reader(q, v);
  m->act = m->quant = -1;
  m->lo = -INFINITY, m->hi = INFINITY;
  if (r >= 0 && clamp_of(q, &q->g->nodes[r], &m->lo, &m->hi)) {
    m->act = r;
    v = q->g->nodes[r].out[0];
    r = only_reader(q, v);
  }
  m->out = v;
  int64_t ns;
  if (r < 0 || strcmp(q->g->nodes[r].op->name, "QuantizeLinear")) return;
  const cx_node *qn = &q->g->nodes[r];
  const float *s = qparams(q, qn, &ns);
  if (!s || ns != 1 || !has_in(qn, 2)) return; /* no zero point: ONNX's uint8 */
  m->quant = r;
  m->y_scale = s[0];
  m->out = qn->out[0];
}

static bool match(const qf *q, int i, qmatch *m) {
  const cx_node *n = &q->g->nodes[i];
  memset(m, 0, sizeof *m);
  m->node = i;
  m->kind = kind_of(n);
  if (m->kind < 0 || n->n_in < 2) return false;
  if (m->kind == 2 && (n->n_in > 2 || q->g->values[n->in[0]].shape.ndim != 2)) return false;
  if (!match_x(q, m, n->in[0]) || !match_w(q, m, n->in[1]) || !match_bias(q, m, n)) return false;
  match_tail(q, m);
  return true;
}

/* ---- the rewrite ------------------------------------------------------------------------------ */

static void copy_attrs(cx_graph *g, int from, int to) {
  for (int k = 0; k < g->nodes[from].n_attrs; k++) {
    const cx_attr a = g->nodes[from].attrs[k];
    if (a.type == CX_ATTR_INT) cx_node_set_int(g, to, a.name, a.i);
    if (a.type == CX_ATTR_FLOAT) cx_node_set_float(g, to, a.name, a.f);
    if (a.type == CX_ATTR_INTS) cx_node_set_ints(g, to, a.name, a.ints, a.n);
    if (a.type == CX_ATTR_FLOATS) cx_node_set_floats(g, to, a.name, a.floats, a.n);
    if (a.type == CX_ATTR_STRING) cx_node_set_string(g, to, a.name, a.s);
  }
}

static float w_scale(const qmatch *m, int64_t c) { return m->w_scale[m->n_w_scale == 1 ? 0 : c]; }

/* The bias in accumulator units, b[c] / (x_scale·w_scale[c]), as a new constant. */
static int bias_acc(cx_graph *g, const qmatch *m, const char *name) {
  if (m->bias < 0) return -1;
  float *ba = malloc(sizeof(float) * (size_t)m->c_out);
  if (!ba) return -1;
  for (int64_t c = 0; c < m->c_out; c++) {
    /* the f32 bias the float graph adds: DequantizeLinear computes q·scale in f32 */
    float b = m->b_f32 ? m->b_f32[c] : (float)m->b_q[c] * m->b_scale[m->n_b_scale == 1 ? 0 : c];
    ba[c] = (float)((double)b / ((double)m->x_scale * w_scale(m, c)));
  }
  int v = cx_graph_init(g, CX_VALUE_CONST, name, CX_F32, &(cx_shape){1, {m->c_out}}, ba);
  free(ba);
  return v;
}

/* W [K, N] as a new [N, K] constant (the Gemm op reads Y = X·Wᵀ). */
static int transposed(cx_graph *g, int w, const char *name) {
  const cx_shape *s = &g->values[w].shape;
  int64_t k = s->d[0], n = s->d[1];
  const signed char *src = g->values[w].init;
  signed char *t = malloc((size_t)(k * n) + 1);
  if (!t) return -1;
  for (int64_t i = 0; i < k; i++)
    for (int64_t j = 0; j < n; j++) t[j * k + i] = src[i * n + j];
  int v = cx_graph_init(g, CX_VALUE_CONST, name, CX_S8, &(cx_shape){2, {n, k}}, t);
  free(t);
  return v;
}

/* Fused node n writes the replaced chain's last value, whose readers keep reading it; the
 * chain's nodes go. */
static cx_status take_over(qf *q, const qmatch *m, int n) {
  cx_graph *g = q->g;
  int fresh = g->nodes[n].out[0];
  g->nodes[n].out[0] = m->out;
  g->values[m->out].producer = n;
  g->values[fresh].producer = -1;
  q->dead[m->node] = true;
  if (m->act >= 0) q->dead[m->act] = true;
  if (m->quant >= 0) q->dead[m->quant] = true;
  return cx_graph_status(g);
}

static cx_status rewrite(qf *q, const qmatch *m) {
  cx_graph *g = q->g;
  char base[600], *name = NULL;
  snprintf(base, sizeof base, "%s:int8", g->nodes[m->node].name);
  CX_TRY(cx_graph_reserve(g, 1, 4));
  name = cx_graph_unique_name(g, base);
  if (!name) return cx_fail(CX_ERR_NOMEM, "out of memory");
  snprintf(base, sizeof base, "%s:bias", name);
  int b = bias_acc(g, m, base), w = m->w_q;
  snprintf(base, sizeof base, "%s:weight", name);
  if (m->kind == 2) w = transposed(g, m->w_q, base);
  float *sc = malloc(sizeof(float) * (size_t)m->c_out);
  cx_status s = sc && w >= 0 && (m->bias < 0 || b >= 0) ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  int n = -1;
  if (s == CX_OK) {
    int in[3] = {m->x_q, w, b};
    n = cx_graph_node(g, m->kind == 0 ? "QLinearConvFused" : "QLinearGemmFused", name, in,
                      b >= 0 ? 3 : 2, 1);
    s = cx_graph_status(g);
  }
  if (s == CX_OK) {
    float y_scale = m->quant >= 0 ? m->y_scale : 1;
    for (int64_t c = 0; c < m->c_out; c++)
      sc[c] = (float)((double)m->x_scale * w_scale(m, c) / y_scale);
    if (m->kind == 0) copy_attrs(g, m->node, n);
    cx_node_set_floats(g, n, "scales", sc, (int)m->c_out);
    if (m->lo > -INFINITY) cx_node_set_float(g, n, "act_min", (float)(m->lo / y_scale));
    if (m->hi < INFINITY) cx_node_set_float(g, n, "act_max", (float)(m->hi / y_scale));
    cx_node_set_int(g, n, "quantized_output", m->quant >= 0);
    if (m->x_signed) cx_node_set_int(g, n, "x_signed", 1);
    if (q->frozen_weights) cx_node_set_int(g, n, "frozen_weights", 1);
    s = take_over(q, m, n);
  }
  free(sc);
  free(name);
  return s;
}

/* ---- the residual Add ------------------------------------------------------------------------- */

/* DequantizeLinear(int8, scalar scale, zero point 0) producing v: its input in *q, scale in *s. */
static bool dq_scalar(const qf *q, int v, int *xq, float *s) {
  const cx_node *d = producer(q, v);
  int64_t ns;
  if (!d || strcmp(d->op->name, "DequantizeLinear") || q->g->values[d->in[0]].dtype != CX_S8)
    return false;
  const float *sc = qparams(q, d, &ns);
  if (!sc || ns != 1) return false;
  *xq = d->in[0];
  *s = sc[0];
  return true;
}

/* Add(DQ(a), DQ(b)) [→ Relu | Clip] → Q, one shape, becomes QLinearAddFused(a, b). */
static cx_status fuse_add(qf *q, int i) {
  cx_graph *g = q->g;
  const cx_node *n = &g->nodes[i];
  int a, b;
  float sa, sb;
  if (n->n_in != 2 || !dq_scalar(q, n->in[0], &a, &sa) || !dq_scalar(q, n->in[1], &b, &sb) ||
      !cx_shape_equal(&g->values[a].shape, &g->values[b].shape))
    return CX_OK;
  qmatch m = {.node = i};
  match_tail(q, &m);
  if (m.quant < 0) return CX_OK;
  char base[600], *name;
  snprintf(base, sizeof base, "%s:int8", n->name);
  CX_TRY(cx_graph_reserve(g, 1, 2));
  if (!(name = cx_graph_unique_name(g, base))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  int k = cx_graph_node(g, "QLinearAddFused", name, (int[]){a, b}, 2, 1);
  free(name);
  CX_TRY(cx_graph_status(g));
  cx_node_set_float(g, k, "a_scale", sa);
  cx_node_set_float(g, k, "b_scale", sb);
  cx_node_set_float(g, k, "y_scale", m.y_scale);
  if (m.lo > -INFINITY) cx_node_set_float(g, k, "act_min", m.lo);
  if (m.hi < INFINITY) cx_node_set_float(g, k, "act_max", m.hi);
  return take_over(q, &m, k);
}

/* ---- the pass --------------------------------------------------------------------------------- */

static void count_readers(qf *q) {
  const cx_graph *g = q->g;
  memset(q->readers, 0, sizeof(int) * (size_t)g->n_values);
  for (int i = 0; i < g->n_nodes; i++) {
    if (q->dead[i]) continue;
    for (int k = 0; k < g->nodes[i].n_in; k++) {
      int v = g->nodes[i].in[k];
      if (v < 0) continue;
      q->readers[v]++;
      q->reader[v] = i;
    }
  }
  for (int k = 0; k < g->n_outputs; k++) q->readers[g->outputs[k]]++;
}

/* DequantizeLinear nodes whose output nothing reads any more. */
static void drop_unread_dequantize(qf *q) {
  count_readers(q);
  for (int i = 0; i < q->g->n_nodes; i++) {
    const cx_node *n = &q->g->nodes[i];
    if (!q->dead[i] && !strcmp(n->op->name, "DequantizeLinear") && !q->readers[n->out[0]])
      q->dead[i] = true;
  }
}

/* ---- QuantizeLinear → DequantizeLinear around ops that commute with quantization ------------- */

static bool same_params(const qf *q, const cx_node *a, const cx_node *b) {
  int64_t na, nb;
  const float *sa = qparams(q, a, &na), *sb = qparams(q, b, &nb);
  return sa && sb && na == 1 && nb == 1 && sa[0] == sb[0] && has_in(a, 2) == has_in(b, 2) &&
         (!has_in(a, 2) || q->g->values[a->in[2]].dtype == q->g->values[b->in[2]].dtype);
}

/* Ops f with Q(f(DQ(Q(x)))) = Q(f(x)) for one set of parameters: monotone per element (Relu,
 * Clip, MaxPool: rounding and saturation are monotone too) or moving elements only (Dropout
 * copies in inference programs, the only ones this pass sees). */
static bool commutes(const char *op) {
  return !strcmp(op, "Relu") || !strcmp(op, "Clip") || !strcmp(op, "MaxPool") ||
         !strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Dropout");
}

/* Q1(x) → DQ → f → Q2 with Q1 and Q2 alike, each link read once: f reads x and the first pair
 * goes (ONNX Runtime's files put one around every Relu after a Conv: Conv → Q → DQ → Relu → Q,
 * which then becomes the fusable Conv → Relu → Q). Exact, so the pass may do it always. */
static void collapse_pairs(qf *q) {
  cx_graph *g = q->g;
  for (int i = 0; i < g->n_nodes; i++) {
    cx_node *f = &g->nodes[i];
    if (q->dead[i] || !commutes(f->op->name) || f->n_in < 1) continue;
    const cx_node *d = producer(q, f->in[0]);
    if (!d || strcmp(d->op->name, "DequantizeLinear") || q->readers[d->out[0]] != 1) continue;
    const cx_node *q1 = producer(q, d->in[0]);
    int r = only_reader(q, f->out[0]);
    if (!q1 || strcmp(q1->op->name, "QuantizeLinear") || q->readers[q1->out[0]] != 1 || r < 0 ||
        strcmp(g->nodes[r].op->name, "QuantizeLinear") || !same_params(q, q1, d) ||
        !same_params(q, q1, &g->nodes[r]))
      continue;
    q->dead[d - g->nodes] = q->dead[q1 - g->nodes] = true;
    f->in[0] = q1->in[0];
  }
  count_readers(q);
}

static bool is_graph_output(const cx_graph *g, int v) {
  for (int k = 0; k < g->n_outputs; k++)
    if (g->outputs[k] == v) return true;
  return false;
}

/* QuantizeLinear nodes alike on one value are one computation. Our exporter writes a pair for
 * every reader (so that ONNX Runtime fuses each reader's pattern: export/export_qdq.c), which
 * leaves a residual Add's output read by two alike Q nodes, and no single Q to fuse into. The
 * first stays; what read the others reads it. */
static void merge_alike_quantize(qf *q) {
  cx_graph *g = q->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *a = &g->nodes[i];
    if (q->dead[i] || strcmp(a->op->name, "QuantizeLinear") || a->n_in < 1) continue;
    for (int j = i + 1; j < g->n_nodes; j++) {
      const cx_node *b = &g->nodes[j];
      if (q->dead[j] || strcmp(b->op->name, "QuantizeLinear") || b->n_in < 1 ||
          b->in[0] != a->in[0] || !same_params(q, a, b) || is_graph_output(g, b->out[0]))
        continue;
      for (int r = 0; r < g->n_nodes; r++)
        for (int k = 0; k < g->nodes[r].n_in; k++)
          if (g->nodes[r].in[k] == b->out[0]) g->nodes[r].in[k] = a->out[0];
      q->dead[j] = true;
    }
  }
  count_readers(q);
}

static cx_status fuse(qf *q) {
  int n_fused = 0;
  count_readers(q);
  merge_alike_quantize(q);
  collapse_pairs(q);
  for (int i = 0; i < q->n_nodes0; i++) {
    qmatch m;
    if (!q->dead[i] && !strcmp(q->g->nodes[i].op->name, "Add")) CX_TRY(fuse_add(q, i));
    if (q->dead[i] || !match(q, i, &m)) continue;
    CX_TRY(rewrite(q, &m));
    n_fused++;
  }
  (void)n_fused;
  drop_unread_dequantize(q);
  return CX_OK;
}

/* Whether backend be runs op with an int8 source that may be negative (a probe node). */
static bool runs_signed(const cx_backend *be, const char *op) {
  cx_attr a = {.name = "x_signed", .type = CX_ATTR_INT, .i = 1};
  cx_node probe = {.name = (char *)op, .op = cx_op_find(op), .n_attrs = 1, .attrs = &a};
  return probe.op && be->find_kernel(be, &probe, NULL, 0) != NULL;
}

cx_status cx_quant_fuse(cx_graph *g, const cx_backend *be, bool frozen_weights) {
  if (!cx_quant_fuse_enabled()) return CX_OK;
  int cap_nodes = 2 * g->n_nodes + 1, cap_values = g->n_values + 8 * g->n_nodes + 1;
  qf q = {.g = g, .frozen_weights = frozen_weights, .n_nodes0 = g->n_nodes, .signed_conv = runs_signed(be, "QLinearConvFused"),
          .signed_gemm = runs_signed(be, "QLinearGemmFused")};
  q.readers = calloc((size_t)cap_values, sizeof(int));
  q.reader = calloc((size_t)cap_values, sizeof(int));
  q.dead = calloc((size_t)cap_nodes, sizeof(bool));
  cx_status s = q.readers && q.reader && q.dead ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) s = fuse(&q);
  if (s == CX_OK) s = cx_graph_remove_nodes(g, q.dead);
  free(q.readers);
  free(q.reader);
  free(q.dead);
  return s;
}
