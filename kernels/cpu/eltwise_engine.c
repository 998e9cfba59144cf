/* The strided broadcast engine behind Add, Sub, Mul, Div, Sum, Neg and BroadcastTo.
 *
 * The output shape is collapsed first: size-1 dimensions go, and neighbours whose strides in a and
 * b chain (both contiguous, both broadcast, ...) merge. Equal shapes become one long row and a
 * per-channel [1,C,1,1] operand against [N,C,H,W] becomes rows of H*W against a scalar, so the
 * fast paths fall out of the general plan. The innermost dimension is a row with strides 0 or 1;
 * the rest are walked with an odometer over a contiguous range of the output per thread. */

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "eltwise_engine.h"
#include "vec_avx2.h"

enum { PAR_MIN = 1 << 15 }; /* below this many elements a thread team costs more than it saves */

static bool portable_only;

static bool env_off(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

bool cx_cpu_avx512(void) {
  static int cached = -1; /* a benign race: every thread computes the same answer */
  if (cached < 0) cached = __builtin_cpu_supports("avx512f") && !env_off("CX_CPU_NO_AVX512");
  return cached == 1 && !portable_only;
}

bool cx_cpu_avx2(void) {
  static int cached = -1; /* a benign race, as above */
  if (cached < 0)
    cached = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             !env_off("CX_CPU_NO_AVX2");
  return cached == 1 && !portable_only;
}

void cx_cpu_force_portable(bool on) { portable_only = on; }

void cx_cpu_thread_range(int64_t n, int64_t *i0, int64_t *i1) {
  int t = omp_get_thread_num(), nt = omp_get_num_threads();
  int64_t blocks = (n + 15) / 16;
  *i0 = blocks * t / nt * 16;
  *i1 = blocks * (t + 1) / nt * 16;
  if (*i1 > n) *i1 = n;
  if (*i0 > n) *i0 = n;
}

typedef struct bin_plan {
  int nd;
  int64_t n[CX_MAX_DIMS];
  int64_t sa[CX_MAX_DIMS], sb[CX_MAX_DIMS]; /* element strides; 0 where broadcast */
} bin_plan;

/* Element strides of operand shape s seen through output shape ys (right-aligned). */
static void operand_strides(const cx_shape *ys, const cx_shape *s, int64_t *st) {
  int64_t acc = 1;
  for (int i = ys->ndim - 1; i >= 0; i--) {
    int j = i - (ys->ndim - (s ? s->ndim : 0));
    int64_t d = j >= 0 ? s->d[j] : 1;
    st[i] = d == 1 ? 0 : acc;
    acc *= d;
  }
}

static void bin_plan_make(bin_plan *p, const cx_shape *ys, const cx_shape *as, const cx_shape *bs) {
  int64_t sa[CX_MAX_DIMS], sb[CX_MAX_DIMS];
  operand_strides(ys, as, sa);
  operand_strides(ys, bs, sb);
  p->nd = 0;
  for (int i = 0; i < ys->ndim; i++) {
    if (ys->d[i] == 1) continue;
    int k = p->nd - 1;
    if (k >= 0 && p->sa[k] == sa[i] * ys->d[i] && p->sb[k] == sb[i] * ys->d[i]) {
      p->n[k] *= ys->d[i];
      p->sa[k] = sa[i];
      p->sb[k] = sb[i];
      continue;
    }
    p->n[p->nd] = ys->d[i];
    p->sa[p->nd] = sa[i];
    p->sb[p->nd] = sb[i];
    p->nd++;
  }
  if (p->nd == 0) { /* a scalar result */
    p->nd = 1;
    p->n[0] = 1;
    p->sa[0] = p->sb[0] = 0;
  }
}

/* One row: y[i] = a[i*ia] op b[i*ib], with ia, ib in {0, 1}. */
static void row_c(cx_bin_op op, float s, float *y, const float *a, int64_t ia, const float *b,
                  int64_t ib, int64_t n) {
  switch (op) {
  case CX_BIN_ADD: for (int64_t i = 0; i < n; i++) y[i] = a[i * ia] + b[i * ib]; break;
  case CX_BIN_SUB: for (int64_t i = 0; i < n; i++) y[i] = a[i * ia] - b[i * ib]; break;
  case CX_BIN_MUL: for (int64_t i = 0; i < n; i++) y[i] = a[i * ia] * b[i * ib]; break;
  case CX_BIN_DIV: for (int64_t i = 0; i < n; i++) y[i] = a[i * ia] / b[i * ib]; break;
  case CX_BIN_COPY: for (int64_t i = 0; i < n; i++) y[i] = s * a[i * ia]; break;
  }
}

__attribute__((target("avx512f"), always_inline)) static inline __m512
ld16(const float *p, int64_t inc, int64_t i, __mmask16 m) {
  return inc ? _mm512_maskz_loadu_ps(m, p + i) : _mm512_set1_ps(*p);
}

__attribute__((target("avx512f"), always_inline)) static inline __m512
apply16(cx_bin_op op, __m512 a, __m512 b, __m512 s) {
  switch (op) {
  case CX_BIN_ADD: return _mm512_add_ps(a, b);
  case CX_BIN_SUB: return _mm512_sub_ps(a, b);
  case CX_BIN_MUL: return _mm512_mul_ps(a, b);
  case CX_BIN_DIV: return _mm512_div_ps(a, b);
  case CX_BIN_COPY: return _mm512_mul_ps(a, s);
  }
  return a;
}

/* The op is a compile-time constant in each caller below, so the switch in apply16 folds away. */
#define ROW_AVX512(OP)                                                                             \
  do {                                                                                             \
    const float *bb = b ? b : &s; /* COPY has no b: point at something readable */                \
    int64_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16)                                                                   \
      _mm512_storeu_ps(y + i, apply16(OP, ld16(a, ia, i, 0xffff), ld16(bb, ib, i, 0xffff), vs));   \
    if (i < n) {                                                                                   \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1);                                              \
      _mm512_mask_storeu_ps(y + i, m, apply16(OP, ld16(a, ia, i, m), ld16(bb, ib, i, m), vs));     \
    }                                                                                              \
  } while (0)

