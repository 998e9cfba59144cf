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

/* Where each kernel column kx reads for one block of columns: the first column and the masks of
 * the 16-lane loads at it and 16 further (zero outside the row). Computed once per block and
 * reused for every row, so the row loops are loads and FMAs only. Masked lanes are never touched,
 * so the addresses may lie outside the row. */
typedef struct col_block {
  int64_t off[3];
  __mmask16 lo[3], hi[3];
} col_block;

static col_block col_block_make(int64_t off0, int64_t off1, int64_t off2, int64_t len) {
  col_block cb = {.off = {off0, off1, off2}};
  for (int k = 0; k < 3; k++) {
    cb.lo[k] = lane_mask(cb.off[k], len);
    cb.hi[k] = lane_mask(cb.off[k] + 16, len);
  }
  return cb;
}

/* columns off[kx] .. off[kx]+15 */
AVX512 static inline __m512 load1(const float *row, const col_block *cb, int kx) {
  return _mm512_maskz_loadu_ps(cb->lo[kx], row + cb->off[kx]);
}

/* columns off[kx], off[kx]+2, ..., off[kx]+30 */
AVX512 static inline __m512 load2(const float *row, const col_block *cb, int kx) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(cb->lo[kx], row + cb->off[kx]), even,
                                _mm512_maskz_loadu_ps(cb->hi[kx], row + cb->off[kx] + 16));
}

/* Input columns under 16 output columns from ox0, for each kx. */
static col_block x_cols(const cx_conv_geom *g, int64_t ox0) {
  int64_t j = ox0 * g->sw - g->pl;
  return col_block_make(j, j + 1, j + 2, g->w);
}

/* One row of 16 outputs; one accumulator per kernel row keeps the FMA chains short. */
AVX512 static inline __m512 fwd_row(const cx_conv_geom *g, const float *x, const __m512 *wv,
                                    const col_block *cb, int64_t oy, float b) {
  __m512 acc[3] = {_mm512_set1_ps(b), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (int ky = 0; ky < 3; ky++) {
    int64_t iy = in_row(g, oy, ky);
    if (iy < 0 || iy >= g->h) continue;
    const float *row = x + iy * g->w;
    for (int kx = 0; kx < 3; kx++)
      acc[ky] = _mm512_fmadd_ps(wv[ky * 3 + kx], g->sw == 1 ? load1(row, cb, kx) : load2(row, cb, kx),
                                acc[ky]);
  }
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]);
}

AVX512 static void fwd_plane_avx512(const cx_conv_geom *g, const float *x, const float *w, float b,
                                    float *y) {
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(w[k]);
  for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 16) {
    col_block cb = x_cols(g, ox0);
    __mmask16 store = lane_mask(ox0, g->ow);
    for (int64_t oy = 0; oy < g->oh; oy++)
      _mm512_mask_storeu_ps(y + oy * g->ow + ox0, store, fwd_row(g, x, wv, &cb, oy, b));
  }
}

/* Stride 1: dx[ix] = sum over kx of w[kx] * dy[ix + pl - kx], 16 columns from ix0. */
AVX512 static void bwd_data_s1(const cx_conv_geom *g, const float *dy, const __m512 *wv,
                               int64_t ix0, float *dx) {
  col_block cb = col_block_make(ix0 + g->pl, ix0 + g->pl - 1, ix0 + g->pl - 2, g->ow);
  __mmask16 store = lane_mask(ix0, g->w);
  for (int64_t iy = 0; iy < g->h; iy++) {
    __m512 acc[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int ky = 0; ky < 3; ky++) {
      int64_t oy = out_row(g, iy, ky);
      if (oy < 0) continue;
      for (int kx = 0; kx < 3; kx++)
        acc[ky] = _mm512_fmadd_ps(wv[ky * 3 + kx], load1(dy + oy * g->ow, &cb, kx), acc[ky]);
    }
    _mm512_mask_storeu_ps(dx + iy * g->w + ix0, store,
                          _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]));
  }
}

/* Stride 2: dx column ix takes dy column (ix + pl - kx) / 2 from each kx where that is whole, so
 * kernel column kx feeds only dx columns of parity (kx + pl) & 1. The even and odd columns of 32
 * dx columns from ix0 are summed apart and interleaved on the way out. */
