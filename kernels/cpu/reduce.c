/* CPU kernels of ReduceSum, ReduceMean, ReduceMax, Softmax, LogSoftmax and their gradient ops.
 *
 * Softmax-like ops see their tensor as [outer, n, inner] around the axis. With inner == 1 (the
 * usual [N, C] logits) each row is contiguous and runs through the vector row primitives; otherwise
 * a block of up to BLOCK neighbouring inner positions is processed together so that every pass over
 * the axis reads contiguous runs. */

#include <math.h>
#include <string.h>

#include "../../core/op.h"
#include "../../core/ops/eltwise.h"
#include "cpu.h"
#include "eltwise_engine.h"

enum { PAR_MIN = 1 << 15, BLOCK = 256 };

/* ---- ReduceSum / ReduceMean ---- */

/* The kept shape ([x] with reduced axes 1): axes from the constant input (forward ops) or the
 * attribute (ReduceMaxGrad, whose input 1 is X). */
static cx_status reduce_keep(const cx_kernel_args *a, const cx_shape *xs, bool from_input,
                             cx_shape *keep) {
  if (from_input && a->n_in > 1 && a->in[1].data)
    return cx_reduce_keep_shape(a->node, xs, a->in[1].data, cx_tensor_numel(&a->in[1]), keep);
  const int64_t *attr = NULL;
  int na = cx_node_ints(a->node, "axes", &attr);
  return cx_reduce_keep_shape(a->node, xs, attr, na, keep);
}

static cx_status run_reduce(const cx_kernel_args *a, bool mean) {
  cx_shape keep;
  const cx_shape *xs = &a->in[0].shape;
  CX_TRY(reduce_keep(a, xs, true, &keep));
  int64_t kept = cx_shape_numel(&keep), count = kept ? cx_shape_numel(xs) / kept : 0;
  float scale = mean && count > 0 ? 1.0f / (float)count : 1.0f;
  cx_cpu_reduce_to(cx_f32(&a->out[0]), &keep, cx_f32(&a->in[0]), xs, scale);
  return CX_OK;
}

/* Walks x in order, keeping the offset of each element's group in the kept tensor. */
typedef struct group_walk {
  int rank;
  int64_t dim[CX_MAX_DIMS], step[CX_MAX_DIMS], idx[CX_MAX_DIMS], at;
} group_walk;

static group_walk walk_start(const cx_shape *xs, const cx_shape *keep) {
  group_walk w = {.rank = xs->ndim};
  int64_t stride = 1;
  for (int d = xs->ndim - 1; d >= 0; d--) {
    w.dim[d] = xs->d[d];
    w.step[d] = keep->d[d] == 1 ? 0 : stride;
    stride *= keep->d[d];
  }
  return w;
}

static void walk_next(group_walk *w) {
  for (int d = w->rank - 1; d >= 0; d--) {
    w->at += w->step[d];
    if (++w->idx[d] < w->dim[d]) return;
    w->at -= w->step[d] * w->dim[d];
    w->idx[d] = 0;
  }
}

/* ReduceMax: NaN wins, as in ONNX Runtime. */
static cx_status run_reduce_max(const cx_kernel_args *a) {
  cx_shape keep;
  const cx_shape *xs = &a->in[0].shape;
  CX_TRY(reduce_keep(a, xs, true, &keep));
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  int64_t n = cx_shape_numel(xs), m = cx_shape_numel(&keep);
  for (int64_t o = 0; o < m; o++) y[o] = -INFINITY;
  group_walk w = walk_start(xs, &keep);
  for (int64_t i = 0; i < n; i++, walk_next(&w))
    if (x[i] > y[w.at] || isnan(x[i])) y[w.at] = x[i];
  return CX_OK;
}

static cx_status prepare_reduce_max_grad(const cx_kernel_args *a, void **state, size_t *scratch) {
  (void)state;
  *scratch = sizeof(float) * (size_t)(cx_tensor_numel(&a->in[2]) + 1);
  return CX_OK;
}

/* ReduceMaxGrad(dY, X, Y): dY / (the group's count of maxima) at each maximum, 0 elsewhere. */
static cx_status run_reduce_max_grad(const cx_kernel_args *a) {
  cx_shape keep;
  const cx_shape *xs = &a->in[1].shape;
  CX_TRY(reduce_keep(a, xs, false, &keep));
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *y = cx_f32(&a->in[2]);
  float *dx = cx_f32(&a->out[0]), *count = a->scratch;
  int64_t n = cx_shape_numel(xs), m = cx_shape_numel(&keep);
  memset(count, 0, sizeof(float) * (size_t)m);
  group_walk w = walk_start(xs, &keep);
  for (int64_t i = 0; i < n; i++, walk_next(&w)) count[w.at] += x[i] == y[w.at];
  w = walk_start(xs, &keep);
  for (int64_t i = 0; i < n; i++, walk_next(&w))
    dx[i] = x[i] == y[w.at] ? dy[w.at] / count[w.at] : 0.0f;
  return CX_OK;
}

static cx_status run_reduce_sum(const cx_kernel_args *a) { return run_reduce(a, false); }
static cx_status run_reduce_mean(const cx_kernel_args *a) { return run_reduce(a, true); }

/* ---- softmax family ---- */

typedef enum sm_kind { SM_SOFTMAX, SM_LOG_SOFTMAX, SM_SOFTMAX_GRAD, SM_LOG_SOFTMAX_GRAD } sm_kind;