__attribute__((target("avx512f"))) static void row_avx512(cx_bin_op op, float s, float *y,
                                                          const float *a, int64_t ia,
                                                          const float *b, int64_t ib, int64_t n) {
  __m512 vs = _mm512_set1_ps(s);
  switch (op) {
  case CX_BIN_ADD: ROW_AVX512(CX_BIN_ADD); break;
  case CX_BIN_SUB: ROW_AVX512(CX_BIN_SUB); break;
  case CX_BIN_MUL: ROW_AVX512(CX_BIN_MUL); break;
  case CX_BIN_DIV: ROW_AVX512(CX_BIN_DIV); break;
  case CX_BIN_COPY: ROW_AVX512(CX_BIN_COPY); break;
  }
}

/* AVX2 + FMA: the same rows 8 floats at a time, the tail through masked loads and stores. */
CX_AVX2_INLINE __m256 ld8(const float *p, int64_t inc, int64_t i, __m256i m) {
  return inc ? _mm256_maskload_ps(p + i, m) : _mm256_set1_ps(*p);
}

CX_AVX2_INLINE __m256 apply8(cx_bin_op op, __m256 a, __m256 b, __m256 s) {
  switch (op) {
  case CX_BIN_ADD: return _mm256_add_ps(a, b);
  case CX_BIN_SUB: return _mm256_sub_ps(a, b);
  case CX_BIN_MUL: return _mm256_mul_ps(a, b);
  case CX_BIN_DIV: return _mm256_div_ps(a, b);
  case CX_BIN_COPY: return _mm256_mul_ps(a, s);
  }
  return a;
}

#define ROW_AVX2(OP)                                                                               \
  do {                                                                                             \
    const float *bb = b ? b : &s;                                                                  \
    __m256i all = _mm256_set1_epi32(-1);                                                           \
    int64_t i = 0;                                                                                 \
    for (; i + 8 <= n; i += 8)                                                                     \
      _mm256_storeu_ps(y + i, apply8(OP, ld8(a, ia, i, all), ld8(bb, ib, i, all), vs));            \
    if (i < n) {                                                                                   \
      __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)),                              \
                                     _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));                   \
      /* masked-off lanes of a divisor load as 0: x / 0 there is never stored */                   \
      _mm256_maskstore_ps(y + i, m, apply8(OP, ld8(a, ia, i, m), ld8(bb, ib, i, m), vs));          \
    }                                                                                              \
  } while (0)

