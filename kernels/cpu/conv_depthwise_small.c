/* Depthwise 3x3 on small planes (8x8, 4x4, 16x16 with stride 2): vectors along a row would leave
 * most lanes empty, so here a vector holds 16 channels of one pixel instead. Each group of 16 planes
 * is transposed into a pixel-major tile on the stack ([pixel][16 channels], in L1), computed with
 * one FMA per kernel tap and pixel, and transposed back. AVX-512 only; conv_depthwise.c calls it. */
#include "conv_depthwise.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))

enum { TILE_PIX = 256, LANES = 16 };

bool cx_conv_dw3x3_small_fits(const cx_conv_geom *g) {
  return g->ow < 16 && g->h * g->w <= TILE_PIX && g->oh * g->ow <= TILE_PIX && g->c_in >= LANES;
}

/* r[i] (row i) becomes column i: four rounds of in-lane and cross-lane shuffles. */
AVX512 static void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; q++) { /* u[4q+m], 128-bit lane L: rows 4q..4q+3 of column 4L+m */
    u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int m = 0; m < 4; m++) {
    __m512 xl = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x44), xh = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xEE);
    __m512 yl = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x44),
           yh = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xEE);
    r[m] = _mm512_shuffle_f32x4(xl, yl, 0x88);
    r[4 + m] = _mm512_shuffle_f32x4(xl, yl, 0xDD);
    r[8 + m] = _mm512_shuffle_f32x4(xh, yh, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(xh, yh, 0xDD);
  }
}

static __mmask16 first_lanes(int64_t n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* planes[c * stride] for c < nc (nc <= 16) -> tile[p][c], npix pixels; missing channels are 0 */
AVX512 static void tile_in(const float *planes, int64_t stride, int nc, int64_t npix, float *tile) {
  for (int64_t p0 = 0; p0 < npix; p0 += 16) {
    __m512 r[16];
    __mmask16 m = first_lanes(npix - p0);
    for (int c = 0; c < 16; c++)
      r[c] = c < nc ? _mm512_maskz_loadu_ps(m, planes + c * stride + p0) : _mm512_setzero_ps();
    transpose16(r);
    for (int j = 0; j < 16 && p0 + j < npix; j++) _mm512_store_ps(tile + (p0 + j) * LANES, r[j]);
  }
}

/* tile[p][c] -> planes[c * stride + p] for c < nc */
AVX512 static void tile_out(const float *tile, int64_t npix, float *planes, int64_t stride, int nc) {
  for (int64_t p0 = 0; p0 < npix; p0 += 16) {
    __m512 r[16];
    __mmask16 m = first_lanes(npix - p0);
    for (int j = 0; j < 16; j++)
      r[j] = p0 + j < npix ? _mm512_load_ps(tile + (p0 + j) * LANES) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < nc; c++) _mm512_mask_storeu_ps(planes + c * stride + p0, m, r[c]);
  }
}

/* The 9 taps of channels c0.. as vectors, wv[k][lane] = w[(c0 + lane) * 9 + k] */
AVX512 static void weights_in(const float *w, int64_t c0, int nc, __m512 wv[9]) {
  float t[9][16] __attribute__((aligned(64))) = {{0}};
  for (int c = 0; c < nc; c++)
    for (int k = 0; k < 9; k++) t[k][c] = w[(c0 + c) * 9 + k];
  for (int k = 0; k < 9; k++) wv[k] = _mm512_load_ps(t[k]);
}

/* The range of kernel columns (or rows) that land inside [0, len) for an output at o. */
static void tap_range(int64_t o, int64_t stride, int64_t pad, int64_t len, int *lo, int *hi) {
  int64_t base = o * stride - pad;
  *lo = base < 0 ? (int)-base : 0;
  *hi = len - base < 3 ? (int)(len - base) : 3;
}

