/* Device code of the select family: Pow, PowGrad and Where, one thread per output element with
 * each operand's offset from bcast.cuh's plan. The arithmetic is kernels/cpu/select.c's, in f32
 * and in the same order: an exponent of 2 is x * x, 0.5 sqrtf (IEEE-rounded, as nvcc compiles
 * without fast math), 1 x itself, and any other powf, whose CUDA version is within 2 ulp of the
 * exact result where glibc's is within 1, so those may differ from the CPU in the last bits. */

#include "bcast.cuh"
#include "select_launch.h"

namespace {

__device__ __forceinline__ float pow1(float x, float e) {
  if (e == 2.0f) return x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == 1.0f) return x;
  return powf(x, e);
}

__global__ void pow_kernel(float *y, const float *x, const float *e, int64_t n, bc_plan<2> p) {
  GRID_STRIDE(i, n) {
    int64_t off[2];
    bc_offsets(p, i, off);
    y[i] = pow1(x[off[0]], e[off[1]]);
  }
}

__global__ void pow_grad_kernel(float *dx, const float *dy, const float *x, const float *e,
                                int64_t n, bc_plan<3> p) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    bc_offsets(p, i, off);
    float xv = x[off[1]], ev = e[off[2]];
    float d = ev == 2.0f ? 2.0f * xv : ev * pow1(xv, ev - 1.0f);
    dx[i] = dy[off[0]] * d;
  }
}

__global__ void where_kernel(float *y, const uint8_t *c, const float *a, const float *b,
                             int64_t n, bc_plan<3> p) {
  GRID_STRIDE(i, n) {
    int64_t off[3];
    bc_offsets(p, i, off);
    y[i] = c[off[0]] ? a[off[1]] : b[off[2]];
  }
}

int64_t numel(const int64_t *d, int nd) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= d[i];
  return n;
}

template <int N>
bc_plan<N> plan_of(const int64_t *yd, int ynd, const cx_cu_operand *ops) {
  const int64_t *od[N];
  int ond[N];
  for (int k = 0; k < N; k++) od[k] = ops[k].d, ond[k] = ops[k].nd;
  return make_bc_plan<N>(yd, ynd, od, ond);
}

} // namespace

extern "C" cudaError_t cx_cu_pow(float *y, const int64_t *yd, int ynd, cx_cu_operand x,
                                 cx_cu_operand e, cudaStream_t s) {
  int64_t n = numel(yd, ynd);
  if (n == 0) return cudaSuccess;
  cx_cu_operand ops[2] = {x, e};
  pow_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, (const float *)x.data, (const float *)e.data, n,
                                               plan_of<2>(yd, ynd, ops));
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_pow_grad(float *dx, const int64_t *yd, int ynd, cx_cu_operand dy,
                                      cx_cu_operand x, cx_cu_operand e, cudaStream_t s) {
  int64_t n = numel(yd, ynd);
  if (n == 0) return cudaSuccess;
  cx_cu_operand ops[3] = {dy, x, e};
  pow_grad_kernel<<<blocks_for(n), THREADS, 0, s>>>(dx, (const float *)dy.data,
                                                    (const float *)x.data, (const float *)e.data,
                                                    n, plan_of<3>(yd, ynd, ops));
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_where(float *y, const int64_t *yd, int ynd, cx_cu_operand c,
                                   cx_cu_operand a, cx_cu_operand b, cudaStream_t s) {
  int64_t n = numel(yd, ynd);
  if (n == 0) return cudaSuccess;
  cx_cu_operand ops[3] = {c, a, b};
  where_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, (const uint8_t *)c.data, (const float *)a.data,
                                                 (const float *)b.data, n,
                                                 plan_of<3>(yd, ynd, ops));
  return cudaGetLastError();
}
