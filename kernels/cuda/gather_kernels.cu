/* Device code of the gather family. The forward ops read one element per thread. The gradients
 * are deterministic without atomics or sorting: one block owns one index value (Gather: one
 * position of the axis, the dX rows (o, value) of every outer o; GatherND: one slice), zeroes its
 * dX elements, then walks the candidate indices in tiles, compacts the ones that name its value
 * into shared memory in index order (a warp scan and a prefix over the warps) and adds their dY
 * rows. Each dX element is only ever written by one thread, in index order, from 0.0f, so the
 * sums are the CPU's bit for bit. Every block reads all its candidate indices (each Gather block
 * all `count` of them): cheap next to the dY rows when the axis is short (class tokens, LeViT's
 * bias tables), a cost that grows as dim * count for long axes. */

#include "common.cuh"
#include "gather_launch.h"

namespace {

constexpr int WARPS = THREADS / 32;

/* k made non-negative and clamped into [0, dim); *bad when it was outside [-dim, dim) */
__device__ __forceinline__ int64_t clamp_index(int64_t k, int64_t dim, bool *bad) {
  if (k < 0) k += dim;
  *bad = k < 0 || k >= dim;
  return k < 0 ? 0 : k >= dim ? dim - 1 : k;
}

/* The slice number, within its batch, that tuple idx[0..k) names (each index clamped). */
__device__ __forceinline__ int64_t nd_slice(const cx_cu_nd_geom &g, const int64_t *idx,
                                            bool *bad) {
  int64_t at = 0;
  *bad = false;
  for (int j = 0; j < g.k; j++) {
    bool b;
    int64_t v = clamp_index(idx[j], g.dims[j], &b);
    *bad = *bad || b;
    at = at * g.dims[j] + v;
  }
  return at;
}

/* ---- forward ---- */

template <typename T>
__global__ void gather_axis_kernel(T *y, const T *x, const int64_t *ind, int64_t n, int64_t dim,
                                   int64_t inner, int64_t count, bool fill_bad, T fill) {
  GRID_STRIDE(i, n) {
    int64_t q = i / inner, r = i % inner, j = q % count, o = q / count;
    bool bad;
    int64_t at = clamp_index(ind[j], dim, &bad);
    y[i] = bad && (fill_bad || dim == 0) ? fill : x[(o * dim + at) * inner + r];
  }
}

template <typename T>
__global__ void gather_nd_kernel(T *y, const T *x, const int64_t *ind, int64_t n,
                                 cx_cu_nd_geom g, bool fill_bad, T fill) {
  GRID_STRIDE(i, n) {
    int64_t t = i / g.slice, r = i % g.slice;
    bool bad;
    int64_t at = nd_slice(g, ind + t * g.k, &bad);
    y[i] = bad && (fill_bad || g.batch_slices == 0)
               ? fill
               : x[(t / g.per_batch * g.batch_slices + at) * g.slice + r];
  }
}

/* ---- gradients: one block per index value ---- */

/* Gather: value d in [0, dim) owns the dX rows (o, d) of every o, width = outer * inner elements
 * (element e is o = e / inner, i = e % inner); its candidates are every index j, whose dY rows
 * are (o, j). */
struct axis_keys {
  const int64_t *ind;
  int64_t dim, count, inner;
  __device__ void range(int64_t d, int64_t *c0, int64_t *c1, int64_t *want) const {
    *c0 = 0, *c1 = count, *want = d;
  }
  __device__ int64_t key(int64_t j) const {
    bool bad;
    int64_t at = clamp_index(ind[j], dim, &bad);
    return bad ? -1 : at;
  }
  __device__ int64_t dst(int64_t d, int64_t e) const {
    return (e / inner * dim + d) * inner + e % inner;
  }
  __device__ int64_t src(int64_t j, int64_t e) const {
    return (e / inner * count + j) * inner + e % inner;
  }
};

/* GatherND: value d is slice d % batch_slices of batch d / batch_slices, width = slice; its
 * candidates are that batch's tuples t, whose dY row is t. */
struct nd_keys {
  const int64_t *ind;
  cx_cu_nd_geom g;
  __device__ void range(int64_t d, int64_t *c0, int64_t *c1, int64_t *want) const {
    *c0 = d / g.batch_slices * g.per_batch, *c1 = *c0 + g.per_batch;
    *want = d % g.batch_slices;
  }
  __device__ int64_t key(int64_t t) const {
    bool bad;
    int64_t at = nd_slice(g, ind + t * g.k, &bad);
    return bad ? -1 : at;
  }
  __device__ int64_t dst(int64_t d, int64_t e) const { return d * g.slice + e; }
  __device__ int64_t src(int64_t t, int64_t e) const { return t * g.slice + e; }
};

constexpr int ITEMS = 4;               /* candidates per thread per tile */
constexpr int TILE = THREADS * ITEMS;  /* candidates per tile */

/* dX's elements owned by values [0, values), `width` each: zeroed, then each matching
 * candidate's dY added in candidate order. blockDim.x == THREADS; the loops over values and tiles
 * are uniform over the block, so every thread reaches the shuffles and barriers. Thread t always
 * handles the elements e = t (mod THREADS) of its value, so no element is written by two
 * threads. */
template <typename K>
__global__ void scatter_rows_kernel(float *dx, const float *dy, int64_t values, int64_t width,
                                    K keys) {
  __shared__ int list[TILE];
  __shared__ int per_warp[WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t d = blockIdx.x; d < values; d += gridDim.x) {
    for (int64_t e = threadIdx.x; e < width; e += THREADS) dx[keys.dst(d, e)] = 0.0f;
    int64_t c0, c1, want;
    keys.range(d, &c0, &c1, &want);
    for (int64_t base = c0; base < c1; base += TILE) {
      /* this thread's ITEMS consecutive candidates; hits[u]: candidate u names value d */
      int64_t j0 = base + (int64_t)threadIdx.x * ITEMS;
      unsigned hits = 0;
      int c = 0;
      for (int u = 0; u < ITEMS; u++)
        if (j0 + u < c1 && keys.key(j0 + u) == want) hits |= 1u << u, c++;
      int inc = c; /* inclusive scan of c over the warp */
      for (int o = 1; o < 32; o <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += v;
      }
      if (lane == 31) per_warp[warp] = inc;
      __syncthreads();
      int at = inc - c, total = 0;
      for (int w = 0; w < WARPS; w++) {
        if (w < warp) at += per_warp[w];
        total += per_warp[w];
      }
      for (int u = 0; u < ITEMS; u++)
        if (hits >> u & 1u) list[at++] = (int)threadIdx.x * ITEMS + u;
      __syncthreads();
      for (int q = 0; q < total; q++) { /* in candidate order */
        int64_t j = base + list[q];
        for (int64_t e = threadIdx.x; e < width; e += THREADS)
          dx[keys.dst(d, e)] += dy[keys.src(j, e)];
      }
      __syncthreads(); /* list and per_warp are reused by the next tile */
    }
  }
}

template <typename T>
void launch_axis(void *y, const void *x, const int64_t *ind, int64_t n, int64_t dim,
                 int64_t inner, int64_t count, bool fill_bad, uint64_t fill, cudaStream_t s) {
  gather_axis_kernel<T><<<blocks_for(n), THREADS, 0, s>>>((T *)y, (const T *)x, ind, n, dim,
                                                          inner, count, fill_bad, (T)fill);
}

template <typename T>
void launch_nd(void *y, const void *x, const int64_t *ind, int64_t n, const cx_cu_nd_geom &g,
               bool fill_bad, uint64_t fill, cudaStream_t s) {
  gather_nd_kernel<T><<<blocks_for(n), THREADS, 0, s>>>((T *)y, (const T *)x, ind, n, g,
                                                        fill_bad, (T)fill);
}

} // namespace