AVX512 static void fwd_tile(const cx_conv_geom *g, const float *tx, const __m512 *wv, __m512 bias,
                            float *ty) {
  for (int64_t oy = 0; oy < g->oh; oy++) {
    int y0, y1;
    tap_range(oy, g->sh, g->pt, g->h, &y0, &y1);
    for (int64_t ox = 0; ox < g->ow; ox++) {
      int x0, x1;
      tap_range(ox, g->sw, g->pl, g->w, &x0, &x1);
      __m512 acc = bias;
      int64_t at = (oy * g->sh - g->pt) * g->w + ox * g->sw - g->pl; /* pixel of tap (0, 0) */
      for (int ky = y0; ky < y1; ky++)
        for (int kx = x0; kx < x1; kx++)
          acc = _mm512_fmadd_ps(wv[ky * 3 + kx], _mm512_load_ps(tx + (at + ky * g->w + kx) * LANES),
                                acc);
      _mm512_store_ps(ty + (oy * g->ow + ox) * LANES, acc);
    }
  }
}

AVX512 static void small_forward(const cx_conv_geom *g, const float *x, const float *w,
          const float *b, float *y) {
  int64_t blocks = (g->c_in + LANES - 1) / LANES, xs = g->h * g->w, ys = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < g->n * blocks; i++) {
    float tx[TILE_PIX * LANES] __attribute__((aligned(64)));
    float ty[TILE_PIX * LANES] __attribute__((aligned(64)));
    int64_t n = i / blocks, c0 = i % blocks * LANES;
    int nc = g->c_in - c0 < LANES ? (int)(g->c_in - c0) : LANES;
    __m512 wv[9], bias = _mm512_setzero_ps();
    weights_in(w, c0, nc, wv);
    if (b) bias = _mm512_maskz_loadu_ps(first_lanes(nc), b + c0);
    tile_in(x + (n * g->c_in + c0) * xs, xs, nc, xs, tx);
    fwd_tile(g, tx, wv, bias, ty);
    tile_out(ty, ys, y + (n * g->c_out + c0) * ys, ys, nc);
  }
}

/* dx at (iy, ix) sums w[ky][kx] * dy[(iy + pt - ky) / sh][(ix + pl - kx) / sw] over whole,
 * in-range quotients. */
AVX512 static void bwd_data_tile(const cx_conv_geom *g, const float *tdy, const __m512 *wv,
                                 float *tdx) {
  for (int64_t iy = 0; iy < g->h; iy++)
    for (int64_t ix = 0; ix < g->w; ix++) {
      __m512 acc = _mm512_setzero_ps();
      for (int ky = 0; ky < 3; ky++) {
        int64_t ty = iy + g->pt - ky;
        if (ty < 0 || ty % g->sh || ty / g->sh >= g->oh) continue;
        for (int kx = 0; kx < 3; kx++) {
          int64_t tx = ix + g->pl - kx;
          if (tx < 0 || tx % g->sw || tx / g->sw >= g->ow) continue;
          const float *d = tdy + (ty / g->sh * g->ow + tx / g->sw) * LANES;
          acc = _mm512_fmadd_ps(wv[ky * 3 + kx], _mm512_load_ps(d), acc);
        }
      }
      _mm512_store_ps(tdx + (iy * g->w + ix) * LANES, acc);
    }
}

AVX512 static void small_backward_data(const cx_conv_geom *g, const float *dy, const float *w,
                float *dx) {
  int64_t blocks = (g->c_in + LANES - 1) / LANES, xs = g->h * g->w, ys = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < g->n * blocks; i++) {
    float tdy[TILE_PIX * LANES] __attribute__((aligned(64)));
    float tdx[TILE_PIX * LANES] __attribute__((aligned(64)));
    int64_t n = i / blocks, c0 = i % blocks * LANES;
    int nc = g->c_in - c0 < LANES ? (int)(g->c_in - c0) : LANES;
    __m512 wv[9];
    weights_in(w, c0, nc, wv);
    tile_in(dy + (n * g->c_out + c0) * ys, ys, nc, ys, tdy);
    bwd_data_tile(g, tdy, wv, tdx);
    tile_out(tdx, xs, dx + (n * g->c_in + c0) * xs, xs, nc);
  }
}

