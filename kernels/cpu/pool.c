#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/ops/pool.h"
#include "cpu.h"

/* Pooling on NCHW (NCW, NCDHW) f32, hand-written: every (n, c) plane is independent, so one
 * OpenMP loop over planes needs no synchronisation, gradients included (a window scatters only
 * into its own plane). Geometry comes from core/ops/pool.c, so windows sit exactly where shape
 * inference and the reference put them; 1-D and 2-D pooling run as 3-D with unit leading axes.
 * Channels-last 4-D tensors (core/layout.c) take the *_nhwc loops below. */

typedef struct geom3 {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t in_plane, out_plane, planes;
} geom3;

static cx_status geom3_make(const cx_node *n, const cx_shape *x, geom3 *g) {
  cx_pool_geom pg;
  CX_TRY(cx_pool_geometry(n, x, &pg));
  cx_pool_geom_3d(&pg, g->in, g->out, g->k, g->s, g->d, g->pb, g->pe);
  g->in_plane = g->in[0] * g->in[1] * g->in[2];
  g->out_plane = g->out[0] * g->out[1] * g->out[2];
  g->planes = x->d[0] * x->d[1];
  return CX_OK;
}

/* One output position on one axis: its first tap inside the input, how many taps lie inside, and
 * the averaging count on this axis (taps inside the input, or with count_include_pad the window
 * clipped to the padded input). Tabulated per axis at compile time, since every window of an
 * output row shares them. */
typedef struct tap_range {
  int64_t first, count, div;
} tap_range;

typedef struct pool_plan {
  geom3 g;
  tap_range *t[3]; /* t[axis][o], in one allocation */
} pool_plan;

static tap_range axis_taps(const geom3 *g, int axis, int64_t o, bool include_pad) {
  int64_t start = o * g->s[axis] - g->pb[axis], d = g->d[axis], lo = 0, hi = g->k[axis];
  if (start < 0) lo = (-start + d - 1) / d;
  int64_t end = (g->in[axis] - start + d - 1) / d; /* first tap at or past the input's end */
  if (end < hi) hi = end;
  tap_range r = {start + lo * d, hi > lo ? hi - lo : 0, hi > lo ? hi - lo : 0};
  if (include_pad) {
    int64_t stop = start + g->k[axis], lim = g->in[axis] + g->pe[axis];
    r.div = (stop < lim ? stop : lim) - start;
  }
  return r;
}

static void pool_release(void *p) {
  pool_plan *plan = p;
  if (plan) free(plan->t[0]);
  free(plan);
}

/* x: the tensor whose shape is the pooling input (X, or dX for AveragePoolGrad). */
static cx_status pool_plan_make(const cx_node *n, const cx_shape *x, void **state) {
  pool_plan *plan = calloc(1, sizeof *plan);
  if (!plan) return cx_fail(CX_ERR_NOMEM, "out of memory preparing node '%s'", n->name);
  cx_status s = geom3_make(n, x, &plan->g);
  const geom3 *g = &plan->g;
  if (s == CX_OK && !(plan->t[0] = malloc(sizeof(tap_range) * (size_t)(g->out[0] + g->out[1] + g->out[2]))))
    s = cx_fail(CX_ERR_NOMEM, "out of memory preparing node '%s'", n->name);
  if (s != CX_OK) {
    pool_release(plan);
    return s;
  }
  plan->t[1] = plan->t[0] + g->out[0];
  plan->t[2] = plan->t[1] + g->out[1];
  bool include_pad = cx_node_int(n, "count_include_pad", 0) != 0;
  for (int i = 0; i < 3; i++)
    for (int64_t o = 0; o < g->out[i]; o++) plan->t[i][o] = axis_taps(g, i, o, include_pad);
  *state = plan;
  return CX_OK;
}

static cx_status pool_prepare_x0(const cx_kernel_args *a, void **state, size_t *scratch) {
  *scratch = 0;
  return pool_plan_make(a->node, &a->in[0].shape, state);
}
static cx_status pool_prepare_x1(const cx_kernel_args *a, void **state, size_t *scratch) {
  *scratch = 0;
  return pool_plan_make(a->node, &a->in[1].shape, state);
}
static cx_status pool_prepare_dx(const cx_kernel_args *a, void **state, size_t *scratch) {
  *scratch = 0;
  return pool_plan_make(a->node, &a->out[0].shape, state);
}

