#include "conv.h"

#include <stddef.h>
#include <string.h>

#include "families.h"

/* ---- geometry ---------------------------------------------------------------------------------- */

/* strides / dilations: absent means 1 in both dimensions */
static cx_status read_pair(const cx_node *n, const char *attr, int64_t out[2]) {
  const int64_t *v;
  int c = cx_node_ints(n, attr, &v);
  out[0] = out[1] = 1;
  if (c == 0) return CX_OK;
  if (c != 2 || v[0] < 1 || v[1] < 1)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): %s must be two integers >= 1 (got %d values)",
                   n->name, attr, c);
  out[0] = v[0];
  out[1] = v[1];
  return CX_OK;
}

/* One spatial dimension under auto_pad; ONNX's formulas. `extent` is the dilated kernel size. */
static void pad_auto(const char *mode, int64_t in, int64_t s, int64_t extent, int64_t *begin,
                     int64_t *end, int64_t *out) {
  if (strcmp(mode, "VALID") == 0) {
    *begin = *end = 0;
    *out = in >= extent ? (in - extent) / s + 1 : 0;
    return;
  }
  *out = (in + s - 1) / s;
  int64_t total = (*out - 1) * s + extent - in;
  if (total < 0) total = 0;
  /* SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the beginning */
  *begin = strcmp(mode, "SAME_UPPER") == 0 ? total / 2 : total - total / 2;
  *end = total - *begin;
}

static cx_status read_pads(const cx_node *n, const char *mode, cx_conv_geom *g) {
  const int64_t *p;
  int c = cx_node_ints(n, "pads", &p);
  bool explicit_pads = strcmp(mode, "NOTSET") == 0;
  if (c != 0 && c != 4)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): pads needs 4 values [top, left, bottom, right], got %d",
                   n->name, c);
  for (int i = 0; i < c; i++) {
    if (p[i] < 0)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): negative pad %lld", n->name, (long long)p[i]);
    if (p[i] != 0 && !explicit_pads)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): pads cannot be combined with auto_pad=%s",
                     n->name, mode);
  }
  int64_t eh = (g->kh - 1) * g->dh + 1, ew = (g->kw - 1) * g->dw + 1;
  if (!explicit_pads) {
    pad_auto(mode, g->h, g->sh, eh, &g->pt, &g->pb, &g->oh);
    pad_auto(mode, g->w, g->sw, ew, &g->pl, &g->pr, &g->ow);
    return CX_OK;
  }
  g->pt = c ? p[0] : 0;
  g->pl = c ? p[1] : 0;
  g->pb = c ? p[2] : 0;
  g->pr = c ? p[3] : 0;
  int64_t hh = g->h + g->pt + g->pb, ww = g->w + g->pl + g->pr;
  g->oh = hh >= eh ? (hh - eh) / g->sh + 1 : 0;
  g->ow = ww >= ew ? (ww - ew) / g->sw + 1 : 0;
  return CX_OK;
}

static cx_status check_channels(const cx_node *n, const cx_shape *x, const cx_shape *w,
                                const cx_conv_geom *g) {
  char bx[CX_SHAPE_STR], bw[CX_SHAPE_STR];
  if (g->group < 1 || g->c_in % g->group || g->c_out % g->group || w->d[1] * g->group != g->c_in)
    return cx_fail(CX_ERR_SHAPE,
                   "node '%s' (Conv): X %s and W %s do not fit group=%lld (expected W[1] * group "
                   "== X[1] and W[0] divisible by group)",
                   n->name, cx_shape_str(x, bx), cx_shape_str(w, bw), (long long)g->group);
  const int64_t *ks;
  int c = cx_node_ints(n, "kernel_shape", &ks);
  if (c && (c != 2 || ks[0] != g->kh || ks[1] != g->kw))
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): kernel_shape disagrees with W %s", n->name,
                   cx_shape_str(w, bw));
  return CX_OK;
}