/* Adds one image's products to acc[0..8] (weights) and acc[9] (bias). */
AVX512 static void bwd_weights_tile(const cx_conv_geom *g, const float *tx, const float *tdy,
                                    __m512 acc[10]) {
  for (int64_t oy = 0; oy < g->oh; oy++) {
    int y0, y1;
    tap_range(oy, g->sh, g->pt, g->h, &y0, &y1);
    for (int64_t ox = 0; ox < g->ow; ox++) {
      int x0, x1;
      tap_range(ox, g->sw, g->pl, g->w, &x0, &x1);
      __m512 d = _mm512_load_ps(tdy + (oy * g->ow + ox) * LANES);
      acc[9] = _mm512_add_ps(acc[9], d);
      int64_t at = (oy * g->sh - g->pt) * g->w + ox * g->sw - g->pl;
      for (int ky = y0; ky < y1; ky++)
        for (int kx = x0; kx < x1; kx++)
          acc[ky * 3 + kx] = _mm512_fmadd_ps(d, _mm512_load_ps(tx + (at + ky * g->w + kx) * LANES),
                                             acc[ky * 3 + kx]);
    }
  }
}

AVX512 static void small_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                   float *dw, float *db) {
  int64_t blocks = (g->c_in + LANES - 1) / LANES, xs = g->h * g->w, ys = g->oh * g->ow;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; blk++) {
    float tx[TILE_PIX * LANES] __attribute__((aligned(64)));
    float tdy[TILE_PIX * LANES] __attribute__((aligned(64)));
    float out[10][16] __attribute__((aligned(64)));
    int64_t c0 = blk * LANES;
    int nc = g->c_in - c0 < LANES ? (int)(g->c_in - c0) : LANES;
    __m512 acc[10];
    for (int k = 0; k < 10; k++) acc[k] = _mm512_setzero_ps();
    for (int64_t n = 0; n < g->n; n++) {
      tile_in(x + (n * g->c_in + c0) * xs, xs, nc, xs, tx);
      tile_in(dy + (n * g->c_out + c0) * ys, ys, nc, ys, tdy);
      bwd_weights_tile(g, tx, tdy, acc);
    }
    for (int k = 0; k < 10; k++) _mm512_store_ps(out[k], acc[k]);
    for (int c = 0; c < nc; c++) {
      if (dw)
        for (int k = 0; k < 9; k++) dw[(c0 + c) * 9 + k] = out[k][c];
      if (db) db[c0 + c] = out[9][c];
    }
  }
}

void cx_conv_dw3x3_small_forward(const cx_conv_geom *g, const float *x, const float *w,
                                 const float *b, float *y) {
  small_forward(g, x, w, b, y);
}

void cx_conv_dw3x3_small_backward_data(const cx_conv_geom *g, const float *dy, const float *w,
                                       float *dx) {
  small_backward_data(g, dy, w, dx);
}

void cx_conv_dw3x3_small_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                          float *dw, float *db) {
  small_backward_weights(g, x, dy, dw, db);
}

#else

bool cx_conv_dw3x3_small_fits(const cx_conv_geom *g) {
  (void)g;
  return false;
}
void cx_conv_dw3x3_small_forward(const cx_conv_geom *g, const float *x, const float *w,
                                 const float *b, float *y) {
  (void)g, (void)x, (void)w, (void)b, (void)y;
}
void cx_conv_dw3x3_small_backward_data(const cx_conv_geom *g, const float *dy, const float *w,
                                       float *dx) {
  (void)g, (void)dy, (void)w, (void)dx;
}
void cx_conv_dw3x3_small_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                          float *dw, float *db) {
  (void)g, (void)x, (void)dy, (void)dw, (void)db;
}

#endif
