/* Device code of ReduceMax and ReduceMaxGrad (kernels/cpu/reduce.c's semantics). x's dims are
 * collapsed on the host into runs of kept and of reduced dims, as the element-wise reduce-to
 * does. A group with few elements is walked by one thread in x's order, as the CPU walks it; a
 * large one is split over a block, whose partial maxima combine so that the result is still the
 * CPU's: NaN when any element is NaN, else the first element (in x's order) of the greatest
 * value, which decides the sign of a zero maximum. */

#include <math.h>

#include "common.cuh"
#include "reduce_launch.h"

namespace {

constexpr int BLOCK_MIN = 128;

/* common.cuh's red_plan; m: groups (elements of keep); r: elements per group */
red_plan make_plan(const int64_t *keep, const int64_t *xd, int nd, int64_t *m, int64_t *r) {
  *m = *r = 1;
  for (int i = nd - 1; i >= 0; i--) {
    if (keep[i] == 1 && xd[i] != 1) *r *= xd[i];
    else *m *= xd[i];
  }
  return make_red_plan(keep, xd, nd);
}

/* A partial maximum: its value and the group position it came from. */
struct best {
  float v;
  int64_t j;
};

/* The maximum of two partials as the CPU's in-order walk finds it: NaN wins, then the greater
 * value, then the earlier position. */
__device__ __forceinline__ best better(best a, best b) {
  if (isnan(a.v)) return a;
  if (isnan(b.v)) return b;
  if (b.v > a.v) return b;
  if (a.v > b.v) return a;
  return b.j < a.j ? b : a;
}

/* one thread per group, in x's order (the CPU's rule: x > y || isnan(x)) */
__global__ void max_thread(float *y, const float *x, int64_t m, int64_t r, red_plan p) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < m;
       o += (int64_t)gridDim.x * blockDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    float acc = -INFINITY;
    for (int64_t j = 0; j < r; j++) {
      float v = base[offset_of(j, p.nr, p.rd, p.rs)];
      if (v > acc || isnan(v)) acc = v;
    }
    y[o] = acc;
  }
}

/* one block per group */
__global__ void max_block(float *y, const float *x, int64_t m, int64_t r, red_plan p) {
  __shared__ float sv[THREADS];
  __shared__ int64_t sj[THREADS];
  for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    best acc = {-INFINITY, INT64_MAX};
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) {
      float v = base[offset_of(j, p.nr, p.rd, p.rs)];
      if (v > acc.v || isnan(v)) acc = best{v, j};
    }
    sv[threadIdx.x] = acc.v;
    sj[threadIdx.x] = acc.j;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) {
        best b = better(best{sv[threadIdx.x], sj[threadIdx.x]},
                        best{sv[threadIdx.x + w], sj[threadIdx.x + w]});
        sv[threadIdx.x] = b.v;
        sj[threadIdx.x] = b.j;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) y[o] = sv[0];
    __syncthreads(); /* sv is reused by the next group */
  }
}

/* count[o] = how many elements of group o equal y[o] */
__global__ void count_thread(float *count, const float *x, const float *y, int64_t m, int64_t r,
                             red_plan p) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < m;
       o += (int64_t)gridDim.x * blockDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    float t = y[o];
    int64_t c = 0;
    for (int64_t j = 0; j < r; j++) c += base[offset_of(j, p.nr, p.rd, p.rs)] == t;
    count[o] = (float)c;
  }
}

__global__ void count_block(float *count, const float *x, const float *y, int64_t m, int64_t r,
                            red_plan p) {
  __shared__ long long part[THREADS / 32];
  for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    float t = y[o];
    long long c = 0;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) c += base[offset_of(j, p.nr, p.rd, p.rs)] == t;
    for (int w = 16; w > 0; w /= 2) c += __shfl_down_sync(0xffffffffu, c, w);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = c;
    __syncthreads();
    if (threadIdx.x < 32) {
      c = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : 0;
      for (int w = 16; w > 0; w /= 2) c += __shfl_down_sync(0xffffffffu, c, w);
      if (threadIdx.x == 0) count[o] = (float)c;
    }
    __syncthreads(); /* part is reused by the next group */
  }
}

/* x's dims and, per dim, the stride of its group index (0 on reduced dims) */
struct spread_plan {
  int nd;
  int64_t d[MAXD], gs[MAXD];
};

__global__ void max_grad_spread(float *dx, const float *dy, const float *x, const float *y,
                                const float *count, int64_t n, spread_plan p) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, g = 0;
    for (int k = p.nd - 1; k >= 0; k--) {
      g += r % p.d[k] * p.gs[k];
      r /= p.d[k];
    }
    dx[i] = x[i] == y[g] ? dy[g] / count[g] : 0.0f;
  }
}

} // namespace

extern "C" cudaError_t cx_cu_reduce_max(float *y, const int64_t *keep, const float *x,
                                        const int64_t *xd, int nd, cudaStream_t s) {
  if (nd > MAXD) return cudaErrorInvalidValue;
  int64_t m, r;
  red_plan p = make_plan(keep, xd, nd, &m, &r);
  if (m == 0) return cudaSuccess;
  if (r < BLOCK_MIN) {
    max_thread<<<blocks_for(m), THREADS, 0, s>>>(y, x, m, r, p);
  } else {
    max_block<<<blocks_for(m, 1), THREADS, 0, s>>>(y, x, m, r, p); /* a block a group */
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_reduce_max_grad(float *dx, const float *dy, const float *x,
                                             const float *y, const int64_t *keep,
                                             const int64_t *xd, int nd, float *count,
                                             cudaStream_t s) {
  if (nd > MAXD) return cudaErrorInvalidValue;
  int64_t m, r;
  red_plan p = make_plan(keep, xd, nd, &m, &r);
  int64_t n = m * r;
  if (n == 0) return cudaSuccess;
  if (r < BLOCK_MIN) {
    count_thread<<<blocks_for(m), THREADS, 0, s>>>(count, x, y, m, r, p);
  } else {
    count_block<<<blocks_for(m, 1), THREADS, 0, s>>>(count, x, y, m, r, p); /* a block a group */
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  spread_plan q = {};
  q.nd = nd;
  int64_t gst = 1;
  for (int k = nd - 1; k >= 0; k--) {
    q.d[k] = xd[k];
    bool red = keep[k] == 1 && xd[k] != 1;
    q.gs[k] = red ? 0 : gst;
    if (!red) gst *= xd[k];
  }
  max_grad_spread<<<blocks_for(n), THREADS, 0, s>>>(dx, dy, x, y, count, n, q);
  return cudaGetLastError();
}
