#include "op_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cuda/cuda_backend.h"
#include "../kernels/ref/ref.h"

/* ---- the backend under test: CX_TEST_BACKEND=cuda runs the same checks on the GPU ---------- */

static struct {
  const cx_backend *be;
  int checked, not_here; /* graphs compiled on it; graphs with an op it has no kernel for */
} B;

#ifdef CX_HAVE_CUDA
/* A run that checked nothing on its backend is a skip, not a pass. */
static void skip_if_nothing_checked(void) {
  if (B.checked == 0 && B.not_here > 0) {
    printf("skipped: backend '%s' has a kernel for none of these checks\n", B.be->name);
    fflush(stdout);
    _exit(77);
  }
}
#endif

static const cx_backend *test_backend(void) {
  if (B.be) return B.be;
  const char *want = getenv("CX_TEST_BACKEND");
  if (!want || !*want || !strcmp(want, "cpu")) return B.be = cx_backend_cpu();
#ifdef CX_HAVE_CUDA
  if (!strcmp(want, "cuda")) {
    if (cx_cuda_probe() != CX_OK) {
      printf("skipped: no GPU (%s)\n", cx_last_error());
      fflush(stdout);
      _exit(77);
    }
    atexit(skip_if_nothing_checked);
    return B.be = cx_backend_cuda();
  }
#endif
  printf("skipped: CX_TEST_BACKEND=%s is not a backend of this build\n", want);
  fflush(stdout);
  _exit(77);
}

const cx_backend *oc_backend(void) { return test_backend(); }

/* Every node of the compiled graph p has a kernel on the backend under test. */
static bool all_kernels_on(const cx_backend *be, const cx_program *p, char *missing, size_t n) {
  const cx_graph *g = cx_program_graph(p);
  for (int i = 0; i < g->n_nodes; i++) {
    const cx_node *nd = &g->nodes[i];
    if (!be->find_kernel(be, nd, NULL, nd->n_in)) {
      snprintf(missing, n, "%s", nd->op->name);
      return false;
    }
  }
  return true;
}

/* A program tensor's values as doubles (downloaded from the backend). */
static double *fetch(const cx_program *p, const cx_tensor *t) {
  int64_t n = cx_tensor_numel(t);
  void *raw = malloc(cx_tensor_nbytes(t) + 8);
  double *d = calloc((size_t)(n ? n : 1), sizeof(double));
  if (raw && d && cx_program_read(p, t, raw) == CX_OK)
    for (int64_t i = 0; i < n; i++) d[i] = cx_dtype_load(t->dtype, raw, (size_t)i);
  else
    for (int64_t i = 0; i < n && d; i++) d[i] = NAN;
  free(raw);
  return d;
}

static int fill_init(cx_graph *g, cx_value_kind kind, const char *name, const cx_shape *shape,
                     float lo, float hi, uint64_t seed) {
  int64_t n = cx_shape_numel(shape);
  float *d = malloc(sizeof(float) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) d[i] = lo + (hi - lo) * cx_rng_uniform(seed, (uint64_t)i);
  int id = cx_graph_init(g, kind, name, CX_F32, shape, d);
  free(d);
  return id;
}

int oc_param(cx_graph *g, const char *name, const cx_shape *shape, float lo, float hi,
             uint64_t seed) {
  return fill_init(g, CX_VALUE_PARAM, name, shape, lo, hi, seed);
}

int oc_const(cx_graph *g, const char *name, const cx_shape *shape, float lo, float hi,
             uint64_t seed) {
  return fill_init(g, CX_VALUE_CONST, name, shape, lo, hi, seed);
}

/* The reference interpreter: every forward node of the compiled graph, in double. */
typedef struct ref_state {
  const cx_graph *g;
  int n_fwd;
  cx_ref_tensor *v; /* by value id */
  uint64_t seed;
  cx_batch_rows rows;
} ref_state;

