/* CPU kernels of the training-step ops (core/ops/optim.c): the optimizer updates (the loops in
 * optim_sgd.c, optim_adamw.c, optim_lamb.c), the weight average, and the two gradient scans.
 * The loops are the ones train/ ran on host memory before they became ops, unchanged, so
 * results are the same bits. */

#include <stdbool.h>

#include "cpu.h"
#include "optim_impl.h"

static cx_optim_hyper hyper_of(const cx_node *n) {
  return (cx_optim_hyper){.momentum = cx_node_float(n, "momentum", 0),
                          .nesterov = cx_node_int(n, "nesterov", 0) != 0,
                          .beta1 = cx_node_float(n, "beta1", 0.9f),
                          .beta2 = cx_node_float(n, "beta2", 0.999f),
                          .eps = cx_node_float(n, "epsilon", 1e-8f),
                          .always_adapt = cx_node_int(n, "always_adapt", 0) != 0};
}

/* X, G and the state inputs from x on. */
static cx_optim_slot slot_of(const cx_kernel_args *a, int x) {
  cx_optim_slot s = {.w = cx_f32(&a->in[x]), .g = cx_f32(&a->in[x + 1]),
                     .n = cx_tensor_numel(&a->in[x]),
                     .wd = cx_node_float(a->node, "weight_decay", 0)};
  for (int j = 0; j < 2 && x + 2 + j < a->n_in; j++) s.s[j] = cx_f32(&a->in[x + 2 + j]);
  return s;
}

static cx_status run_sgd(const cx_kernel_args *a) {
  const cx_optim_hyper h = hyper_of(a->node);
  const cx_optim_slot s = slot_of(a, 1);
  cx_optim_sgd_update(&h, &s, *cx_f32(&a->in[0]));
  return CX_OK;
}

static int64_t step_of(const cx_kernel_args *a) { return *(const int64_t *)a->in[1].data; }

static cx_status run_adamw(const cx_kernel_args *a) {
  const cx_optim_hyper h = hyper_of(a->node);
  const cx_optim_slot s = slot_of(a, 2);
  cx_optim_adamw_update(&h, &s, *cx_f32(&a->in[0]), step_of(a));
  return CX_OK;
}

static cx_status run_lamb(const cx_kernel_args *a) {
  const cx_optim_hyper h = hyper_of(a->node);
  const cx_optim_slot s = slot_of(a, 2);
  cx_optim_lamb_update(&h, &s, *cx_f32(&a->in[0]), step_of(a));
  return CX_OK;
}

/* avg = d * avg + (1 - d) * x */
static cx_status run_ema(const cx_kernel_args *a) {
  const float d = *cx_f32(&a->in[0]), w = (float)(1.0 - d);
  float *avg = cx_f32(&a->in[1]);
  const float *x = cx_f32(&a->in[2]);
  const int64_t m = cx_tensor_numel(&a->in[1]);
#pragma omp parallel for simd if (m >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t j = 0; j < m; j++) avg[j] = d * avg[j] + w * x[j];
  return CX_OK;
}

static cx_status run_sq_norm(const cx_kernel_args *a) {
  const float *g = cx_f32(&a->in[0]);
  const int64_t n = cx_tensor_numel(&a->in[0]);
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
  *(double *)a->out[0].data = s;
  return CX_OK;
}

/* x * 0 is 0 for finite x and NaN for inf or NaN, so the sum says whether any was not finite,
 * in a loop that vectorises with no branch. */
static cx_status run_finite(const cx_kernel_args *a) {
  const float *g = cx_f32(&a->in[0]);
  const int64_t n = cx_tensor_numel(&a->in[0]);
  float z = 0;
#pragma omp parallel for simd reduction(+ : z) if (n >= CX_OPTIM_PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) z += g[i] * 0.0f;
  *(bool *)a->out[0].data = z == 0;
  return CX_OK;
}

const cx_kernel cx_cpu_optim[] = {
    {.op = "SGDUpdate", .run = run_sgd},
    {.op = "AdamWUpdate", .run = run_adamw},
    {.op = "LAMBUpdate", .run = run_lamb},
    {.op = "EMAUpdate", .run = run_ema},
    {.op = "SquaredNorm", .run = run_sq_norm},
    {.op = "AllFinite", .run = run_finite},
    {.op = NULL},
};
