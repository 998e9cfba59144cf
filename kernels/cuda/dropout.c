/* Dropout on the GPU: inference Dropout (a copy, and an all-kept mask when asked for),
 * DropoutTrain and DropoutGrad as kernels/cpu/shape.c computes them, with the same masks: the
 * stream key is made here on the host by core/rng.c, the draws on the device by a copy of its
 * Philox function (dropout_kernels.cu). */
#include "../../core/rng.h"
#include "cuda.h"
#include "dropout_launch.h"

/* the ratio input (a device scalar) when given, else NULL and the attribute */
static const float *ratio_input(const cx_kernel_args *a, int i) {
  return a->n_in > i && a->in[i].data ? cx_cuda_f32(&a->in[i]) : NULL;
}

static float ratio_attr(const cx_kernel_args *a) { return cx_node_float(a->node, "ratio", 0.5f); }

static cx_status run_dropout(const cx_kernel_args *a) {
  cudaStream_t st = cx_cuda_stream(a->stream)->s;
  size_t bytes = cx_tensor_nbytes(&a->out[0]);
  if (a->out[0].data != a->in[0].data && bytes)
    CX_CUDA(cudaMemcpyAsync(a->out[0].data, a->in[0].data, bytes, cudaMemcpyDeviceToDevice, st));
  /* the mask is bool: every byte 1, all kept */
  if (a->n_out > 1 && a->out[1].data && cx_tensor_nbytes(&a->out[1]))
    CX_CUDA(cudaMemsetAsync(a->out[1].data, 1, cx_tensor_nbytes(&a->out[1]), st));
  return CX_OK;
}

/* (X[, ratio[, training_mode]]) -> (Y, mask) */
static cx_status run_dropout_train(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  int64_t n = cx_tensor_numel(x), row = x->shape.ndim && n ? n / x->shape.d[0] : 1;
  if (!n) return CX_OK;
  uint64_t key = cx_rng_key(a->seed, a->step, (uint64_t)a->node_index);
  cx_cuda_dropout_train(cx_cuda_f32(x), cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->out[1]), n, row,
                        a->rows.first, a->rows.stride, key, ratio_input(a, 1), ratio_attr(a),
                        cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

/* (dY, mask[, ratio]) -> dX */
static cx_status run_dropout_grad(const cx_kernel_args *a) {
  int64_t n = cx_tensor_numel(&a->in[0]);
  if (!n) return CX_OK;
  cx_cuda_dropout_grad(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->out[0]), n,
                       ratio_input(a, 2), ratio_attr(a), cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

const cx_kernel cx_cuda_dropout[] = {
    {"Dropout", NULL, run_dropout, NULL, 0, NULL, 0},
    {"DropoutTrain", NULL, run_dropout_train, NULL, 0, NULL, 0},
    {"DropoutGrad", NULL, run_dropout_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
