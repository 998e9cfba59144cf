#include "conv_depthwise.h"

#include <stddef.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CX_DW_X86 1
#endif

/* Index bookkeeping shared by both paths. The output pixel (oy, ox) reads input pixel
 * (oy*sh - pt + ky, ox*sw - pl + kx); input rows outside the image are skipped rather than
 * padded, and the vector path masks columns outside it, so no padded copy is ever made. */

static int64_t in_row(const cx_conv_geom *g, int64_t oy, int ky) { return oy * g->sh - g->pt + ky; }

/* The output row that input row iy reaches through kernel row ky, or -1. */
static int64_t out_row(const cx_conv_geom *g, int64_t iy, int ky) {
  int64_t t = iy + g->pt - ky;
  if (t < 0 || t % g->sh) return -1;
  return t / g->sh < g->oh ? t / g->sh : -1;
}

/* ---- portable C ------------------------------------------------------------------------------- */

static void fwd_plane_c(const cx_conv_geom *g, const float *x, const float *w, float b, float *y) {
  for (int64_t oy = 0; oy < g->oh; oy++)
    for (int64_t ox = 0; ox < g->ow; ox++) {
      float s = b;
      for (int ky = 0; ky < 3; ky++) {
        int64_t iy = in_row(g, oy, ky);
        if (iy < 0 || iy >= g->h) continue;
        for (int kx = 0; kx < 3; kx++) {
          int64_t ix = ox * g->sw - g->pl + kx;
          if (ix >= 0 && ix < g->w) s += w[ky * 3 + kx] * x[iy * g->w + ix];
        }
      }
      y[oy * g->ow + ox] = s;
    }
}

static void bwd_data_plane_c(const cx_conv_geom *g, const float *dy, const float *w, float *dx) {
  for (int64_t iy = 0; iy < g->h; iy++)
    for (int64_t ix = 0; ix < g->w; ix++) {
      float s = 0;
      for (int ky = 0; ky < 3; ky++) {
        int64_t oy = out_row(g, iy, ky);
        if (oy < 0) continue;
        for (int kx = 0; kx < 3; kx++) {
          int64_t t = ix + g->pl - kx;
          if (t < 0 || t % g->sw || t / g->sw >= g->ow) continue;
          s += w[ky * 3 + kx] * dy[oy * g->ow + t / g->sw];
        }
      }
      dx[iy * g->w + ix] = s;
    }
}

/* Adds one plane's contribution to the nine weight gradients and the bias gradient. */
static void bwd_weights_plane_c(const cx_conv_geom *g, const float *x, const float *dy,
                                double acc[9], double *accb) {
  for (int64_t oy = 0; oy < g->oh; oy++)
    for (int64_t ox = 0; ox < g->ow; ox++) {
      float d = dy[oy * g->ow + ox];
      *accb += d;
      for (int ky = 0; ky < 3; ky++) {
        int64_t iy = in_row(g, oy, ky);
        if (iy < 0 || iy >= g->h) continue;
        for (int kx = 0; kx < 3; kx++) {
          int64_t ix = ox * g->sw - g->pl + kx;
          if (ix >= 0 && ix < g->w) acc[ky * 3 + kx] += d * x[iy * g->w + ix];
        }
      }
    }
}

/* ---- AVX-512 ---------------------------------------------------------------------------------- */

#ifdef CX_DW_X86

#define AVX512 __attribute__((target("avx512f")))