cx_status cx_conv_geom_make(const cx_node *n, const cx_shape *x, const cx_shape *w,
                            cx_conv_geom *g) {
  char bx[CX_SHAPE_STR], bw[CX_SHAPE_STR];
  memset(g, 0, sizeof *g);
  if (x->ndim != 4 || w->ndim != 4)
    return cx_fail(CX_ERR_UNSUPPORTED,
                   "node '%s' (Conv): only 2-D convolutions are supported (X [N,C,H,W] and W "
                   "[M,C/group,kH,kW]); got X %s and W %s",
                   n->name, cx_shape_str(x, bx), cx_shape_str(w, bw));
  *g = (cx_conv_geom){.n = x->d[0], .c_in = x->d[1], .h = x->d[2], .w = x->d[3],
                      .c_out = w->d[0], .kh = w->d[2], .kw = w->d[3],
                      .group = cx_node_int(n, "group", 1)};
  if (g->c_in < 1 || g->h < 1 || g->w < 1 || g->c_out < 1 || g->kh < 1 || g->kw < 1)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): X %s or W %s has an empty or unknown dimension",
                   n->name, cx_shape_str(x, bx), cx_shape_str(w, bw));
  CX_TRY(check_channels(n, x, w, g));
  int64_t s[2], d[2];
  CX_TRY(read_pair(n, "strides", s));
  CX_TRY(read_pair(n, "dilations", d));
  g->sh = s[0], g->sw = s[1], g->dh = d[0], g->dw = d[1];
  const char *mode = cx_node_string(n, "auto_pad", "NOTSET");
  if (strcmp(mode, "NOTSET") && strcmp(mode, "SAME_UPPER") && strcmp(mode, "SAME_LOWER") &&
      strcmp(mode, "VALID"))
    return cx_fail(CX_ERR_SHAPE,
                   "node '%s' (Conv): auto_pad '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID",
                   n->name, mode);
  CX_TRY(read_pads(n, mode, g));
  if (g->oh < 1 || g->ow < 1)
    return cx_fail(CX_ERR_SHAPE,
                   "node '%s' (Conv): the kernel (W %s, dilations %lldx%lld) does not fit in X %s "
                   "with pads [%lld,%lld,%lld,%lld]",
                   n->name, cx_shape_str(w, bw), (long long)g->dh, (long long)g->dw,
                   cx_shape_str(x, bx), (long long)g->pt, (long long)g->pl, (long long)g->pb,
                   (long long)g->pr);
  return CX_OK;
}

void cx_conv_grad_wanted(const cx_node *n, bool want[3]) {
  const int64_t *v;
  int c = cx_node_ints(n, "outputs", &v);
  for (int i = 0; i < 3; i++) want[i] = c == 3 ? v[i] != 0 : true;
}

/* ---- Conv -------------------------------------------------------------------------------------- */

static const cx_attr_schema conv_attrs[] = {
    {"auto_pad", CX_ATTR_STRING, false}, {"dilations", CX_ATTR_INTS, false},
    {"group", CX_ATTR_INT, false},       {"kernel_shape", CX_ATTR_INTS, false},
    {"pads", CX_ATTR_INTS, false},       {"strides", CX_ATTR_INTS, false},
    {NULL, 0, false},
};

static cx_status check_f32(const cx_infer_ctx *ctx, int n_in) {
  for (int i = 0; i < n_in; i++)
    if (ctx->node->in[i] >= 0 && ctx->in_dtype[i] != CX_F32)
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): input %d is %s; only f32 is supported",
                     ctx->node->name, ctx->node->op->name, i, cx_dtype_name(ctx->in_dtype[i]));
  return CX_OK;
}

static cx_status conv_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  cx_conv_geom g;
  CX_TRY(check_f32(ctx, n->n_in));
  CX_TRY(cx_conv_geom_make(n, &ctx->in_shape[0], &ctx->in_shape[1], &g));
  if (n->n_in > 2 && n->in[2] >= 0) {
    const cx_shape *b = &ctx->in_shape[2];
    char bb[CX_SHAPE_STR];
    if (b->ndim != 1 || b->d[0] != g.c_out)
      return cx_fail(CX_ERR_SHAPE, "node '%s' (Conv): bias B is %s, expected [%lld]", n->name,
                     cx_shape_str(b, bb), (long long)g.c_out);
  }
  ctx->out_shape[0] = cx_shape_make(4, (int64_t[]){g.n, g.c_out, g.oh, g.ow});
  ctx->out_dtype[0] = CX_F32;
  return CX_OK;
}

