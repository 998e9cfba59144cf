/* References for Add, Sub, Mul, Div, Sum, Neg, ReduceSumTo and BroadcastTo: every output element
 * found by unravelling its index and mapping it into each operand, numpy style. */

#include "../../core/ops/eltwise.h"
#include "../../core/op.h"
#include "ref.h"
#include "ref_index.h"

static cx_status ref_binary(const cx_ref_args *a, char op) {
  const cx_shape *ys = &a->out[0].shape;
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(ys); i++) {
    cx_ref_unravel(ys, i, idx);
    double x = a->in[0].data[cx_ref_broadcast_offset(ys, idx, &a->in[0].shape)];
    double y = a->in[1].data[cx_ref_broadcast_offset(ys, idx, &a->in[1].shape)];
    a->out[0].data[i] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : x / y;
  }
  return CX_OK;
}

static cx_status ref_add(const cx_ref_args *a) { return ref_binary(a, '+'); }
static cx_status ref_sub(const cx_ref_args *a) { return ref_binary(a, '-'); }
static cx_status ref_mul(const cx_ref_args *a) { return ref_binary(a, '*'); }
static cx_status ref_div(const cx_ref_args *a) { return ref_binary(a, '/'); }

static cx_status ref_sum(const cx_ref_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(ys); i++) {
    cx_ref_unravel(ys, i, idx);
    for (int k = 0; k < a->n_in; k++)
      if (a->in[k].data)
        a->out[0].data[i] += a->in[k].data[cx_ref_broadcast_offset(ys, idx, &a->in[k].shape)];
  }
  return CX_OK;
}

static cx_status ref_neg(const cx_ref_args *a) {
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++)
    a->out[0].data[i] = -a->in[0].data[i];
  return CX_OK;
}

/* Each input element adds into the output element it was broadcast from. */
static cx_status ref_reduce_sum_to(const cx_ref_args *a) {
  cx_shape keep;
  const cx_shape *xs = &a->in[0].shape;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->out[0].shape, xs, &keep));
  double scale = cx_node_float(a->node, "scale", 1.0f);
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(xs); i++) {
    cx_ref_unravel(xs, i, idx);
    a->out[0].data[cx_ref_broadcast_offset(xs, idx, &keep)] += scale * a->in[0].data[i];
  }
  return CX_OK;
}

static cx_status ref_broadcast_to(const cx_ref_args *a) {
  cx_shape keep;
  const cx_shape *ys = &a->out[0].shape;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->in[0].shape, ys, &keep));
  double scale = cx_node_float(a->node, "scale", 1.0f);
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(ys); i++) {
    cx_ref_unravel(ys, i, idx);
    a->out[0].data[i] = scale * a->in[0].data[cx_ref_broadcast_offset(ys, idx, &keep)];
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_eltwise[] = {
    {"Add", ref_add},
    {"Sub", ref_sub},
    {"Mul", ref_mul},
    {"Div", ref_div},
    {"Sum", ref_sum},
    {"Neg", ref_neg},
    {"ReduceSumTo", ref_reduce_sum_to},
    {"BroadcastTo", ref_broadcast_to},
    {NULL, NULL},
};
