/* Pow, PowGrad and Where references, in double, element by element with numpy broadcasting. */

#include <math.h>

#include "ref.h"
#include "ref_index.h"

/* operand k's value at the output's multi-index idx */
static double at(const cx_ref_args *a, int k, const int64_t *idx) {
  return a->in[k].data[cx_ref_broadcast_offset(&a->out[0].shape, idx, &a->in[k].shape)];
}

static cx_status ref_pow(const cx_ref_args *a) {
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    cx_ref_unravel(&a->out[0].shape, i, idx);
    a->out[0].data[i] = pow(at(a, 0, idx), at(a, 1, idx));
  }
  return CX_OK;
}

static cx_status ref_pow_grad(const cx_ref_args *a) {
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    cx_ref_unravel(&a->out[0].shape, i, idx);
    double e = at(a, 2, idx);
    a->out[0].data[i] = at(a, 0, idx) * e * pow(at(a, 1, idx), e - 1);
  }
  return CX_OK;
}

static cx_status ref_where(const cx_ref_args *a) {
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    cx_ref_unravel(&a->out[0].shape, i, idx);
    a->out[0].data[i] = at(a, 0, idx) != 0 ? at(a, 1, idx) : at(a, 2, idx);
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_select[] = {
    {"Pow", ref_pow},
    {"PowGrad", ref_pow_grad},
    {"Where", ref_where},
    {NULL, NULL},
};
