/* References for ReduceSum, ReduceMean, Softmax, LogSoftmax and their gradient ops, in double. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "../../core/ops/eltwise.h"
#include "ref.h"
#include "ref_index.h"

/* The reduction's [kept] shape: axes from the constant input (forward ops), else the attribute
 * (ReduceMaxGrad, whose input 1 is X). */
static cx_status ref_keep(const cx_ref_args *a, const cx_shape *xs, cx_shape *keep) {
  bool from_input = strcmp(a->node->op->name, "ReduceMaxGrad") != 0;
  int64_t axes[CX_MAX_DIMS];
  int na = 0;
  if (from_input && a->n_in > 1 && a->in[1].data) {
    na = (int)cx_shape_numel(&a->in[1].shape);
    for (int i = 0; i < na && i < CX_MAX_DIMS; i++) axes[i] = (int64_t)a->in[1].data[i];
  } else {
    const int64_t *attr = NULL;
    na = cx_node_ints(a->node, "axes", &attr);
    for (int i = 0; i < na && i < CX_MAX_DIMS; i++) axes[i] = attr[i];
  }
  if (na > CX_MAX_DIMS) return cx_fail(CX_ERR_SHAPE, "too many axes");
  cx_shape out;
  return cx_reduce_shapes(a->node, xs, axes, na, keep, &out, NULL);
}

/* Every input element adds into the output element at its index with reduced axes set to 0. */
static cx_status ref_reduce(const cx_ref_args *a, bool mean) {
  const cx_shape *xs = &a->in[0].shape;
  cx_shape keep;
  CX_TRY(ref_keep(a, xs, &keep));
  int64_t n = cx_shape_numel(xs), m = cx_shape_numel(&keep), idx[CX_MAX_DIMS];
  double scale = mean && m ? (double)m / (double)n : 1.0;
  for (int64_t i = 0; i < n; i++) {
    cx_ref_unravel(xs, i, idx);
    a->out[0].data[cx_ref_broadcast_offset(xs, idx, &keep)] += scale * a->in[0].data[i];
  }
  return CX_OK;
}

static cx_status ref_reduce_sum(const cx_ref_args *a) { return ref_reduce(a, false); }

static cx_status ref_reduce_max(const cx_ref_args *a) {
  const cx_shape *xs = &a->in[0].shape;
  cx_shape keep;
  CX_TRY(ref_keep(a, xs, &keep));
  int64_t n = cx_shape_numel(xs), m = cx_shape_numel(&keep), idx[CX_MAX_DIMS];
  for (int64_t o = 0; o < m; o++) a->out[0].data[o] = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    cx_ref_unravel(xs, i, idx);
    double *y = &a->out[0].data[cx_ref_broadcast_offset(xs, idx, &keep)];
    *y = fmax(*y, a->in[0].data[i]);
  }
  return CX_OK;
}

/* (dY, X, Y): each maximum of a group gets dY / (the number of maxima in the group). */
static cx_status ref_reduce_max_grad(const cx_ref_args *a) {
  const cx_shape *xs = &a->in[1].shape;
  cx_shape keep;
  CX_TRY(ref_keep(a, xs, &keep));
  int64_t n = cx_shape_numel(xs), m = cx_shape_numel(&keep), idx[CX_MAX_DIMS];
  double *count = calloc((size_t)(m ? m : 1), sizeof(double));
  if (!count) return cx_fail(CX_ERR_NOMEM, "ReduceMaxGrad reference: out of memory");
  for (int pass = 0; pass < 2; pass++)
    for (int64_t i = 0; i < n; i++) {
      cx_ref_unravel(xs, i, idx);
      int64_t o = cx_ref_broadcast_offset(xs, idx, &keep);
      bool top = a->in[1].data[i] == a->in[2].data[o];
      if (pass == 0) count[o] += top;
      else a->out[0].data[i] = top ? a->in[0].data[o] / count[o] : 0;
    }
  free(count);
  return CX_OK;
}
static cx_status ref_reduce_mean(const cx_ref_args *a) { return ref_reduce(a, true); }

typedef enum kind { SOFTMAX, LOG_SOFTMAX, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD } kind;

/* Along the axis, for every (outer, inner) position: x = the input (forward) or Y (gradients). */
static cx_status ref_softmax_like(const cx_ref_args *a, kind k) {
  bool grad = k == SOFTMAX_GRAD || k == LOG_SOFTMAX_GRAD;
  const cx_ref_tensor *xt = &a->in[grad ? 1 : 0];
  int axis = 0;
  CX_TRY(cx_axis_normalize(a->node, cx_node_int(a->node, "axis", -1), xt->shape.ndim, &axis));
  int64_t outer = 1, n = xt->shape.d[axis], inner = 1;
  for (int i = 0; i < axis; i++) outer *= xt->shape.d[i];
  for (int i = axis + 1; i < xt->shape.ndim; i++) inner *= xt->shape.d[i];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      const double *x = xt->data + o * n * inner + j;
      const double *dy = grad ? a->in[0].data + o * n * inner + j : NULL;
      double *y = a->out[0].data + o * n * inner + j;
      double m = -INFINITY, s = 0;
      if (!grad) {
        for (int64_t c = 0; c < n; c++) m = fmax(m, x[c * inner]);
        for (int64_t c = 0; c < n; c++) s += exp(x[c * inner] - m);
        for (int64_t c = 0; c < n; c++)
          y[c * inner] = k == SOFTMAX ? exp(x[c * inner] - m) / s : x[c * inner] - m - log(s);
      } else if (k == SOFTMAX_GRAD) { /* dx = y * (dy - sum(dy * y)) */
        for (int64_t c = 0; c < n; c++) s += dy[c * inner] * x[c * inner];
        for (int64_t c = 0; c < n; c++) y[c * inner] = x[c * inner] * (dy[c * inner] - s);
      } else { /* dx = dy - softmax * sum(dy), softmax = exp(log_softmax) */
        for (int64_t c = 0; c < n; c++) s += dy[c * inner];
        for (int64_t c = 0; c < n; c++) y[c * inner] = dy[c * inner] - exp(x[c * inner]) * s;
      }
    }
  return CX_OK;
}

static cx_status ref_softmax(const cx_ref_args *a) { return ref_softmax_like(a, SOFTMAX); }
static cx_status ref_log_softmax(const cx_ref_args *a) { return ref_softmax_like(a, LOG_SOFTMAX); }
static cx_status ref_softmax_grad(const cx_ref_args *a) {
  return ref_softmax_like(a, SOFTMAX_GRAD);
}
static cx_status ref_log_softmax_grad(const cx_ref_args *a) {
  return ref_softmax_like(a, LOG_SOFTMAX_GRAD);
}

const cx_ref_entry cx_ref_reduce[] = {
    {"ReduceSum", ref_reduce_sum},
    {"ReduceMean", ref_reduce_mean},
    {"ReduceMax", ref_reduce_max},
    {"ReduceMaxGrad", ref_reduce_max_grad},
    {"Softmax", ref_softmax},
    {"LogSoftmax", ref_log_softmax},
    {"SoftmaxGrad", ref_softmax_grad},
    {"LogSoftmaxGrad", ref_log_softmax_grad},
    {NULL, NULL},
};