static cx_status ref_run(ref_state *r) {
  const cx_graph *g = r->g;
  for (int i = 0; i < r->n_fwd; i++) {
    const cx_node *n = &g->nodes[i];
    cx_ref_fn fn = cx_ref_find(n->op->name);
    if (!fn) return cx_fail(CX_ERR_UNSUPPORTED, "no reference for op %s", n->op->name);
    cx_ref_tensor in[64], out[16];
    for (int k = 0; k < n->n_in; k++)
      in[k] = n->in[k] >= 0 ? r->v[n->in[k]] : (cx_ref_tensor){0};
    for (int k = 0; k < n->n_out; k++) {
      cx_ref_tensor *o = &r->v[n->out[k]];
      memset(o->data, 0, sizeof(double) * (size_t)cx_shape_numel(&o->shape));
      out[k] = *o;
    }
    cx_ref_args a = {.node = n, .in = in, .n_in = n->n_in, .out = out, .n_out = n->n_out,
                     .training = true, .seed = r->seed, .step = 0, .node_index = i,
                     .rows = r->rows};
    cx_status s = fn(&a);
    if (s != CX_OK) {
      cx_error_prefix("reference of node '%s' (%s)", n->name, n->op->name);
      return s;
    }
  }
  return CX_OK;
}

static double max_abs(const double *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* L = sum over graph outputs of R * output, in double. */
static double ref_loss(ref_state *r, double *const *R) {
  if (ref_run(r) != CX_OK) return NAN;
  double L = 0;
  for (int k = 0; k < r->g->n_outputs; k++) {
    const cx_ref_tensor *o = &r->v[r->g->outputs[k]];
    for (int64_t i = 0; i < cx_shape_numel(&o->shape); i++) L += R[k][i] * o->data[i];
  }
  return L;
}

static int check_forward(const char *label, cx_program *p, ref_state *r, double tol) {
  int fails = 0;
  for (int k = 0; k < r->g->n_outputs; k++) {
    int v = r->g->outputs[k];
    const cx_tensor *t = cx_program_value_tensor(p, v);
    const cx_ref_tensor *o = &r->v[v];
    int64_t n = cx_shape_numel(&o->shape);
    double err = 0, scale = fmax(max_abs(o->data, n), 1e-3);
    int64_t worst = 0;
    double *ours = fetch(p, t);
    for (int64_t i = 0; i < n; i++) { /* NaN matches NaN only */
      bool nan_ours = isnan(ours[i]), nan_ref = isnan(o->data[i]);
      double e = nan_ours || nan_ref ? (nan_ours == nan_ref ? 0 : INFINITY)
                                     : fabs(ours[i] - o->data[i]);
      if (e > err) err = e, worst = i;
    }
    err /= scale;
    char sh[CX_SHAPE_STR];
    bool bad = !(err <= tol);
    printf("%s %s: forward '%s' %s: error %.2e (tol %.0e)", bad ? "FAIL" : "ok  ", label,
           r->g->values[v].name, cx_shape_str(&o->shape, sh), err, tol);
    if (bad)
      printf(" at element %lld: ours %.6g, reference %.6g", (long long)worst, ours[worst],
             o->data[worst]);
    printf("\n");
    free(ours);
    fails += bad;
  }
  return fails;
}

static int check_grads(const char *label, cx_program *p, ref_state *r, double *const *R,
                       const oc_opts *o) {
  int fails = 0;
  for (int k = 0; k < cx_program_param_count(p); k++) {
    const char *name = cx_program_param_name(p, k);
    int v = cx_graph_find_value(r->g, name);
    const cx_tensor *gt = cx_program_param_grad(p, k);
    cx_ref_tensor *x = &r->v[v];
    int64_t n = cx_shape_numel(&x->shape), samples = n < o->max_fd ? n : o->max_fd;
    double err = 0, scale = 1e-3, worst_fd = 0, worst_ours = 0;
    int64_t worst = -1;
    double *g_ours = fetch(p, gt);
    for (int64_t s = 0; s < samples; s++) {
      int64_t i = samples == n ? s : (int64_t)(cx_rng_uniform(o->seed + 7, (uint64_t)s) * n);
      double keep = x->data[i];
      x->data[i] = keep + o->fd_step;
      double lp = ref_loss(r, R);
      x->data[i] = keep - o->fd_step;
      double lm = ref_loss(r, R);
      x->data[i] = keep;
      double fd = (lp - lm) / (2 * o->fd_step), ours = g_ours[i];
      scale = fmax(scale, fabs(fd));
      if (!(fabs(fd - ours) <= err)) err = fabs(fd - ours), worst = i, worst_fd = fd, worst_ours = ours;
    }
    free(g_ours);
    err /= scale;
    bool bad = !(err <= o->grad_tol);
    char sh[CX_SHAPE_STR];
    printf("%s %s: gradient of '%s' %s: error %.2e (tol %.0e, %lld of %lld elements)",
           bad ? "FAIL" : "ok  ", label, name, cx_shape_str(&x->shape, sh), err, o->grad_tol,
           (long long)samples, (long long)n);
    if (bad)
      printf(" at element %lld: ours %.6g, finite difference %.6g", (long long)worst, worst_ours,
             worst_fd);
    printf("\n");
    fails += bad;
  }
  ref_run(r); /* leave the unperturbed outputs */
  return fails;
}

static oc_opts defaults(const oc_opts *given) {
  oc_opts o = given ? *given : (oc_opts){0};
  if (o.fwd_tol <= 0) o.fwd_tol = 1e-4;
  if (o.grad_tol <= 0) o.grad_tol = 1e-3;
  if (o.max_fd <= 0) o.max_fd = 48;
  if (o.fd_step <= 0) o.fd_step = 1e-4;
  if (o.rows.stride <= 0) o.rows = (cx_batch_rows){0, 1};
  return o;
}

static int run_check(const char *label, cx_program *p, const oc_opts *o) {
  const cx_graph *g = cx_program_graph(p);
  ref_state r = {.g = g, .n_fwd = cx_program_forward_nodes(p), .seed = o->seed, .rows = o->rows};
  cx_program_set_rows(p, o->rows);
  r.v = calloc((size_t)g->n_values + 1, sizeof(cx_ref_tensor));
  for (int v = 0; v < g->n_values; v++) {
    const cx_tensor *t = cx_program_value_tensor(p, v);
    int64_t n = cx_shape_numel(&t->shape);
    r.v[v] = (cx_ref_tensor){.shape = t->shape,
                             .data = g->values[v].kind != CX_VALUE_ACT
                                         ? fetch(p, t)
                                         : calloc((size_t)(n ? n : 1), 8),
                             .dtype = t->dtype};
  }
  double **R = calloc((size_t)g->n_outputs + 1, sizeof(double *));
  for (int k = 0; k < g->n_outputs; k++) {
    const cx_shape *s = &g->values[g->outputs[k]].shape;
    int64_t n = cx_shape_numel(s);
    R[k] = calloc((size_t)(n ? n : 1), sizeof(double));
    char name[600];
    snprintf(name, sizeof name, "%s@grad", g->values[g->outputs[k]].name);
    cx_tensor *seed = o->grad ? cx_program_tensor(p, name) : NULL;
    float *host = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
      float x = 2 * cx_rng_uniform(o->seed + 1000 + (uint64_t)k, (uint64_t)i) - 1;
      R[k][i] = x;
      host[i] = x;
    }
    if (seed) cx_program_write(p, seed, host);
    free(host);
  }
  int fails = 0;
  cx_status s = ref_run(&r);
  if (s == CX_OK) s = cx_program_forward(p);
  if (s == CX_OK) fails += check_forward(label, p, &r, o->fwd_tol);
  if (s == CX_OK && o->grad) s = cx_program_backward(p);
  if (s == CX_OK && o->grad) fails += check_grads(label, p, &r, R, o);
  if (s != CX_OK) {
    printf("FAIL %s: %s\n", label, cx_last_error());
    fails++;
  }
  for (int v = 0; v < g->n_values; v++) free(r.v[v].data);
  for (int k = 0; k < g->n_outputs; k++) free(R[k]);
  free(R);
  free(r.v);
  return fails;
}

