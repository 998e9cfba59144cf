/* The training-step ops (core/ops/optim.c) on the GPU, as kernels/cpu/optim.c: the optimizer
 * updates in place, the weight average, and the two gradient scans. The learning rate, the step
 * counter and the EMA decay are device scalars, read by the kernels, so nothing here waits for
 * the device. */
#include "cuda.h"
#include "optim_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static float wd_of(const cx_kernel_args *a) { return cx_node_float(a->node, "weight_decay", 0); }

/* SGDUpdate(R, X, G[, M]): without momentum the buffer, if any, is left alone, as on the CPU */
static cx_status run_sgd(const cx_kernel_args *a) {
  float mu = cx_node_float(a->node, "momentum", 0);
  float *m = mu != 0 && a->n_in > 3 ? cx_cuda_f32(&a->in[3]) : NULL;
  if (mu != 0 && !m)
    return cx_fail(CX_ERR_ARG, "node '%s' (SGDUpdate): momentum needs a buffer", a->node->name);
  int64_t n = cx_tensor_numel(&a->in[1]);
  if (!n) return CX_OK;
  cx_cuda_sgd(cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->in[2]), m, n, cx_cuda_f32(&a->in[0]),
              wd_of(a), mu, cx_node_int(a->node, "nesterov", 0) != 0, stream_of(a));
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static float beta1_of(const cx_node *n) { return cx_node_float(n, "beta1", 0.9f); }
static float beta2_of(const cx_node *n) { return cx_node_float(n, "beta2", 0.999f); }
static float eps_of(const cx_node *n) { return cx_node_float(n, "epsilon", 1e-8f); }

/* AdamWUpdate(R, T, X, G, M, V) */
static cx_status run_adamw(const cx_kernel_args *a) {
  int64_t n = cx_tensor_numel(&a->in[2]);
  if (!n) return CX_OK;
  cx_cuda_adamw(cx_cuda_f32(&a->in[2]), cx_cuda_f32(&a->in[3]), cx_cuda_f32(&a->in[4]),
                cx_cuda_f32(&a->in[5]), n, cx_cuda_f32(&a->in[0]),
                (const int64_t *)a->in[1].data, wd_of(a), beta1_of(a->node), beta2_of(a->node),
                eps_of(a->node), stream_of(a));
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* the trust ratio's two norms, in partial sums, and the step */
static cx_status prepare_lamb(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)state;
  *scratch = (2 * (size_t)cx_cuda_optim_parts(cx_tensor_numel(&a->in[2])) + 1) * sizeof(double);
  return CX_OK;
}

/* LAMBUpdate(R, T, X, G, M, V) */
static cx_status run_lamb(const cx_kernel_args *a) {
  int64_t n = cx_tensor_numel(&a->in[2]);
  if (!n) return CX_OK;
  cx_cuda_lamb(cx_cuda_f32(&a->in[2]), cx_cuda_f32(&a->in[3]), cx_cuda_f32(&a->in[4]),
               cx_cuda_f32(&a->in[5]), n, cx_cuda_f32(&a->in[0]),
               (const int64_t *)a->in[1].data, wd_of(a), beta1_of(a->node), beta2_of(a->node),
               eps_of(a->node), cx_node_int(a->node, "always_adapt", 0) != 0, a->scratch,
               stream_of(a));
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* EMAUpdate(D, A, X): A = D * A + (1 - D) * X */
static cx_status run_ema(const cx_kernel_args *a) {
  int64_t n = cx_tensor_numel(&a->in[1]);
  if (!n) return CX_OK;
  cx_cuda_ema(cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->in[2]), n, cx_cuda_f32(&a->in[0]),
              stream_of(a));
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static cx_status prepare_sq_norm(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)state;
  *scratch = (size_t)cx_cuda_optim_parts(cx_tensor_numel(&a->in[0])) * sizeof(double);
  return CX_OK;
}

/* SquaredNorm(X) -> a device double */
static cx_status run_sq_norm(const cx_kernel_args *a) {
  cx_cuda_sq_norm(cx_cuda_f32(&a->in[0]), cx_tensor_numel(&a->in[0]), (double *)a->out[0].data,
                  a->scratch, stream_of(a));
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* AllFinite(X) -> a device bool: true, cleared by any inf or NaN */
static cx_status run_finite(const cx_kernel_args *a) {
  cudaStream_t st = stream_of(a);
  CX_CUDA(cudaMemsetAsync(a->out[0].data, 1, sizeof(bool), st));
  int64_t n = cx_tensor_numel(&a->in[0]);
  if (!n) return CX_OK;
  cx_cuda_all_finite(cx_cuda_f32(&a->in[0]), n, (bool *)a->out[0].data, st);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

const cx_kernel cx_cuda_optim[] = {
    {.op = "SGDUpdate", .run = run_sgd},
    {.op = "AdamWUpdate", .run = run_adamw},
    {.op = "LAMBUpdate", .prepare = prepare_lamb, .run = run_lamb},
    {.op = "EMAUpdate", .run = run_ema},
    {.op = "SquaredNorm", .prepare = prepare_sq_norm, .run = run_sq_norm},
    {.op = "AllFinite", .run = run_finite},
    {.op = NULL},
};