/* Lanes l of a 16-wide load starting at column j0 with 0 <= j0 + l < len. */
static inline __mmask16 lane_mask(int64_t j0, int64_t len) {
  int64_t lo = j0 < 0 ? -j0 : 0, hi = len - j0 < 16 ? len - j0 : 16;
  if (hi <= lo) return 0;
  return (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

/* Columns j0, j0+1, ... of row (zero outside [0, len)); masked lanes are never touched, so the
 * address may lie outside the row. */
AVX512 static inline __m512 load_cols(const float *row, int64_t j0, int64_t len) {
  return _mm512_maskz_loadu_ps(lane_mask(j0, len), row + j0);
}

/* Columns j0, j0+2, ..., j0+30 of row (zero outside [0, len)). */
AVX512 static inline __m512 load_cols2(const float *row, int64_t j0, int64_t len) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(load_cols(row, j0, len), even, load_cols(row, j0 + 16, len));
}

/* 16 input columns seen by output columns ox0.. through kernel column kx */
AVX512 static inline __m512 load_x(const cx_conv_geom *g, const float *row, int64_t ox0, int kx) {
  int64_t j0 = ox0 * g->sw - g->pl + kx;
  return g->sw == 1 ? load_cols(row, j0, g->w) : load_cols2(row, j0, g->w);
}

AVX512 static void fwd_plane_avx512(const cx_conv_geom *g, const float *x, const float *w, float b,
                                    float *y) {
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(w[k]);
  for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 16) {
    __mmask16 store = lane_mask(ox0, g->ow);
    for (int64_t oy = 0; oy < g->oh; oy++) {
      __m512 acc = _mm512_set1_ps(b);
      for (int ky = 0; ky < 3; ky++) {
        int64_t iy = in_row(g, oy, ky);
        if (iy < 0 || iy >= g->h) continue;
        const float *row = x + iy * g->w;
        for (int kx = 0; kx < 3; kx++)
          acc = _mm512_fmadd_ps(wv[ky * 3 + kx], load_x(g, row, ox0, kx), acc);
      }
      _mm512_mask_storeu_ps(y + oy * g->ow + ox0, store, acc);
    }
  }
}

/* dx row iy, columns ix0..ix0+15, stride 1: dx[ix] = sum_kx w[kx] * dy[ix + pl - kx] */
AVX512 static inline __m512 bwd_cols_s1(const cx_conv_geom *g, const __m512 *wk, const float *dyrow,
                                        int64_t ix0, __m512 acc) {
  for (int kx = 0; kx < 3; kx++)
    acc = _mm512_fmadd_ps(wk[kx], load_cols(dyrow, ix0 + g->pl - kx, g->ow), acc);
  return acc;
}

/* Stride 2: dx column 2m+p takes dy column m + (p+pl-kx)/2 from each kx with p+pl-kx even. The even
 * and odd columns of 32 dx columns from ix0 = 2*m0 are gathered separately. */
AVX512 static inline void bwd_cols_s2(const cx_conv_geom *g, const __m512 *wk, const float *dyrow,
                                      int64_t m0, __m512 acc[2]) {
  for (int p = 0; p < 2; p++)
    for (int kx = 0; kx < 3; kx++) {
      int64_t t = p + g->pl - kx;
      if (t & 1) continue;
      acc[p] = _mm512_fmadd_ps(wk[kx], load_cols(dyrow, m0 + t / 2, g->ow), acc[p]);
    }
}

AVX512 static void bwd_data_row_s1(const cx_conv_geom *g, const float *dy, const __m512 *wv,
                                   int64_t iy, float *dxrow) {
  for (int64_t ix0 = 0; ix0 < g->w; ix0 += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (int ky = 0; ky < 3; ky++) {
      int64_t oy = out_row(g, iy, ky);
      if (oy >= 0) acc = bwd_cols_s1(g, wv + ky * 3, dy + oy * g->ow, ix0, acc);
    }
    _mm512_mask_storeu_ps(dxrow + ix0, lane_mask(ix0, g->w), acc);
  }
}

AVX512 static void bwd_data_row_s2(const cx_conv_geom *g, const float *dy, const __m512 *wv,
                                   int64_t iy, float *dxrow) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int64_t ix0 = 0; ix0 < g->w; ix0 += 32) {
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int ky = 0; ky < 3; ky++) {
      int64_t oy = out_row(g, iy, ky);
      if (oy >= 0) bwd_cols_s2(g, wv + ky * 3, dy + oy * g->ow, ix0 / 2, acc);
    }
    _mm512_mask_storeu_ps(dxrow + ix0, lane_mask(ix0, g->w), _mm512_permutex2var_ps(acc[0], lo, acc[1]));
    _mm512_mask_storeu_ps(dxrow + ix0 + 16, lane_mask(ix0 + 16, g->w),
                          _mm512_permutex2var_ps(acc[0], hi, acc[1]));
  }
}

AVX512 static void bwd_data_plane_avx512(const cx_conv_geom *g, const float *dy, const float *w,
                                         float *dx) {
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(w[k]);
  for (int64_t iy = 0; iy < g->h; iy++) {
    if (g->sw == 1)
      bwd_data_row_s1(g, dy, wv, iy, dx + iy * g->w);
    else
      bwd_data_row_s2(g, dy, wv, iy, dx + iy * g->w);
  }
}

