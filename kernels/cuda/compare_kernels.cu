/* Device code of the compare family: broadcasting comparisons (bcast.cuh's plan), Not, and Cast
 * as kernels/cpu/compare.c converts. */

#include "bcast.cuh"
#include "compare_launch.h"

namespace {

/* ---- comparisons: in the operands' own type, which gives what the CPU's comparisons through
 * double (exact for f32 and s32) and its sign test for s64 give; NaN compares false ---- */

template <int OP, typename T>
__device__ __forceinline__ bool cmp(T x, T y) {
  if (OP == CX_CU_EQ) return x == y;
  if (OP == CX_CU_LT) return x < y;
  if (OP == CX_CU_GT) return x > y;
  if (OP == CX_CU_LE) return x <= y;
  return x >= y;
}

template <int OP, typename T>
__global__ void compare_kernel(uint8_t *y, const T *a, const T *b, int64_t n, bc_plan<2> p) {
  GRID_STRIDE(i, n) {
    int64_t off[2];
    bc_offsets(p, i, off);
    y[i] = cmp<OP, T>(a[off[0]], b[off[1]]) ? 1 : 0;
  }
}

template <typename T>
cudaError_t launch_compare(int op, uint8_t *y, const void *a, const void *b, int64_t n,
                           const bc_plan<2> &p, cudaStream_t s) {
  unsigned g = blocks_for(n);
  const T *x = (const T *)a, *z = (const T *)b;
  switch (op) {
  case CX_CU_EQ: compare_kernel<CX_CU_EQ, T><<<g, THREADS, 0, s>>>(y, x, z, n, p); break;
  case CX_CU_LT: compare_kernel<CX_CU_LT, T><<<g, THREADS, 0, s>>>(y, x, z, n, p); break;
  case CX_CU_GT: compare_kernel<CX_CU_GT, T><<<g, THREADS, 0, s>>>(y, x, z, n, p); break;
  case CX_CU_LE: compare_kernel<CX_CU_LE, T><<<g, THREADS, 0, s>>>(y, x, z, n, p); break;
  case CX_CU_GE: compare_kernel<CX_CU_GE, T><<<g, THREADS, 0, s>>>(y, x, z, n, p); break;
  default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

__global__ void not_kernel(uint8_t *y, const uint8_t *x, int64_t n) {
  GRID_STRIDE(i, n) y[i] = x[i] ? 0 : 1;
}

/* ---- Cast ----
 * The CPU converts through double: the value loaded (a bool as 0 or 1), truncated toward zero
 * for an integer target, then stored with C's conversion; s64 to a narrower integer goes
 * integer to integer (modulo 2^bits, as GCC defines it). C leaves a double outside the target's
 * range (NaN and infinities included) undefined; on x86-64, where the CPU backend runs, GCC
 * converts with cvttsd2si, which gives the "integer indefinite" INT_MIN (INT64_MIN for s64) for
 * those, and narrows to s8 / u8 through a 32-bit conversion (300.0 -> u8 44, 1e10 -> 0). The
 * device's own conversions saturate instead, so the x86 results are spelt out here and the two
 * backends agree bit for bit. */

template <int T> struct ctype;
template <> struct ctype<CX_CU_T_F32> { typedef float t; };
template <> struct ctype<CX_CU_T_U8> { typedef uint8_t t; };
template <> struct ctype<CX_CU_T_S8> { typedef int8_t t; };
template <> struct ctype<CX_CU_T_S32> { typedef int32_t t; };
template <> struct ctype<CX_CU_T_S64> { typedef int64_t t; };
template <> struct ctype<CX_CU_T_BOOL> { typedef uint8_t t; };

/* cvttsd2si, 32- and 64-bit: truncation, INT_MIN / INT64_MIN when out of range or NaN */
__device__ __forceinline__ int32_t x86_cvt32(double v) {
  return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : INT32_MIN;
}
__device__ __forceinline__ int64_t x86_cvt64(double v) {
  return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? (int64_t)v : INT64_MIN;
}

template <int FROM, int TO>
__device__ __forceinline__ typename ctype<TO>::t convert(typename ctype<FROM>::t x) {
  typedef typename ctype<TO>::t To;
  if constexpr (FROM == CX_CU_T_S64 && TO != CX_CU_T_F32 && TO != CX_CU_T_BOOL) {
    return (To)x; /* integer narrowing, modulo 2^bits */
  } else {
    double v = FROM == CX_CU_T_BOOL ? (x != 0 ? 1.0 : 0.0) : (double)x;
    if constexpr (TO == CX_CU_T_F32) return (float)v; /* s64: rounded to double, then float */
    else if constexpr (TO == CX_CU_T_BOOL) return v != 0 ? 1 : 0; /* NaN is nonzero: true */
    else if constexpr (TO == CX_CU_T_S64) return x86_cvt64(trunc(v));
    else return (To)x86_cvt32(trunc(v)); /* s32 as it is; s8, u8 its low byte */
  }
}

template <int FROM, int TO>
__global__ void cast_kernel(typename ctype<TO>::t *y, const typename ctype<FROM>::t *x,
                            int64_t n) {
  GRID_STRIDE(i, n) y[i] = convert<FROM, TO>(x[i]);
}

template <int FROM, int TO>
cudaError_t launch_cast(void *y, const void *x, int64_t n, cudaStream_t s) {
  if constexpr (FROM == TO) {
    return cudaErrorInvalidValue; /* a copy: the caller's */
  } else {
    cast_kernel<FROM, TO><<<blocks_for(n), THREADS, 0, s>>>((typename ctype<TO>::t *)y,
                                                           (const typename ctype<FROM>::t *)x, n);
    return cudaGetLastError();
  }
}

template <int FROM>
cudaError_t cast_from(void *y, int to, const void *x, int64_t n, cudaStream_t s) {
  switch (to) {
  case CX_CU_T_F32: return launch_cast<FROM, CX_CU_T_F32>(y, x, n, s);
  case CX_CU_T_U8: return launch_cast<FROM, CX_CU_T_U8>(y, x, n, s);
  case CX_CU_T_S8: return launch_cast<FROM, CX_CU_T_S8>(y, x, n, s);
  case CX_CU_T_S32: return launch_cast<FROM, CX_CU_T_S32>(y, x, n, s);
  case CX_CU_T_S64: return launch_cast<FROM, CX_CU_T_S64>(y, x, n, s);
  case CX_CU_T_BOOL: return launch_cast<FROM, CX_CU_T_BOOL>(y, x, n, s);
  default: return cudaErrorInvalidValue;
  }
}

} // namespace

extern "C" cudaError_t cx_cu_compare(int op, int type, uint8_t *y, const int64_t *yd, int ynd,
                                     const void *a, const int64_t *ad, int and_, const void *b,
                                     const int64_t *bd, int bnd, cudaStream_t s) {
  int64_t n = 1;
  for (int i = 0; i < ynd; i++) n *= yd[i];
  if (n == 0) return cudaSuccess;
  const int64_t *od[2] = {ad, bd};
  int ond[2] = {and_, bnd};
  bc_plan<2> p = make_bc_plan<2>(yd, ynd, od, ond);
  switch (type) {
  case CX_CU_T_F32: return launch_compare<float>(op, y, a, b, n, p, s);
  case CX_CU_T_S32: return launch_compare<int32_t>(op, y, a, b, n, p, s);
  case CX_CU_T_S64: return launch_compare<int64_t>(op, y, a, b, n, p, s);
  default: return cudaErrorInvalidValue;
  }
}

extern "C" cudaError_t cx_cu_not(uint8_t *y, const uint8_t *x, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  not_kernel<<<blocks_for(n), THREADS, 0, s>>>(y, x, n);
  return cudaGetLastError();
}

extern "C" cudaError_t cx_cu_cast(void *y, int to, const void *x, int from, int64_t n,
                                  cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  switch (from) {
  case CX_CU_T_F32: return cast_from<CX_CU_T_F32>(y, to, x, n, s);
  case CX_CU_T_U8: return cast_from<CX_CU_T_U8>(y, to, x, n, s);
  case CX_CU_T_S8: return cast_from<CX_CU_T_S8>(y, to, x, n, s);
  case CX_CU_T_S32: return cast_from<CX_CU_T_S32>(y, to, x, n, s);
  case CX_CU_T_S64: return cast_from<CX_CU_T_S64>(y, to, x, n, s);
  case CX_CU_T_BOOL: return cast_from<CX_CU_T_BOOL>(y, to, x, n, s);
  default: return cudaErrorInvalidValue;
  }
}
