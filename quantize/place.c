/* Where FakeQuantize goes: the plan (sites: a value, the node inputs that read it quantized,
 * its grid), made once from the folded float graph and applied to any graph that shares its
 * names (the model's clone, the training graph). The rules are docs/quantize.md's
 * "Placement": what the exporter turns into Q/DQ pairs that ONNX Runtime and TensorRT fuse. */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "internal.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static const char *node_name(const cx_node *n) { return n->name ? n->name : ""; }

static bool is_op(const cx_node *n, const char *op) { return !strcmp(n->op->name, op); }

static bool runtime_value(const cx_graph *g, int v) {
  return v >= 0 && (g->values[v].kind == CX_VALUE_ACT || g->values[v].kind == CX_VALUE_INPUT);
}

/* The channel axis and count of a weighted node's weight; false when the node is not one
 * (its weight not an f32 initializer of a shape we know). */
static bool weight_axis(const cx_graph *g, const cx_node *n, int *axis, int64_t *channels) {
  bool conv = is_op(n, "Conv"), gemm = is_op(n, "Gemm"), matmul = is_op(n, "MatMul");
  if ((!conv && !gemm && !matmul) || n->n_in < 2 || n->in[1] < 0) return false;
  const cx_value *w = &g->values[n->in[1]];
  if ((w->kind != CX_VALUE_PARAM && w->kind != CX_VALUE_CONST) || w->dtype != CX_F32 || !w->init)
    return false;
  if (conv ? w->shape.ndim < 3 : w->shape.ndim != 2) return false;
  *axis = conv || (gemm && cx_node_int(n, "transB", 0)) ? 0 : 1;
  *channels = w->shape.d[*axis];
  return true;
}

/* A residual Add: two run-time inputs (an Add of a constant is a bias, left alone). */
static bool residual_add(const cx_graph *g, const cx_node *n) {
  return is_op(n, "Add") && n->n_in == 2 && runtime_value(g, n->in[0]) &&
         runtime_value(g, n->in[1]);
}

static bool quantizable(const cx_graph *g, const cx_node *n) {
  int axis;
  int64_t ch;
  return weight_axis(g, n, &axis, &ch) || residual_add(g, n) || is_op(n, "Concat");
}

static bool kept(const cx_quant_config *c, const cx_node *n) {
  for (int i = 0; i < c->n_keep_fp32; i++)
    if (fnmatch(c->keep_fp32[i], node_name(n), 0) == 0) return true;
  return false;
}

/* Every keep_fp32 glob must name a quantizable node: a typo is an error, not a no-op. */
static cx_status check_globs(const cx_graph *g, const cx_quant_config *c, const char *model) {
  for (int i = 0; i < c->n_keep_fp32; i++) {
    bool hit = false;
    for (int k = 0; k < g->n_nodes && !hit; k++)
      hit = quantizable(g, &g->nodes[k]) &&
            fnmatch(c->keep_fp32[i], node_name(&g->nodes[k]), 0) == 0;
    if (!hit)
      return cx_fail(CX_ERR_ARG, "%s: quantize keep_fp32 glob '%s' matches no Conv, Gemm, "
                     "MatMul, residual Add or Concat node (`compress inspect` lists the node "
                     "names)", model, c->keep_fp32[i]);
  }
  return CX_OK;
}

/* ---- building the plan ---- */

/* site_of[] of a Concat output quantized on the Concat's inputs: PUSHED - (one of its sites) */
#define PUSHED (-2)

typedef struct builder {
  const cx_graph *g;
  const cx_quant_config *c;
  cx_quant_plan *p;
  int *site_of; /* [n_values]: the ungrouped site of a value, -1 */
  int cap;
} builder;

static cx_status add_use(cx_quant_site *s, const char *node, int input) {
  cx_quant_use *u = realloc(s->uses, sizeof *u * (size_t)(s->n_uses + 1));
  if (!u) return nomem();
  s->uses = u;
  if (!(u[s->n_uses].node = strdup(node))) return nomem();
  u[s->n_uses++].input = input;
  return CX_OK;
}