/* Adds one plane's products to the 9 weight accumulators and the bias accumulator. */
AVX512 static void bwd_weights_plane_avx512(const cx_conv_geom *g, const float *x, const float *dy,
                                            __m512 acc[10]) {
  for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 16) {
    __mmask16 m = lane_mask(ox0, g->ow);
    for (int64_t oy = 0; oy < g->oh; oy++) {
      __m512 d = _mm512_maskz_loadu_ps(m, dy + oy * g->ow + ox0);
      acc[9] = _mm512_add_ps(acc[9], d);
      for (int ky = 0; ky < 3; ky++) {
        int64_t iy = in_row(g, oy, ky);
        if (iy < 0 || iy >= g->h) continue;
        const float *row = x + iy * g->w;
        for (int kx = 0; kx < 3; kx++)
          acc[ky * 3 + kx] = _mm512_fmadd_ps(d, load_x(g, row, ox0, kx), acc[ky * 3 + kx]);
      }
    }
  }
}

AVX512 static void bwd_weights_channel_avx512(const cx_conv_geom *g, int64_t c, const float *x,
                                              const float *dy, float *dw, float *db) {
  __m512 acc[10];
  for (int k = 0; k < 10; k++) acc[k] = _mm512_setzero_ps();
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  for (int64_t n = 0; n < g->n; n++)
    bwd_weights_plane_avx512(g, x + (n * g->c_in + c) * xs, dy + (n * g->c_out + c) * ys, acc);
  if (dw)
    for (int k = 0; k < 9; k++) dw[c * 9 + k] = _mm512_reduce_add_ps(acc[k]);
  if (db) db[c] = _mm512_reduce_add_ps(acc[9]);
}

bool cx_conv_dw_have_avx512(void) { return __builtin_cpu_supports("avx512f"); }

#else

bool cx_conv_dw_have_avx512(void) { return false; }

#endif

/* ---- entry points: OpenMP over planes (batch x channel), or channels for the weights ------------ */

void cx_conv_dw3x3_forward(const cx_conv_geom *g, const float *x, const float *w, const float *b,
                           float *y, bool avx512) {
  int64_t planes = g->n * g->c_in, xs = g->h * g->w, ys = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; p++) {
    int64_t c = p % g->c_in;
    float bc = b ? b[c] : 0.0f;
#ifdef CX_DW_X86
    if (avx512) {
      fwd_plane_avx512(g, x + p * xs, w + c * 9, bc, y + p * ys);
      continue;
    }
#endif
    fwd_plane_c(g, x + p * xs, w + c * 9, bc, y + p * ys);
  }
  (void)avx512;
}

void cx_conv_dw3x3_backward_data(const cx_conv_geom *g, const float *dy, const float *w, float *dx,
                                 bool avx512) {
  int64_t planes = g->n * g->c_in, xs = g->h * g->w, ys = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; p++) {
    int64_t c = p % g->c_in;
#ifdef CX_DW_X86
    if (avx512) {
      bwd_data_plane_avx512(g, dy + p * ys, w + c * 9, dx + p * xs);
      continue;
    }
#endif
    bwd_data_plane_c(g, dy + p * ys, w + c * 9, dx + p * xs);
  }
  (void)avx512;
}

static void bwd_weights_channel_c(const cx_conv_geom *g, int64_t c, const float *x, const float *dy,
                                  float *dw, float *db) {
  double acc[9] = {0}, accb = 0;
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  for (int64_t n = 0; n < g->n; n++)
    bwd_weights_plane_c(g, x + (n * g->c_in + c) * xs, dy + (n * g->c_out + c) * ys, acc, &accb);
  if (dw)
    for (int k = 0; k < 9; k++) dw[c * 9 + k] = (float)acc[k];
  if (db) db[c] = (float)accb;
}

void cx_conv_dw3x3_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                    float *dw, float *db, bool avx512) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g->c_in; c++) {
#ifdef CX_DW_X86
    if (avx512) {
      bwd_weights_channel_avx512(g, c, x, dy, dw, db);
      continue;
    }
#endif
    bwd_weights_channel_c(g, c, x, dy, dw, db);
  }
  (void)avx512;
}
