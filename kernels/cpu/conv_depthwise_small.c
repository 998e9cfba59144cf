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

/* r[i] (row i) becomes column i: four rounds of in-lane and cross-lane shuffles. Inlined so that r
 * stays in registers. */
AVX512 static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
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

/* Asks for the planes the next image will read while this one computes: the 16 loads of a tile
 * chunk hit 16 different cache lines, so waiting for each group's lines would dominate. */
static inline void prefetch_planes(const float *p, int64_t floats) {
  for (int64_t i = 0; i < floats; i += 16) _mm_prefetch((const char *)(p + i), _MM_HINT_T0);
}

/* One channel group's 9 taps as 16-lane rows, v[k][lane] = w[(c0 + lane) * 9 + k]; each thread keeps
 * the group it used last, since its images of one group come one after the other. */
typedef struct group_weights {
  float v[9][LANES] __attribute__((aligned(64)));
  int64_t c0;
} group_weights;

static void group_weights_load(group_weights *gw, const float *w, int64_t c0, int nc) {
  if (gw->c0 == c0) return;
  for (int k = 0; k < 9; k++)
    for (int c = 0; c < LANES; c++) gw->v[k][c] = c < nc ? w[(c0 + c) * 9 + k] : 0.0f;
  gw->c0 = c0;
}

AVX512 static inline void weights_in(const group_weights *gw, __m512 wv[9]) {
  for (int k = 0; k < 9; k++) wv[k] = _mm512_load_ps(gw->v[k]);
}

/* The range of kernel columns (or rows) that land inside [0, len) for an output at o. */
static inline void tap_range(int64_t o, int64_t stride, int64_t pad, int64_t len, int *lo, int *hi) {
  int64_t base = o * stride - pad;
  *lo = base < 0 ? (int)-base : 0;
  *hi = len - base < 3 ? (int)(len - base) : 3;
}

/* A 3x3 correlation of tiles: out[oy][ox] = bias + sum w[ky][kx] * in[oy*s - pad + ky][...]. */
typedef struct corr_geom {
  int64_t ih, iw, oh, ow, sh, sw, pt, pl;
} corr_geom;

AVX512 static inline __m512 corr_interior(const float *in, int64_t at, int64_t iw, const __m512 *wv,
                                          __m512 bias) {
  const float *r0 = in + at * LANES, *r1 = r0 + iw * LANES, *r2 = r1 + iw * LANES;
  __m512 a0 = _mm512_fmadd_ps(wv[0], _mm512_load_ps(r0), bias);
  __m512 a1 = _mm512_mul_ps(wv[3], _mm512_load_ps(r1));
  __m512 a2 = _mm512_mul_ps(wv[6], _mm512_load_ps(r2));
  a0 = _mm512_fmadd_ps(wv[1], _mm512_load_ps(r0 + LANES), a0);
  a1 = _mm512_fmadd_ps(wv[4], _mm512_load_ps(r1 + LANES), a1);
  a2 = _mm512_fmadd_ps(wv[7], _mm512_load_ps(r2 + LANES), a2);
  a0 = _mm512_fmadd_ps(wv[2], _mm512_load_ps(r0 + 2 * LANES), a0);
  a1 = _mm512_fmadd_ps(wv[5], _mm512_load_ps(r1 + 2 * LANES), a1);
  a2 = _mm512_fmadd_ps(wv[8], _mm512_load_ps(r2 + 2 * LANES), a2);
  return _mm512_add_ps(_mm512_add_ps(a0, a1), a2);
}

AVX512 static void correlate(const corr_geom *c, const float *in, const __m512 *wv, __m512 bias,
                             float *out) {
  for (int64_t oy = 0; oy < c->oh; oy++) {
    int y0, y1;
    tap_range(oy, c->sh, c->pt, c->ih, &y0, &y1);
    for (int64_t ox = 0; ox < c->ow; ox++) {
      int x0, x1;
      tap_range(ox, c->sw, c->pl, c->iw, &x0, &x1);
      int64_t at = (oy * c->sh - c->pt) * c->iw + ox * c->sw - c->pl; /* pixel of tap (0, 0) */
      __m512 acc = bias;
      if (y0 == 0 && y1 == 3 && x0 == 0 && x1 == 3)
        acc = corr_interior(in, at, c->iw, wv, bias);
      else
        for (int ky = y0; ky < y1; ky++)
          for (int kx = x0; kx < x1; kx++)
            acc = _mm512_fmadd_ps(wv[ky * 3 + kx],
                                  _mm512_load_ps(in + (at + ky * c->iw + kx) * LANES), acc);
      _mm512_store_ps(out + (oy * c->ow + ox) * LANES, acc);
    }
  }
}