static cx_status new_site(builder *b, cx_quant_kind kind, int v, const char *node, int axis,
                          int64_t channels, int *out) {
  cx_quant_plan *p = b->p;
  if (p->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    cx_quant_site *s = realloc(p->s, sizeof *s * (size_t)cap);
    if (!s) return nomem();
    p->s = s, b->cap = cap;
  }
  cx_quant_site *s = &p->s[p->n];
  bool act = kind == CX_QUANT_ACTIVATION, u8 = b->c->activations == CX_QUANT_UINT8;
  int64_t wmax = b->c->reduce_range ? 63 : 127;
  *s = (cx_quant_site){.kind = kind, .axis = axis, .channels = channels, .share = p->n,
                       .qmin = !act ? -wmax : u8 ? 0 : -128,
                       .qmax = !act ? wmax : u8 ? 255 : 127};
  s->value = strdup(b->g->values[v].name);
  s->node = strdup(node);
  s->scale = malloc(sizeof *s->scale * (size_t)channels);
  s->zero = calloc((size_t)channels, sizeof *s->zero);
  *out = p->n++;
  if (!s->value || !s->node || !s->scale || !s->zero) return nomem();
  for (int64_t j = 0; j < channels; j++) s->scale[j] = 1;
  return CX_OK;
}

/* Makes the groups of sites a and b one, led by the lower index (a Concat's inputs share a
 * scale; a value read by two Concats joins both groups). */
static void merge(cx_quant_plan *p, int a, int b) {
  int la = p->s[a].share, lb = p->s[b].share, lead = la < lb ? la : lb;
  for (int i = 0; i < p->n; i++)
    if (p->s[i].share == la || p->s[i].share == lb) p->s[i].share = lead;
}

/* A run-time value v read quantized by input `input` of node k; *site gets its site. Each value
 * has one site. A Concat's output is quantized on the Concat's inputs instead (recursively), in
 * one group; *site is then one of them. */
static cx_status request(builder *b, int v, int k, int input, int *site) {
  const cx_graph *g = b->g;
  int prod = g->values[v].producer;
  if (prod >= 0 && is_op(&g->nodes[prod], "Concat") && !kept(b->c, &g->nodes[prod])) {
    if (b->site_of[v] <= PUSHED) { /* another reader pushed it already */
      *site = PUSHED - b->site_of[v];
      return CX_OK;
    }
    const cx_node *cat = &g->nodes[prod];
    int first = -1;
    for (int i = 0; i < cat->n_in; i++) {
      int s;
      if (!runtime_value(g, cat->in[i])) continue; /* a constant input stays float */
      CX_TRY(request(b, cat->in[i], prod, i, &s));
      if (first < 0) first = s;
      else merge(b->p, first, s);
    }
    if (first < 0) return cx_fail(CX_ERR_UNSUPPORTED, "quantize: Concat '%s' has no run-time "
                                  "input to quantize", node_name(cat));
    b->site_of[v] = PUSHED - first;
    *site = first;
    return CX_OK;
  }
  int s = b->site_of[v];
  if (s < 0) CX_TRY(new_site(b, CX_QUANT_ACTIVATION, v, node_name(&g->nodes[k]), -1, 1, &s));
  b->site_of[v] = *site = s;
  return add_use(&b->p->s[s], node_name(&g->nodes[k]), input);
}

static cx_status add_weight(builder *b, int k, int axis, int64_t channels, int *weight_site) {
  const cx_node *n = &b->g->nodes[k];
  int w = n->in[1];
  int s = weight_site[w];
  if (s < 0) CX_TRY(new_site(b, CX_QUANT_WEIGHT, w, node_name(n), axis, channels, &s));
  else if (b->p->s[s].axis != axis)
    return cx_fail(CX_ERR_UNSUPPORTED, "quantize: weight '%s' is read by '%s' along axis %d "
                   "and by '%s' along axis %d; one per-channel scale cannot serve both",
                   b->g->values[w].name, b->p->s[s].node, b->p->s[s].axis, node_name(n), axis);
  weight_site[w] = s;
  return add_use(&b->p->s[s], node_name(n), 1);
}

static cx_status plan_nodes(builder *b, int *weight_site) {
  const cx_graph *g = b->g;
  for (int k = 0; k < g->n_nodes; k++) {
    const cx_node *n = &g->nodes[k];
    int axis, site;
    int64_t ch;
    if (kept(b->c, n)) continue;
    if (weight_axis(g, n, &axis, &ch)) {
      CX_TRY(add_weight(b, k, axis, ch, weight_site));
      if (runtime_value(g, n->in[0])) CX_TRY(request(b, n->in[0], k, 0, &site));
    } else if (residual_add(g, n)) {
      CX_TRY(request(b, n->in[0], k, 0, &site));
      CX_TRY(request(b, n->in[1], k, 1, &site));
    }
  }
  return CX_OK;
}

