#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../core/ops/pool.h"
#include "cpu.h"

/* Pooling on NCHW (NCW, NCDHW) f32, hand-written: every (n, c) plane is independent, so one
 * OpenMP loop over planes needs no synchronisation, gradients included (a window scatters only
 * into its own plane). Geometry comes from core/ops/pool.c, so windows sit exactly where shape
 * inference and the reference put them; 1-D and 2-D pooling run as 3-D with unit leading axes. */

typedef struct geom3 {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t in_plane, out_plane, planes;
} geom3;

static cx_status geom3_make(const cx_node *n, const cx_shape *x, geom3 *g) {
  cx_pool_geom pg;
  CX_TRY(cx_pool_geometry(n, x, &pg));
  int lead = 3 - pg.nsp;
  for (int i = 0; i < 3; i++) {
    int j = i - lead;
    g->in[i] = j >= 0 ? pg.in[j] : 1;
    g->out[i] = j >= 0 ? pg.out[j] : 1;
    g->k[i] = j >= 0 ? pg.k[j] : 1;
    g->s[i] = j >= 0 ? pg.s[j] : 1;
    g->d[i] = j >= 0 ? pg.d[j] : 1;
    g->pb[i] = j >= 0 ? pg.pad_b[j] : 0;
    g->pe[i] = j >= 0 ? pg.pad_e[j] : 0;
  }
  g->in_plane = g->in[0] * g->in[1] * g->in[2];
  g->out_plane = g->out[0] * g->out[1] * g->out[2];
  g->planes = x->d[0] * x->d[1];
  return CX_OK;
}

/* The taps j in [lo, hi) of one axis whose input index start + j * d lies inside [0, in). */
typedef struct tap_range {
  int64_t start, lo, hi;
} tap_range;

static tap_range taps(const geom3 *g, int axis, int64_t o) {
  int64_t start = o * g->s[axis] - g->pb[axis], d = g->d[axis];
  tap_range r = {start, 0, g->k[axis]};
  if (start < 0) r.lo = (-start + d - 1) / d;
  int64_t end = (g->in[axis] - start + d - 1) / d; /* first tap at or past the end */
  if (end < r.hi) r.hi = end;
  return r;
}

/* Walks the valid taps of output (od, oh, ow) in scan order, giving each input offset. */
#define FOR_WINDOW(g, od, oh, ow, off)                                                             \
  tap_range rd_ = taps(g, 0, od), rh_ = taps(g, 1, oh), rw_ = taps(g, 2, ow);                      \
  for (int64_t jd_ = rd_.lo; jd_ < rd_.hi; jd_++)                                                  \
    for (int64_t jh_ = rh_.lo; jh_ < rh_.hi; jh_++)                                                \
      for (int64_t jw_ = rw_.lo, off = ((rd_.start + jd_ * (g)->d[0]) * (g)->in[1] +               \
                                        rh_.start + jh_ * (g)->d[1]) * (g)->in[2] +                \
                                       rw_.start + jw_ * (g)->d[2];                                \
           jw_ < rw_.hi; jw_++, off += (g)->d[2])

#define FOR_OUTPUT(g, od, oh, ow, o)                                                               \
  for (int64_t od = 0, o = 0; od < (g)->out[0]; od++)                                              \
    for (int64_t oh = 0; oh < (g)->out[1]; oh++)                                                   \
      for (int64_t ow = 0; ow < (g)->out[2]; ow++, o++)

/* Offset of the first maximum in scan order; ties keep the earliest, as the gradient assumes. */
static int64_t window_argmax(const geom3 *g, const float *x, int64_t od, int64_t oh, int64_t ow) {
  int64_t best = -1;
  float m = 0;
  FOR_WINDOW(g, od, oh, ow, off) {
    if (best < 0 || x[off] > m) {
      best = off;
      m = x[off];
    }
  }
  return best;
}

static cx_status max_pool_run(const cx_kernel_args *a) {
  geom3 g;
  CX_TRY(geom3_make(a->node, &a->in[0].shape, &g));
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; p++) {
    const float *xp = x + p * g.in_plane;
    float *yp = y + p * g.out_plane;
    FOR_OUTPUT(&g, od, oh, ow, o) {
      int64_t i = window_argmax(&g, xp, od, oh, ow);
      yp[o] = i >= 0 ? xp[i] : -INFINITY;
    }
  }
  return CX_OK;
}

