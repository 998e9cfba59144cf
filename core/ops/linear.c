#include <stddef.h>
#include <string.h>

#include "families.h"

/* Gemm and MatMul (ONNX), and MatMulT (com.compress): MatMul with transA / transB, which swap the
 * last two axes of an operand, so that gradients read operands in place instead of copying
 * transposes. Batch axes broadcast as in numpy; a 1-D operand of MatMul gets a unit axis that is
 * removed from the result (forward only). */

static cx_status linear_fail_shapes(const cx_infer_ctx *ctx, const char *what) {
  char b0[CX_SHAPE_STR], b1[CX_SHAPE_STR], b2[CX_SHAPE_STR] = "none";
  const cx_node *n = ctx->node;
  if (n->n_in > 2 && n->in[2] >= 0) cx_shape_str(&ctx->in_shape[2], b2);
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): A %s, B %s%s%s: %s", n->name, n->op->name,
                 cx_shape_str(&ctx->in_shape[0], b0), cx_shape_str(&ctx->in_shape[1], b1),
                 n->n_in > 2 ? ", C " : "", n->n_in > 2 ? b2 : "", what);
}

static cx_status check_f32(const cx_infer_ctx *ctx) {
  for (int i = 0; i < ctx->node->n_in; i++)
    if (ctx->node->in[i] >= 0 && ctx->in_dtype[i] != CX_F32)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32",
                     ctx->node->name, ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
  return CX_OK;
}

static cx_status gemm_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  const cx_shape *a = &ctx->in_shape[0], *b = &ctx->in_shape[1];
  CX_TRY(check_f32(ctx));
  if (a->ndim != 2 || b->ndim != 2) return linear_fail_shapes(ctx, "A and B must be 2-D");
  bool ta = cx_node_int(n, "transA", 0) != 0, tb = cx_node_int(n, "transB", 0) != 0;
  int64_t m = a->d[ta], k = a->d[!ta], kb = b->d[tb], nn = b->d[!tb];
  if (k != kb) return linear_fail_shapes(ctx, "the inner dimensions (K) of op(A) and op(B) differ");
  if (n->n_in > 2 && n->in[2] >= 0) {
    const cx_shape *c = &ctx->in_shape[2];
    if (c->ndim > 2) return linear_fail_shapes(ctx, "C must have rank <= 2");
    int64_t c0 = c->ndim == 2 ? c->d[0] : 1, c1 = c->ndim >= 1 ? c->d[c->ndim - 1] : 1;
    if ((c0 != 1 && c0 != m) || (c1 != 1 && c1 != nn))
      return linear_fail_shapes(ctx, "C does not broadcast to [M, N]");
  }
  ctx->out_shape[0] = cx_shape_make(2, (int64_t[]){m, nn});
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* numpy matmul of a and b, each operand with its last two axes swapped when t[i] is set. */
static cx_status matmul_shape(const cx_infer_ctx *ctx, const bool t[2], cx_shape *y) {
  cx_shape s[2] = {ctx->in_shape[0], ctx->in_shape[1]};
  bool vec[2] = {s[0].ndim == 1, s[1].ndim == 1};
  if (s[0].ndim == 0 || s[1].ndim == 0) return linear_fail_shapes(ctx, "operands must not be scalars");
  if (vec[0]) s[0] = cx_shape_make(2, (int64_t[]){1, s[0].d[0]});
  if (vec[1]) s[1] = cx_shape_make(2, (int64_t[]){s[1].d[0], 1});
  for (int i = 0; i < 2; i++)
    if (t[i]) {
      int64_t tmp = s[i].d[s[i].ndim - 1];
      s[i].d[s[i].ndim - 1] = s[i].d[s[i].ndim - 2];
      s[i].d[s[i].ndim - 2] = tmp;
    }
  int ra = s[0].ndim, rb = s[1].ndim;
  if (s[0].d[ra - 1] != s[1].d[rb - 2])
    return linear_fail_shapes(ctx, "the inner dimensions (K) of A and B differ");
  cx_shape ba = cx_shape_make(ra - 2, s[0].d), bb = cx_shape_make(rb - 2, s[1].d), batch;
  if (cx_shape_broadcast(&ba, &bb, &batch) != CX_OK)
    return linear_fail_shapes(ctx, "the batch dimensions do not broadcast");
  *y = batch;
  if (!vec[0]) y->d[y->ndim++] = s[0].d[ra - 2];
  if (!vec[1]) y->d[y->ndim++] = s[1].d[rb - 1];
  return CX_OK;
}

