#include <math.h>
#include <string.h>

#include "../../core/ops/pool.h"
#include "ref.h"

/* Pooling references: for every output element, visit every kernel tap in row-major order, map it
 * to an input position (out * stride - pad_begin + tap * dilation) and skip taps in the padding. */

typedef struct window {
  const cx_pool_geom *g;
  int64_t start[CX_POOL_MAX_SPATIAL]; /* input position of tap 0 on each axis */
  int64_t tap[CX_POOL_MAX_SPATIAL];
} window;

/* Input position (flat, within one plane) of the current tap; -1 when it lies in the padding. */
static int64_t tap_offset(const window *w) {
  int64_t off = 0;
  for (int i = 0; i < w->g->nsp; i++) {
    int64_t p = w->start[i] + w->tap[i] * w->g->d[i];
    if (p < 0 || p >= w->g->in[i]) return -1;
    off = off * w->g->in[i] + p;
  }
  return off;
}

/* Advances an index over `lim` like an odometer; false after the last one. */
static bool next_index(int64_t *idx, const int64_t *lim, int n) {
  for (int i = n - 1; i >= 0; i--) {
    if (++idx[i] < lim[i]) return true;
    idx[i] = 0;
  }
  return false;
}

static window window_at(const cx_pool_geom *g, const int64_t *o) {
  window w = {.g = g};
  for (int i = 0; i < g->nsp; i++) w.start[i] = o[i] * g->s[i] - g->pad_b[i];
  return w;
}

static double avg_divisor(const window *w, bool include_pad) {
  double n = 1;
  const cx_pool_geom *g = w->g;
  for (int i = 0; i < g->nsp; i++) {
    int64_t count = 0;
    for (int64_t t = 0; t < g->k[i]; t++) {
      int64_t p = w->start[i] + t;
      if (include_pad ? p < g->in[i] + g->pad_e[i] : p >= 0 && p < g->in[i]) count++;
    }
    n *= (double)count;
  }
  return n;
}

typedef enum { POOL_MAX, POOL_AVG, POOL_MAX_GRAD, POOL_AVG_GRAD } pool_kind;

/* Offset of the first maximum in tap order, or -1 when every tap is padding. */
static int64_t window_argmax(window w, const double *x) {
  int64_t best = -1;
  do {
    int64_t off = tap_offset(&w);
    if (off >= 0 && (best < 0 || x[off] > x[best])) best = off;
  } while (next_index(w.tap, w.g->k, w.g->nsp));
  return best;
}

/* Adds v to every tap's position in dst (a gradient), or returns the sum of the taps of src. */
static double window_sum(window w, const double *src, double *dst, double v) {
  double sum = 0;
  do {
    int64_t off = tap_offset(&w);
    if (off < 0) continue;
    if (src) sum += src[off];
    if (dst) dst[off] += v;
  } while (next_index(w.tap, w.g->k, w.g->nsp));
  return sum;
}

typedef struct plane_io {
  const double *x, *dy; /* x: forward input plane (NULL for AVG_GRAD); dy: gradient ops only */
  double *y, *dx;
} plane_io;

static void pool_one(pool_kind kind, bool include_pad, window w, int64_t oi, const plane_io *io) {
  if (kind == POOL_MAX || kind == POOL_MAX_GRAD) {
    int64_t best = window_argmax(w, io->x);
    if (kind == POOL_MAX) io->y[oi] = best >= 0 ? io->x[best] : -INFINITY;
    else if (best >= 0) io->dx[best] += io->dy[oi];
  } else if (kind == POOL_AVG) {
    io->y[oi] = window_sum(w, io->x, NULL, 0) / avg_divisor(&w, include_pad);
  } else {
    window_sum(w, NULL, io->dx, io->dy[oi] / avg_divisor(&w, include_pad));
  }
}

static cx_status ref_pool(const cx_ref_args *a, pool_kind kind, const cx_shape *xs) {
  cx_pool_geom g;
  CX_TRY(cx_pool_geometry(a->node, xs, &g));
  bool include_pad = cx_node_int(a->node, "count_include_pad", 0) != 0;
  int64_t planes = xs->d[0] * xs->d[1], in_plane = 1, out_plane = 1;
  for (int i = 0; i < g.nsp; i++) {
    in_plane *= g.in[i];
    out_plane *= g.out[i];
  }
  bool fwd = kind == POOL_MAX || kind == POOL_AVG;
  for (int64_t p = 0; p < planes; p++) {
    plane_io io = {0};
    if (kind != POOL_AVG_GRAD) io.x = a->in[fwd ? 0 : 1].data + p * in_plane;
    if (fwd) io.y = a->out[0].data + p * out_plane;
    else {
      io.dy = a->in[0].data + p * out_plane;
      io.dx = a->out[0].data + p * in_plane;
    }
    int64_t o[CX_POOL_MAX_SPATIAL] = {0}, oi = 0;
    do pool_one(kind, include_pad, window_at(&g, o), oi++, &io);
    while (next_index(o, g.out, g.nsp));
  }
  return CX_OK;
}

static cx_status ref_max_pool(const cx_ref_args *a) {
  return ref_pool(a, POOL_MAX, &a->in[0].shape);
}
static cx_status ref_avg_pool(const cx_ref_args *a) {
  return ref_pool(a, POOL_AVG, &a->in[0].shape);
}
static cx_status ref_max_pool_grad(const cx_ref_args *a) {
  return ref_pool(a, POOL_MAX_GRAD, &a->in[1].shape);
}
static cx_status ref_avg_pool_grad(const cx_ref_args *a) {
  return ref_pool(a, POOL_AVG_GRAD, &a->out[0].shape);
}

static cx_status ref_global_avg_pool(const cx_ref_args *a) {
  const cx_shape *xs = &a->in[0].shape;
  int64_t planes = xs->d[0] * xs->d[1], s = cx_shape_numel(xs) / planes;
  for (int64_t p = 0; p < planes; p++) {
    double sum = 0;
    for (int64_t i = 0; i < s; i++) sum += a->in[0].data[p * s + i];
    a->out[0].data[p] = sum / (double)s;
  }
  return CX_OK;
}

static cx_status ref_global_avg_pool_grad(const cx_ref_args *a) {
  const cx_shape *xs = &a->out[0].shape;
  int64_t planes = xs->d[0] * xs->d[1], s = cx_shape_numel(xs) / planes;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t i = 0; i < s; i++) a->out[0].data[p * s + i] = a->in[0].data[p] / (double)s;
  return CX_OK;
}

const cx_ref_entry cx_ref_pool[] = {
    {"MaxPool", ref_max_pool},
    {"AveragePool", ref_avg_pool},
    {"GlobalAveragePool", ref_global_avg_pool},
    {"MaxPoolGrad", ref_max_pool_grad},
    {"AveragePoolGrad", ref_avg_pool_grad},
    {"GlobalAveragePoolGrad", ref_global_avg_pool_grad},
    {NULL, NULL},
};