/* On a backend other than the CPU, a graph whose compiled form has an op without a kernel there
 * is reported and left out (the CUDA coverage test says which ops must have one). */
int oc_check(const char *label, cx_graph *g, const oc_opts *given) {
  oc_opts o = defaults(given);
  const cx_backend *be = test_backend();
  cx_compile_opts co = {.batch = 1, .training = o.grad, .backend = cx_backend_cpu(),
                        .seed = o.seed};
  cx_program *p = NULL;
  if (cx_program_compile(g, &co, &p) != CX_OK) {
    printf("FAIL %s: compile: %s\n", label, cx_last_error());
    return 1;
  }
  if (be != cx_backend_cpu()) {
    char missing[200];
    bool here = all_kernels_on(be, p, missing, sizeof missing);
    cx_program_free(p);
    p = NULL;
    if (!here) {
      printf("not on %s: %s (no kernel for %s)\n", be->name, label, missing);
      B.not_here++;
      return 0;
    }
    co.backend = be;
    if (cx_program_compile(g, &co, &p) != CX_OK) {
      printf("FAIL %s: compile on %s: %s\n", label, be->name, cx_last_error());
      return 1;
    }
  }
  B.checked++;
  int fails = run_check(label, p, &o);
  cx_program_free(p);
  return fails;
}