static cx_status matmul_infer(const cx_infer_ctx *ctx) {
  CX_TRY(check_f32(ctx));
  const cx_node *n = ctx->node;
  bool t[2] = {cx_node_int(n, "transA", 0) != 0, cx_node_int(n, "transB", 0) != 0};
  if ((t[0] || t[1]) && (ctx->in_shape[0].ndim < 2 || ctx->in_shape[1].ndim < 2))
    return linear_fail_shapes(ctx, "a transposed operand must have rank >= 2");
  CX_TRY(matmul_shape(ctx, t, &ctx->out_shape[0]));
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* Emits op(x, y) with the given transposes; for Gemm also alpha. Returns the value id. */
static int emit_product(const cx_grad_ctx *ctx, const char *op, int x, int y, bool tx, bool ty,
                        float alpha) {
  int node = cx_grad_node(ctx, op, (int[]){x, y}, 2, 1);
  if (node < 0) return -1;
  if (tx) cx_node_set_int(ctx->g, node, "transA", 1);
  if (ty) cx_node_set_int(ctx->g, node, "transB", 1);
  if (alpha != 1) cx_node_set_float(ctx->g, node, "alpha", alpha);
  return cx_node_output(ctx->g, node, 0);
}

/* For Y = alpha * op(A) op(B) (op transposes when tA / tB is set):
 *   dA = alpha * dY op(B)^T        or, when tA, alpha * op(B) dY^T
 *   dB = alpha * op(A)^T dY        or, when tB, alpha * dY^T op(A)
 * each written as one product of stored operands with transpose flags. Batch broadcasting of
 * MatMul is undone with a reduction to the operand's shape. */
static cx_status product_grad(const cx_grad_ctx *ctx, const char *op, float alpha) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  bool ta = cx_node_int(n, "transA", 0) != 0, tb = cx_node_int(n, "transB", 0) != 0;
  int a = n->in[0], b = n->in[1], dy = ctx->dy[0];
  cx_shape y_shape = ctx->shape[n->out[0]];
  int d[2] = {-1, -1};
  if (ctx->need[0])
    d[0] = ta ? emit_product(ctx, op, b, dy, tb, true, alpha)
              : emit_product(ctx, op, dy, b, false, !tb, alpha);
  if (ctx->need[1])
    d[1] = tb ? emit_product(ctx, op, dy, a, true, ta, alpha)
              : emit_product(ctx, op, a, dy, !ta, false, alpha);
  for (int i = 0; i < 2; i++) {
    if (!ctx->need[i]) continue;
    if (d[i] < 0) return cx_graph_status(ctx->g);
    /* the product's batch axes are Y's; sum them down to the operand's */
    cx_shape full = ctx->shape[n->in[i]];
    full.ndim = y_shape.ndim;
    int r = ctx->shape[n->in[i]].ndim;
    for (int k = 0; k < y_shape.ndim - 2; k++) full.d[k] = y_shape.d[k];
    full.d[full.ndim - 2] = ctx->shape[n->in[i]].d[r - 2];
    full.d[full.ndim - 1] = ctx->shape[n->in[i]].d[r - 1];
    ctx->dx[i] = cx_grad_reduce_to(ctx, d[i], &full, &ctx->shape[n->in[i]]);
  }
  return cx_graph_status(ctx->g);
}

static cx_status matmul_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  for (int i = 0; i < n->n_in; i++) ctx->dx[i] = -1;
  if (ctx->dy[0] < 0) return CX_OK;
  for (int i = 0; i < 2; i++)
    if (ctx->shape[n->in[i]].ndim < 2)
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): the gradient of a 1-D operand is not "
                     "supported; reshape it to [1, K] or [K, 1] first", n->name, n->op->name);
  return product_grad(ctx, "MatMulT", 1);
}

static cx_status gemm_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  for (int i = 0; i < n->n_in; i++) ctx->dx[i] = -1;
  if (ctx->dy[0] < 0) return CX_OK;
  CX_TRY(product_grad(ctx, "Gemm", cx_node_float(n, "alpha", 1)));
  if (n->n_in < 3 || n->in[2] < 0 || !ctx->need[2]) return CX_OK;
  float beta = cx_node_float(n, "beta", 1);
  int dc = cx_grad_reduce_to(ctx, ctx->dy[0], &ctx->shape[n->out[0]], &ctx->shape[n->in[2]]);
  if (dc >= 0 && beta != 1) dc = cx_grad_emit(ctx, "Mul", (int[]){dc, cx_grad_scalar(ctx, beta)}, 2);
  ctx->dx[2] = dc;
  return cx_graph_status(ctx->g);
}

static const cx_attr_schema gemm_attrs[] = {
    {"alpha", CX_ATTR_FLOAT, false}, {"beta", CX_ATTR_FLOAT, false},
    {"transA", CX_ATTR_INT, false},  {"transB", CX_ATTR_INT, false},
    {NULL, 0, false},
};
static const cx_attr_schema matmul_attrs[] = {{NULL, 0, false}};
static const cx_attr_schema matmul_t_attrs[] = {
    {"transA", CX_ATTR_INT, false}, {"transB", CX_ATTR_INT, false}, {NULL, 0, false}};

static const cx_op_def gemm = {
    .name = "Gemm", .domain = CX_DOMAIN_ONNX,
    .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
    .attrs = gemm_attrs, .infer = gemm_infer, .grad = gemm_grad,
};
static const cx_op_def matmul = {
    .name = "MatMul", .domain = CX_DOMAIN_ONNX,
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = matmul_attrs, .infer = matmul_infer, .grad = matmul_grad,
};
static const cx_op_def matmul_t = {
    .name = "MatMulT", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = matmul_t_attrs, .infer = matmul_infer, .grad = matmul_grad,
};

const cx_op_def *const cx_ops_linear[] = {&gemm, &matmul, &matmul_t, NULL};
