/* Pooling kernels: one thread per output (forward, max gradient) or per input element (average
 * gradient, which gathers and so needs no atomics). Window taps follow kernels/cpu/pool.c's
 * axis_taps exactly: the taps inside the input, scanned in row-major order, and the averaging
 * divisor from the taps inside (or with count_include_pad, the window clipped to the padded
 * input). */
#include <math.h>

#include "common.cuh"
#include "pool_launch.h"

namespace {

struct taps {
  int64_t first, count, div;
};

__device__ taps axis_taps(const cx_cu_pool_geom &g, int ax, int64_t o) {
  int64_t start = o * g.s[ax] - g.pb[ax], d = g.d[ax], lo = 0, hi = g.k[ax];
  if (start < 0) lo = (-start + d - 1) / d;
  int64_t end = (g.in[ax] - start + d - 1) / d; /* first tap at or past the input's end */
  if (end < hi) hi = end;
  taps t = {start + lo * d, hi > lo ? hi - lo : 0, hi > lo ? hi - lo : 0};
  if (g.include_pad) {
    int64_t stop = start + g.k[ax], lim = g.in[ax] + g.pe[ax];
    t.div = (stop < lim ? stop : lim) - start;
  }
  return t;
}

/* Output element r of a plane: its three tap ranges. */
__device__ void window_of(const cx_cu_pool_geom &g, int64_t r, taps *t) {
  int64_t ow = r % g.out[2], oh = r / g.out[2] % g.out[1], od = r / (g.out[2] * g.out[1]);
  t[0] = axis_taps(g, 0, od);
  t[1] = axis_taps(g, 1, oh);
  t[2] = axis_taps(g, 2, ow);
}

__device__ int64_t tap_offset(const cx_cu_pool_geom &g, const taps *t, int64_t a, int64_t b,
                              int64_t c) {
  return ((t[0].first + a * g.d[0]) * g.in[1] + t[1].first + b * g.d[1]) * g.in[2] + t[2].first +
         c * g.d[2];
}

__global__ void max_pool(cx_cu_pool_geom g, const float *x, float *y) {
  int64_t op = g.out[0] * g.out[1] * g.out[2], ip = g.in[0] * g.in[1] * g.in[2];
  GRID_STRIDE(i, g.planes * op) {
    taps t[3];
    window_of(g, i % op, t);
    const float *xp = x + i / op * ip;
    float m = -INFINITY;
    for (int64_t a = 0; a < t[0].count; a++)
      for (int64_t b = 0; b < t[1].count; b++)
        for (int64_t c = 0; c < t[2].count; c++) {
          float v = xp[tap_offset(g, t, a, b, c)];
          m = v > m ? v : m; /* as the CPU: a NaN never wins */
        }
    y[i] = m;
  }
}

/* The first maximum in scan order takes the gradient (ties keep the earliest); windows overlap
 * when stride < kernel, hence the atomics. */
__global__ void max_pool_grad(cx_cu_pool_geom g, const float *x, const float *dy, float *dx) {
  int64_t op = g.out[0] * g.out[1] * g.out[2], ip = g.in[0] * g.in[1] * g.in[2];
  GRID_STRIDE(i, g.planes * op) {
    taps t[3];
    window_of(g, i % op, t);
    const float *xp = x + i / op * ip;
    int64_t best = tap_offset(g, t, 0, 0, 0);
    float m = -INFINITY;
    for (int64_t a = 0; a < t[0].count; a++)
      for (int64_t b = 0; b < t[1].count; b++)
        for (int64_t c = 0; c < t[2].count; c++) {
          int64_t off = tap_offset(g, t, a, b, c);
          if (xp[off] > m) m = xp[off], best = off;
        }
    atomicAdd(dx + i / op * ip + best, dy[i]);
  }
}

__global__ void avg_pool(cx_cu_pool_geom g, const float *x, float *y) {
  int64_t op = g.out[0] * g.out[1] * g.out[2], ip = g.in[0] * g.in[1] * g.in[2];
  GRID_STRIDE(i, g.planes * op) {
    taps t[3];
    window_of(g, i % op, t);
    const float *xp = x + i / op * ip;
    float sum = 0;
    for (int64_t a = 0; a < t[0].count; a++)
      for (int64_t b = 0; b < t[1].count; b++)
        for (int64_t c = 0; c < t[2].count; c++) sum += xp[tap_offset(g, t, a, b, c)];
    y[i] = sum / (float)(t[0].div * t[1].div * t[2].div);
  }
}

/* dX at one input position: the sum over the windows that hold it (window o holds position p
 * on an axis when o * s - pb + t * d == p for a tap t < k) of dY / divisor. */
__global__ void avg_pool_grad(cx_cu_pool_geom g, const float *dy, float *dx) {
  int64_t op = g.out[0] * g.out[1] * g.out[2], ip = g.in[0] * g.in[1] * g.in[2];
  GRID_STRIDE(i, g.planes * ip) {
    int64_t r = i % ip, pos[3] = {r / (g.in[1] * g.in[2]), r / g.in[2] % g.in[1], r % g.in[2]};
    const float *dyp = dy + i / ip * op;
    float acc = 0;
    for (int64_t t0 = 0; t0 < g.k[0]; t0++) {
      int64_t n0 = pos[0] + g.pb[0] - t0 * g.d[0];
      if (n0 < 0 || n0 % g.s[0] || n0 / g.s[0] >= g.out[0]) continue;
      taps a = axis_taps(g, 0, n0 / g.s[0]);
      for (int64_t t1 = 0; t1 < g.k[1]; t1++) {
        int64_t n1 = pos[1] + g.pb[1] - t1 * g.d[1];
        if (n1 < 0 || n1 % g.s[1] || n1 / g.s[1] >= g.out[1]) continue;
        taps b = axis_taps(g, 1, n1 / g.s[1]);
        for (int64_t t2 = 0; t2 < g.k[2]; t2++) {
          int64_t n2 = pos[2] + g.pb[2] - t2 * g.d[2];
          if (n2 < 0 || n2 % g.s[2] || n2 / g.s[2] >= g.out[2]) continue;
          taps c = axis_taps(g, 2, n2 / g.s[2]);
          int64_t o = (n0 / g.s[0] * g.out[1] + n1 / g.s[1]) * g.out[2] + n2 / g.s[2];
          acc += dyp[o] / (float)(a.div * b.div * c.div);
        }
      }
    }
    dx[i] = acc;
  }
}

constexpr int kReduceThreads = 256;

/* One block per plane (grid-stride over planes). */
__global__ void global_avg_pool(const float *x, float *y, int64_t planes, int64_t size) {
  __shared__ float part[kReduceThreads];
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const float *xp = x + p * size;
    float s = 0;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) s += xp[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
      if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
      __syncthreads();
    }
    if (threadIdx.x == 0) y[p] = part[0] / (float)size;
    __syncthreads(); /* part is refilled for the next plane */
  }
}

