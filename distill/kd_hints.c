/* Feature distillation between named layers: FitNets hints (a learned 1x1 conv adapter from the
 * student's channels to the teacher's, then MSE) and attention transfer (Zagoruyko & Komodakis:
 * MSE between the L2-normalised spatial maps mean_c(F^2) of both networks). The teacher's
 * feature is fed as the input "teacher_feat/<name>"; only the student side gets gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "../core/rng.h"
#include "internal.h"

/* Every value's shape in the student for one image (core/graph_shapes.h), malloc'd. */
static cx_status student_shapes(const cx_graph *student, cx_shape **out) {
  cx_shape *shape = malloc(sizeof(cx_shape) * ((size_t)student->n_values + 1));
  cx_dtype *dtype = malloc(sizeof(cx_dtype) * ((size_t)student->n_values + 1));
  cx_status s = shape && dtype ? cx_graph_infer_shapes(student, 1, shape, dtype)
                               : cx_fail(CX_ERR_NOMEM, "feature hints: out of memory");
  free(dtype);
  if (s != CX_OK) free(shape);
  *out = s == CX_OK ? shape : NULL;
  return s;
}

/* The student's feature map for hint h, checked against the teacher's. */
static cx_status student_shape(const cx_graph *student, const cx_shape *shapes,
                               const cx_kd_hint *h, cx_shape *s) {
  int v = cx_graph_find_value(student, h->student);
  if (v < 0)
    return cx_fail(CX_ERR_ARG, "feature hint: the student has no value named '%s' (names as "
                   "`compress inspect` shows them)", h->student);
  *s = shapes[v];
  if (s->ndim != 4)
    return cx_fail(CX_ERR_SHAPE, "feature hint: the student's '%s' has rank %d; a feature map "
                   "[N,C,H,W] is needed", h->student, s->ndim);
  if (s->d[2] != h->teacher_shape[1] || s->d[3] != h->teacher_shape[2])
    return cx_fail(CX_ERR_SHAPE, "feature hint: the student's '%s' is %lldx%lld and the "
                   "teacher's '%s' %lldx%lld; the spatial sizes must agree", h->student,
                   (long long)s->d[2], (long long)s->d[3], h->teacher,
                   (long long)h->teacher_shape[1], (long long)h->teacher_shape[2]);
  return CX_OK;
}

static int reduce(cx_graph *g, const char *op, const char *name, int x, int axis, int keep) {
  int node = cx_graph_node(g, op, name, &x, 1, 1);
  if (axis >= 0) cx_node_set_ints(g, node, "axes", (int64_t[]){axis}, 1);
  cx_node_set_int(g, node, "keepdims", keep);
  return cx_node_output(g, node, 0);
}

static int named(char *buf, const char *prefix, int i, const char *what) {
  return snprintf(buf, 96, "%s%d/%s", prefix, i, what);
}

/* mean((a - b)^2) over every element */
static int mse(cx_graph *g, int a, int b, int i) {
  char n[96];
  named(n, "distill/hint", i, "diff");
  int d = cx_graph_op(g, "Sub", n, (int[]){a, b}, 2);
  named(n, "distill/hint", i, "squared");
  int sq = cx_graph_op(g, "Mul", n, (int[]){d, d}, 2);
  named(n, "distill/hint", i, "mse");
  return reduce(g, "ReduceMean", n, sq, -1, 0);
}