/* Walks the valid taps of the window (rd, rh, rw) in scan order, giving each input offset. */
#define FOR_WINDOW(g, rd, rh, rw, off)                                                             \
  for (int64_t a_ = 0; a_ < (rd)->count; a_++)                                                     \
    for (int64_t b_ = 0; b_ < (rh)->count; b_++)                                                   \
      for (int64_t c_ = 0, off = (((rd)->first + a_ * (g)->d[0]) * (g)->in[1] + (rh)->first +      \
                                  b_ * (g)->d[1]) * (g)->in[2] + (rw)->first;                      \
           c_ < (rw)->count; c_++, off += (g)->d[2])

/* Every output of a plane in order (o counts them), with its three tap ranges. */
#define FOR_OUTPUT(plan, rd, rh, rw, o)                                                            \
  for (int64_t od_ = 0, o = 0; od_ < (plan)->g.out[0]; od_++)                                      \
    for (int64_t oh_ = 0; oh_ < (plan)->g.out[1]; oh_++)                                           \
      for (int64_t ow_ = 0; ow_ < (plan)->g.out[2]; ow_++, o++)                                    \
        for (const tap_range *rd = &(plan)->t[0][od_], *rh = &(plan)->t[1][oh_],                   \
                             *rw = &(plan)->t[2][ow_];                                             \
             rd; rd = NULL)

/* ---- channels-last (2-D pooling on 4-D tensors): a pixel is a row of C floats, so each window
 * tap is one vector operation over channels; images run in parallel (gradients scatter only within
 * their image). Channels go in blocks of CB so the per-channel state stays on the stack. ---- */

enum { CB = 64 };

typedef struct nhwc_arg {
  const float *x, *dy;
  float *y;
  int64_t c;
} nhwc_arg;

static void max_pool_nhwc(const pool_plan *plan, nhwc_arg a) {
  const geom3 *g = &plan->g;
  int64_t n_img = g->planes / a.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_img; n++) {
    const float *xn = a.x + n * g->in_plane * a.c;
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      float *yo = a.y + (n * g->out_plane + o) * a.c;
      for (int64_t c = 0; c < a.c; c++) yo[c] = -INFINITY;
      FOR_WINDOW(g, rd, rh, rw, off) {
        const float *xp = xn + off * a.c;
#pragma omp simd
        for (int64_t c = 0; c < a.c; c++) yo[c] = xp[c] > yo[c] ? xp[c] : yo[c];
      }
    }
  }
}

/* dX: each output's gradient goes to the first maximum of its window, per channel. */
static void max_pool_grad_nhwc(const pool_plan *plan, nhwc_arg a) {
  const geom3 *g = &plan->g;
  int64_t n_img = g->planes / a.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_img; n++) {
    const float *xn = a.x + n * g->in_plane * a.c;
    float *dxn = a.y + n * g->in_plane * a.c;
    memset(dxn, 0, sizeof(float) * (size_t)(g->in_plane * a.c));
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      const float *dyo = a.dy + (n * g->out_plane + o) * a.c;
      for (int64_t c0 = 0; c0 < a.c; c0 += CB) {
        int64_t nc = a.c - c0 < CB ? a.c - c0 : CB, best[CB];
        float m[CB];
        for (int64_t c = 0; c < nc; c++) m[c] = -INFINITY, best[c] = 0;
        FOR_WINDOW(g, rd, rh, rw, off) {
          const float *xp = xn + off * a.c + c0;
          for (int64_t c = 0; c < nc; c++) {
            bool gt = xp[c] > m[c];
            m[c] = gt ? xp[c] : m[c];
            best[c] = gt ? off : best[c];
          }
        }
        for (int64_t c = 0; c < nc; c++) dxn[best[c] * a.c + c0 + c] += dyo[c0 + c];
      }
    }
  }
}