/* One image's group of 16 channels: which, and how many of them exist. */
typedef struct group {
  int64_t n, c0;
  int nc;
} group;

AVX512 static void forward_group(const cx_conv_geom *g, const float *x, const float *b, float *y,
                                 const group *q, const group_weights *gw) {
  float tx[TILE_PIX * LANES] __attribute__((aligned(64)));
  float ty[TILE_PIX * LANES] __attribute__((aligned(64)));
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  corr_geom c = {g->h, g->w, g->oh, g->ow, g->sh, g->sw, g->pt, g->pl};
  __m512 wv[9], bias = b ? _mm512_maskz_loadu_ps(first_lanes(q->nc), b + q->c0) : _mm512_setzero_ps();
  weights_in(gw, wv);
  if (q->n + 1 < g->n) prefetch_planes(x + ((q->n + 1) * g->c_in + q->c0) * xs, q->nc * xs);
  tile_in(x + (q->n * g->c_in + q->c0) * xs, xs, q->nc, xs, tx);
  correlate(&c, tx, wv, bias, ty);
  tile_out(ty, ys, y + (q->n * g->c_out + q->c0) * ys, ys, q->nc);
}

/* dx at (iy, ix) sums w[ky][kx] * dy[(iy + pt - ky) / sh][(ix + pl - kx) / sw] over whole,
 * in-range quotients. With stride 1 that is a correlation of dy with the flipped kernel and pads
 * 2 - pt, 2 - pl; otherwise each dy pixel is scattered along the forward taps. */
AVX512 static void bwd_data_tile(const cx_conv_geom *g, const float *tdy, const __m512 *wv,
                                 float *tdx) {
  if (g->sh == 1 && g->sw == 1) {
    __m512 flip[9];
    for (int k = 0; k < 9; k++) flip[k] = wv[8 - k];
    corr_geom c = {g->oh, g->ow, g->h, g->w, 1, 1, 2 - g->pt, 2 - g->pl};
    correlate(&c, tdy, flip, _mm512_setzero_ps(), tdx);
    return;
  }
  for (int64_t p = 0; p < g->h * g->w; p++) _mm512_store_ps(tdx + p * LANES, _mm512_setzero_ps());
  for (int64_t oy = 0; oy < g->oh; oy++) {
    int y0, y1;
    tap_range(oy, g->sh, g->pt, g->h, &y0, &y1);
    for (int64_t ox = 0; ox < g->ow; ox++) {
      int x0, x1;
      tap_range(ox, g->sw, g->pl, g->w, &x0, &x1);
      __m512 d = _mm512_load_ps(tdy + (oy * g->ow + ox) * LANES);
      int64_t at = (oy * g->sh - g->pt) * g->w + ox * g->sw - g->pl;
      for (int ky = y0; ky < y1; ky++)
        for (int kx = x0; kx < x1; kx++) {
          float *o = tdx + (at + ky * g->w + kx) * LANES;
          _mm512_store_ps(o, _mm512_fmadd_ps(wv[ky * 3 + kx], d, _mm512_load_ps(o)));
        }
    }
  }
}

AVX512 static void backward_data_group(const cx_conv_geom *g, const float *dy, float *dx,
                                       const group *q, const group_weights *gw) {
  float tdy[TILE_PIX * LANES] __attribute__((aligned(64)));
  float tdx[TILE_PIX * LANES] __attribute__((aligned(64)));
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  __m512 wv[9];
  weights_in(gw, wv);
  if (q->n + 1 < g->n) prefetch_planes(dy + ((q->n + 1) * g->c_out + q->c0) * ys, q->nc * ys);
  tile_in(dy + (q->n * g->c_out + q->c0) * ys, ys, q->nc, ys, tdy);
  bwd_data_tile(g, tdy, wv, tdx);
  tile_out(tdx, xs, dx + (q->n * g->c_in + q->c0) * xs, xs, q->nc);
}