/* x [N,C,H,W] -> mean_c(x^2) [N,H*W] divided by its L2 norm */
static int attention_map(cx_graph *g, int x, int i, const char *side) {
  char n[96], what[48];
  snprintf(what, sizeof what, "%s/squared", side);
  named(n, "distill/hint", i, what);
  int sq = cx_graph_op(g, "Mul", n, (int[]){x, x}, 2);
  snprintf(what, sizeof what, "%s/map", side);
  named(n, "distill/hint", i, what);
  int m = reduce(g, "ReduceMean", n, sq, 1, 0);
  snprintf(what, sizeof what, "%s/flat", side);
  named(n, "distill/hint", i, what);
  int node = cx_graph_node(g, "Flatten", n, &m, 1, 1);
  cx_node_set_int(g, node, "axis", 1);
  int flat = cx_node_output(g, node, 0);
  snprintf(what, sizeof what, "%s/sq", side);
  named(n, "distill/hint", i, what);
  int sq2 = cx_graph_op(g, "Mul", n, (int[]){flat, flat}, 2);
  snprintf(what, sizeof what, "%s/sumsq", side);
  named(n, "distill/hint", i, what);
  int ss = reduce(g, "ReduceSum", n, sq2, 1, 1);
  float eps = 1e-12f;
  snprintf(what, sizeof what, "%s/eps", side);
  named(n, "distill/hint", i, what);
  int e = cx_graph_const_f32(g, n, &(cx_shape){0}, &eps);
  snprintf(what, sizeof what, "%s/sumsq_eps", side);
  named(n, "distill/hint", i, what);
  int sse = cx_graph_op(g, "Add", n, (int[]){ss, e}, 2);
  snprintf(what, sizeof what, "%s/norm", side);
  named(n, "distill/hint", i, what);
  int norm = cx_graph_op(g, "Sqrt", n, &sse, 1);
  snprintf(what, sizeof what, "%s/normalised", side);
  named(n, "distill/hint", i, what);
  return cx_graph_op(g, "Div", n, (int[]){flat, norm}, 2);
}

static void adapter_name(char *buf, size_t size, int i) {
  snprintf(buf, size, "distill.adapter.%d.weight", i);
}

/* W [Ct, Cs, 1, 1] drawn as PyTorch's Conv2d default: U(-1/sqrt(Cs), 1/sqrt(Cs)); an adapter
 * already in the graph (cx_kd_adapters_add) is used as it is. */
static int adapter_weight(cx_graph *g, int64_t cs, int64_t ct, int i, uint64_t seed) {
  char name[96];
  adapter_name(name, sizeof name, i);
  cx_shape shape = {4, {ct, cs, 1, 1}};
  int v = cx_graph_find_value(g, name);
  if (v >= 0) {
    if (g->values[v].kind == CX_VALUE_PARAM && cx_shape_equal(&g->values[v].shape, &shape))
      return v;
    cx_fail(CX_ERR_SHAPE, "feature hint %d: the student's '%s' is not a [%lld,%lld,1,1] "
            "parameter", i, name, (long long)ct, (long long)cs);
    return -1;
  }
  int64_t n = ct * cs;
  float *w = malloc(sizeof(float) * (size_t)n), bound = 1.0f / sqrtf((float)cs);
  if (!w) return -1;
  uint64_t key = cx_rng_key(seed, 0x4b44ada9, (uint64_t)i);
  for (int64_t j = 0; j < n; j++) w[j] = bound * (2 * cx_rng_uniform(key, (uint64_t)j) - 1);
  v = cx_graph_param(g, name, &shape, w);
  free(w);
  return v;
}

static int fitnet_adapter(cx_graph *g, int x, int wv, int i) {
  char name[96];
  named(name, "distill/hint", i, "adapter");
  int node = cx_graph_node(g, "Conv", name, (int[]){x, wv}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){1, 1}, 2);
  return cx_node_output(g, node, 0);
}

