/* Feature distillation between named layers: FitNets hints (a learned 1x1 conv adapter from the
 * student's channels to the teacher's, then MSE) and attention transfer (Zagoruyko & Komodakis:
 * MSE between the L2-normalised spatial maps mean_c(F^2) of both networks). The teacher's
 * feature is fed as the input "teacher_feat/<name>"; only the student side gets gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "internal.h"

/* The student's per-image shapes, from one inference compile at batch 1. */
static cx_status student_shape(cx_program *p, const cx_kd_hint *h, cx_shape *s) {
  cx_tensor *t = cx_program_tensor(p, h->student);
  if (!t)
    return cx_fail(CX_ERR_ARG, "feature hint: the student has no value named '%s' (names as "
                   "`compress inspect` shows them)", h->student);
  *s = t->shape;
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

/* W [Ct, Cs, 1, 1] drawn as PyTorch's Conv2d default: U(-1/sqrt(Cs), 1/sqrt(Cs)) */
static int fitnet_adapter(cx_graph *g, int x, int64_t cs, int64_t ct, int i, uint64_t seed) {
  int64_t n = ct * cs;
  float *w = malloc(sizeof(float) * (size_t)n), bound = 1.0f / sqrtf((float)cs);
  if (!w) return -1;
  uint64_t key = cx_rng_key(seed, 0x4b44ada9, (uint64_t)i);
  for (int64_t j = 0; j < n; j++) w[j] = bound * (2 * cx_rng_uniform(key, (uint64_t)j) - 1);
  char name[96];
  snprintf(name, sizeof name, "distill.adapter.%d.weight", i);
  int wv = cx_graph_param(g, name, &(cx_shape){4, {ct, cs, 1, 1}}, w);
  free(w);
  named(name, "distill/hint", i, "adapter");
  int node = cx_graph_node(g, "Conv", name, (int[]){x, wv}, 2, 1);
  cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){1, 1}, 2);
  return cx_node_output(g, node, 0);
}

static cx_status add_hint(cx_graph *g, cx_program *p, const cx_kd_config *c, int i,
                          cx_kd_term *term) {
  const cx_kd_hint *h = &c->hints[i];
  cx_shape ss = {0};
  CX_TRY(student_shape(p, h, &ss));
  int sv = cx_graph_find_value(g, h->student);
  char name[300];
  snprintf(name, sizeof name, "teacher_feat/%s", h->teacher);
  if (cx_graph_find_value(g, name) >= 0)
    return cx_fail(CX_ERR_ARG, "feature hint: the teacher's '%s' is used by two hints", h->teacher);
  const int64_t *t = h->teacher_shape;
  int tv = cx_graph_input(g, name, CX_F32, &(cx_shape){4, {-1, t[0], t[1], t[2]}});
  int v;
  if (h->kind == CX_HINT_FITNET) {
    v = mse(g, fitnet_adapter(g, sv, ss.d[1], t[0], i, c->seed), tv, i);
  } else {
    v = mse(g, attention_map(g, sv, i, "student"), attention_map(g, tv, i, "teacher"), i);
  }
  *term = (cx_kd_term){v, h->weight > 0 ? h->weight : 1.0f};
  return cx_graph_status(g);
}

cx_status cx_kd_add_hints(cx_graph *g, const cx_graph *student, const cx_kd_config *c,
                          cx_kd_term *terms, int *n_terms) {
  if (c->n_hints == 0) return CX_OK;
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  CX_TRY(cx_program_compile(student, &co, &p));
  cx_status s = CX_OK;
  for (int i = 0; s == CX_OK && i < c->n_hints; i++) {
    const cx_kd_hint *h = &c->hints[i];
    if (!h->student || !h->teacher || h->teacher_shape[0] <= 0)
      s = cx_fail(CX_ERR_ARG, "feature hint %d: student and teacher names and the teacher's "
                  "feature shape are needed", i);
    else
      s = add_hint(g, p, c, i, &terms[(*n_terms)++]);
  }
  cx_program_free(p);
  return s;
}
