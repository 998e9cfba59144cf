/* Softmax, LogSoftmax and their gradient ops on the GPU (kernels/cpu/reduce.c's semantics). */
#include "../../core/op.h"
#include "cuda.h"
#include "softmax_launch.h"

static cx_status run_kind(const cx_kernel_args *a, int kind) {
  bool grad = kind >= 2;
  const cx_tensor *xt = &a->in[grad ? 1 : 0];
  int axis = 0;
  CX_TRY(cx_axis_normalize(a->node, cx_node_int(a->node, "axis", -1), xt->shape.ndim, &axis));
  int64_t outer = 1, n = xt->shape.d[axis], inner = 1;
  for (int i = 0; i < axis; i++) outer *= xt->shape.d[i];
  for (int i = axis + 1; i < xt->shape.ndim; i++) inner *= xt->shape.d[i];
  CX_CUDA(cx_cuda_softmax_like(kind, cx_cuda_f32(&a->out[0]), cx_cuda_f32(xt),
                               grad ? cx_cuda_f32(&a->in[0]) : NULL, outer, n, inner,
                               cx_cuda_stream(a->stream)->s));
  return CX_OK;
}

static cx_status run_softmax(const cx_kernel_args *a) { return run_kind(a, 0); }
static cx_status run_log_softmax(const cx_kernel_args *a) { return run_kind(a, 1); }
static cx_status run_softmax_grad(const cx_kernel_args *a) { return run_kind(a, 2); }
static cx_status run_log_softmax_grad(const cx_kernel_args *a) { return run_kind(a, 3); }

const cx_kernel cx_cuda_softmax[] = {
    {.op = "Softmax", .run = run_softmax},
    {.op = "LogSoftmax", .run = run_log_softmax},
    {.op = "SoftmaxGrad", .run = run_softmax_grad},
    {.op = "LogSoftmaxGrad", .run = run_log_softmax_grad},
    {.op = NULL},
};
