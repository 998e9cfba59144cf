/* Synchronised BatchNorm in the CPU kernels (BatchNormTrain / BatchNormGrad with
 * cx_kernel_args.sync_stats, docs/distributed.md), without MPI: the replicas are simulated.
 *   - two replicas in two threads, each with half of a batch, pooling through a reduction that
 *     adds the other's sums: Y = Conv(Relu(BN(Conv(X)))) on each half must equal the same graph
 *     on the whole batch without replicas (Y, dX, the running statistics), and the replicas'
 *     parameter gradients (each its own sums) must add up to the whole batch's;
 *   - replicas whose reduction leaves the sums as they are must give the results of no replicas
 *     bit for bit: the synchronised path does the local path's arithmetic.
 * On channels-last activations (the default layout), without the fused Relu (CX_FUSE=off), and
 * on plain activations (CX_LAYOUT=plain). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

enum { N = 3, CIN = 2, C = 5, H = 6, W = 7 };

/* Two replicas in two threads: each reduction waits for the other's sums and adds them, in the
 * same order on both (as MPI_Allreduce gives every rank the same result). */
typedef struct pair {
  pthread_barrier_t bar;
  double *slot[2];
} pair;

typedef struct side {
  pair *p;
  int me;
} side;

static cx_status pair_reduce(void *user, double *buf, int64_t n, cx_reduce_op op) {
  side *s = user;
  pair *p = s->p;
  double *sum = malloc(sizeof(double) * (size_t)(n + 1));
  if (!sum || op != CX_REDUCE_SUM) return free(sum), cx_fail(CX_ERR_ARG, "pair_reduce");
  p->slot[s->me] = buf;
  pthread_barrier_wait(&p->bar);
  for (int64_t i = 0; i < n; i++) sum[i] = p->slot[0][i] + p->slot[1][i];
  pthread_barrier_wait(&p->bar); /* both have read both before either writes */
  memcpy(buf, sum, sizeof(double) * (size_t)n);
  free(sum);
  return CX_OK;
}

static cx_status same_reduce(void *user, double *buf, int64_t n, cx_reduce_op op) {
  (void)user, (void)buf, (void)n, (void)op;
  return CX_OK;
}

/* Element i of images [first, first + count): the same numbers whichever batch holds them. */
static void fill(float *p, int64_t first, int64_t count, int64_t per, uint64_t seed, float lo,
                 float hi) {
  for (int64_t i = 0; i < count * per; i++)
    p[i] = lo + (hi - lo) * cx_rng_uniform(seed, (uint64_t)(first * per + i));
}

/* X (images [first, first + b) of the data) -> Conv 1x1 -> BatchNormalization -> Relu -> Conv
 * 1x1 -> Y: BatchNorm's input and output are activations between convolutions, which the layout
 * pass makes channels-last (graph inputs and outputs stay plain); the Relu is fused into it. */
static cx_graph *graph(int64_t first, int64_t b) {
  cx_graph *g = cx_graph_new();
  float *x = malloc(sizeof(float) * (size_t)(b * CIN * H * W));
  fill(x, first, b, CIN * H * W, 11, -2, 3);
  int xv = cx_graph_init(g, CX_VALUE_PARAM, "X", CX_F32, &S(b, CIN, H, W), x);
  free(x);
  int wv = oc_param(g, "W", &S(C, CIN, 1, 1), -1, 1, 12);
  int h = cx_graph_op(g, "Conv", "conv", (int[]){xv, wv}, 2);
  float m[C], v[C];
  fill(m, 0, 1, C, 13, -0.5f, 0.5f), fill(v, 0, 1, C, 14, 0.5f, 1.5f);
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

/* One replica's run: images [first, first + b), two training steps (the running statistics
 * accumulate). */
typedef struct job {
  int64_t first, b;
  cx_replicas r;
  cx_program *p;
  cx_status s;
  result out;
} job;

static cx_status compile(job *j) {
  cx_graph *g = graph(j->first, j->b);
  cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &j->p);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  cx_program_set_replicas(j->p, j->r.count ? &j->r : NULL);
  j->out.channels_last = cx_program_channels_last_count(j->p);
  const cx_tensor *gy = cx_program_tensor(j->p, "y@grad");
  float *dy = malloc(sizeof(float) * (size_t)(j->b * C * H * W));
  fill(dy, j->first, j->b, C * H * W, 17, -1, 1);
  s = gy ? cx_program_write(j->p, gy, dy) : cx_fail(CX_ERR_ARG, "no y@grad");
  free(dy);
  return s;
}

static void *execute(void *arg) {
  job *j = arg;
  cx_status s = CX_OK;
  for (int step = 0; step < 2 && s == CX_OK; step++) {
    s = cx_program_forward(j->p);
    if (s == CX_OK) s = cx_program_backward(j->p);
  }
  result *o = &j->out;
  o->y = read(j->p, "y", &s), o->dx = read(j->p, "X@grad", &s), o->dw = read(j->p, "W@grad", &s);
  o->dscale = read(j->p, "scale@grad", &s), o->db = read(j->p, "B@grad", &s);
  o->rm = read(j->p, "running_mean", &s), o->rv = read(j->p, "running_var", &s);
  j->s = s;
  return NULL;
}

static void drop(job *j) {
  result *r = &j->out;
  free(r->y), free(r->dx), free(r->dw), free(r->dscale), free(r->db), free(r->rm), free(r->rv);
  cx_program_free(j->p);
}