static bool has_weight(const cx_quant_plan *p) {
  for (int i = 0; i < p->n; i++)
    if (p->s[i].kind == CX_QUANT_WEIGHT) return true;
  return false;
}

cx_status cx_quant_plan_make(const cx_graph *g, const cx_quant_config *c, const char *model,
                             cx_quant_plan *out) {
  *out = (cx_quant_plan){0};
  if (!model) model = "the model";
  CX_TRY(cx_quant_config_check(c));
  CX_TRY(check_globs(g, c, model));
  builder b = {.g = g, .c = c, .p = out};
  b.site_of = malloc(sizeof *b.site_of * (size_t)(g->n_values + 1));
  int *weight_site = malloc(sizeof *weight_site * (size_t)(g->n_values + 1));
  cx_status s = b.site_of && weight_site ? CX_OK : nomem();
  for (int v = 0; s == CX_OK && v < g->n_values; v++) b.site_of[v] = weight_site[v] = -1;
  if (s == CX_OK) s = plan_nodes(&b, weight_site);
  if (s == CX_OK && !has_weight(out))
    s = cx_fail(CX_ERR_ARG, "%s: nothing to quantize: no Conv, Gemm or MatMul with an f32 "
                "weight initializer%s", model, c->n_keep_fp32 ? " outside keep_fp32" : "");
  free(b.site_of), free(weight_site);
  if (s != CX_OK) cx_quant_plan_free(out);
  return s;
}

void cx_quant_plan_free(cx_quant_plan *p) {
  for (int i = 0; p->s && i < p->n; i++) {
    cx_quant_site *s = &p->s[i];
    for (int u = 0; u < s->n_uses; u++) free(s->uses[u].node);
    free(s->uses), free(s->value), free(s->node), free(s->scale), free(s->zero);
  }
  free(p->s);
  *p = (cx_quant_plan){0};
}

cx_status cx_quant_plan_copy(const cx_quant_plan *from, cx_quant_plan *to) {
  *to = (cx_quant_plan){0};
  if (!(to->s = calloc((size_t)from->n + 1, sizeof *to->s))) return nomem();
  for (int i = 0; i < from->n; i++, to->n++) {
    const cx_quant_site *f = &from->s[i];
    cx_quant_site *t = &to->s[i];
    *t = *f;
    t->uses = calloc((size_t)f->n_uses + 1, sizeof *t->uses);
    t->value = strdup(f->value), t->node = strdup(f->node);
    t->scale = malloc(sizeof *t->scale * (size_t)f->channels);
    t->zero = malloc(sizeof *t->zero * (size_t)f->channels);
    if (!t->uses || !t->value || !t->node || !t->scale || !t->zero) {
      to->n++;
      return cx_quant_plan_free(to), nomem();
    }
    memcpy(t->scale, f->scale, sizeof *t->scale * (size_t)f->channels);
    memcpy(t->zero, f->zero, sizeof *t->zero * (size_t)f->channels);
    for (int u = 0; u < f->n_uses; u++) {
      t->uses[u].input = f->uses[u].input;
      if (!(t->uses[u].node = strdup(f->uses[u].node))) {
        t->n_uses = u;
        to->n++;
        return cx_quant_plan_free(to), nomem();
      }
    }
  }
  return CX_OK;
}

cx_status cx_quant_check_ranges(const cx_quant_plan *p, const char *model) {
  if (!model) model = "the model";
  for (int i = 0; i < p->n; i++) {
    const cx_quant_site *s = &p->s[i];
    /* an all-zero weight channel is exact at scale 1 (a constant channel of the fold, or one
     * that training zeroed): only an activation that calibration never saw is an error */
    if (s->zero_channels == 0 || s->kind != CX_QUANT_ACTIVATION) continue;
    return cx_fail(CX_ERR_ARG, "%s: activation '%s' (read by '%s') was 0 on every calibration "
                   "batch: its scale would underflow (use keep_fp32, or other calibration "
                   "data)", model, s->value, s->node);
  }
  return CX_OK;
}
