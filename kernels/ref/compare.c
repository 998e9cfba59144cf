/* Equal, Less, Greater, LessOrEqual, GreaterOrEqual, Not and Cast references, in double, with
 * numpy broadcasting; a result's type is applied as the stored value would have it. */

#include <math.h>
#include <string.h>

#include "../../core/op.h"
#include "../../core/ops/compare.h"
#include "ref.h"
#include "ref_index.h"

static double at(const cx_ref_args *a, int k, const int64_t *idx) {
  return a->in[k].data[cx_ref_broadcast_offset(&a->out[0].shape, idx, &a->in[k].shape)];
}

static cx_status ref_compare(const cx_ref_args *a) {
  const char *op = a->node->op->name;
  int64_t idx[CX_MAX_DIMS];
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    cx_ref_unravel(&a->out[0].shape, i, idx);
    double x = at(a, 0, idx), y = at(a, 1, idx);
    bool r = !strcmp(op, "Equal") ? x == y : !strcmp(op, "Less") ? x < y
           : !strcmp(op, "Greater") ? x > y : !strcmp(op, "LessOrEqual") ? x <= y : x >= y;
    a->out[0].data[i] = r;
  }
  return CX_OK;
}

static cx_status ref_not(const cx_ref_args *a) {
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++)
    a->out[0].data[i] = a->in[0].data[i] == 0;
  return CX_OK;
}

static cx_status ref_cast(const cx_ref_args *a) {
  cx_dtype to = CX_F32;
  CX_TRY(cx_cast_target(a->node, &to));
  for (int64_t i = 0; i < cx_shape_numel(&a->out[0].shape); i++) {
    double v = a->in[0].data[i];
    a->out[0].data[i] = to == CX_BOOL ? v != 0 : to == CX_F32 ? (double)(float)v : trunc(v);
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_compare[] = {
    {"Equal", ref_compare},       {"Less", ref_compare},  {"Greater", ref_compare},
    {"LessOrEqual", ref_compare}, {"GreaterOrEqual", ref_compare}, {"Not", ref_not},
    {"Cast", ref_cast},           {NULL, NULL},
};