static void avg_pool_nhwc(const pool_plan *plan, nhwc_arg a) {
  const geom3 *g = &plan->g;
  int64_t n_img = g->planes / a.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_img; n++) {
    const float *xn = a.x + n * g->in_plane * a.c;
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      float *yo = a.y + (n * g->out_plane + o) * a.c, inv = 1.0f / (float)(rd->div * rh->div * rw->div);
      for (int64_t c = 0; c < a.c; c++) yo[c] = 0;
      FOR_WINDOW(g, rd, rh, rw, off) {
        const float *xp = xn + off * a.c;
#pragma omp simd
        for (int64_t c = 0; c < a.c; c++) yo[c] += xp[c];
      }
      for (int64_t c = 0; c < a.c; c++) yo[c] *= inv;
    }
  }
}

static void avg_pool_grad_nhwc(const pool_plan *plan, nhwc_arg a) {
  const geom3 *g = &plan->g;
  int64_t n_img = g->planes / a.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < n_img; n++) {
    float *dxn = a.y + n * g->in_plane * a.c;
    memset(dxn, 0, sizeof(float) * (size_t)(g->in_plane * a.c));
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      const float *dyo = a.dy + (n * g->out_plane + o) * a.c;
      float inv = 1.0f / (float)(rd->div * rh->div * rw->div);
      FOR_WINDOW(g, rd, rh, rw, off) {
        float *dp = dxn + off * a.c;
#pragma omp simd
        for (int64_t c = 0; c < a.c; c++) dp[c] += dyo[c] * inv;
      }
    }
  }
}

/* Offset of the first maximum in scan order; ties keep the earliest, as the gradient assumes.
 * Branch-free updates: on random data the comparison is unpredictable. */
static int64_t window_argmax(const geom3 *g, const float *x, const tap_range *rd,
                             const tap_range *rh, const tap_range *rw) {
  int64_t best = (rd->first * g->in[1] + rh->first) * g->in[2] + rw->first;
  float m = -INFINITY;
  FOR_WINDOW(g, rd, rh, rw, off) {
    bool gt = x[off] > m;
    m = gt ? x[off] : m;
    best = gt ? off : best;
  }
  return best;
}

static cx_status max_pool_run(const cx_kernel_args *a) {
  const pool_plan *plan = a->state;
  if (cx_tensor_nhwc(&a->in[0])) {
    max_pool_nhwc(plan, (nhwc_arg){cx_f32(&a->in[0]), NULL, cx_f32(&a->out[0]), a->in[0].shape.d[1]});
    return CX_OK;
  }
  const geom3 *g = &plan->g;
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g->planes; p++) {
    const float *xp = x + p * g->in_plane;
    float *yp = y + p * g->out_plane;
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      float m = -INFINITY;
      FOR_WINDOW(g, rd, rh, rw, off) m = xp[off] > m ? xp[off] : m;
      yp[o] = m;
    }
  }
  return CX_OK;
}

static cx_status max_pool_grad_run(const cx_kernel_args *a) {
  const pool_plan *plan = a->state;
  if (cx_tensor_nhwc(&a->in[1])) {
    max_pool_grad_nhwc(plan, (nhwc_arg){cx_f32(&a->in[1]), cx_f32(&a->in[0]), cx_f32(&a->out[0]),
                                        a->in[1].shape.d[1]});
    return CX_OK;
  }
  const geom3 *g = &plan->g;
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]);
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g->planes; p++) {
    const float *xp = x + p * g->in_plane, *dyp = dy + p * g->out_plane;
    float *dxp = dx + p * g->in_plane;
    memset(dxp, 0, sizeof(float) * (size_t)g->in_plane);
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      dxp[window_argmax(g, xp, rd, rh, rw)] += dyp[o];
    }
  }
  return CX_OK;
}

static cx_status avg_pool_run(const cx_kernel_args *a) {
  const pool_plan *plan = a->state;
  if (cx_tensor_nhwc(&a->in[0])) {
    avg_pool_nhwc(plan, (nhwc_arg){cx_f32(&a->in[0]), NULL, cx_f32(&a->out[0]), a->in[0].shape.d[1]});
    return CX_OK;
  }
  const geom3 *g = &plan->g;
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g->planes; p++) {
    const float *xp = x + p * g->in_plane;
    float *yp = y + p * g->out_plane;
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      float sum = 0;
      FOR_WINDOW(g, rd, rh, rw, off) sum += xp[off];
      yp[o] = sum / (float)(rd->div * rh->div * rw->div);
    }
  }
  return CX_OK;
}

