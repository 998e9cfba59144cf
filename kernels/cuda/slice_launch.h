#ifndef CX_CUDA_SLICE_LAUNCH_H
#define CX_CUDA_SLICE_LAUNCH_H

/* Launchers of the slice / pad family (slice_kernels.cu): the scatter that undoes a strided
 * gather (SliceGrad), and Pad / PadGrad on plain row-major f32 tensors. Slice itself is the shape
 * family's gather (shape_launch.h). Each launcher queues on `s` and returns the launch's error. */

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[base + sum i_d * stride[d]] = in (contiguous, dims[0..nd), nd <= 8)[i0..]; strides and base
 * in elements of es bytes (1, 2, 4 or 8); out's other elements are left as they are. The target
 * positions must be distinct. */
cudaError_t cx_cu_scatter(void *out, const void *in, size_t es, int nd, const int64_t *dims,
                          const int64_t *stride, int64_t base, cudaStream_t s);

/* Pad modes, as core/ops/shape.h's cx_pad_mode. */
enum { CX_CU_PAD_CONSTANT, CX_CU_PAD_REFLECT, CX_CU_PAD_EDGE };

/* y (dims yd) = x (dims xd) padded by `before` elements at the start of each axis (the rest at the
 * end), nd <= 8. Constant padding reads *fill_dev (device memory) when fill_dev is not NULL,
 * else fill. */
cudaError_t cx_cu_pad(float *y, const float *x, int nd, const int64_t *xd, const int64_t *before,
                      const int64_t *yd, int mode, const float *fill_dev, float fill,
                      cudaStream_t s);

/* The adjoint: dx (dims xd) = the sum of the dy (dims yd) elements read from each position, in
 * dy's order (as the CPU kernel adds them). Every dx element is written. */
cudaError_t cx_cu_pad_grad(float *dx, const float *dy, int nd, const int64_t *xd,
                           const int64_t *before, const int64_t *yd, int mode, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
