/* Applying a plan: one FakeQuantize node per site, reading the value and its scale (and zero
 * point) initializers, and the site's uses rewired to its output. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "internal.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static int find_node(const cx_graph *g, const char *name) {
  for (int k = 0; k < g->n_nodes; k++)
    if (g->nodes[k].name && !strcmp(g->nodes[k].name, name)) return k;
  return -1;
}

/* base + suffix, made unique in g; caller frees. */
static char *unique(const cx_graph *g, const char *base, const char *suffix) {
  size_t len = strlen(base) + strlen(suffix) + 1;
  char *want = malloc(len);
  if (!want) return NULL;
  snprintf(want, len, "%s%s", base, suffix);
  char *name = cx_graph_unique_name(g, want);
  free(want);
  return name;
}

/* An initializer named base + suffix (made unique). */
static int add_init(cx_graph *g, cx_value_kind kind, const char *base, const char *suffix,
                    const cx_shape *shape, const float *data) {
  char *name = unique(g, base, suffix);
  if (!name) return -1;
  int id = cx_graph_init(g, kind, name, CX_F32, shape, data);
  free(name);
  return id;
}

/* LSQ's gradient scale 1/sqrt(N·qmax), N the elements one scale entry covers (per sample). */
static float lsq_grad_scale(const cx_graph *g, const cx_quant_site *s, int v,
                            const cx_shape *shapes) {
  int64_t n = cx_shape_numel(shapes ? &shapes[v] : &g->values[v].shape) / s->channels;
  return n > 0 ? (float)(1.0 / sqrt((double)n * (double)s->qmax)) : 1.0f;
}

static cx_status rewire(cx_graph *g, const cx_quant_site *s, int v, int out) {
  for (int u = 0; u < s->n_uses; u++) {
    int k = find_node(g, s->uses[u].node);
    int i = s->uses[u].input;
    if (k < 0 || i >= g->nodes[k].n_in || g->nodes[k].in[i] != v)
      return cx_fail(CX_ERR_ARG, "quantize: the graph has no node '%s' reading '%s' as input "
                     "%d (the plan was made for another graph)", s->uses[u].node, s->value, i);
    g->nodes[k].in[i] = out;
  }
  return CX_OK;
}

static cx_status insert_site(cx_graph *g, const cx_quant_plan *p, int i, cx_value_kind kind,
                             const cx_shape *shapes, int *scale_id, int *zero_id) {
  const cx_quant_site *s = &p->s[i];
  int v = cx_graph_find_value(g, s->value);
  if (v < 0)
    return cx_fail(CX_ERR_ARG, "quantize: the graph has no value '%s' (the plan was made for "
                   "another graph)", s->value);
  bool zp = s->qmin >= 0;
  if (s->share == i) {
    cx_shape shape = s->kind == CX_QUANT_WEIGHT ? (cx_shape){1, {s->channels}} : (cx_shape){0};
    scale_id[i] = add_init(g, kind, s->value, ".scale", &shape, s->scale);
    /* a zero point is never learned (LSQ learns the scale only) */
    zero_id[i] = zp ? add_init(g, kind == CX_VALUE_PARAM ? CX_VALUE_STATE : kind, s->value,
                               ".zero_point", &shape, s->zero)
                    : -1;
    if (scale_id[i] < 0 || (zp && zero_id[i] < 0))
      return g->status != CX_OK ? cx_graph_status(g) : nomem();
  } else {
    scale_id[i] = scale_id[s->share], zero_id[i] = zero_id[s->share];
  }
  char *fq = unique(g, s->value, ".fq");
  if (!fq) return nomem();
  int in[3] = {v, scale_id[i], zero_id[i]};
  int k = cx_graph_node(g, "FakeQuantize", fq, in, zp ? 3 : 2, 1);
  free(fq);
  if (k < 0) return cx_graph_status(g);
  cx_node_set_int(g, k, "axis", s->kind == CX_QUANT_WEIGHT ? s->axis : 1);
  cx_node_set_int(g, k, "qmin", s->qmin);
  cx_node_set_int(g, k, "qmax", s->qmax);
  if (kind == CX_VALUE_PARAM)
    cx_node_set_float(g, k, "grad_scale", lsq_grad_scale(g, s, v, shapes));
  return rewire(g, s, v, cx_node_output(g, k, 0));
}

cx_status cx_quant_insert_ids(cx_graph *g, const cx_quant_plan *p, cx_value_kind scale_kind,
                              int *scale_id, int *zero_id) {
  int *sid = calloc((size_t)p->n + 1, sizeof *sid), *zid = calloc((size_t)p->n + 1, sizeof *zid);
  cx_shape *shapes = NULL;
  cx_dtype *dtypes = NULL;
  cx_status s = sid && zid ? CX_OK : nomem();
  if (s == CX_OK && scale_kind == CX_VALUE_PARAM) { /* LSQ needs each value's size */
    shapes = malloc(sizeof *shapes * (size_t)(g->n_values + 1));
    dtypes = malloc(sizeof *dtypes * (size_t)(g->n_values + 1));
    s = shapes && dtypes ? cx_graph_infer_shapes(g, 1, shapes, dtypes) : nomem();
  }
  for (int i = 0; s == CX_OK && i < p->n; i++)
    s = insert_site(g, p, i, scale_kind, shapes, sid, zid);
  if (s == CX_OK) s = cx_graph_status(g);
  if (s == CX_OK && scale_id) memcpy(scale_id, sid, sizeof *sid * (size_t)p->n);
  if (s == CX_OK && zero_id) memcpy(zero_id, zid, sizeof *zid * (size_t)p->n);
  free(sid), free(zid), free(shapes), free(dtypes);
  return s;
}

cx_status cx_quant_insert(cx_graph *g, const cx_quant_plan *p, cx_value_kind scale_kind) {
  return cx_quant_insert_ids(g, p, scale_kind, NULL, NULL);
}
