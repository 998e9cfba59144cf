#include "pool.h"

#include <stddef.h>
#include <string.h>

#include "families.h"

/* MaxPool, AveragePool, GlobalAveragePool (ONNX) and their gradient ops (com.compress):
 *   MaxPoolGrad (dY, X) -> dX                 recomputes each window's argmax from X
 *   AveragePoolGrad (dY [, X]) -> dX          X only for its shape; without it, the attribute
 *   GlobalAveragePoolGrad (dY [, X]) -> dX    input_shape gives dX's shape
 * The gradient rules use input_shape rather than X, so that X need not stay alive for backward. */

/* Reads an ints attribute of length want, or fills fallback when absent. */
static cx_status read_ints(const cx_node *n, const char *name, int want, int64_t fallback,
                           int64_t *v) {
  const int64_t *a;
  int k = cx_node_ints(n, name, &a);
  if (k == 0) {
    for (int i = 0; i < want; i++) v[i] = fallback;
    return CX_OK;
  }
  if (k != want)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): attribute %s has %d values; expected %d",
                   n->name, n->op->name, name, k, want);
  for (int i = 0; i < want; i++) {
    if (a[i] < (strcmp(name, "pads") == 0 ? 0 : 1))
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): attribute %s has value %lld at %d",
                     n->name, n->op->name, name, (long long)a[i], i);
    v[i] = a[i];
  }
  return CX_OK;
}

/* One spatial axis: output size and padding for the auto_pad mode. */
static void axis_geometry(cx_pool_geom *g, int i, const char *auto_pad, bool ceil_mode) {
  int64_t ek = (g->k[i] - 1) * g->d[i] + 1, in = g->in[i], s = g->s[i];
  if (strcmp(auto_pad, "SAME_UPPER") == 0 || strcmp(auto_pad, "SAME_LOWER") == 0) {
    g->out[i] = (in + s - 1) / s;
    int64_t total = (g->out[i] - 1) * s + ek - in;
    if (total < 0) total = 0;
    bool upper = auto_pad[5] == 'U';
    g->pad_b[i] = upper ? total / 2 : total - total / 2;
    g->pad_e[i] = total - g->pad_b[i];
    return;
  }
  if (strcmp(auto_pad, "VALID") == 0) {
    g->pad_b[i] = g->pad_e[i] = 0;
    ceil_mode = false;
  }
  int64_t span = in + g->pad_b[i] + g->pad_e[i] - ek;
  g->out[i] = span < 0 ? 0 : (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  /* ceil_mode: a last window that would start in the right padding is dropped */
  if (ceil_mode && g->out[i] > 0 && (g->out[i] - 1) * s >= in + g->pad_b[i]) g->out[i]--;
}

/* Every window must hold at least one input element: a window of padding only has no maximum
 * and no average. */
static cx_status check_windows(const cx_node *n, const cx_pool_geom *g, int i) {
  for (int64_t o = 0; o < g->out[i]; o++) {
    int64_t start = o * g->s[i] - g->pad_b[i], t = 0;
    while (t < g->k[i] && (start + t * g->d[i] < 0 || start + t * g->d[i] >= g->in[i])) t++;
    if (t == g->k[i])
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): window %lld of spatial axis %d lies entirely "
                     "in the padding (input %lld, pads %lld+%lld, kernel %lld, dilation %lld)",
                     n->name, n->op->name, (long long)o, i, (long long)g->in[i],
                     (long long)g->pad_b[i], (long long)g->pad_e[i], (long long)g->k[i],
                     (long long)g->d[i]);
  }
  return CX_OK;
}

static cx_status check_auto_pad(const cx_node *n, const char *p) {
  static const char *const ok[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  for (int i = 0; i < 4; i++)
    if (strcmp(p, ok[i]) == 0) return CX_OK;
  return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): auto_pad is '%s'; expected NOTSET, SAME_UPPER, "
                 "SAME_LOWER or VALID", n->name, n->op->name, p);
}