CX_AVX2 static void row_avx2(cx_bin_op op, float s, float *y, const float *a, int64_t ia,
                             const float *b, int64_t ib, int64_t n) {
  __m256 vs = _mm256_set1_ps(s);
  switch (op) {
  case CX_BIN_ADD: ROW_AVX2(CX_BIN_ADD); break;
  case CX_BIN_SUB: ROW_AVX2(CX_BIN_SUB); break;
  case CX_BIN_MUL: ROW_AVX2(CX_BIN_MUL); break;
  case CX_BIN_DIV: ROW_AVX2(CX_BIN_DIV); break;
  case CX_BIN_COPY: ROW_AVX2(CX_BIN_COPY); break;
  }
}

enum { ISA_C, ISA_AVX2, ISA_AVX512 };

static int row_isa(void) { return cx_cpu_avx512() ? ISA_AVX512 : cx_cpu_avx2() ? ISA_AVX2 : ISA_C; }

static void row(int isa, cx_bin_op op, float s, float *y, const float *a, int64_t ia,
                const float *b, int64_t ib, int64_t n) {
  if (isa == ISA_AVX512) row_avx512(op, s, y, a, ia, b, ib, n);
  else if (isa == ISA_AVX2) row_avx2(op, s, y, a, ia, b, ib, n);
  else row_c(op, s, y, a, ia, b, ib, n);
}

void cx_cpu_row_add(float *y, const float *a, const float *b, int64_t n) {
  row(row_isa(), CX_BIN_ADD, 1.0f, y, a, 1, b, 1, n);
}

typedef struct bin_job {
  const bin_plan *p;
  cx_bin_op op;
  float scale;
  float *y;
  const float *a, *b;
  int isa;
} bin_job;

/* Output elements [e0, e1). */
static void bin_range(const bin_job *j, int64_t e0, int64_t e1) {
  const bin_plan *p = j->p;
  int nd = p->nd, last = nd - 1;
  int64_t inner = p->n[last], ia = p->sa[last], ib = p->sb[last];
  int64_t idx[CX_MAX_DIMS], r = e0 / inner, c = e0 % inner, oa = 0, ob = 0;
  for (int d = last - 1; d >= 0; d--) {
    idx[d] = r % p->n[d];
    r /= p->n[d];
    oa += idx[d] * p->sa[d];
    ob += idx[d] * p->sb[d];
  }
  for (int64_t e = e0; e < e1;) {
    int64_t len = inner - c < e1 - e ? inner - c : e1 - e;
    const float *a = j->a + oa + c * ia, *b = j->b ? j->b + ob + c * ib : NULL;
    row(j->isa, j->op, j->scale, j->y + e, a, ia, b, ib, len);
    e += len;
    c = 0;
    for (int d = last - 1; d >= 0; d--) {
      oa += p->sa[d];
      ob += p->sb[d];
      if (++idx[d] < p->n[d]) break;
      oa -= p->sa[d] * p->n[d];
      ob -= p->sb[d] * p->n[d];
      idx[d] = 0;
    }
  }
}

void cx_cpu_binary(cx_bin_op op, float scale, float *y, const cx_shape *ys, const float *a,
                   const cx_shape *as, const float *b, const cx_shape *bs) {
  int64_t total = cx_shape_numel(ys);
  if (total <= 0) return;
  bin_plan p;
  bin_plan_make(&p, ys, as, op == CX_BIN_COPY ? NULL : bs);
  bin_job j = {&p, op, scale, y, a, op == CX_BIN_COPY ? NULL : b, row_isa()};
#pragma omp parallel if (total > PAR_MIN)
  {
    int64_t e0, e1;
    cx_cpu_thread_range(total, &e0, &e1);
    if (e0 < e1) bin_range(&j, e0, e1);
  }
}
