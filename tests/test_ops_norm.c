/* BatchNormalization: inference with running statistics; training (BatchNormTrain) with batch
 * statistics, its gradient, and the update of the running statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

/* STATE running statistics: means in [-0.5, 0.5), variances in [0.5, 1.5). */
static void add_running_stats(cx_graph *g, int64_t c, uint64_t seed, int *mean, int *var) {
  float *m = malloc(sizeof(float) * (size_t)c), *v = malloc(sizeof(float) * (size_t)c);
  for (int64_t i = 0; i < c; i++) {
    m[i] = cx_rng_uniform(seed, (uint64_t)i) - 0.5f;
    v[i] = cx_rng_uniform(seed + 1, (uint64_t)i) + 0.5f;
  }
  *mean = cx_graph_init(g, CX_VALUE_STATE, "running_mean", CX_F32, &S(c), m);
  *var = cx_graph_init(g, CX_VALUE_STATE, "running_var", CX_F32, &S(c), v);
  free(m);
  free(v);
}

/* X (PARAM) -> BatchNormalization; eps/momentum < 0 keep the defaults. */
static cx_graph *bn_graph(const cx_shape *x, float eps, float momentum, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  int64_t c = x->d[1];
  int in[5];
  in[0] = oc_param(g, "X", x, -2, 3, seed);
  in[1] = oc_param(g, "scale", &S(c), 0.5f, 1.5f, seed + 1);
  in[2] = oc_param(g, "B", &S(c), -1, 1, seed + 2);
  add_running_stats(g, c, seed + 3, &in[3], &in[4]);
  int n = cx_graph_node(g, "BatchNormalization", "bn", in, 5, 1);
  if (eps >= 0) cx_node_set_float(g, n, "epsilon", eps);
  if (momentum >= 0) cx_node_set_float(g, n, "momentum", momentum);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  return g;
}

static int bn_case(const char *label, cx_shape x, bool train, float eps, uint64_t seed) {
  cx_graph *g = bn_graph(&x, eps, -1, seed);
  int f = oc_check(label, g, &(oc_opts){.grad = train, .seed = seed});
  cx_graph_free(g);
  return f;
}

/* g's training program at batch 1; NULL (g freed, the failure printed) when it does not compile. */
static cx_program *training_program(const char *label, cx_graph *g) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &co, &p) == CX_OK) return p;
  printf("FAIL %s: compile: %s\n", label, cx_last_error());
  cx_graph_free(g);
  return NULL;
}

/* After each training forward: running = running * m + batch * (1 - m), with the unbiased batch
 * variance, computed here in double from X. Two steps, to see that the update accumulates. */
static int running_stats_case(const char *label, cx_shape xs, float momentum, uint64_t seed) {
  cx_graph *g = bn_graph(&xs, -1, momentum, seed);
  cx_program *p = training_program(label, g);
  if (!p) return 1;
  int64_t n = xs.d[0], c = xs.d[1], s = cx_shape_numel(&xs) / (n * c);
  const float *x = cx_program_tensor(p, "X")->data;
  double *rm = malloc(sizeof(double) * (size_t)c), *rv = malloc(sizeof(double) * (size_t)c);
  for (int64_t k = 0; k < c; k++) {
    rm[k] = ((float *)g->values[cx_graph_find_value(g, "running_mean")].init)[k];
    rv[k] = ((float *)g->values[cx_graph_find_value(g, "running_var")].init)[k];
  }
  double m = (double)momentum, err = 0;
  cx_status st = CX_OK;
  for (int step = 0; step < 2 && st == CX_OK; step++) {
    st = cx_program_forward(p);
    for (int64_t k = 0; k < c; k++) {
      double sum = 0, sq = 0, cnt = (double)(n * s);
      for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < s; i++) sum += x[(b * c + k) * s + i];
      double mean = sum / cnt;
      for (int64_t b = 0; b < n; b++)
        for (int64_t i = 0; i < s; i++)
          sq += (x[(b * c + k) * s + i] - mean) * (x[(b * c + k) * s + i] - mean);
      rm[k] = rm[k] * m + mean * (1 - m);
      rv[k] = rv[k] * m + sq / (cnt - 1) * (1 - m);
    }
    const float *pm = cx_program_tensor(p, "running_mean")->data;
    const float *pv = cx_program_tensor(p, "running_var")->data;
    for (int64_t k = 0; k < c; k++)
      err = fmax(err, fmax(fabs(pm[k] - rm[k]), fabs(pv[k] - rv[k]) / fabs(rv[k])));
  }
  bool bad = st != CX_OK || !(err < 1e-5);
  if (st != CX_OK) printf("FAIL %s: %s\n", label, cx_last_error());
  else printf("%s %s: running statistics after 2 steps: error %.2e (tol 1e-05)\n",
              bad ? "FAIL" : "ok  ", label, err);
  free(rm);
  free(rv);
  cx_program_free(p);
  cx_graph_free(g);
  return bad;
}

