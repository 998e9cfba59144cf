/* Synchronised BatchNorm in the CPU kernels (BatchNormTrain / BatchNormGrad with
 * cx_kernel_args.sync_stats, docs/distributed.md), without MPI: the replicas are simulated.
 *   - "twin" replicas, whose reduction doubles every sum, stand for two replicas holding the
 *     same batch: Y = Relu(BN(Conv(X))) on X with them must equal the same graph on the batch
 *     [X; X] without replicas: outputs, dX and the running statistics alike, the parameter
 *     gradients (this replica's sums) half of the whole batch's;
 *   - replicas whose reduction leaves the sums as they are must give the results of no replicas
 *     bit for bit: the synchronised path does the local path's arithmetic.
 * Both on channels-last activations (the default layout) and on plain ones (CX_LAYOUT=plain). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

enum { N = 3, CIN = 2, C = 5, H = 6, W = 7 };

static cx_status twin_reduce(void *user, double *buf, int64_t n, cx_reduce_op op) {
  (void)user;
  for (int64_t i = 0; op == CX_REDUCE_SUM && i < n; i++) buf[i] *= 2;
  return CX_OK;
}

static cx_status same_reduce(void *user, double *buf, int64_t n, cx_reduce_op op) {
  (void)user, (void)buf, (void)n, (void)op;
  return CX_OK;
}

static void fill(float *p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = 0; i < n; i++) p[i] = lo + (hi - lo) * cx_rng_uniform(seed, (uint64_t)i);
}

/* X [batch, CIN, H, W] -> Conv 1x1 -> BatchNormalization -> Relu -> Conv 1x1 -> Y: BatchNorm's
 * input and output are activations between convolutions, which the layout pass makes
 * channels-last (graph inputs and outputs stay plain). X holds `copies` copies of one batch. */
static cx_graph *graph(int copies) {
  cx_graph *g = cx_graph_new();
  int64_t b = (int64_t)N * copies, per = (int64_t)N * CIN * H * W;
  float *x = malloc(sizeof(float) * (size_t)(b * CIN * H * W));
  for (int k = 0; k < copies; k++) fill(x + k * per, per, 11, -2, 3);
  int xv = cx_graph_init(g, CX_VALUE_PARAM, "X", CX_F32, &S(b, CIN, H, W), x);
  free(x);
  int wv = oc_param(g, "W", &S(C, CIN, 1, 1), -1, 1, 12);
  int h = cx_graph_op(g, "Conv", "conv", (int[]){xv, wv}, 2);
  float m[C], v[C];
  fill(m, C, 13, -0.5f, 0.5f), fill(v, C, 14, 0.5f, 1.5f);
  int in[5] = {h, oc_param(g, "scale", &S(C), 0.5f, 1.5f, 15), oc_param(g, "B", &S(C), -1, 1, 16),
               cx_graph_init(g, CX_VALUE_STATE, "running_mean", CX_F32, &S(C), m),
               cx_graph_init(g, CX_VALUE_STATE, "running_var", CX_F32, &S(C), v)};
  int bn = cx_graph_op(g, "BatchNormalization", "bn", in, 5);
  int r = cx_graph_op(g, "Relu", "relu", (int[]){bn}, 1);
  int w2 = oc_param(g, "W2", &S(C, C, 1, 1), -1, 1, 18);
  cx_graph_mark_output(g, cx_graph_op(g, "Conv", "y", (int[]){r, w2}, 2));
  return g;
}

typedef struct result {
  float *y, *dx, *dw, *dscale, *db, *rm, *rv; /* host copies */
  int channels_last;
} result;

static float *read(cx_program *p, const char *name, cx_status *s) {
  const cx_tensor *t = cx_program_tensor(p, name);
  if (!t) return *s = cx_fail(CX_ERR_ARG, "no %s", name), NULL;
  float *h = malloc(cx_tensor_nbytes(t));
  if (*s == CX_OK) *s = cx_program_read(p, t, h);
  return h;
}

