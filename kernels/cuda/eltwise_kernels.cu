/* Device code of the element-wise family: broadcasting binary ops and the reduce-to that undoes a
 * broadcast. Shapes are collapsed on the host (size-1 dims dropped, runs of dims that stay
 * contiguous for every operand merged) so the common cases index with one or two dims. */

#include "common.cuh"
#include "eltwise_launch.h"

namespace {

/* Output dims and each operand's element strides (0 where it broadcasts). */
struct bin_plan {
  int nd;
  int64_t d[MAXD], sa[MAXD], sb[MAXD];
};

/* Element strides of an operand of rank k aligned right against rank nd, 0 on broadcast dims. */
void operand_strides(const int64_t *yd, int nd, const int64_t *xd, int k, int64_t *st) {
  int64_t acc = 1;
  for (int i = nd - 1; i >= 0; i--) {
    int j = i - (nd - k);
    if (j < 0 || xd[j] == 1 || yd[i] == 1) {
      st[i] = 0;
    } else {
      st[i] = acc;
    }
    if (j >= 0) acc *= xd[j];
  }
}

bin_plan make_bin_plan(const int64_t *yd, int ynd, const int64_t *ad, int and_, const int64_t *bd,
                       int bnd) {
  int64_t sa[MAXD], sb[MAXD];
  operand_strides(yd, ynd, ad, and_, sa);
  operand_strides(yd, ynd, bd ? bd : yd, bd ? bnd : ynd, sb);
  bin_plan p = {};
  /* walk from the innermost dim, merging a dim into the one inside it when both strides go on */
  int64_t d[MAXD], a[MAXD], b[MAXD];
  int n = 0;
  for (int i = ynd - 1; i >= 0; i--) {
    if (yd[i] == 1) continue;
    if (n > 0 && sa[i] == a[n - 1] * d[n - 1] && sb[i] == b[n - 1] * d[n - 1]) {
      d[n - 1] *= yd[i];
      continue;
    }
    d[n] = yd[i], a[n] = sa[i], b[n] = sb[i];
    n++;
  }
  p.nd = n;
  for (int i = 0; i < n; i++) { /* back to outer-first order */
    p.d[i] = d[n - 1 - i];
    p.sa[i] = a[n - 1 - i];
    p.sb[i] = b[n - 1 - i];
  }
  return p;
}

template <int OP>
__device__ __forceinline__ float apply(float x, float y, float scale) {
  if (OP == CX_CU_ADD) return x + y;
  if (OP == CX_CU_SUB) return x - y;
  if (OP == CX_CU_MUL) return x * y;
  if (OP == CX_CU_DIV) return x / y;
  return scale * x;
}

template <int OP>
__global__ void binary_contig(float *y, const float *a, const float *b, float scale, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    y[i] = apply<OP>(a[i], OP == CX_CU_COPY ? 0.0f : b[i], scale);
}

template <int OP>
__global__ void binary_bcast(float *y, const float *a, const float *b, float scale, int64_t n,
                             bin_plan p) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i, oa = 0, ob = 0;
    for (int k = p.nd - 1; k >= 0; k--) {
      int64_t c = r % p.d[k];
      r /= p.d[k];
      oa += c * p.sa[k];
      ob += c * p.sb[k];
    }
    y[i] = apply<OP>(a[oa], OP == CX_CU_COPY ? 0.0f : b[ob], scale);
  }
}

template <int OP>
void launch_binary(float *y, const float *a, const float *b, float scale, int64_t n,
                   const bin_plan &p, cudaStream_t s) {
  /* one dim left with unit strides: every operand has y's shape */
  bool contig = p.nd == 0 ? false : p.nd == 1 && p.sa[0] == 1 && (OP == CX_CU_COPY || p.sb[0] == 1);
  if (contig) binary_contig<OP><<<blocks_for(n), THREADS, 0, s>>>(y, a, b, scale, n);
  else binary_bcast<OP><<<blocks_for(n), THREADS, 0, s>>>(y, a, b, scale, n, p);
}

/* ---- reduce-to (common.cuh's red_plan) ---- */

/* few terms per output: one thread per output element */
__global__ void reduce_thread(float *y, const float *x, int64_t m, int64_t r, float scale,
                              red_plan p) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < m;
       o += (int64_t)gridDim.x * blockDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    double acc = 0;
    for (int64_t j = 0; j < r; j++) acc += base[offset_of(j, p.nr, p.rd, p.rs)];
    y[o] = (float)(scale * acc);
  }
}

/* many terms per output: one block per output element, adjacent threads on adjacent terms */
__global__ void reduce_block(float *y, const float *x, int64_t m, int64_t r, float scale,
                             red_plan p) {
  __shared__ double part[THREADS / 32];
  for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {
    const float *base = x + offset_of(o, p.nk, p.kd, p.ks);
    double acc = 0;
    for (int64_t j = threadIdx.x; j < r; j += blockDim.x) acc += base[offset_of(j, p.nr, p.rd, p.rs)];
    for (int w = 16; w > 0; w /= 2) acc += __shfl_down_sync(0xffffffffu, acc, w);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
      acc = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : 0.0;
      for (int w = 16; w > 0; w /= 2) acc += __shfl_down_sync(0xffffffffu, acc, w);
      if (threadIdx.x == 0) y[o] = (float)(scale * acc);
    }
    __syncthreads(); /* part is reused by the next output */
  }
}

} // namespace

extern "C" cudaError_t cx_cu_binary(int op, float scale, float *y, const int64_t *yd, int ynd,
                                    const float *a, const int64_t *ad, int and_, const float *b,
                                    const int64_t *bd, int bnd, cudaStream_t s) {
  int64_t n = 1;
  for (int i = 0; i < ynd; i++) n *= yd[i];
  if (n == 0) return cudaSuccess;
  bin_plan p = make_bin_plan(yd, ynd, ad, and_, op == CX_CU_COPY ? nullptr : bd, bnd);
  switch (op) {
  case CX_CU_ADD: launch_binary<CX_CU_ADD>(y, a, b, scale, n, p, s); break;
  case CX_CU_SUB: launch_binary<CX_CU_SUB>(y, a, b, scale, n, p, s); break;
  case CX_CU_MUL: launch_binary<CX_CU_MUL>(y, a, b, scale, n, p, s); break;
  case CX_CU_DIV: launch_binary<CX_CU_DIV>(y, a, b, scale, n, p, s); break;
  case CX_CU_COPY: launch_binary<CX_CU_COPY>(y, a, b, scale, n, p, s); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_reduce_to(float *y, const int64_t *keep, const float *x,
                                       const int64_t *xd, int nd, float scale, cudaStream_t s) {
  int64_t m = 1, total = 1;
  for (int i = 0; i < nd; i++) {
    m *= keep[i];
    total *= xd[i];
  }
  if (m == 0) return cudaSuccess;
  if (total == 0) return cudaMemsetAsync(y, 0, sizeof(float) * (size_t)m, s);
  red_plan p = make_red_plan(keep, xd, nd);
  int64_t r = total / m;
  if (r < 128) {
    reduce_thread<<<blocks_for(m), THREADS, 0, s>>>(y, x, m, r, scale, p);
  } else {
    /* one block per output (m > 0 here) */
    reduce_block<<<blocks_for(m, 1), THREADS, 0, s>>>(y, x, m, r, scale, p);
  }
  return cudaGetLastError();
}