/* Adds one image's products to acc[0..8] (weights) and acc[9] (bias). */
AVX512 static void bwd_weights_tile(const cx_conv_geom *g, const float *tx, const float *tdy,
                                    __m512 sum[10]) {
  __m512 acc[10]; /* a local copy: __m512 may alias float, so sum[] itself would stay in memory */
  for (int k = 0; k < 10; k++) acc[k] = sum[k];
  for (int64_t oy = 0; oy < g->oh; oy++) {
    int y0, y1;
    tap_range(oy, g->sh, g->pt, g->h, &y0, &y1);
    for (int64_t ox = 0; ox < g->ow; ox++) {
      int x0, x1;
      tap_range(ox, g->sw, g->pl, g->w, &x0, &x1);
      __m512 d = _mm512_load_ps(tdy + (oy * g->ow + ox) * LANES);
      acc[9] = _mm512_add_ps(acc[9], d);
      int64_t at = (oy * g->sh - g->pt) * g->w + ox * g->sw - g->pl;
      if (y0 == 0 && y1 == 3 && x0 == 0 && x1 == 3) {
        for (int ky = 0; ky < 3; ky++)
          for (int kx = 0; kx < 3; kx++)
            acc[ky * 3 + kx] = _mm512_fmadd_ps(
                d, _mm512_load_ps(tx + (at + ky * g->w + kx) * LANES), acc[ky * 3 + kx]);
        continue;
      }
      for (int ky = y0; ky < y1; ky++)
        for (int kx = x0; kx < x1; kx++)
          acc[ky * 3 + kx] = _mm512_fmadd_ps(d, _mm512_load_ps(tx + (at + ky * g->w + kx) * LANES),
                                             acc[ky * 3 + kx]);
    }
  }
  for (int k = 0; k < 10; k++) sum[k] = acc[k];
}

/* The weight and bias gradients of one group of 16 channels, over all images. */
AVX512 static void backward_weights_group(const cx_conv_geom *g, const float *x, const float *dy,
                                          float *dw, float *db, int64_t c0, int nc) {
  float tx[TILE_PIX * LANES] __attribute__((aligned(64)));
  float tdy[TILE_PIX * LANES] __attribute__((aligned(64)));
  float out[10][LANES] __attribute__((aligned(64)));
  int64_t xs = g->h * g->w, ys = g->oh * g->ow;
  __m512 acc[10];
  for (int k = 0; k < 10; k++) acc[k] = _mm512_setzero_ps();
  for (int64_t n = 0; n < g->n; n++) {
    if (n + 1 < g->n) {
      prefetch_planes(x + ((n + 1) * g->c_in + c0) * xs, nc * xs);
      prefetch_planes(dy + ((n + 1) * g->c_out + c0) * ys, nc * ys);
    }
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

/* The drivers are plain C (OpenMP regions do not inherit a function's target attribute under every
 * compiler); the vector work is in the functions they call. Forward and backward data run over
 * (image, group) pairs, images innermost, so that each thread loads a group's weights once. */

static group group_of(const cx_conv_geom *g, int64_t i) {
  group q = {.n = i % g->n, .c0 = i / g->n * LANES};
  q.nc = g->c_in - q.c0 < LANES ? (int)(g->c_in - q.c0) : LANES;
  return q;
}

static int64_t n_groups(const cx_conv_geom *g) { return (g->c_in + LANES - 1) / LANES; }

void cx_conv_dw3x3_small_forward(const cx_conv_geom *g, const float *x, const float *w,
                                 const float *b, float *y) {
#pragma omp parallel
  {
    group_weights gw = {.c0 = -1};
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g->n * n_groups(g); i++) {
      group q = group_of(g, i);
      group_weights_load(&gw, w, q.c0, q.nc);
      forward_group(g, x, b, y, &q, &gw);
    }
  }
}

void cx_conv_dw3x3_small_backward_data(const cx_conv_geom *g, const float *dy, const float *w,
                                       float *dx) {
#pragma omp parallel
  {
    group_weights gw = {.c0 = -1};
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g->n * n_groups(g); i++) {
      group q = group_of(g, i);
      group_weights_load(&gw, w, q.c0, q.nc);
      backward_data_group(g, dy, dx, &q, &gw);
    }
  }
}

void cx_conv_dw3x3_small_backward_weights(const cx_conv_geom *g, const float *x, const float *dy,
                                          float *dw, float *db) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_groups(g); k++) {
    int64_t c0 = k * LANES;
    backward_weights_group(g, x, dy, dw, db, c0, g->c_in - c0 < LANES ? (int)(g->c_in - c0) : LANES);
  }
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