__global__ void global_avg_pool_grad(const float *dy, float *dx, int64_t planes, int64_t size) {
  GRID_STRIDE(i, planes * size) dx[i] = dy[i / size] / (float)size;
}

int64_t out_elems(const cx_cu_pool_geom *g) {
  return g->planes * g->out[0] * g->out[1] * g->out[2];
}

int64_t in_elems(const cx_cu_pool_geom *g) { return g->planes * g->in[0] * g->in[1] * g->in[2]; }

} // namespace

extern "C" cudaError_t cx_cu_max_pool(const cx_cu_pool_geom *g, const float *x, float *y,
                                      cudaStream_t s) {
  if (out_elems(g) == 0) return cudaSuccess;
  max_pool<<<blocks_for(out_elems(g)), THREADS, 0, s>>>(*g, x, y);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_max_pool_grad(const cx_cu_pool_geom *g, const float *x,
                                           const float *dy, float *dx, cudaStream_t s) {
  if (in_elems(g) == 0) return cudaSuccess;
  cudaError_t e = cudaMemsetAsync(dx, 0, sizeof(float) * (size_t)in_elems(g), s);
  if (e != cudaSuccess || out_elems(g) == 0) return e;
  max_pool_grad<<<blocks_for(out_elems(g)), THREADS, 0, s>>>(*g, x, dy, dx);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_avg_pool(const cx_cu_pool_geom *g, const float *x, float *y,
                                      cudaStream_t s) {
  if (out_elems(g) == 0) return cudaSuccess;
  avg_pool<<<blocks_for(out_elems(g)), THREADS, 0, s>>>(*g, x, y);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_avg_pool_grad(const cx_cu_pool_geom *g, const float *dy, float *dx,
                                           cudaStream_t s) {
  if (in_elems(g) == 0) return cudaSuccess;
  avg_pool_grad<<<blocks_for(in_elems(g)), THREADS, 0, s>>>(*g, dy, dx);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_global_avg_pool(const float *x, float *y, int64_t planes,
                                             int64_t size, cudaStream_t s) {
  if (planes == 0) return cudaSuccess;
  unsigned grid = blocks_for(planes, 1, 65535); /* a block a plane */
  global_avg_pool<<<grid, kReduceThreads, 0, s>>>(x, y, planes, size);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_global_avg_pool_grad(const float *dy, float *dx, int64_t planes,
                                                  int64_t size, cudaStream_t s) {
  if (planes * size == 0) return cudaSuccess;
  global_avg_pool_grad<<<blocks_for(planes * size), THREADS, 0, s>>>(dy, dx, planes, size);
  return cudaGetLastError();
}
