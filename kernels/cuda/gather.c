/* CUDA kernels of the gather family: Gather and GatherND (any dtype, s64 indices) and their
 * gradients GatherGrad and GatherNDGrad (f32), as kernels/cpu/gather.c computes them, with the
 * geometry of core/ops/gather.h (plain layouts only). The indices live on the device, so a bad
 * one cannot be refused as the CPU refuses it: gather_launch.h says what it gives instead (NaN in
 * floating outputs). */

#include "../../core/ops/gather.h"
#include "cuda.h"
#include "gather_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

/* What a read through an out-of-range index gives: a quiet NaN of a floating type (*fill_bad),
 * else zero bits (used only when the axis is empty; other reads clamp the index). */
static uint64_t bad_fill(cx_dtype t, bool *fill_bad) {
  *fill_bad = true;
  switch (t) {
  case CX_F32: return 0x7fc00000u;
  case CX_F16: return 0x7e00u;
  case CX_BF16: return 0x7fc0u;
  case CX_F64: return 0x7ff8000000000000ull;
  default: *fill_bad = false; return 0;
  }
}

static cx_status run_gather(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &x->shape, &a->in[1].shape, &s));
  bool fill_bad;
  uint64_t fill = bad_fill(x->dtype, &fill_bad);
  CX_CUDA(cx_cu_gather_axis(a->out[0].data, x->data, cx_dtype_size(x->dtype), a->in[1].data,
                            s.outer, s.dim, s.inner, s.count, fill_bad, fill, stream_of(a)));
  return CX_OK;
}

static cx_status run_gather_grad(const cx_kernel_args *a) {
  cx_gather_split s;
  CX_TRY(cx_gather_split_make(a->node, &a->out[0].shape, &a->in[1].shape, &s));
  CX_CUDA(cx_cu_gather_axis_grad(cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]), a->in[1].data,
                                 s.outer, s.dim, s.inner, s.count, stream_of(a)));
  return CX_OK;
}

/* data: GatherND's data shape (GatherNDGrad's output); *batches: the product of its batch axes */
static cx_status nd_geom(const cx_kernel_args *a, const cx_shape *data, cx_cu_nd_geom *g,
                         int64_t *tuples, int64_t *batches) {
  cx_gather_nd_split s;
  CX_TRY(cx_gather_nd_split_make(a->node, data, &a->in[1].shape, &s));
  *g = (cx_cu_nd_geom){.k = s.k, .per_batch = s.per_batch, .batch_slices = s.batch_slices,
                       .slice = s.slice};
  for (int j = 0; j < s.k; j++) g->dims[j] = data->d[s.batch_dims + j];
  *tuples = s.tuples;
  *batches = 1;
  for (int d = 0; d < s.batch_dims; d++) *batches *= data->d[d];
  return CX_OK;
}

static cx_status run_gather_nd(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  cx_cu_nd_geom g;
  int64_t tuples, batches;
  CX_TRY(nd_geom(a, &x->shape, &g, &tuples, &batches));
  bool fill_bad;
  uint64_t fill = bad_fill(x->dtype, &fill_bad);
  CX_CUDA(cx_cu_gather_nd(a->out[0].data, x->data, cx_dtype_size(x->dtype), a->in[1].data, &g,
                          tuples, fill_bad, fill, stream_of(a)));
  return CX_OK;
}

static cx_status run_gather_nd_grad(const cx_kernel_args *a) {
  cx_cu_nd_geom g;
  int64_t tuples, batches;
  CX_TRY(nd_geom(a, &a->out[0].shape, &g, &tuples, &batches));
  CX_CUDA(cx_cu_gather_nd_grad(cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]), a->in[1].data, &g,
                               batches, stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_gather[] = {
    {"Gather", NULL, run_gather, NULL, 0, NULL, 0},
    {"GatherGrad", NULL, run_gather_grad, NULL, 0, NULL, 0},
    {"GatherND", NULL, run_gather_nd, NULL, 0, NULL, 0},
    {"GatherNDGrad", NULL, run_gather_nd_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
