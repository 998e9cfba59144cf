#include "ema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op_call.h"

struct cx_ema {
  cx_ema_config c;
  const cx_backend *b;
  cx_stream *s;
  int n;
  int64_t updates;
  bool swapped;
  cx_tensor *avg; /* views into block */
  char **names;
  cx_op_call **update; /* EMAUpdate per tensor */
  void *block;
  void *decay, *tmp;   /* on the backend: d (f32 []), and room for the largest tensor (swaps) */
  cx_tensor decay_t;
};

cx_ema_config cx_ema_defaults(void) {
  return (cx_ema_config){.decay = 0.9999f, .warmup_gamma = 1.0f, .warmup_power = 2.0f / 3.0f};
}

static cx_status check_tensor(const cx_ema *e, const cx_tensor *t, const char *name) {
  if (!t || !t->data || t->dtype != CX_F32 || t->device.kind != e->b->device ||
      !cx_tensor_is_contiguous(t))
    return cx_fail(CX_ERR_ARG, "EMA: '%s' must be a contiguous f32 tensor of the %s backend",
                   name, e->b->name);
  return CX_OK;
}

static cx_status check_config(const cx_ema_config *c) {
  if (!(c->decay >= 0 && c->decay <= 1))
    return cx_fail(CX_ERR_ARG, "EMA: decay %g must be in [0, 1]", c->decay);
  if (c->warmup && (!(c->warmup_gamma > 0) || !(c->warmup_power > 0)))
    return cx_fail(CX_ERR_ARG, "EMA: warmup_gamma %g and warmup_power %g must be > 0",
                   c->warmup_gamma, c->warmup_power);
  return CX_OK;
}

static cx_tensor backend_view(const cx_ema *e, const cx_shape *s, void *data) {
  cx_tensor v = cx_tensor_view(CX_F32, s, data);
  v.device.kind = e->b->device;
  return v;
}

/* The average's block, a copy of the tensors, and the scalars. */
static cx_status allocate(cx_ema *e, cx_tensor *const *tensors) {
  int64_t total = 0, largest = 0;
  for (int i = 0; i < e->n; i++) {
    int64_t m = cx_tensor_numel(tensors[i]);
    total += m;
    largest = m > largest ? m : largest;
  }
  e->block = e->b->alloc(sizeof(float) * (size_t)(total + 1));
  e->tmp = e->b->alloc(sizeof(float) * (size_t)(largest + 1));
  e->decay = e->b->alloc(sizeof(float));
  if (!e->block || !e->tmp || !e->decay)
    return cx_fail(CX_ERR_NOMEM, "out of memory for the EMA of %lld weights", (long long)total);
  cx_shape scalar = {0};
  e->decay_t = backend_view(e, &scalar, e->decay);
  float *at = e->block;
  for (int i = 0; i < e->n; i++) {
    e->avg[i] = backend_view(e, &tensors[i]->shape, at);
    CX_TRY(cx_backend_copy(e->b, &e->avg[i], tensors[i], e->s));
    at += cx_tensor_numel(tensors[i]);
  }
  return CX_OK;
}

static cx_status add_updates(cx_ema *e) {
  for (int i = 0; i < e->n; i++) {
    char name[300];
    snprintf(name, sizeof name, "EMAUpdate(%s)", e->names[i] + 4);
    cx_tensor in[3] = {e->decay_t, e->avg[i], e->avg[i]}; /* x has the average's shape */
    cx_op_call_desc d = {.op = "EMAUpdate", .name = name, .in = in, .n_in = 3};
    CX_TRY(cx_op_call_create(e->b, e->s, &d, &e->update[i]));
  }
  return CX_OK;
}

static cx_status fill(cx_ema *e, cx_tensor *const *tensors, const char *const *names) {
  for (int i = 0; i < e->n; i++) {
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param%d", i);
    const char *name = names && names[i] ? names[i] : fallback;
    CX_TRY(check_tensor(e, tensors[i], name));
    size_t len = strlen(name) + 5;
    if (!(e->names[i] = malloc(len))) return cx_fail(CX_ERR_NOMEM, "out of memory");
    snprintf(e->names[i], len, "ema/%s", name);
  }
  CX_TRY(allocate(e, tensors));
  return add_updates(e);
}

