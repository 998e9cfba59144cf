#include "grad_clip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op_call.h"

/* Accumulation buffers start on 64-byte boundaries, as the optimizer's state does. */
#define ALIGN_FLOATS 16

/* The ops of tensor k of the list. */
typedef struct grad_slot {
  cx_op_call *norm, *finite, *scale, *add; /* add: with accumulation buffers only */
  cx_tensor sq, flag, acc; /* element k of the norms and flags vectors; buffer k */
} grad_slot;

struct cx_grad_ops {
  const cx_backend *b;
  cx_stream *s;
  int n;
  grad_slot *slot;
  bool *present; /* like[k] != NULL */
  /* on the backend: every tensor's squared norm (f64 [n]) and finite flag (bool [n]), and the
   * scale factor (f32 []); host copies of the first two, read in one download each */
  void *norms, *flags, *factor;
  cx_tensor norms_t, flags_t, factor_t;
  double *norms_host;
  bool *flags_host;
  void *acc_block;
  cx_tensor **acc; /* n pointers into slot[k].acc, NULL where like[k] is */
};

static cx_tensor backend_view(const cx_grad_ops *g, cx_dtype t, const cx_shape *s, void *data) {
  cx_tensor v = cx_tensor_view(t, s, data);
  v.device.kind = g->b->device;
  return v;
}

static cx_status call(cx_grad_ops *g, const char *op, int k, const cx_tensor *in, int n_in,
                      const cx_tensor *out, cx_op_call **c) {
  char name[64];
  snprintf(name, sizeof name, "%s(gradient %d)", op, k);
  cx_op_call_desc d = {.op = op, .name = name, .in = in, .n_in = n_in, .out = out, .n_out = 1};
  return cx_op_call_create(g->b, g->s, &d, c);
}

static cx_status add_scalars(cx_grad_ops *g) {
  size_t n = (size_t)g->n + 1;
  g->norms = g->b->alloc(sizeof(double) * n);
  g->flags = g->b->alloc(sizeof(bool) * n);
  g->factor = g->b->alloc(sizeof(float));
  g->norms_host = calloc(n, sizeof(double));
  g->flags_host = calloc(n, sizeof(bool));
  if (!g->norms || !g->flags || !g->factor || !g->norms_host || !g->flags_host)
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  g->b->memset_zero(g->norms, sizeof(double) * n, g->s); /* entries of NULL tensors stay 0 */
  g->b->memset_zero(g->flags, sizeof(bool) * n, g->s);
  cx_shape all = {1, {g->n}}, scalar = {0};
  g->norms_t = backend_view(g, CX_F64, &all, g->norms);
  g->flags_t = backend_view(g, CX_BOOL, &all, g->flags);
  g->factor_t = backend_view(g, CX_F32, &scalar, g->factor);
  return CX_OK;
}

