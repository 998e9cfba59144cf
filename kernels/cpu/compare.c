/* Equal, Less, Greater, LessOrEqual, GreaterOrEqual (f32, s64 or s32 operands, numpy
 * broadcasting, bool out), Not and Cast on the CPU. Masks are small next to the activations
 * they select, so one plain loop walks the output with each operand's offset kept by strides
 * (0 on broadcast axes). */

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../core/ops/compare.h"
#include "cpu.h"

typedef enum cmp_kind { CMP_EQ, CMP_LT, CMP_GT, CMP_LE, CMP_GE } cmp_kind;

/* Element strides of operand s over the output's axes (0 where it broadcasts). */
static void strides(const cx_shape *out, const cx_shape *s, int64_t *st) {
  int64_t stride = 1;
  for (int d = out->ndim - 1; d >= 0; d--) {
    int sd = d - (out->ndim - s->ndim);
    st[d] = sd >= 0 && s->d[sd] != 1 ? stride : 0;
    if (sd >= 0) stride *= s->d[sd];
  }
}

static double load(const cx_tensor *t, int64_t i) {
  switch (t->dtype) {
  case CX_F32: return ((const float *)t->data)[i];
  case CX_S64: return (double)((const int64_t *)t->data)[i];
  default: return ((const int32_t *)t->data)[i];
  }
}

static bool compare(cmp_kind k, double x, double y) {
  switch (k) {
  case CMP_EQ: return x == y;
  case CMP_LT: return x < y;
  case CMP_GT: return x > y;
  case CMP_LE: return x <= y;
  default: return x >= y;
  }
}

static cx_status run_compare(const cx_kernel_args *a, cmp_kind k) {
  const cx_shape *os = &a->out[0].shape;
  int64_t sa[CX_MAX_DIMS], sb[CX_MAX_DIMS], idx[CX_MAX_DIMS] = {0}, ia = 0, ib = 0;
  strides(os, &a->in[0].shape, sa);
  strides(os, &a->in[1].shape, sb);
  uint8_t *y = a->out[0].data;
  int64_t n = cx_shape_numel(os);
  /* s64 values beyond 2^53 would round in a double: compare those as integers */
  bool s64 = a->in[0].dtype == CX_S64;
  const int64_t *xi = a->in[0].data, *yi = a->in[1].data;
  for (int64_t i = 0; i < n; i++) {
    if (s64) { /* the sign of p - q, compared with 0 */
      int64_t p = xi[ia], q = yi[ib];
      y[i] = compare(k, (double)(p > q) - (double)(p < q), 0);
    } else {
      y[i] = compare(k, load(&a->in[0], ia), load(&a->in[1], ib));
    }
    for (int d = os->ndim - 1; d >= 0; d--) { /* the next output index */
      ia += sa[d], ib += sb[d];
      if (++idx[d] < os->d[d]) break;
      ia -= sa[d] * os->d[d], ib -= sb[d] * os->d[d];
      idx[d] = 0;
    }
  }
  return CX_OK;
}

static cx_status run_equal(const cx_kernel_args *a) { return run_compare(a, CMP_EQ); }
static cx_status run_less(const cx_kernel_args *a) { return run_compare(a, CMP_LT); }
static cx_status run_greater(const cx_kernel_args *a) { return run_compare(a, CMP_GT); }
static cx_status run_less_equal(const cx_kernel_args *a) { return run_compare(a, CMP_LE); }
static cx_status run_greater_equal(const cx_kernel_args *a) { return run_compare(a, CMP_GE); }

static cx_status run_not(const cx_kernel_args *a) {
  const uint8_t *x = a->in[0].data;
  uint8_t *y = a->out[0].data;
  for (int64_t i = 0; i < cx_tensor_numel(&a->out[0]); i++) y[i] = !x[i];
  return CX_OK;
}

/* Through double: exact for every value of the types taken except s64 beyond 2^53, which
 * goes integer to integer directly. */
static cx_status run_cast(const cx_kernel_args *a) {
  cx_dtype to = CX_F32, from = a->in[0].dtype;
  CX_TRY(cx_cast_target(a->node, &to));
  int64_t n = cx_tensor_numel(&a->out[0]);
  if (from == to) {
    memcpy(a->out[0].data, a->in[0].data, cx_tensor_nbytes(&a->out[0]));
    return CX_OK;
  }
  if (from == CX_S64 && to != CX_F32 && to != CX_BOOL) { /* narrowing, as C converts */
    const int64_t *x = a->in[0].data;
    for (int64_t i = 0; i < n; i++) {
      if (to == CX_S32) ((int32_t *)a->out[0].data)[i] = (int32_t)x[i];
      else if (to == CX_S8) ((int8_t *)a->out[0].data)[i] = (int8_t)x[i];
      else ((uint8_t *)a->out[0].data)[i] = (uint8_t)x[i];
    }
    return CX_OK;
  }
  for (int64_t i = 0; i < n; i++) {
    double v = cx_dtype_load(from, a->in[0].data, (size_t)i);
    if (to != CX_F32 && to != CX_BOOL) v = trunc(v);
    cx_dtype_store(to, a->out[0].data, (size_t)i, v);
  }
  return CX_OK;
}

const cx_kernel cx_cpu_compare[] = {
    {"Equal", NULL, run_equal, NULL, 0, NULL, 0},
    {"Less", NULL, run_less, NULL, 0, NULL, 0},
    {"Greater", NULL, run_greater, NULL, 0, NULL, 0},
    {"LessOrEqual", NULL, run_less_equal, NULL, 0, NULL, 0},
    {"GreaterOrEqual", NULL, run_greater_equal, NULL, 0, NULL, 0},
    {"Not", NULL, run_not, NULL, 0, NULL, 0},
    {"Cast", NULL, run_cast, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