/* max |a + b - w| / max |w| over n values (b NULL: a alone) */
static double rel(const float *a, const float *b, const float *w, int64_t n) {
  double big = 0, diff = 0;
  for (int64_t i = 0; i < n; i++) {
    big = fmax(big, fabs(w[i]));
    diff = fmax(diff, fabs((double)a[i] + (b ? b[i] : 0) - w[i]));
  }
  return big > 0 ? diff / big : diff;
}

/* Replicas 0 and 1 hold images [0, N) and [N, 2N); one program without replicas holds all 2N:
 * each replica's Y and dX are its half of the whole's, the parameter gradients (each replica's
 * own sums) add up to the whole's, the running statistics are the whole's on both. */
static int pair_case(const char *layout) {
  pair pr;
  pthread_barrier_init(&pr.bar, NULL, 2);
  side sd[2] = {{&pr, 0}, {&pr, 1}};
  job j[3] = {{.first = 0, .b = N}, {.first = N, .b = N}, {.first = 0, .b = 2 * N}};
  for (int k = 0; k < 2; k++)
    j[k].r = (cx_replicas){.count = 2, .reduce = pair_reduce, .user = &sd[k],
                           .sync_batch_stats = true};
  cx_status s = CX_OK;
  for (int k = 0; k < 3 && s == CX_OK; k++) s = compile(&j[k]);
  pthread_t t[2];
  if (s == CX_OK) {
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, execute, &j[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    execute(&j[2]);
    s = j[0].s != CX_OK ? j[0].s : j[1].s != CX_OK ? j[1].s : j[2].s;
  }
  pthread_barrier_destroy(&pr.bar);
  if (s != CX_OK) {
    printf("FAIL sync bn pair (%s): %s\n", layout, cx_last_error());
    for (int k = 0; k < 3; k++) drop(&j[k]);
    return 1;
  }
  const result *a = &j[0].out, *b = &j[1].out, *w = &j[2].out;
  int64_t ny = (int64_t)N * C * H * W, nx = (int64_t)N * CIN * H * W;
  double e[] = {fmax(rel(a->y, NULL, w->y, ny), rel(b->y, NULL, w->y + ny, ny)),
                fmax(rel(a->dx, NULL, w->dx, nx), rel(b->dx, NULL, w->dx + nx, nx)),
                rel(a->dw, b->dw, w->dw, C * CIN), rel(a->dscale, b->dscale, w->dscale, C),
                rel(a->db, b->db, w->db, C),
                fmax(rel(a->rm, NULL, w->rm, C), rel(b->rm, NULL, w->rm, C)),
                fmax(rel(a->rv, NULL, w->rv, C), rel(b->rv, NULL, w->rv, C))};
  static const char *const what[] = {"Y", "dX", "dW", "dScale", "dB", "running_mean",
                                     "running_var"};
  int f = 0;
  for (int i = 0; i < 7; i++) {
    bool bad = !(e[i] <= 1e-5);
    printf("%s sync bn pair (%s, %d channels-last values) vs one batch of both: %s differs by "
           "%.2e (tol 1e-05)\n", bad ? "FAIL" : "ok  ", layout, a->channels_last, what[i], e[i]);
    f += bad;
  }
  for (int k = 0; k < 3; k++) drop(&j[k]);
  return f;
}

/* Replicas whose reduction leaves the sums as they are: the synchronised path must compute what
 * the local one does, bit for bit. */
static int same_case(const char *layout) {
  job j[2] = {{.first = 0, .b = N, .r = {.count = 2, .reduce = same_reduce,
                                          .sync_batch_stats = true}},
              {.first = 0, .b = N}};
  cx_status s = CX_OK;
  for (int k = 0; k < 2 && s == CX_OK; k++) {
    s = compile(&j[k]);
    if (s == CX_OK) execute(&j[k]), s = j[k].s;
  }
  if (s != CX_OK) {
    printf("FAIL sync bn identity (%s): %s\n", layout, cx_last_error());
    return drop(&j[0]), drop(&j[1]), 1;
  }
  size_t bytes[] = {sizeof(float) * N * C * H * W, sizeof(float) * N * CIN * H * W,
                    sizeof(float) * C * CIN, sizeof(float) * C, sizeof(float) * C,
                    sizeof(float) * C, sizeof(float) * C};
  const result *a = &j[0].out, *b = &j[1].out;
  const float *pa[] = {a->y, a->dx, a->dw, a->dscale, a->db, a->rm, a->rv};
  const float *pb[] = {b->y, b->dx, b->dw, b->dscale, b->db, b->rm, b->rv};
  bool same_bits = true;
  for (int i = 0; i < 7; i++) same_bits &= memcmp(pa[i], pb[i], bytes[i]) == 0;
  printf("%s sync bn with sums left alone (%s) equals no replicas bit for bit\n",
         same_bits ? "ok  " : "FAIL", layout);
  drop(&j[0]), drop(&j[1]);
  return !same_bits;
}

int main(void) {
  int f = pair_case("default layout") + same_case("default layout");
  setenv("CX_FUSE", "off", 1); /* the Relu apart: BatchNorm without a fused activation */
  f += pair_case("unfused") + same_case("unfused");
  unsetenv("CX_FUSE");
  setenv("CX_LAYOUT", "plain", 1);
  f += pair_case("plain") + same_case("plain");
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