static int64_t padded(const cx_tensor *t) {
  return (cx_tensor_numel(t) + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

static cx_status add_buffers(cx_grad_ops *g, cx_tensor *const *like) {
  int64_t total = 0;
  for (int k = 0; k < g->n; k++) total += like[k] ? padded(like[k]) : 0;
  size_t bytes = sizeof(float) * (size_t)(total > 0 ? total : 1);
  g->acc_block = g->b->alloc(bytes);
  g->acc = calloc((size_t)g->n + 1, sizeof *g->acc);
  if (!g->acc_block || !g->acc)
    return cx_fail(CX_ERR_NOMEM, "out of memory for %zu bytes of accumulated gradients", bytes);
  g->b->memset_zero(g->acc_block, bytes, g->s);
  float *at = g->acc_block;
  for (int k = 0; k < g->n; k++) {
    if (!like[k]) continue;
    g->slot[k].acc = backend_view(g, CX_F32, &like[k]->shape, at);
    g->acc[k] = &g->slot[k].acc;
    at += padded(like[k]);
  }
  return CX_OK;
}

static cx_status add_slot(cx_grad_ops *g, int k, const cx_tensor *t, bool accumulate) {
  grad_slot *s = &g->slot[k];
  cx_shape scalar = {0};
  s->sq = backend_view(g, CX_F64, &scalar, (double *)g->norms + k);
  s->flag = backend_view(g, CX_BOOL, &scalar, (bool *)g->flags + k);
  CX_TRY(call(g, "SquaredNorm", k, t, 1, &s->sq, &s->norm));
  CX_TRY(call(g, "AllFinite", k, t, 1, &s->flag, &s->finite));
  CX_TRY(call(g, "Mul", k, (cx_tensor[]){*t, g->factor_t}, 2, t, &s->scale));
  if (accumulate) CX_TRY(call(g, "Add", k, (cx_tensor[]){s->acc, *t}, 2, &s->acc, &s->add));
  return CX_OK;
}

static cx_status create(cx_grad_ops *g, cx_tensor *const *like, bool accumulate) {
  g->slot = calloc((size_t)g->n + 1, sizeof *g->slot);
  g->present = calloc((size_t)g->n + 1, sizeof *g->present);
  if (!g->slot || !g->present) return cx_fail(CX_ERR_NOMEM, "out of memory");
  CX_TRY(add_scalars(g));
  if (accumulate) CX_TRY(add_buffers(g, like));
  for (int k = 0; k < g->n; k++) {
    if (!(g->present[k] = like[k] != NULL)) continue;
    if (like[k]->dtype != CX_F32 || like[k]->device.kind != g->b->device)
      return cx_fail(CX_ERR_ARG, "gradient %d is %s; expected f32 on the %s backend", k,
                     cx_dtype_name(like[k]->dtype), g->b->name);
    CX_TRY(add_slot(g, k, like[k], accumulate));
  }
  return CX_OK;
}

cx_status cx_grad_ops_create(const cx_backend *b, cx_stream *s, int n, cx_tensor *const *like,
                             bool accumulate, cx_grad_ops **out) {
  *out = NULL;
  if (n < 0 || (n > 0 && !like))
    return cx_fail(CX_ERR_ARG, "gradient ops: %d tensors and no list of them", n);
  cx_grad_ops *g = calloc(1, sizeof *g);
  if (!g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  *g = (cx_grad_ops){.b = b, .s = s, .n = n};
  cx_status st = create(g, like, accumulate);
  if (st != CX_OK) {
    cx_grad_ops_free(g);
    return st;
  }
  *out = g;
  return CX_OK;
}

void cx_grad_ops_free(cx_grad_ops *g) {
  if (!g) return;
  for (int k = 0; g->slot && k < g->n; k++) {
    cx_op_call_free(g->slot[k].norm);
    cx_op_call_free(g->slot[k].finite);
    cx_op_call_free(g->slot[k].scale);
    cx_op_call_free(g->slot[k].add);
  }
  if (g->norms) g->b->free(g->norms);
  if (g->flags) g->b->free(g->flags);
  if (g->factor) g->b->free(g->factor);
  if (g->acc_block) g->b->free(g->acc_block);
  free(g->slot);
  free(g->present);
  free(g->norms_host);
  free(g->flags_host);
  free(g->acc);
  free(g);
}

/* t[k] is where the list has a tensor (NULL entries of t are skipped). */
static cx_status check_entry(const cx_grad_ops *g, cx_tensor *const *t, int k) {
  if (!t[k] || g->present[k]) return CX_OK;
  return cx_fail(CX_ERR_ARG, "gradient ops: tensor %d given, but the list has none there", k);
}

cx_status cx_grad_sq_norms(cx_grad_ops *g, cx_tensor *const *t, double *sq) {
  for (int k = 0; k < g->n; k++) {
    CX_TRY(check_entry(g, t, k));
    if (t[k]) CX_TRY(cx_op_call_run(g->slot[k].norm, t[k], &g->slot[k].sq));
  }
  if (g->n) CX_TRY(cx_backend_download(g->b, g->norms_host, &g->norms_t, g->s));
  for (int k = 0; k < g->n; k++) sq[k] = t[k] ? g->norms_host[k] : 0;
  return CX_OK;
}

cx_status cx_grad_global_norm(cx_grad_ops *g, cx_tensor *const *grads, float *norm) {
  CX_TRY(cx_grad_sq_norms(g, grads, g->norms_host));
  double s = 0;
  for (int k = 0; k < g->n; k++)
    if (grads[k]) s += g->norms_host[k];
  *norm = (float)sqrt(s);
  return CX_OK;
}

cx_status cx_grad_clip_global_norm(cx_grad_ops *g, cx_tensor *const *grads, float max_norm,
                                   float *norm) {
  CX_TRY(cx_grad_global_norm(g, grads, norm));
  double coef = (double)max_norm / ((double)*norm + 1e-6);
  if (isfinite(*norm) && coef < 1) CX_TRY(cx_grad_scale(g, grads, (float)coef));
  return CX_OK;
}

cx_status cx_grads_finite(cx_grad_ops *g, cx_tensor *const *grads, bool *finite) {
  for (int k = 0; k < g->n; k++) {
    CX_TRY(check_entry(g, grads, k));
    if (grads[k]) CX_TRY(cx_op_call_run(g->slot[k].finite, grads[k], &g->slot[k].flag));
  }
  if (g->n) CX_TRY(cx_backend_download(g->b, g->flags_host, &g->flags_t, g->s));
  *finite = true;
  for (int k = 0; k < g->n; k++)
    if (grads[k] && !g->flags_host[k]) *finite = false;
  return CX_OK;
}

cx_status cx_grad_scale(cx_grad_ops *g, cx_tensor *const *grads, float factor) {
  CX_TRY(cx_backend_upload(g->b, &g->factor_t, &factor, g->s));
  for (int k = 0; k < g->n; k++) {
    CX_TRY(check_entry(g, grads, k));
    if (!grads[k]) continue;
    cx_tensor in[2] = {*grads[k], g->factor_t};
    CX_TRY(cx_op_call_run(g->slot[k].scale, in, grads[k]));
  }
  return CX_OK;
}

cx_status cx_grad_accumulate_one(cx_grad_ops *g, int k, const cx_tensor *grad, bool first) {
  if (!g->acc)
    return cx_fail(CX_ERR_ARG, "gradient accumulation: the gradient ops have no buffers");
  if (k < 0 || k >= g->n) return cx_fail(CX_ERR_ARG, "gradient accumulation: no tensor %d", k);
  if (!g->present[k] && !grad) return CX_OK;
  if (!g->present[k] || !grad)
    return cx_fail(CX_ERR_ARG, "gradient accumulation: tensor %d is %s, its buffer %s", k,
                   grad ? "given" : "missing", g->present[k] ? "exists" : "does not");
  grad_slot *s = &g->slot[k];
  if (!first) return cx_op_call_run(s->add, (cx_tensor[]){s->acc, *grad}, &s->acc);
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  if (!cx_shape_equal(&grad->shape, &s->acc.shape))
    return cx_fail(CX_ERR_SHAPE, "gradient accumulation: buffer %d is %s, its gradient %s", k,
                   cx_shape_str(&s->acc.shape, a), cx_shape_str(&grad->shape, b));
  return cx_backend_copy(g->b, &s->acc, grad, g->s);
}

cx_status cx_grad_accumulate(cx_grad_ops *g, cx_tensor *const *grads, bool first) {
  for (int k = 0; k < g->n; k++) CX_TRY(cx_grad_accumulate_one(g, k, grads[k], first));
  return CX_OK;
}

cx_tensor *const *cx_grad_accumulated(const cx_grad_ops *g) { return g->acc; }
