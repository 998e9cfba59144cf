/* CUDA kernels of the select family: Pow, PowGrad and Where with numpy broadcasting, as
 * kernels/cpu/select.c computes them (plain layouts only; f32 values, a bool condition: shape
 * inference checked the dtypes and that the operands broadcast to the output). */

#include "cuda.h"
#include "select_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static cx_cu_operand operand(const cx_tensor *t) {
  return (cx_cu_operand){t->data, t->shape.d, t->shape.ndim};
}

static cx_status run_pow(const cx_kernel_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  CX_CUDA(cx_cu_pow(cx_cuda_f32(&a->out[0]), ys->d, ys->ndim, operand(&a->in[0]),
                    operand(&a->in[1]), stream_of(a)));
  return CX_OK;
}

/* PowGrad(dY, X, E) = dY * E * X^(E - 1) at the output's shape (the broadcast of the three) */
static cx_status run_pow_grad(const cx_kernel_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  CX_CUDA(cx_cu_pow_grad(cx_cuda_f32(&a->out[0]), ys->d, ys->ndim, operand(&a->in[0]),
                         operand(&a->in[1]), operand(&a->in[2]), stream_of(a)));
  return CX_OK;
}

static cx_status run_where(const cx_kernel_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  CX_CUDA(cx_cu_where(cx_cuda_f32(&a->out[0]), ys->d, ys->ndim, operand(&a->in[0]),
                      operand(&a->in[1]), operand(&a->in[2]), stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_select[] = {
    {"Pow", NULL, run_pow, NULL, 0, NULL, 0},
    {"PowGrad", NULL, run_pow_grad, NULL, 0, NULL, 0},
    {"Where", NULL, run_where, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
