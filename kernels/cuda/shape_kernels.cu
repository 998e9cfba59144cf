/* Device code of the shape family: one strided gather (Transpose, Expand) moving elements as
 * unsigned integers of their size, so every dtype takes the same path. */

#include "shape_launch.h"

namespace {

constexpr int MAXD = 8, THREADS = 256;

struct gather_plan {
  int nd;
  int64_t d[MAXD], st[MAXD];
};

template <typename T>
__global__ void gather_kernel(T *out, const T *in, int64_t n, int64_t base, gather_plan p) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, off = base;
    for (int k = p.nd - 1; k >= 0; k--) {
      off += r % p.d[k] * p.st[k];
      r /= p.d[k];
    }
    out[i] = in[off];
  }
}

} // namespace

extern "C" cudaError_t cx_cu_gather(void *out, const void *in, size_t es, int nd,
                                    const int64_t *dims, const int64_t *stride, int64_t base,
                                    cudaStream_t s) {
  /* size-1 dims dropped and a dim merged into the one inside it where the stride carries on */
  int64_t d[MAXD], st[MAXD], n = 1;
  int k = 0;
  for (int i = nd - 1; i >= 0; i--) {
    n *= dims[i];
    if (dims[i] == 1) continue;
    if (k > 0 && stride[i] == st[k - 1] * d[k - 1]) {
      d[k - 1] *= dims[i];
      continue;
    }
    d[k] = dims[i], st[k] = stride[i];
    k++;
  }
  if (n == 0) return cudaSuccess;
  gather_plan p = {};
  p.nd = k;
  for (int i = 0; i < k; i++) p.d[i] = d[k - 1 - i], p.st[i] = st[k - 1 - i];
  int64_t b = (n + THREADS - 1) / THREADS;
  unsigned g = (unsigned)(b < (1 << 20) ? b : (1 << 20));
  switch (es) {
  case 1: gather_kernel<<<g, THREADS, 0, s>>>((uint8_t *)out, (const uint8_t *)in, n, base, p); break;
  case 2: gather_kernel<<<g, THREADS, 0, s>>>((uint16_t *)out, (const uint16_t *)in, n, base, p); break;
  case 4: gather_kernel<<<g, THREADS, 0, s>>>((uint32_t *)out, (const uint32_t *)in, n, base, p); break;
  case 8: gather_kernel<<<g, THREADS, 0, s>>>((uint64_t *)out, (const uint64_t *)in, n, base, p); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}