static cx_status add_hint(cx_graph *g, const cx_graph *student, const cx_shape *shapes,
                          const cx_kd_config *c, int i, cx_kd_term *term) {
  const cx_kd_hint *h = &c->hints[i];
  cx_shape ss = {0};
  CX_TRY(student_shape(student, shapes, h, &ss));
  int sv = cx_graph_find_value(g, h->student);
  char name[300];
  snprintf(name, sizeof name, "teacher_feat/%s", h->teacher);
  if (cx_graph_find_value(g, name) >= 0)
    return cx_fail(CX_ERR_ARG, "feature hint: the teacher's '%s' is used by two hints", h->teacher);
  const int64_t *t = h->teacher_shape;
  int tv = cx_graph_input(g, name, CX_F32, &(cx_shape){4, {-1, t[0], t[1], t[2]}});
  int v;
  if (h->kind == CX_HINT_FITNET) {
    int w = adapter_weight(g, ss.d[1], t[0], i, c->seed);
    if (w < 0) return cx_graph_status(g) != CX_OK ? cx_graph_status(g) : CX_ERR_SHAPE;
    v = mse(g, fitnet_adapter(g, sv, w, i), tv, i);
  } else {
    v = mse(g, attention_map(g, sv, i, "student"), attention_map(g, tv, i, "teacher"), i);
  }
  *term = (cx_kd_term){v, h->weight > 0 ? h->weight : 1.0f};
  return cx_graph_status(g);
}

static cx_status check_hint(const cx_kd_hint *h, int i) {
  if (!h->student || !h->teacher || h->teacher_shape[0] <= 0)
    return cx_fail(CX_ERR_ARG, "feature hint %d: student and teacher names and the teacher's "
                   "feature shape are needed", i);
  return CX_OK;
}

cx_status cx_kd_add_hints(cx_graph *g, const cx_graph *student, const cx_kd_config *c,
                          cx_kd_term *terms, int *n_terms) {
  if (c->n_hints == 0) return CX_OK;
  cx_shape *shapes;
  CX_TRY(student_shapes(student, &shapes));
  cx_status s = CX_OK;
  for (int i = 0; s == CX_OK && i < c->n_hints; i++) {
    s = check_hint(&c->hints[i], i);
    if (s == CX_OK) s = add_hint(g, student, shapes, c, i, &terms[(*n_terms)++]);
  }
  free(shapes);
  return s;
}

/* ---- adapters kept in the student while it trains ---- */

cx_status cx_kd_adapters_add(cx_graph *student, const cx_kd_config *c) {
  bool any = false;
  for (int i = 0; i < c->n_hints; i++) any = any || c->hints[i].kind == CX_HINT_FITNET;
  if (!any) return CX_OK;
  cx_shape *shapes;
  CX_TRY(student_shapes(student, &shapes));
  cx_status s = CX_OK;
  for (int i = 0; s == CX_OK && i < c->n_hints; i++) {
    const cx_kd_hint *h = &c->hints[i];
    cx_shape ss = {0};
    s = check_hint(h, i);
    if (s == CX_OK && h->kind == CX_HINT_FITNET) s = student_shape(student, shapes, h, &ss);
    if (s == CX_OK && h->kind == CX_HINT_FITNET &&
        adapter_weight(student, ss.d[1], h->teacher_shape[0], i, c->seed) < 0)
      s = cx_graph_status(student) != CX_OK ? cx_graph_status(student) : CX_ERR_SHAPE;
  }
  free(shapes);
  return s;
}

static bool is_adapter(const cx_value *v) {
  return strncmp(v->name, "distill.adapter.", 16) == 0;
}

cx_status cx_kd_adapters_strip(cx_graph *student) {
  for (int n = 0; n < student->n_nodes; n++)
    for (int k = 0; k < student->nodes[n].n_in; k++) {
      int v = student->nodes[n].in[k];
      if (v >= 0 && is_adapter(&student->values[v]))
        return cx_fail(CX_ERR_ARG, "the student's node '%s' reads the adapter '%s'",
                       student->nodes[n].name, student->values[v].name);
    }
  /* cx_kd_adapters_add appended them: they are the last values */
  while (student->n_values > 0 && is_adapter(&student->values[student->n_values - 1])) {
    cx_value *v = &student->values[--student->n_values];
    free(v->name);
    free(v->init);
  }
  for (int v = 0; v < student->n_values; v++)
    if (is_adapter(&student->values[v]))
      return cx_fail(CX_ERR_ARG, "the student's adapter '%s' is not among its last values",
                     student->values[v].name);
  return CX_OK;
}
