#include "stage.h"

#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/dtype.h"
#include "bf16_vec.h"
#include "eltwise_engine.h"

#if defined(__x86_64__) || defined(__i386__)

CX_BF16_TARGET static int64_t widen_avx512(float *y, const uint16_t *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (i % 32 == 0) /* a line of the next piece: its first lines would wait on memory */
      _mm_prefetch((const char *)(x + i + CX_STAGE), _MM_HINT_T0);
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
    _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  return i;
}

CX_BF16_TARGET static int64_t round_avx512(uint16_t *y, const float *x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256((__m256i *)(y + i), (__m256i)h);
  }
  return i;
}

/* bf16 programs run only where the CPU has AVX512-BF16 (kernels/cpu/backend.c); elsewhere (tests
 * of the portable paths) the scalar loops do the same rounding. */
static bool have_bf16(void) {
  static int have = -1;
  if (have < 0) /* every CPU with AVX512-BF16 has BW, which bf16_vec.h's masked tails take */
    have = cx_cpu_avx512() && __builtin_cpu_supports("avx512bf16") &&
           __builtin_cpu_supports("avx512bw");
  return have;
}
#else /* never called: have_bf16() is false */
static bool have_bf16(void) { return false; }
static int64_t widen_avx512(float *y, const uint16_t *x, int64_t n) {
  (void)y, (void)x, (void)n;
  return 0;
}
static int64_t round_avx512(uint16_t *y, const float *x, int64_t n) {
  (void)y, (void)x, (void)n;
  return 0;
}
#endif

bool cx_cpu_bf16_direct(void) {
  static int direct = -1;
  if (direct < 0) {
    const char *e = getenv("CX_BF16_DIRECT");
    direct = have_bf16() && !(e && !strcmp(e, "off"));
  }
  return direct;
}

void cx_cpu_bf16_widen(float *y, const uint16_t *x, int64_t n) {
  int64_t i = have_bf16() ? widen_avx512(y, x, n) : 0;
  for (; i < n; i++) y[i] = cx_bf16_to_f32(x[i]);
}

void cx_cpu_bf16_round(uint16_t *y, const float *x, int64_t n) {
  int64_t i = have_bf16() ? round_avx512(y, x, n) : 0;
  for (; i < n; i++) y[i] = cx_f32_to_bf16(x[i]);
}

const float *cx_stage_in(const cx_tensor *t, int64_t i, int64_t n, float *buf) {
  if (t->dtype != CX_BF16) return (const float *)t->data + i;
  cx_cpu_bf16_widen(buf, (const uint16_t *)t->data + i, n);
  return buf;
}

float *cx_stage_out(const cx_tensor *t, int64_t i, float *buf) {
  return t->dtype == CX_BF16 ? buf : (float *)t->data + i;
}

void cx_stage_commit(const cx_tensor *t, int64_t i, int64_t n, const float *buf) {
  if (t->dtype == CX_BF16) cx_cpu_bf16_round((uint16_t *)t->data + i, buf, n);
}

static void map_range(cx_stage_fn f, const void *ctx, const cx_tensor *y,
                      const cx_tensor *const *x, int n_x, int64_t i0, int64_t i1) {
  _Alignas(64) float in[CX_STAGE_MAX_IN][CX_STAGE], out[CX_STAGE];
  const float *xs[CX_STAGE_MAX_IN] = {0};
  for (int64_t i = i0; i < i1; i += CX_STAGE) {
    int64_t n = i1 - i < CX_STAGE ? i1 - i : CX_STAGE;
    for (int k = 0; k < n_x; k++) xs[k] = x[k] ? cx_stage_in(x[k], i, n, in[k]) : NULL;
    float *ys = cx_stage_out(y, i, out);
    f(ctx, ys, xs, n);
    cx_stage_commit(y, i, n, ys);
  }
}

void cx_stage_map(cx_stage_fn f, const void *ctx, const cx_tensor *y, const cx_tensor *const *x,
                  int n_x, bool par) {
  int64_t n = cx_tensor_numel(y);
#pragma omp parallel if (par)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    map_range(f, ctx, y, x, n_x, i0, i1);
  }
}

bool cx_stage_any_bf16(const cx_tensor *in, int n_in, const cx_tensor *out, int n_out) {
  for (int k = 0; k < n_in; k++)
    if (in[k].data && in[k].dtype == CX_BF16) return true;
  for (int k = 0; k < n_out; k++)
    if (out[k].dtype == CX_BF16) return true;
  return false;
}

bool cx_stage_all_bf16(const cx_tensor *in, int n_in, const cx_tensor *out, int n_out) {
  for (int k = 0; k < n_in; k++)
    if (in[k].data && in[k].dtype != CX_BF16) return false;
  for (int k = 0; k < n_out; k++)
    if (out[k].dtype != CX_BF16) return false;
  return cx_cpu_bf16_direct();
}