extern "C" cudaError_t cx_cu_gather_axis(void *y, const void *x, size_t es, const int64_t *ind,
                                         int64_t outer, int64_t dim, int64_t inner, int64_t count,
                                         bool fill_bad, uint64_t fill, cudaStream_t s) {
  int64_t n = outer * count * inner;
  if (n == 0) return cudaSuccess;
  switch (es) {
  case 1: launch_axis<uint8_t>(y, x, ind, n, dim, inner, count, fill_bad, fill, s); break;
  case 2: launch_axis<uint16_t>(y, x, ind, n, dim, inner, count, fill_bad, fill, s); break;
  case 4: launch_axis<uint32_t>(y, x, ind, n, dim, inner, count, fill_bad, fill, s); break;
  case 8: launch_axis<uint64_t>(y, x, ind, n, dim, inner, count, fill_bad, fill, s); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_gather_axis_grad(float *dx, const float *dy, const int64_t *ind,
                                              int64_t outer, int64_t dim, int64_t inner,
                                              int64_t count, cudaStream_t s) {
  int64_t width = outer * inner;
  if (dim == 0 || width == 0) return cudaSuccess;
  axis_keys k = {ind, dim, count, inner};
  scatter_rows_kernel<axis_keys><<<blocks_for(dim, 1), THREADS, 0, s>>>(dx, dy, dim, width, k);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_gather_nd(void *y, const void *x, size_t es, const int64_t *ind,
                                       const cx_cu_nd_geom *g, int64_t tuples, bool fill_bad,
                                       uint64_t fill, cudaStream_t s) {
  int64_t n = tuples * g->slice;
  if (n == 0) return cudaSuccess;
  switch (es) {
  case 1: launch_nd<uint8_t>(y, x, ind, n, *g, fill_bad, fill, s); break;
  case 2: launch_nd<uint16_t>(y, x, ind, n, *g, fill_bad, fill, s); break;
  case 4: launch_nd<uint32_t>(y, x, ind, n, *g, fill_bad, fill, s); break;
  case 8: launch_nd<uint64_t>(y, x, ind, n, *g, fill_bad, fill, s); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_gather_nd_grad(float *dx, const float *dy, const int64_t *ind,
                                            const cx_cu_nd_geom *g, int64_t batches,
                                            cudaStream_t s) {
  int64_t values = batches * g->batch_slices;
  if (values == 0 || g->slice == 0) return cudaSuccess;
  nd_keys k = {ind, *g};
  scatter_rows_kernel<nd_keys><<<blocks_for(values, 1), THREADS, 0, s>>>(dx, dy, values, g->slice,
                                                                        k);
  return cudaGetLastError();
}