AVX512 static void bwd_data_s2(const cx_conv_geom *g, const float *dy, const __m512 *wv,
                               int64_t ix0, float *dx) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  int par[3], m0 = (int)(ix0 / 2);
  int64_t off[3];
  for (int kx = 0; kx < 3; kx++) {
    par[kx] = (int)((kx + g->pl) & 1);
    off[kx] = m0 + (par[kx] + g->pl - kx) / 2;
  }
  col_block cb = col_block_make(off[0], off[1], off[2], g->ow);
  __mmask16 st_lo = lane_mask(ix0, g->w), st_hi = lane_mask(ix0 + 16, g->w);
  for (int64_t iy = 0; iy < g->h; iy++) {
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int ky = 0; ky < 3; ky++) {
      int64_t oy = out_row(g, iy, ky);
      if (oy < 0) continue;
      for (int kx = 0; kx < 3; kx++)
        acc[par[kx]] =
            _mm512_fmadd_ps(wv[ky * 3 + kx], load1(dy + oy * g->ow, &cb, kx), acc[par[kx]]);
    }
    float *out = dx + iy * g->w + ix0;
    _mm512_mask_storeu_ps(out, st_lo, _mm512_permutex2var_ps(acc[0], lo, acc[1]));
    _mm512_mask_storeu_ps(out + 16, st_hi, _mm512_permutex2var_ps(acc[0], hi, acc[1]));
  }
}

AVX512 static void bwd_data_plane_avx512(const cx_conv_geom *g, const float *dy, const float *w,
                                         float *dx) {
  __m512 wv[9];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_set1_ps(w[k]);
  for (int64_t ix0 = 0; ix0 < g->w; ix0 += g->sw == 1 ? 16 : 32) {
    if (g->sw == 1)
      bwd_data_s1(g, dy, wv, ix0, dx);
    else
      bwd_data_s2(g, dy, wv, ix0, dx);
  }
}

/* The weight gradient walks one channel's planes image by image, a page apart, where the hardware
 * prefetcher does not follow; so the start of the next plane is asked for ahead of time. */
static inline void prefetch_start(const float *p, int64_t floats) {
  for (int64_t i = 0; i < floats && i < 2048; i += 16) _mm_prefetch((const char *)(p + i), _MM_HINT_T0);
}

/* Adds one plane's products to the 9 weight accumulators and the bias accumulator (acc[9]). */
AVX512 static void bwd_weights_plane_avx512(const cx_conv_geom *g, const float *x, const float *dy,
                                            __m512 sum[10]) {
  __m512 acc[10]; /* a local copy: __m512 may alias float, so sum[] itself would stay in memory */
  for (int k = 0; k < 10; k++) acc[k] = sum[k];
  for (int64_t ox0 = 0; ox0 < g->ow; ox0 += 16) {
    col_block cb = x_cols(g, ox0);
    __mmask16 m = lane_mask(ox0, g->ow);
    for (int64_t oy = 0; oy < g->oh; oy++) {
      __m512 d = _mm512_maskz_loadu_ps(m, dy + oy * g->ow + ox0);
      acc[9] = _mm512_add_ps(acc[9], d);
      for (int ky = 0; ky < 3; ky++) {
        int64_t iy = in_row(g, oy, ky);
        if (iy < 0 || iy >= g->h) continue;
        const float *row = x + iy * g->w;
        for (int kx = 0; kx < 3; kx++)
          acc[ky * 3 + kx] = _mm512_fmadd_ps(
              d, g->sw == 1 ? load1(row, &cb, kx) : load2(row, &cb, kx), acc[ky * 3 + kx]);
      }
    }
  }
  for (int k = 0; k < 10; k++) sum[k] = acc[k];
}

AVX512 static void bwd_weights_channel_avx512(const cx_conv_geom *g, int64_t c, const float *x,
                                              const float *dy, float *dw, float *db) {
  __m512 acc[10];
  for (int k = 0; k < 10; k++) acc[k] = _mm512_setzero_ps();
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  for (int64_t n = 0; n < g->n; n++) {
    if (n + 1 < g->n) {
      prefetch_start(x + ((n + 1) * g->c_in + c) * xs, xs);
      prefetch_start(dy + ((n + 1) * g->c_out + c) * ys, ys);
    }
    bwd_weights_plane_avx512(g, x + (n * g->c_in + c) * xs, dy + (n * g->c_out + c) * ys, acc);
  }
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
  if (avx512 && cx_conv_dw3x3_small_fits(g)) {
    cx_conv_dw3x3_small_forward(g, x, w, b, y);
    return;
  }
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
  if (avx512 && cx_conv_dw3x3_small_fits(g)) {
    cx_conv_dw3x3_small_backward_data(g, dy, w, dx);
    return;
  }
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
  if (avx512 && cx_conv_dw3x3_small_fits(g)) {
    cx_conv_dw3x3_small_backward_weights(g, x, dy, dw, db);
    return;
  }
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