/* One contiguous row of n: y from x (forward), or dx from dy and y (gradients). */
static void sm_row(sm_kind k, float *out, const float *x, const float *dy, int64_t n) {
  switch (k) {
  case SM_SOFTMAX: {
    float s = cx_cpu_row_exp_sum(out, x, cx_cpu_row_max(x, n), n);
    cx_cpu_row_scale(out, out, 1.0f / s, n);
    break;
  }
  case SM_LOG_SOFTMAX: {
    float m = cx_cpu_row_max(x, n);
    float s = cx_cpu_row_exp_sum(out, x, m, n); /* out is scratch until the last line */
    cx_cpu_row_sub(out, x, m + logf(s), n);
    break;
  }
  case SM_SOFTMAX_GRAD: { /* x is y: dx = y * (dy - <dy, y>) */
    float d = cx_cpu_row_dot(dy, x, n);
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * (dy[i] - d);
    break;
  }
  case SM_LOG_SOFTMAX_GRAD: { /* x is y: dx = dy - exp(y) * sum(dy) */
    float s = cx_cpu_row_sum(dy, n);
    cx_cpu_map_exp(out, x, n);
    for (int64_t i = 0; i < n; i++) out[i] = dy[i] - out[i] * s;
    break;
  }
  }
}

/* w positions of one [n, inner] slab starting at column 0 of x (row stride `inner`). */
static void sm_block(sm_kind k, float *out, const float *x, const float *dy, int64_t n,
                     int64_t inner, int w) {
  float acc[BLOCK], m[BLOCK];
  for (int j = 0; j < w; j++) acc[j] = 0, m[j] = -INFINITY;
  if (k == SM_SOFTMAX || k == SM_LOG_SOFTMAX) {
    for (int64_t c = 0; c < n; c++)
      for (int j = 0; j < w; j++) m[j] = fmaxf(m[j], x[c * inner + j]);
    for (int64_t c = 0; c < n; c++)
      for (int j = 0; j < w; j++) acc[j] += out[c * inner + j] = expf(x[c * inner + j] - m[j]);
    for (int j = 0; j < w; j++) /* the factor (softmax) or offset (log-softmax) per position */
      acc[j] = k == SM_SOFTMAX ? 1.0f / acc[j] : m[j] + logf(acc[j]);
    for (int64_t c = 0; c < n; c++)
      for (int j = 0; j < w; j++) {
        int64_t i = c * inner + j;
        out[i] = k == SM_SOFTMAX ? out[i] * acc[j] : x[i] - acc[j];
      }
    return;
  }
  for (int64_t c = 0; c < n; c++) /* <dy, y> or sum(dy) */
    for (int j = 0; j < w; j++)
      acc[j] += dy[c * inner + j] * (k == SM_SOFTMAX_GRAD ? x[c * inner + j] : 1.0f);
  for (int64_t c = 0; c < n; c++)
    for (int j = 0; j < w; j++) {
      int64_t i = c * inner + j;
      out[i] = k == SM_SOFTMAX_GRAD ? x[i] * (dy[i] - acc[j]) : dy[i] - expf(x[i]) * acc[j];
    }
}

static cx_status run_softmax_like(const cx_kernel_args *a, sm_kind k) {
  bool grad = k == SM_SOFTMAX_GRAD || k == SM_LOG_SOFTMAX_GRAD;
  const cx_tensor *xt = &a->in[grad ? 1 : 0];
  int axis = 0;
  CX_TRY(cx_axis_normalize(a->node, cx_node_int(a->node, "axis", -1), xt->shape.ndim, &axis));
  int64_t outer, n, inner;
  cx_cpu_axis_split(&xt->shape, axis, &outer, &n, &inner);
  const float *x = cx_f32(xt), *dy = grad ? cx_f32(&a->in[0]) : NULL;
  float *y = cx_f32(&a->out[0]);
  int64_t total = outer * n * inner;
  if (inner == 1) {
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t o = 0; o < outer; o++)
      sm_row(k, y + o * n, x + o * n, dy ? dy + o * n : NULL, n);
    return CX_OK;
  }
  int64_t blocks = (inner + BLOCK - 1) / BLOCK;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
  for (int64_t t = 0; t < outer * blocks; t++) {
    int64_t o = t / blocks, j0 = t % blocks * BLOCK, off = o * n * inner + j0;
    int w = (int)(inner - j0 < BLOCK ? inner - j0 : BLOCK);
    sm_block(k, y + off, x + off, dy ? dy + off : NULL, n, inner, w);
  }
  return CX_OK;
}

static cx_status run_softmax(const cx_kernel_args *a) { return run_softmax_like(a, SM_SOFTMAX); }
static cx_status run_log_softmax(const cx_kernel_args *a) {
  return run_softmax_like(a, SM_LOG_SOFTMAX);
}
static cx_status run_softmax_grad(const cx_kernel_args *a) {
  return run_softmax_like(a, SM_SOFTMAX_GRAD);
}
static cx_status run_log_softmax_grad(const cx_kernel_args *a) {
  return run_softmax_like(a, SM_LOG_SOFTMAX_GRAD);
}

const cx_kernel cx_cpu_reduce[] = {
    {"ReduceSum", NULL, run_reduce_sum, NULL, 0, NULL, 0},
    {"ReduceMean", NULL, run_reduce_mean, NULL, 0, NULL, 0},
    {"ReduceMax", NULL, run_reduce_max, NULL, 0, NULL, 0},
    {"ReduceMaxGrad", prepare_reduce_max_grad, run_reduce_max_grad, NULL, 0, NULL, 0},
    {"Softmax", NULL, run_softmax, NULL, 0, NULL, 0},
    {"LogSoftmax", NULL, run_log_softmax, NULL, 0, NULL, 0},
    {"SoftmaxGrad", NULL, run_softmax_grad, NULL, 0, NULL, 0},
    {"LogSoftmaxGrad", NULL, run_log_softmax_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