cx_status cx_pool_geometry(const cx_node *n, const cx_shape *x, cx_pool_geom *g) {
  char b[CX_SHAPE_STR];
  *g = (cx_pool_geom){.nsp = x->ndim - 2};
  if (g->nsp < 1 || g->nsp > CX_POOL_MAX_SPATIAL)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): X has shape %s; expected [N, C, D1 (, D2, D3)]",
                   n->name, n->op->name, cx_shape_str(x, b));
  const int64_t *ks;
  if (cx_node_ints(n, "kernel_shape", &ks) != g->nsp)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): kernel_shape must have %d values for X %s",
                   n->name, n->op->name, g->nsp, cx_shape_str(x, b));
  int64_t pads[2 * CX_POOL_MAX_SPATIAL];
  CX_TRY(read_ints(n, "kernel_shape", g->nsp, 1, g->k));
  CX_TRY(read_ints(n, "strides", g->nsp, 1, g->s));
  CX_TRY(read_ints(n, "dilations", g->nsp, 1, g->d));
  CX_TRY(read_ints(n, "pads", 2 * g->nsp, 0, pads));
  const char *auto_pad = cx_node_string(n, "auto_pad", "NOTSET");
  CX_TRY(check_auto_pad(n, auto_pad));
  if (cx_node_int(n, "storage_order", 0) != 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): storage_order=1 (column-major indices) "
                   "is not supported", n->name, n->op->name);
  bool ceil_mode = cx_node_int(n, "ceil_mode", 0) != 0;
  for (int i = 0; i < g->nsp; i++) {
    g->in[i] = x->d[2 + i];
    g->pad_b[i] = pads[i];
    g->pad_e[i] = pads[g->nsp + i];
    axis_geometry(g, i, auto_pad, ceil_mode);
    if (g->out[i] < 1)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): X %s is smaller than the window on spatial "
                     "axis %d (kernel %lld, dilation %lld, pads %lld+%lld)", n->name, n->op->name,
                     cx_shape_str(x, b), i, (long long)g->k[i], (long long)g->d[i],
                     (long long)g->pad_b[i], (long long)g->pad_e[i]);
    CX_TRY(check_windows(n, g, i));
  }
  return CX_OK;
}

cx_shape cx_pool_out_shape(const cx_shape *x, const cx_pool_geom *g) {
  cx_shape y = *x;
  for (int i = 0; i < g->nsp; i++) y.d[2 + i] = g->out[i];
  return y;
}

void cx_pool_geom_3d(const cx_pool_geom *g, int64_t in[3], int64_t out[3], int64_t k[3],
                     int64_t s[3], int64_t d[3], int64_t pad_b[3], int64_t pad_e[3]) {
  int lead = 3 - g->nsp;
  for (int i = 0; i < 3; i++) {
    int j = i - lead;
    in[i] = j >= 0 ? g->in[j] : 1;
    out[i] = j >= 0 ? g->out[j] : 1;
    k[i] = j >= 0 ? g->k[j] : 1;
    s[i] = j >= 0 ? g->s[j] : 1;
    d[i] = j >= 0 ? g->d[j] : 1;
    pad_b[i] = j >= 0 ? g->pad_b[j] : 0;
    pad_e[i] = j >= 0 ? g->pad_e[j] : 0;
  }
}

static cx_status check_f32(const cx_infer_ctx *ctx) {
  for (int i = 0; i < ctx->node->n_in; i++)
    if (ctx->node->in[i] >= 0 && ctx->in_dtype[i] != CX_F32)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): input %d is %s; expected f32",
                     ctx->node->name, ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
  return CX_OK;
}

static cx_status pool_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  if (n->n_out > 1)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (MaxPool): the Indices output is not supported; "
                   "use only output Y", n->name);
  if (strcmp(n->op->name, "AveragePool") == 0) {
    const int64_t *d;
    int k = cx_node_ints(n, "dilations", &d);
    for (int i = 0; i < k; i++)
      if (d[i] != 1)
        return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (AveragePool): dilations other than 1 are "
                       "not supported", n->name);
  }
  CX_TRY(check_f32(ctx));
  cx_pool_geom g;
  CX_TRY(cx_pool_geometry(n, &ctx->in_shape[0], &g));
  ctx->out_shape[0] = cx_pool_out_shape(&ctx->in_shape[0], &g);
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status global_pool_infer(const cx_infer_ctx *ctx) {
  char b[CX_SHAPE_STR];
  const cx_shape *x = &ctx->in_shape[0];
  if (x->ndim < 3)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): X has shape %s; expected [N, C, D1, ...]",
                   ctx->node->name, ctx->node->op->name, cx_shape_str(x, b));
  CX_TRY(check_f32(ctx));
  ctx->out_shape[0] = *x;
  for (int i = 2; i < x->ndim; i++) ctx->out_shape[0].d[i] = 1;
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* The shape of dX: input 1 (X) when given, else the input_shape attribute. */
static cx_status grad_x_shape(const cx_infer_ctx *ctx, cx_shape *x) {
  const cx_node *n = ctx->node;
  if (n->n_in > 1 && n->in[1] >= 0) {
    *x = ctx->in_shape[1];
    return CX_OK;
  }
  const int64_t *d;
  int k = cx_node_ints(n, "input_shape", &d);
  if (k < 1 || k > CX_MAX_DIMS)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): needs X as input 1 or the attribute "
                   "input_shape", n->name, n->op->name);
  *x = cx_shape_make(k, d);
  return CX_OK;
}

/* dY must have the forward output's shape for X; dX gets X's shape. */
static cx_status grad_infer_with(const cx_infer_ctx *ctx, const cx_shape *x, const cx_shape *y) {
  char b0[CX_SHAPE_STR], b1[CX_SHAPE_STR], b2[CX_SHAPE_STR];
  if (!cx_shape_equal(&ctx->in_shape[0], y))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (%s): dY has shape %s; the pooling of X %s gives %s",
                   ctx->node->name, ctx->node->op->name, cx_shape_str(&ctx->in_shape[0], b0),
                   cx_shape_str(x, b1), cx_shape_str(y, b2));
  CX_TRY(check_f32(ctx));
  ctx->out_shape[0] = *x;
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