/* A channel whose values are all equal (a dead ReLU's, say) has a batch variance of exactly 0:
 * quantization's fold tells constant channels by their running variance (cx_graph_fold_bn), so
 * rounding noise there would not do. Its running variance, set to 0 first, stays exactly 0. */
static int constant_channel_case(const char *label, cx_shape xs, uint64_t seed) {
  cx_graph *g = bn_graph(&xs, -1, 0.5f, seed);
  cx_program *p = training_program(label, g);
  if (!p) return 1;
  int64_t n = xs.d[0], c = xs.d[1], s = cx_shape_numel(&xs) / (n * c);
  float *x = cx_program_tensor(p, "X")->data, *rv = cx_program_tensor(p, "running_var")->data;
  for (int64_t b = 0; b < n; b++)
    for (int64_t i = 0; i < s; i++) x[(b * c + 1) * s + i] = 1234.567f;
  rv[1] = 0;
  cx_status st = cx_program_forward(p);
  bool bad = st != CX_OK || rv[1] != 0;
  printf("%s %s: running variance of a constant channel %.3g (exactly 0 wanted)%s%s\n",
         bad ? "FAIL" : "ok  ", label, (double)rv[1], st ? ": " : "", st ? cx_last_error() : "");
  cx_program_free(p);
  cx_graph_free(g);
  return bad;
}

/* Wrong channel count of scale: shape inference must say so. */
static int bad_shape_case(void) {
  cx_graph *g = cx_graph_new();
  int in[5] = {oc_param(g, "X", &S(2, 3, 4, 4), -1, 1, 1), oc_param(g, "scale", &S(4), 1, 2, 2),
               oc_param(g, "B", &S(3), 0, 1, 3)};
  add_running_stats(g, 3, 4, &in[3], &in[4]);
  cx_graph_mark_output(g, cx_graph_op(g, "BatchNormalization", "bn", in, 5));
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  bool ok = s == CX_ERR_SHAPE && strstr(cx_last_error(), "scale");
  printf("%s bn: wrong scale shape is rejected: %s\n", ok ? "ok  " : "FAIL",
         s == CX_OK ? "(compiled)" : cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = 0;
  /* inference: running statistics */
  f += bn_case("bn infer [2,3,5,7]", S(2, 3, 5, 7), false, -1, 10);
  f += bn_case("bn infer [1,5,4,4] eps 1e-3", S(1, 5, 4, 4), false, 1e-3f, 20);
  f += bn_case("bn infer [4,6] rank 2", S(4, 6), false, -1, 30);
  f += bn_case("bn infer [2,4,3,3,3] rank 5", S(2, 4, 3, 3, 3), false, -1, 40);
  /* training: batch statistics, gradients of X, scale and B */
  f += bn_case("bn train [2,3,5,7]", S(2, 3, 5, 7), true, -1, 50);
  f += bn_case("bn train batch 1 [1,5,3,4]", S(1, 5, 3, 4), true, -1, 60);
  f += bn_case("bn train [3,7,2,3] eps 0.1", S(3, 7, 2, 3), true, 0.1f, 70);
  f += bn_case("bn train [5,4] rank 2", S(5, 4), true, -1, 80);
  f += bn_case("bn train [2,3,9,11]", S(2, 3, 9, 11), true, -1, 90);
  /* one value per channel and image: the rows of norm_nhwc.c, C not a multiple of 16 */
  f += bn_case("bn infer [3,17,1,1] 1x1 maps", S(3, 17, 1, 1), false, -1, 120);
  f += bn_case("bn train [6,20,1,1] 1x1 maps", S(6, 20, 1, 1), true, -1, 130);
  f += running_stats_case("bn running stats [7,18,1,1] momentum 0.8", S(7, 18, 1, 1), 0.8f, 140);
  f += running_stats_case("bn running stats [2,3,5,7] momentum 0.9", S(2, 3, 5, 7), 0.9f, 100);
  f += running_stats_case("bn running stats [1,5,3,4] momentum 0.7", S(1, 5, 3, 4), 0.7f, 110);
  f += constant_channel_case("bn constant channel [4,3,5,5]", S(4, 3, 5, 5), 150);
  f += constant_channel_case("bn constant channel [6,20,1,1] 1x1 maps", S(6, 20, 1, 1), 160);
  f += bad_shape_case();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
