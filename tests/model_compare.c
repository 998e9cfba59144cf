#include "model_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/rng.h"
#include "../kernels/cpu/cpu.h"
#include "../models/zoo.h"
#include "op_check.h"

static void fill(cx_tensor *t, uint64_t key) {
  float *x = t->data;
  for (int64_t i = 0; i < cx_tensor_numel(t); i++) x[i] = cx_rng_normal(key, (uint64_t)i);
}

static double max_abs(const cx_tensor *t) {
  const float *x = t->data;
  double m = 0;
  for (int64_t i = 0; i < cx_tensor_numel(t); i++) m = fmax(m, fabs((double)x[i]));
  return m;
}

/* max|a - b| / max(max|b|, floor) */
static double rel_err(const cx_tensor *a, const cx_tensor *b, double floor) {
  const float *x = a->data, *y = b->data;
  double d = 0;
  for (int64_t i = 0; i < cx_tensor_numel(b); i++) d = fmax(d, fabs((double)x[i] - y[i]));
  return d / fmax(max_abs(b), floor);
}

static cx_graph *with_loss(const char *spec, bool train) {
  cx_graph *g = NULL;
  if (cx_model_build(spec, &g, NULL) != CX_OK) {
    printf("FAIL %s: %s\n", spec, cx_last_error());
    return NULL;
  }
  if (train) {
    int labels = cx_graph_input(g, "labels", CX_S64, &S(-1));
    int loss = cx_graph_op(g, "SoftmaxCrossEntropyLoss", "loss",
                           (int[]){cx_graph_find_value(g, "logits"), labels}, 2);
    cx_graph_mark_output(g, loss);
  }
  return g;
}

cx_program *mc_run(const char *spec, bool train, const char *env, const char *value,
                   int64_t batch) {
  return mc_run_as(spec, train, env, value, batch, CX_PRECISION_F32);
}

cx_program *mc_run_as(const char *spec, bool train, const char *env, const char *value,
                      int64_t batch, cx_precision precision) {
  cx_graph *g = with_loss(spec, train);
  if (!g) return NULL;
  cx_program *p = NULL;
  if (env) setenv(env, value, 1);
  cx_compile_opts o = {.batch = batch, .training = train, .loss = train ? "loss" : NULL,
                       .backend = cx_backend_cpu(), .seed = 3, .precision = precision};
  cx_status s = cx_program_compile(g, &o, &p);
  if (env) unsetenv(env);
  cx_graph_free(g);
  if (s != CX_OK) {
    printf("FAIL %s: compile: %s\n", spec, cx_last_error());
    return NULL;
  }
  fill(cx_program_tensor(p, "input"), 21);
  if (train) {
    int64_t *y = cx_program_tensor(p, "labels")->data;
    for (int64_t i = 0; i < batch; i++) y[i] = i % 10;
  }
  s = cx_program_forward(p);
  if (s == CX_OK && train) s = cx_program_backward(p);
  if (s != CX_OK) {
    printf("FAIL %s: step: %s\n", spec, cx_last_error());
    cx_program_free(p);
    return NULL;
  }
  return p;
}

int mc_compare_training(const char *spec, cx_program *a, cx_program *b, double tol) {
  double e = rel_err(cx_program_tensor(a, "loss"), cx_program_tensor(b, "loss"), 1e-12);
  /* The bias gradient of a BN whose output feeds a convolution and another BN is zero in exact
   * arithmetic (BN's dX sums to zero per channel), so it is rounding noise on both sides:
   * errors are relative to the tensor's largest gradient, at least 1e-3 of the model's. */
  double floor = 0, worst = 0;
  const char *worst_name = "";
  for (int k = 0; k < cx_program_param_count(b); k++)
    floor = fmax(floor, 1e-3 * max_abs(cx_program_param_grad(b, k)));
  for (int k = 0; k < cx_program_param_count(b); k++) {
    double ek = rel_err(cx_program_param_grad(a, k), cx_program_param_grad(b, k), floor);
    if (ek > worst) worst = ek, worst_name = cx_program_param_name(a, k);
  }
  bool bad = !(e <= tol) || !(worst <= tol);
  printf("%s %s: loss error %.2e, worst gradient error %.2e (%s), tolerance %.0e\n",
         bad ? "FAIL" : "ok  ", spec, e, worst, worst_name, tol);
  return bad;
}

int mc_compare_inference(const char *spec, cx_program *a, cx_program *b, double tol) {
  double e = rel_err(cx_program_tensor(a, "logits"), cx_program_tensor(b, "logits"), 1e-12);
  bool bad = !(e <= tol);
  printf("%s %s: inference logits error %.2e, tolerance %.0e\n", bad ? "FAIL" : "ok  ", spec, e,
         tol);
  return bad;
}