/* One ConvGrad node computes every wanted input gradient, so that X and dY are read together. */
static cx_status conv_grad(const cx_grad_ctx *ctx) {
  const cx_node *n = &ctx->g->nodes[ctx->node];
  bool has_b = n->n_in > 2 && n->in[2] >= 0;
  int64_t want[3] = {ctx->need[0], ctx->need[1], has_b && ctx->need[2]};
  int in[3] = {ctx->dy[0], n->in[0], n->in[1]};
  if (ctx->dy[0] < 0 || !(want[0] || want[1] || want[2])) return CX_OK;
  int k = cx_grad_node(ctx, "ConvGrad", in, 3, 3); /* may move g->nodes: n is stale after this */
  if (k < 0) return cx_graph_status(ctx->g);
  cx_grad_copy_attrs(ctx, k);
  cx_node_set_ints(ctx->g, k, "outputs", want, 3);
  for (int i = 0; i < 3; i++)
    if (want[i]) ctx->dx[i] = cx_node_output(ctx->g, k, i);
  return cx_graph_status(ctx->g);
}

static const cx_op_def conv_def = {
    .name = "Conv",
    .domain = CX_DOMAIN_ONNX,
    .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
    .attrs = conv_attrs,
    .infer = conv_infer,
    .grad = conv_grad,
};

/* ---- ConvGrad: (dY, X, W) -> (dX, dW, dB) ------------------------------------------------------ */

static const cx_attr_schema conv_grad_attrs[] = {
    {"auto_pad", CX_ATTR_STRING, false}, {"dilations", CX_ATTR_INTS, false},
    {"group", CX_ATTR_INT, false},       {"kernel_shape", CX_ATTR_INTS, false},
    {"pads", CX_ATTR_INTS, false},       {"strides", CX_ATTR_INTS, false},
    {"outputs", CX_ATTR_INTS, false},    {NULL, 0, false},
};

static bool dims_match(int64_t a, int64_t b) { return a == b || a < 0 || b < 0; }

static cx_status conv_grad_infer(const cx_infer_ctx *ctx) {
  const cx_node *n = ctx->node;
  const cx_shape *dy = &ctx->in_shape[0];
  cx_conv_geom g;
  bool want[3];
  char b[CX_SHAPE_STR];
  CX_TRY(check_f32(ctx, 3));
  CX_TRY(cx_conv_geom_make(n, &ctx->in_shape[1], &ctx->in_shape[2], &g));
  if (dy->ndim != 4 || !dims_match(dy->d[0], g.n) || dy->d[1] != g.c_out || dy->d[2] != g.oh ||
      dy->d[3] != g.ow)
    return cx_fail(CX_ERR_SHAPE, "node '%s' (ConvGrad): dY is %s, expected [%lld,%lld,%lld,%lld]",
                   n->name, cx_shape_str(dy, b), (long long)g.n, (long long)g.c_out,
                   (long long)g.oh, (long long)g.ow);
  cx_conv_grad_wanted(n, want);
  cx_shape none = cx_shape_make(1, (int64_t[]){0});
  ctx->out_shape[0] = want[0] ? ctx->in_shape[1] : none;
  ctx->out_shape[1] = want[1] ? ctx->in_shape[2] : none;
  ctx->out_shape[2] = want[2] ? cx_shape_make(1, (int64_t[]){g.c_out}) : none;
  for (int i = 0; i < 3; i++) ctx->out_dtype[i] = CX_F32;
  return CX_OK;
}

static const cx_op_def conv_grad_def = {
    .name = "ConvGrad",
    .domain = CX_DOMAIN_COMPRESS,
    .min_in = 3, .max_in = 3, .min_out = 3, .max_out = 3,
    .attrs = conv_grad_attrs,
    .infer = conv_grad_infer,
};

const cx_op_def *const cx_ops_conv[] = {&conv_def, &conv_grad_def, NULL};
