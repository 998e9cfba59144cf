#ifndef CX_CUDA_BCAST_CUH
#define CX_CUDA_BCAST_CUH

/* numpy broadcasting of N operands against one contiguous output, for the .cu files of the
 * select (Pow, PowGrad, Where) and compare (Equal, Less, ...) families; eltwise_kernels.cu keeps
 * its own two-operand f32 plan with its contiguous fast path. Like common.cuh (which this
 * includes): device/C++ code only, everything in an anonymous namespace, inline or templates. */

#include "common.cuh"

namespace {

/* The output's dims (size-1 dims dropped, neighbours merged where every operand's stride goes on
 * across them) and each operand's element strides along them, 0 where it broadcasts. */
template <int N>
struct bc_plan {
  int nd;
  int64_t d[MAXD];
  int64_t st[N][MAXD];
};

/* y: dims yd[0..ynd); operand k: dims od[k][0..ond[k]) with ond[k] <= ynd, aligned right (the
 * ranks were checked by shape inference; ynd <= MAXD as every tensor's). */
template <int N>
inline bc_plan<N> make_bc_plan(const int64_t *yd, int ynd, const int64_t *const *od,
                               const int *ond) {
  int64_t st[N][MAXD];
  for (int k = 0; k < N; k++) {
    int64_t acc = 1;
    for (int i = ynd - 1; i >= 0; i--) {
      int j = i - (ynd - ond[k]);
      st[k][i] = j < 0 || od[k][j] == 1 || yd[i] == 1 ? 0 : acc;
      if (j >= 0) acc *= od[k][j];
    }
  }
  int64_t d[MAXD], s[N][MAXD];
  int n = 0;
  for (int i = ynd - 1; i >= 0; i--) { /* from the innermost dim */
    if (yd[i] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < N && merge; k++) merge = st[k][i] == s[k][n - 1] * d[n - 1];
    if (merge) {
      d[n - 1] *= yd[i];
      continue;
    }
    d[n] = yd[i];
    for (int k = 0; k < N; k++) s[k][n] = st[k][i];
    n++;
  }
  bc_plan<N> p = {};
  p.nd = n;
  for (int i = 0; i < n; i++) { /* back to outer-first order */
    p.d[i] = d[n - 1 - i];
    for (int k = 0; k < N; k++) p.st[k][i] = s[k][n - 1 - i];
  }
  return p;
}

/* off[k]: operand k's element offset at output element i */
template <int N>
__device__ __forceinline__ void bc_offsets(const bc_plan<N> &p, int64_t i, int64_t *off) {
  for (int k = 0; k < N; k++) off[k] = 0;
  for (int j = p.nd - 1; j >= 0; j--) {
    int64_t c = i % p.d[j];
    i /= p.d[j];
    for (int k = 0; k < N; k++) off[k] += c * p.st[k][j];
  }
}

} // namespace

#endif
