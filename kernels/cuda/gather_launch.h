#ifndef CX_CUDA_GATHER_LAUNCH_H
#define CX_CUDA_GATHER_LAUNCH_H

/* Launchers of the gather family (gather_kernels.cu): Gather along an axis and GatherND, any
 * dtype by element size (1, 2, 4 or 8 bytes), with s64 indices in device memory, and their f32
 * gradients. Each launcher queues on `s` and returns the launch's error.
 *
 * Indices are device data, which the host cannot check before the kernels run (the CPU kernels
 * refuse an index outside [-dim, dim) naming the node). Here a forward read through such an
 * index gives `fill` when fill_bad (the C side passes a quiet NaN for floating types, so that the
 * run's finiteness checks see it) and otherwise reads the index clamped into [0, dim) (integer
 * data, which has no NaN; zeros when the axis is empty); a gradient drops the dY of such an index
 * (its forward output was already NaN). */

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y [outer, count, inner] = x [outer, dim, inner] at indices ind[0..count) along the middle axis
 * (negative ones counted from the end). */
cudaError_t cx_cu_gather_axis(void *y, const void *x, size_t es, const int64_t *ind,
                              int64_t outer, int64_t dim, int64_t inner, int64_t count,
                              bool fill_bad, uint64_t fill, cudaStream_t s);

/* The gradient: dx [outer, dim, inner] (every element written) = the sum of the dy [outer,
 * count, inner] rows whose index names it, added in index order as the CPU adds them (so a
 * repeated index sums the same way every run: no atomics). */
cudaError_t cx_cu_gather_axis_grad(float *dx, const float *dy, const int64_t *ind, int64_t outer,
                                   int64_t dim, int64_t inner, int64_t count, cudaStream_t s);

/* GatherND geometry (core/ops/gather.h's cx_gather_nd_split): tuples of k indices into the axes
 * dims[0..k) that follow the batch axes; a batch holds per_batch tuples and batch_slices slices
 * of `slice` elements. */
typedef struct cx_cu_nd_geom {
  int k;
  int64_t dims[8];
  int64_t per_batch, batch_slices, slice;
} cx_cu_nd_geom;

/* y [tuples, slice] = the slices of x [batches, batch_slices, slice] the tuples of ind
 * [tuples, k] pick, each in its own batch. */
cudaError_t cx_cu_gather_nd(void *y, const void *x, size_t es, const int64_t *ind,
                            const cx_cu_nd_geom *g, int64_t tuples, bool fill_bad, uint64_t fill,
                            cudaStream_t s);

/* The gradient: dx [batches, batch_slices, slice] (every element written) = the sum of the dy
 * [batches * per_batch, slice] slices whose tuple names it, in tuple order. */
cudaError_t cx_cu_gather_nd_grad(float *dx, const float *dy, const int64_t *ind,
                                 const cx_cu_nd_geom *g, int64_t batches, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
