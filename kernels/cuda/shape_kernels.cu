/* The shape family's launcher: one strided gather (Transpose, Expand), common.cuh's strided walk,
 * moving elements as unsigned integers of their size, so every dtype takes the same path. */

#include "common.cuh"
#include "shape_launch.h"

extern "C" cudaError_t cx_cu_gather(void *out, const void *in, size_t es, int nd,
                                    const int64_t *dims, const int64_t *stride, int64_t base,
                                    cudaStream_t s) {
  int64_t n;
  walk_plan p = make_walk_plan(nd, dims, stride, &n);
  if (n == 0) return cudaSuccess;
  return launch_walk<false>(out, in, es, n, base, p, s);
}
