#ifndef CX_CUDA_COMMON_CUH
#define CX_CUDA_COMMON_CUH

/* Helpers the CUDA backend's .cu files share (C++ and device code: include it from .cu files
 * only, never from the C side or the *_launch.h headers): the launch constants and grid sizing,
 * the block-wide double sum, the strided walk of the gather / scatter kernels and the kept /
 * reduced dims plan of the reductions. One copy here instead of one per file; everything sits in
 * an anonymous namespace and is inline or a template, so each translation unit gets its own
 * private copy of what it uses and no unused-function warnings for the rest. */

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* for (i over [0, n)) as a grid-stride loop */
#define GRID_STRIDE(i, n)                                                                          \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                       \
       i += (int64_t)gridDim.x * blockDim.x)

namespace {

constexpr int MAXD = 8;      /* the most dims a plan holds */
constexpr int THREADS = 256; /* threads per block of the element-wise and reduction kernels */

constexpr int64_t GRID_CAP = 1 << 20;   /* the usual cap on a grid-stride kernel's blocks */
constexpr int64_t GRID_CAP_64K = 65536; /* the cap of the dropout, loss, norm and optim kernels */

/* Blocks for n items at per_block items a block: at least 1 (never a 0-block launch, even for
 * n <= 0) and at most cap; grid-stride kernels loop over the rest. */
inline unsigned blocks_for(int64_t n, int per_block = THREADS, int64_t cap = GRID_CAP) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  return (unsigned)(b < cap ? b : cap);
}

/* Tree reduction of one double over a block of N threads (blockDim.x == N, t holds N); the
 * result is in t[0]. */
template <int N = THREADS>
__device__ __forceinline__ void block_sum(double *t, double v) {
  t[threadIdx.x] = v;
  __syncthreads();
  for (int k = N / 2; k > 0; k >>= 1) {
    if ((int)threadIdx.x < k) t[threadIdx.x] += t[threadIdx.x + k];
    __syncthreads();
  }
}

/* The sum of part[0..n) in a fixed order, by one block of N threads; the result is in t[0].
 * The index has n's type (int or int64_t). */
template <int N = THREADS, typename I>
__device__ __forceinline__ void fold(double *t, const double *part, I n) {
  double s = 0;
  for (I i = threadIdx.x; i < n; i += N) s += part[i];
  block_sum<N>(t, s);
}

/* Offset of element i of a row-major index space d[0..n) whose dims step by st[0..n). */
__device__ __forceinline__ int64_t offset_of(int64_t i, int n, const int64_t *d,
                                             const int64_t *st) {
  int64_t off = 0;
  for (int k = n - 1; k >= 0; k--) {
    off += i % d[k] * st[k];
    i /= d[k];
  }
  return off;
}

/* ---- strided walk: gather (Transpose, Expand) and scatter (SliceGrad) ---- */

/* The dims of the contiguous side and the strided side's element strides along them. */
struct walk_plan {
  int nd;
  int64_t d[MAXD], st[MAXD];
};

/* dims[0..nd) with stride[0..nd): size-1 dims dropped and a dim merged into the one inside it
 * where the stride carries on. *n: the element count (the product of all dims). No MAXD check:
 * the callers do it where they need it. */
inline walk_plan make_walk_plan(int nd, const int64_t *dims, const int64_t *stride, int64_t *n) {
  int64_t d[MAXD], st[MAXD];
  int k = 0;
  *n = 1;
  for (int i = nd - 1; i >= 0; i--) {
    *n *= dims[i];
    if (dims[i] == 1) continue;
    if (k > 0 && stride[i] == st[k - 1] * d[k - 1]) {
      d[k - 1] *= dims[i];
      continue;
    }
    d[k] = dims[i], st[k] = stride[i];
    k++;
  }
  walk_plan p = {};
  p.nd = k;
  for (int i = 0; i < k; i++) p.d[i] = d[k - 1 - i], p.st[i] = st[k - 1 - i];
  return p;
}

/* Element i of the contiguous side against element base + offset(i) of the strided side: gather
 * reads the strided side (in) into out[i], SCATTER writes in[i] to the strided side (out). */
template <typename T, bool SCATTER>
__global__ void walk_kernel(T *out, const T *in, int64_t n, int64_t base, walk_plan p) {
  GRID_STRIDE(i, n) {
    int64_t r = i, off = base;
    for (int k = p.nd - 1; k >= 0; k--) {
      off += r % p.d[k] * p.st[k];
      r /= p.d[k];
    }
    if (SCATTER) out[off] = in[i];
    else out[i] = in[off];
  }
}

/* The walk of n elements of es bytes (1, 2, 4 or 8) as unsigned integers of that size, so every
 * dtype takes the same path; n > 0. Returns the launch's error. */
template <bool SCATTER>
cudaError_t launch_walk(void *out, const void *in, size_t es, int64_t n, int64_t base,
                        const walk_plan &p, cudaStream_t s) {
  unsigned g = blocks_for(n);
  switch (es) {
  case 1: walk_kernel<uint8_t, SCATTER><<<g, THREADS, 0, s>>>((uint8_t *)out, (const uint8_t *)in, n, base, p); break;
  case 2: walk_kernel<uint16_t, SCATTER><<<g, THREADS, 0, s>>>((uint16_t *)out, (const uint16_t *)in, n, base, p); break;
  case 4: walk_kernel<uint32_t, SCATTER><<<g, THREADS, 0, s>>>((uint32_t *)out, (const uint32_t *)in, n, base, p); break;
  case 8: walk_kernel<uint64_t, SCATTER><<<g, THREADS, 0, s>>>((uint64_t *)out, (const uint64_t *)in, n, base, p); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

/* ---- kept / reduced dims: ReduceMax and the element-wise reduce-to ---- */

/* Kept dims (the output, row-major) and reduced dims, each with x's element strides. */
struct red_plan {
  int nk, nr;
  int64_t kd[MAXD], ks[MAXD], rd[MAXD], rs[MAXD];
};

/* x's dims (contiguous, xd[0..nd)) with size-1 dims dropped and runs of kept or of reduced dims
 * merged (x is contiguous, so any two neighbours of a kind merge); dim i is reduced when
 * keep[i] == 1 (and xd[i] != 1). No MAXD check: the callers do it where they need it. */
inline red_plan make_red_plan(const int64_t *keep, const int64_t *xd, int nd) {
  red_plan p = {};
  int64_t st = 1, kd[MAXD], ks[MAXD], rd[MAXD], rs[MAXD];
  int nk = 0, nr = 0, prev = -1; /* 0 kept, 1 reduced: the kind of the dim just inside */
  for (int i = nd - 1; i >= 0; i--) {
    if (xd[i] == 1) continue;
    int red = keep[i] == 1;
    if (red && prev == 1) rd[nr - 1] *= xd[i];
    else if (!red && prev == 0) kd[nk - 1] *= xd[i];
    else if (red) rd[nr] = xd[i], rs[nr++] = st;
    else kd[nk] = xd[i], ks[nk++] = st;
    prev = red;
    st *= xd[i];
  }
  p.nk = nk, p.nr = nr;
  for (int i = 0; i < nk; i++) p.kd[i] = kd[nk - 1 - i], p.ks[i] = ks[nk - 1 - i];
  for (int i = 0; i < nr; i++) p.rd[i] = rd[nr - 1 - i], p.rs[i] = rs[nr - 1 - i];
  return p;
}

} // namespace

#endif