/* Two training steps (the running statistics accumulate); dY is `copies` copies of one. */
static cx_status run(int copies, const cx_replicas *r, result *out) {
  cx_graph *g = graph(copies);
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  cx_program_set_replicas(p, r);
  out->channels_last = cx_program_channels_last_count(p);
  const cx_tensor *gy = cx_program_tensor(p, "y@grad");
  int64_t per = (int64_t)N * C * H * W;
  float *dy = malloc(sizeof(float) * (size_t)(per * copies));
  for (int k = 0; k < copies; k++) fill(dy + k * per, per, 17, -1, 1);
  s = gy ? cx_program_write(p, gy, dy) : cx_fail(CX_ERR_ARG, "no y@grad");
  free(dy);
  for (int step = 0; step < 2 && s == CX_OK; step++) {
    s = cx_program_forward(p);
    if (s == CX_OK) s = cx_program_backward(p);
  }
  out->y = read(p, "y", &s), out->dx = read(p, "X@grad", &s), out->dw = read(p, "W@grad", &s);
  out->dscale = read(p, "scale@grad", &s), out->db = read(p, "B@grad", &s);
  out->rm = read(p, "running_mean", &s), out->rv = read(p, "running_var", &s);
  cx_program_free(p);
  return s;
}

static void drop(result *r) {
  free(r->y), free(r->dx), free(r->dw), free(r->dscale), free(r->db), free(r->rm), free(r->rv);
}

/* max |k * a - b| / max |b| over n values */
static double rel(const float *a, const float *b, int64_t n, double k) {
  double big = 0, diff = 0;
  for (int64_t i = 0; i < n; i++) {
    big = fmax(big, fabs(b[i]));
    diff = fmax(diff, fabs(k * a[i] - b[i]));
  }
  return big > 0 ? diff / big : diff;
}

static int twin_case(const char *layout) {
  cx_replicas twins = {.count = 2, .reduce = twin_reduce, .sync_batch_stats = true};
  result a = {0}, b = {0};
  cx_status s = run(1, &twins, &a);
  if (s == CX_OK) s = run(2, NULL, &b);
  if (s != CX_OK) {
    printf("FAIL sync bn twins (%s): %s\n", layout, cx_last_error());
    return drop(&a), drop(&b), 1;
  }
  /* the whole batch's parameter gradients are the sums over both copies: twice this replica's */
  double e[] = {rel(a.y, b.y, (int64_t)N * C * H * W, 1), rel(a.dx, b.dx, (int64_t)N * CIN * H * W, 1),
                rel(a.dw, b.dw, C * CIN, 2), rel(a.dscale, b.dscale, C, 2),
                rel(a.db, b.db, C, 2), rel(a.rm, b.rm, C, 1), rel(a.rv, b.rv, C, 1)};
  static const char *const what[] = {"Y", "dX", "dW", "dScale", "dB", "running_mean",
                                     "running_var"};
  int f = 0;
  for (int i = 0; i < 7; i++) {
    bool bad = !(e[i] <= 1e-5);
    printf("%s sync bn twins (%s, %d channels-last values) vs batch [X; X]: %s differs by %.2e "
           "(tol 1e-05)\n", bad ? "FAIL" : "ok  ", layout, a.channels_last, what[i], e[i]);
    f += bad;
  }
  drop(&a), drop(&b);
  return f;
}

static int same_case(const char *layout) {
  cx_replicas same = {.count = 2, .reduce = same_reduce, .sync_batch_stats = true};
  result a = {0}, b = {0};
  cx_status s = run(1, &same, &a);
  if (s == CX_OK) s = run(1, NULL, &b);
  if (s != CX_OK) {
    printf("FAIL sync bn identity (%s): %s\n", layout, cx_last_error());
    return drop(&a), drop(&b), 1;
  }
  size_t bytes[] = {sizeof(float) * N * C * H * W, sizeof(float) * N * CIN * H * W,
                    sizeof(float) * C * CIN, sizeof(float) * C, sizeof(float) * C,
                    sizeof(float) * C, sizeof(float) * C};
  const float *pa[] = {a.y, a.dx, a.dw, a.dscale, a.db, a.rm, a.rv};
  const float *pb[] = {b.y, b.dx, b.dw, b.dscale, b.db, b.rm, b.rv};
  bool same_bits = true;
  for (int i = 0; i < 7; i++) same_bits &= memcmp(pa[i], pb[i], bytes[i]) == 0;
  printf("%s sync bn with sums left alone (%s) equals no replicas bit for bit\n",
         same_bits ? "ok  " : "FAIL", layout);
  drop(&a), drop(&b);
  return !same_bits;
}

int main(void) {
  int f = twin_case("default layout") + same_case("default layout");
  setenv("CX_LAYOUT", "plain", 1);
  f += twin_case("plain") + same_case("plain");
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
