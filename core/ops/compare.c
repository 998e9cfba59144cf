/* Comparisons, Not and Cast on activations (masks that dynamo-style exports compute at run time:
 * Equal, Less, Greater, LessOrEqual, GreaterOrEqual with numpy broadcasting give bool; Not of a
 * bool; Cast between f32, s64, s32, u8, s8 and bool as ONNX defines it: to a bool, nonzero is
 * true; to an integer, truncation). None has a gradient: their outputs are piecewise constant,
 * and a float-to-float Cast is removed at import. When their inputs are constants the importer
 * folds them instead. */
#include <string.h>

#include "compare.h"
#include "families.h"

static bool comparable(cx_dtype t) { return t == CX_F32 || t == CX_S64 || t == CX_S32; }

static cx_status infer_compare(const cx_infer_ctx *c) {
  if (c->in_dtype[0] != c->in_dtype[1] || !comparable(c->in_dtype[0]))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): inputs are %s and %s; expected two f32, s64 or "
                   "s32 tensors of one type", c->node->name, c->node->op->name,
                   cx_dtype_name(c->in_dtype[0]), cx_dtype_name(c->in_dtype[1]));
  CX_TRY(cx_infer_broadcast(c));
  c->out_dtype[0] = CX_BOOL;
  return CX_OK;
}

static cx_status infer_not(const cx_infer_ctx *c) {
  if (c->in_dtype[0] != CX_BOOL)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Not): input is %s; expected bool", c->node->name,
                   cx_dtype_name(c->in_dtype[0]));
  return cx_infer_same_as_input(c);
}

cx_status cx_cast_target(const cx_node *n, cx_dtype *to) {
  /* ONNX's TensorProto.DataType numbers of the types a tensor here holds */
  static const struct { int64_t onnx; cx_dtype t; } types[] = {
      {1, CX_F32}, {2, CX_U8}, {3, CX_S8}, {6, CX_S32}, {7, CX_S64}, {9, CX_BOOL}};
  int64_t want = cx_node_int(n, "to", 0);
  for (size_t k = 0; k < sizeof types / sizeof *types; k++)
    if (types[k].onnx == want) return *to = types[k].t, CX_OK;
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (Cast): to = %lld is not a type the engine holds "
                 "(FLOAT 1, UINT8 2, INT8 3, INT32 6, INT64 7, BOOL 9)", n->name, (long long)want);
}

static cx_status infer_cast(const cx_infer_ctx *c) {
  cx_dtype to = CX_F32, from = c->in_dtype[0];
  CX_TRY(cx_cast_target(c->node, &to));
  if (from != CX_F32 && from != CX_U8 && from != CX_S8 && from != CX_S32 && from != CX_S64 &&
      from != CX_BOOL)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Cast): input is %s, which Cast does not take",
                   c->node->name, cx_dtype_name(from));
  CX_TRY(cx_infer_same_as_input(c));
  c->out_dtype[0] = to;
  return CX_OK;
}

static const cx_attr_schema no_attrs[] = {{NULL, 0, false}};
static const cx_attr_schema cast_attrs[] = {{"to", CX_ATTR_INT, true},
                                            {"saturate", CX_ATTR_INT, false}, {NULL, 0, false}};

#define COMPARE(var, name)                                                                         \
  static const cx_op_def var = {name, CX_DOMAIN_ONNX, 2, 2, 1, 1, no_attrs, infer_compare, NULL,  \
                                NULL, CX_OP_NO_GRAD}
COMPARE(op_equal, "Equal");
COMPARE(op_less, "Less");
COMPARE(op_greater, "Greater");
COMPARE(op_less_equal, "LessOrEqual");
COMPARE(op_greater_equal, "GreaterOrEqual");
static const cx_op_def op_not = {"Not", CX_DOMAIN_ONNX, 1, 1, 1, 1, no_attrs, infer_not, NULL,
                                 NULL, CX_OP_NO_GRAD};
static const cx_op_def op_cast = {"Cast", CX_DOMAIN_ONNX, 1, 1, 1, 1, cast_attrs, infer_cast, NULL,
                                  NULL, CX_OP_NO_GRAD};

const cx_op_def *const cx_ops_compare[] = {
    &op_equal, &op_less, &op_greater, &op_less_equal, &op_greater_equal, &op_not, &op_cast, NULL,
};