cx_status cx_ema_create(const cx_ema_config *c, const cx_backend *b, cx_stream *s, int n,
                        cx_tensor *const *tensors, const char *const *names, cx_ema **out) {
  *out = NULL;
  CX_TRY(check_config(c));
  if (n < 0 || (n > 0 && !tensors))
    return cx_fail(CX_ERR_ARG, "EMA: %d tensors and no list of them", n);
  cx_ema *e = calloc(1, sizeof *e);
  if (!e) return cx_fail(CX_ERR_NOMEM, "out of memory");
  e->c = *c;
  e->b = b;
  e->s = s;
  e->n = n;
  e->avg = calloc((size_t)n + 1, sizeof *e->avg);
  e->names = calloc((size_t)n + 1, sizeof *e->names);
  e->update = calloc((size_t)n + 1, sizeof *e->update);
  cx_status st = e->avg && e->names && e->update ? fill(e, tensors, names)
                                                 : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (st != CX_OK) {
    cx_ema_free(e);
    return st;
  }
  *out = e;
  return CX_OK;
}

void cx_ema_free(cx_ema *e) {
  if (!e) return;
  for (int i = 0; e->names && i < e->n; i++) free(e->names[i]);
  for (int i = 0; e->update && i < e->n; i++) cx_op_call_free(e->update[i]);
  free(e->names);
  free(e->update);
  free(e->avg);
  if (e->block) e->b->free(e->block);
  if (e->tmp) e->b->free(e->tmp);
  if (e->decay) e->b->free(e->decay);
  free(e);
}

static cx_status check_list(const cx_ema *e, cx_tensor *const *tensors, const char *what) {
  for (int i = 0; i < e->n; i++) {
    CX_TRY(check_tensor(e, tensors[i], e->names[i] + 4));
    if (!cx_shape_equal(&tensors[i]->shape, &e->avg[i].shape)) {
      char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
      return cx_fail(CX_ERR_SHAPE, "EMA %s: '%s' is %s; its average is %s", what,
                     e->names[i] + 4, cx_shape_str(&tensors[i]->shape, a),
                     cx_shape_str(&e->avg[i].shape, b));
    }
  }
  return CX_OK;
}

float cx_ema_decay(const cx_ema *e) {
  if (!e->c.warmup) return e->c.decay;
  double k = (double)e->updates;
  double d = 1.0 - pow(1.0 + k / e->c.warmup_gamma, -(double)e->c.warmup_power);
  return (float)(d < e->c.decay ? d : e->c.decay);
}

cx_status cx_ema_update(cx_ema *e, cx_tensor *const *tensors) {
  if (e->swapped)
    return cx_fail(CX_ERR_ARG, "EMA update while the average is swapped in; swap it out first");
  CX_TRY(check_list(e, tensors, "update"));
  const float d = cx_ema_decay(e);
  CX_TRY(cx_backend_upload(e->b, &e->decay_t, &d, e->s));
  for (int i = 0; i < e->n; i++) {
    cx_tensor in[3] = {e->decay_t, e->avg[i], *tensors[i]};
    CX_TRY(cx_op_call_run(e->update[i], in, NULL));
  }
  e->updates++;
  return CX_OK;
}

/* Three copies through room for the largest tensor. */
static cx_status swap_one(cx_ema *e, cx_tensor *avg, const cx_tensor *w) {
  cx_tensor tmp = backend_view(e, &avg->shape, e->tmp);
  CX_TRY(cx_backend_copy(e->b, &tmp, avg, e->s));
  CX_TRY(cx_backend_copy(e->b, avg, w, e->s));
  return cx_backend_copy(e->b, w, &tmp, e->s);
}

cx_status cx_ema_swap(cx_ema *e, cx_tensor *const *tensors) {
  CX_TRY(check_list(e, tensors, "swap"));
  for (int i = 0; i < e->n; i++) CX_TRY(swap_one(e, &e->avg[i], tensors[i]));
  e->swapped = !e->swapped;
  return CX_OK;
}

bool cx_ema_swapped(const cx_ema *e) { return e->swapped; }

cx_status cx_ema_copy_to(const cx_ema *e, cx_tensor *const *tensors) {
  if (e->swapped)
    return cx_fail(CX_ERR_ARG, "EMA copy while the average is swapped in; swap it out first");
  CX_TRY(check_list(e, tensors, "copy"));
  for (int i = 0; i < e->n; i++) CX_TRY(cx_backend_copy(e->b, tensors[i], &e->avg[i], e->s));
  return CX_OK;
}

int cx_ema_count(const cx_ema *e) { return e->n; }
const char *cx_ema_name(const cx_ema *e, int i) { return i >= 0 && i < e->n ? e->names[i] : NULL; }
cx_tensor *cx_ema_tensor(cx_ema *e, int i) { return i >= 0 && i < e->n ? &e->avg[i] : NULL; }
int64_t cx_ema_updates(const cx_ema *e) { return e->updates; }
void cx_ema_set_updates(cx_ema *e, int64_t updates) { e->updates = updates; }