static cx_status max_pool_grad_run(const cx_kernel_args *a) {
  geom3 g;
  CX_TRY(geom3_make(a->node, &a->in[1].shape, &g));
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]);
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; p++) {
    const float *xp = x + p * g.in_plane, *dyp = dy + p * g.out_plane;
    float *dxp = dx + p * g.in_plane;
    memset(dxp, 0, sizeof(float) * (size_t)g.in_plane);
    FOR_OUTPUT(&g, od, oh, ow, o) {
      int64_t i = window_argmax(&g, xp, od, oh, ow);
      if (i >= 0) dxp[i] += dyp[o];
    }
  }
  return CX_OK;
}

/* The divisor of one window: its taps inside the input, or with count_include_pad the window
 * clipped to the padded input (a ceil_mode window may reach past the right padding). */
static float avg_divisor(const geom3 *g, bool include_pad, int64_t od, int64_t oh, int64_t ow) {
  int64_t o[3] = {od, oh, ow}, n = 1;
  for (int i = 0; i < 3; i++) {
    tap_range r = taps(g, i, o[i]);
    if (include_pad) {
      int64_t end = r.start + g->k[i], lim = g->in[i] + g->pe[i];
      n *= (end < lim ? end : lim) - r.start;
    } else {
      n *= r.hi - r.lo;
    }
  }
  return (float)n;
}

static cx_status avg_pool_run(const cx_kernel_args *a) {
  geom3 g;
  CX_TRY(geom3_make(a->node, &a->in[0].shape, &g));
  bool include_pad = cx_node_int(a->node, "count_include_pad", 0) != 0;
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; p++) {
    const float *xp = x + p * g.in_plane;
    float *yp = y + p * g.out_plane;
    FOR_OUTPUT(&g, od, oh, ow, o) {
      float sum = 0;
      FOR_WINDOW(&g, od, oh, ow, off) sum += xp[off];
      yp[o] = sum / avg_divisor(&g, include_pad, od, oh, ow);
    }
  }
  return CX_OK;
}

static cx_status avg_pool_grad_run(const cx_kernel_args *a) {
  geom3 g;
  CX_TRY(geom3_make(a->node, &a->out[0].shape, &g));
  bool include_pad = cx_node_int(a->node, "count_include_pad", 0) != 0;
  const float *dy = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g.planes; p++) {
    const float *dyp = dy + p * g.out_plane;
    float *dxp = dx + p * g.in_plane;
    memset(dxp, 0, sizeof(float) * (size_t)g.in_plane);
    FOR_OUTPUT(&g, od, oh, ow, o) {
      float v = dyp[o] / avg_divisor(&g, include_pad, od, oh, ow);
      FOR_WINDOW(&g, od, oh, ow, off) dxp[off] += v;
    }
  }
  return CX_OK;
}

enum { LANES = 16 };

static double plane_sum(const float *x, int64_t s) {
  float acc[LANES] = {0};
  int64_t i = 0;
  for (; i + LANES <= s; i += LANES)
    for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
  double t = 0;
  for (; i < s; i++) t += x[i];
  for (int j = 0; j < LANES; j++) t += acc[j];
  return t;
}

static cx_status global_avg_pool_run(const cx_kernel_args *a) {
  const cx_shape *xs = &a->in[0].shape;
  int64_t planes = xs->d[0] * xs->d[1], s = cx_shape_numel(xs) / (planes ? planes : 1);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; p++) y[p] = (float)(plane_sum(x + p * s, s) / (double)s);
  return CX_OK;
}

static cx_status global_avg_pool_grad_run(const cx_kernel_args *a) {
  const cx_shape *xs = &a->out[0].shape;
  int64_t planes = xs->d[0] * xs->d[1], s = cx_shape_numel(xs) / (planes ? planes : 1);
  const float *dy = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; p++) {
    float v = dy[p] / (float)s;
    for (int64_t i = 0; i < s; i++) dx[p * s + i] = v;
  }
  return CX_OK;
}

const cx_kernel cx_cpu_pool[] = {
    {"MaxPool", NULL, max_pool_run, NULL},
    {"MaxPoolGrad", NULL, max_pool_grad_run, NULL},
    {"AveragePool", NULL, avg_pool_run, NULL},
    {"AveragePoolGrad", NULL, avg_pool_grad_run, NULL},
    {"GlobalAveragePool", NULL, global_avg_pool_run, NULL},
    {"GlobalAveragePoolGrad", NULL, global_avg_pool_grad_run, NULL},
    {NULL, NULL, NULL, NULL},
};
