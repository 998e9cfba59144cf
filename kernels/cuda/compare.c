/* CUDA kernels of the compare family: Equal, Less, Greater, LessOrEqual, GreaterOrEqual (f32, s32
 * or s64 operands of one type, numpy broadcasting, bool out), Not and Cast between f32, u8, s8,
 * s32, s64 and bool, as kernels/cpu/compare.c computes them (plain layouts only). */

#include "../../core/op.h"
#include "../../core/ops/compare.h"
#include "compare_launch.h"
#include "cuda.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

/* The launchers' type code of t; -1 for a type none of these ops takes. */
static int cu_type(cx_dtype t) {
  switch (t) {
  case CX_F32: return CX_CU_T_F32;
  case CX_U8: return CX_CU_T_U8;
  case CX_S8: return CX_CU_T_S8;
  case CX_S32: return CX_CU_T_S32;
  case CX_S64: return CX_CU_T_S64;
  case CX_BOOL: return CX_CU_T_BOOL;
  default: return -1;
  }
}

static cx_status run_compare(const cx_kernel_args *a, int op) {
  const cx_tensor *x = &a->in[0], *z = &a->in[1];
  const cx_shape *ys = &a->out[0].shape;
  int t = cu_type(x->dtype);
  if (x->dtype != z->dtype || (t != CX_CU_T_F32 && t != CX_CU_T_S32 && t != CX_CU_T_S64))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): inputs are %s and %s; expected two f32, "
                   "s64 or s32 tensors of one type", a->node->name, a->node->op->name,
                   cx_dtype_name(x->dtype), cx_dtype_name(z->dtype));
  CX_CUDA(cx_cu_compare(op, t, a->out[0].data, ys->d, ys->ndim, x->data, x->shape.d,
                        x->shape.ndim, z->data, z->shape.d, z->shape.ndim, stream_of(a)));
  return CX_OK;
}

static cx_status run_equal(const cx_kernel_args *a) { return run_compare(a, CX_CU_EQ); }
static cx_status run_less(const cx_kernel_args *a) { return run_compare(a, CX_CU_LT); }
static cx_status run_greater(const cx_kernel_args *a) { return run_compare(a, CX_CU_GT); }
static cx_status run_less_equal(const cx_kernel_args *a) { return run_compare(a, CX_CU_LE); }
static cx_status run_greater_equal(const cx_kernel_args *a) { return run_compare(a, CX_CU_GE); }

static cx_status run_not(const cx_kernel_args *a) {
  CX_CUDA(cx_cu_not(a->out[0].data, a->in[0].data, cx_tensor_numel(&a->out[0]), stream_of(a)));
  return CX_OK;
}

/* Every pair of f32, u8, s8, s32, s64 and bool (the CPU's; the conversions are described in
 * compare_kernels.cu); one type to itself is a copy of the bytes. */
static cx_status run_cast(const cx_kernel_args *a) {
  cx_dtype to = CX_F32, from = a->in[0].dtype;
  CX_TRY(cx_cast_target(a->node, &to));
  int tf = cu_type(from), tt = cu_type(to);
  if (tf < 0 || tt < 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Cast): %s to %s is not a cast the engine does",
                   a->node->name, cx_dtype_name(from), cx_dtype_name(to));
  if (from == to) {
    size_t bytes = cx_tensor_nbytes(&a->out[0]);
    if (bytes && a->out[0].data != a->in[0].data)
      CX_CUDA(cudaMemcpyAsync(a->out[0].data, a->in[0].data, bytes, cudaMemcpyDeviceToDevice,
                              stream_of(a)));
    return CX_OK;
  }
  CX_CUDA(cx_cu_cast(a->out[0].data, tt, a->in[0].data, tf, cx_tensor_numel(&a->out[0]),
                     stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_compare[] = {
    {"Equal", NULL, run_equal, NULL, 0, NULL, 0},
    {"Less", NULL, run_less, NULL, 0, NULL, 0},
    {"Greater", NULL, run_greater, NULL, 0, NULL, 0},
    {"LessOrEqual", NULL, run_less_equal, NULL, 0, NULL, 0},
    {"GreaterOrEqual", NULL, run_greater_equal, NULL, 0, NULL, 0},
    {"Not", NULL, run_not, NULL, 0, NULL, 0},
    {"Cast", NULL, run_cast, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