static cx_status pool_grad_infer(const cx_infer_ctx *ctx) {
  cx_shape x;
  cx_pool_geom g;
  CX_TRY(grad_x_shape(ctx, &x));
  CX_TRY(cx_pool_geometry(ctx->node, &x, &g));
  cx_shape y = cx_pool_out_shape(&x, &g);
  return grad_infer_with(ctx, &x, &y);
}

static cx_status global_pool_grad_infer(const cx_infer_ctx *ctx) {
  cx_shape x;
  CX_TRY(grad_x_shape(ctx, &x));
  cx_shape y = x;
  for (int i = 2; i < x.ndim; i++) y.d[i] = 1;
  return grad_infer_with(ctx, &x, &y);
}

static cx_status max_pool_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  ctx->dx[0] = -1;
  if (ctx->dy[0] < 0 || !ctx->need[0]) return CX_OK;
  int in[2] = {ctx->dy[0], n->in[0]};
  int node = cx_grad_node(ctx, "MaxPoolGrad", in, 2, 1);
  if (node < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, node);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

/* AveragePool and GlobalAveragePool: dX from dY alone, X's shape as an attribute. */
static cx_status avg_pool_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  ctx->dx[0] = -1;
  if (ctx->dy[0] < 0 || !ctx->need[0]) return CX_OK;
  bool global = strcmp(n->op->name, "GlobalAveragePool") == 0;
  int node = cx_grad_node(ctx, global ? "GlobalAveragePoolGrad" : "AveragePoolGrad", &ctx->dy[0],
                          1, 1);
  if (node < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, node);
  const cx_shape *x = &ctx->shape[n->in[0]];
  cx_node_set_ints(ctx->g, node, "input_shape", x->d, x->ndim);
  ctx->dx[0] = cx_node_output(ctx->g, node, 0);
  return cx_graph_status(ctx->g);
}

#define POOL_WINDOW_ATTRS                                                                          \
  {"auto_pad", CX_ATTR_STRING, false}, {"ceil_mode", CX_ATTR_INT, false},                          \
      {"dilations", CX_ATTR_INTS, false}, {"kernel_shape", CX_ATTR_INTS, true},                    \
      {"pads", CX_ATTR_INTS, false}, {"strides", CX_ATTR_INTS, false}

static const cx_attr_schema max_pool_attrs[] = {
    POOL_WINDOW_ATTRS, {"storage_order", CX_ATTR_INT, false}, {NULL, 0, false}};
static const cx_attr_schema avg_pool_attrs[] = {
    POOL_WINDOW_ATTRS, {"count_include_pad", CX_ATTR_INT, false}, {NULL, 0, false}};
static const cx_attr_schema max_pool_grad_attrs[] = {
    POOL_WINDOW_ATTRS, {"storage_order", CX_ATTR_INT, false}, {NULL, 0, false}};
static const cx_attr_schema avg_pool_grad_attrs[] = {
    POOL_WINDOW_ATTRS, {"count_include_pad", CX_ATTR_INT, false},
    {"input_shape", CX_ATTR_INTS, false}, {NULL, 0, false}};
static const cx_attr_schema global_pool_attrs[] = {{NULL, 0, false}};
static const cx_attr_schema global_pool_grad_attrs[] = {
    {"input_shape", CX_ATTR_INTS, false}, {NULL, 0, false}};

static const cx_op_def max_pool = {
    .name = "MaxPool", .domain = CX_DOMAIN_ONNX,
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 2,
    .attrs = max_pool_attrs, .infer = pool_infer, .grad = max_pool_grad,
};
static const cx_op_def avg_pool = {
    .name = "AveragePool", .domain = CX_DOMAIN_ONNX,
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = avg_pool_attrs, .infer = pool_infer, .grad = avg_pool_grad,
};
static const cx_op_def global_avg_pool = {
    .name = "GlobalAveragePool", .domain = CX_DOMAIN_ONNX,
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = global_pool_attrs, .infer = global_pool_infer, .grad = avg_pool_grad,
};
static const cx_op_def max_pool_grad_op = {
    .name = "MaxPoolGrad", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = max_pool_grad_attrs, .infer = pool_grad_infer,
};
static const cx_op_def avg_pool_grad_op = {
    .name = "AveragePoolGrad", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = avg_pool_grad_attrs, .infer = pool_grad_infer,
};
static const cx_op_def global_avg_pool_grad_op = {
    .name = "GlobalAveragePoolGrad", .domain = CX_DOMAIN_COMPRESS,
    .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = global_pool_grad_attrs, .infer = global_pool_grad_infer,
};

const cx_op_def *const cx_ops_pool[] = {
    &max_pool, &avg_pool, &global_avg_pool, &max_pool_grad_op, &avg_pool_grad_op,
    &global_avg_pool_grad_op, NULL,
};