static cx_status avg_pool_grad_run(const cx_kernel_args *a) {
  const pool_plan *plan = a->state;
  if (cx_tensor_nhwc(&a->out[0])) {
    avg_pool_grad_nhwc(plan, (nhwc_arg){NULL, cx_f32(&a->in[0]), cx_f32(&a->out[0]),
                                        a->out[0].shape.d[1]});
    return CX_OK;
  }
  const geom3 *g = &plan->g;
  const float *dy = cx_f32(&a->in[0]);
  float *dx = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < g->planes; p++) {
    const float *dyp = dy + p * g->out_plane;
    float *dxp = dx + p * g->in_plane;
    memset(dxp, 0, sizeof(float) * (size_t)g->in_plane);
    FOR_OUTPUT(plan, rd, rh, rw, o) {
      float v = dyp[o] / (float)(rd->div * rh->div * rw->div);
      FOR_WINDOW(g, rd, rh, rw, off) dxp[off] += v;
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

/* Channels-last: image n is S rows of C channels; its means accumulate in its output row. */
static void global_avg_pool_nhwc(const cx_tensor *xt, float *y) {
  int64_t n = xt->shape.d[0], c = xt->shape.d[1], s = xt->shape.d[2] * xt->shape.d[3];
  const float *x = cx_f32(xt);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i++) {
    float *yr = y + i * c;
    for (int64_t k = 0; k < c; k++) yr[k] = 0;
    for (int64_t p = 0; p < s; p++) {
      const float *xr = x + (i * s + p) * c;
#pragma omp simd
      for (int64_t k = 0; k < c; k++) yr[k] += xr[k];
    }
    for (int64_t k = 0; k < c; k++) yr[k] /= (float)s;
  }
}

static void global_avg_pool_grad_nhwc(const float *dy, const cx_tensor *dxt) {
  int64_t n = dxt->shape.d[0], c = dxt->shape.d[1], s = dxt->shape.d[2] * dxt->shape.d[3];
  float *dx = cx_f32(dxt);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n * s; r++) {
    const float *g = dy + r / s * c;
    float *o = dx + r * c;
#pragma omp simd
    for (int64_t k = 0; k < c; k++) o[k] = g[k] / (float)s;
  }
}

static cx_status global_avg_pool_run(const cx_kernel_args *a) {
  if (cx_tensor_nhwc(&a->in[0])) {
    global_avg_pool_nhwc(&a->in[0], cx_f32(&a->out[0]));
    return CX_OK;
  }
  const cx_shape *xs = &a->in[0].shape;
  int64_t planes = xs->d[0] * xs->d[1], s = cx_shape_numel(xs) / (planes ? planes : 1);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; p++) y[p] = (float)(plane_sum(x + p * s, s) / (double)s);
  return CX_OK;
}

static cx_status global_avg_pool_grad_run(const cx_kernel_args *a) {
  if (cx_tensor_nhwc(&a->out[0])) {
    global_avg_pool_grad_nhwc(cx_f32(&a->in[0]), &a->out[0]);
    return CX_OK;
  }
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
    {"MaxPool", pool_prepare_x0, max_pool_run, pool_release, CX_LAYOUT_SHARED, NULL, 0},
    {"MaxPoolGrad", pool_prepare_x1, max_pool_grad_run, pool_release, CX_LAYOUT_SHARED, NULL, 0},
    {"AveragePool", pool_prepare_x0, avg_pool_run, pool_release, CX_LAYOUT_SHARED, NULL, 0},
    {"AveragePoolGrad", pool_prepare_dx, avg_pool_grad_run, pool_release, CX_LAYOUT_SHARED, NULL,
     0},
    {"GlobalAveragePool", NULL, global_avg_pool_run, NULL, CX_LAYOUT_SHARED, NULL, 0},
    {"GlobalAveragePoolGrad", NULL, global_avg_pool_grad_run, NULL, CX_LAYOUT_SHARED, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
