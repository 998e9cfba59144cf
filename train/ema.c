#include "ema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARALLEL_MIN 32768

struct cx_ema {
  cx_ema_config c;
  int n;
  int64_t updates;
  bool swapped;
  cx_tensor *avg; /* views into block */
  char **names;
  float *block;
};

cx_ema_config cx_ema_defaults(void) {
  return (cx_ema_config){.decay = 0.9999f, .warmup_gamma = 1.0f, .warmup_power = 2.0f / 3.0f};
}

static cx_status check_tensor(const cx_tensor *t, const char *name) {
  if (!t || !t->data || t->dtype != CX_F32 || t->device.kind != CX_DEVICE_CPU ||
      !cx_tensor_is_contiguous(t))
    return cx_fail(CX_ERR_ARG, "EMA: '%s' must be a contiguous f32 tensor in host memory", name);
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

static cx_status fill(cx_ema *e, cx_tensor *const *tensors, const char *const *names) {
  int64_t total = 0;
  for (int i = 0; i < e->n; i++) {
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param%d", i);
    const char *name = names && names[i] ? names[i] : fallback;
    CX_TRY(check_tensor(tensors[i], name));
    size_t len = strlen(name) + 5;
    if (!(e->names[i] = malloc(len))) return cx_fail(CX_ERR_NOMEM, "out of memory");
    snprintf(e->names[i], len, "ema/%s", name);
    total += cx_tensor_numel(tensors[i]);
  }
  e->block = malloc(sizeof(float) * (size_t)(total + 1));
  if (!e->block) return cx_fail(CX_ERR_NOMEM, "out of memory for the EMA of %lld weights",
                                (long long)total);
  float *at = e->block;
  for (int i = 0; i < e->n; i++) {
    e->avg[i] = cx_tensor_view(CX_F32, &tensors[i]->shape, at);
    memcpy(at, tensors[i]->data, cx_tensor_nbytes(tensors[i]));
    at += cx_tensor_numel(tensors[i]);
  }
  return CX_OK;
}

cx_status cx_ema_create(const cx_ema_config *c, int n, cx_tensor *const *tensors,
                        const char *const *names, cx_ema **out) {
  *out = NULL;
  CX_TRY(check_config(c));
  if (n < 0 || (n > 0 && !tensors))
    return cx_fail(CX_ERR_ARG, "EMA: %d tensors and no list of them", n);
  cx_ema *e = calloc(1, sizeof *e);
  if (!e) return cx_fail(CX_ERR_NOMEM, "out of memory");
  e->c = *c;
  e->n = n;
  e->avg = calloc((size_t)n + 1, sizeof *e->avg);
  e->names = calloc((size_t)n + 1, sizeof *e->names);
  cx_status s = e->avg && e->names ? fill(e, tensors, names) : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s != CX_OK) {
    cx_ema_free(e);
    return s;
  }
  *out = e;
  return CX_OK;
}

void cx_ema_free(cx_ema *e) {
  if (!e) return;
  for (int i = 0; e->names && i < e->n; i++) free(e->names[i]);
  free(e->names);
  free(e->avg);
  free(e->block);
  free(e);
}

static cx_status check_list(const cx_ema *e, cx_tensor *const *tensors, const char *what) {
  for (int i = 0; i < e->n; i++) {
    CX_TRY(check_tensor(tensors[i], e->names[i] + 4));
    if (cx_tensor_numel(tensors[i]) != cx_tensor_numel(&e->avg[i])) {
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
  const float d = cx_ema_decay(e), a = (float)(1.0 - d);
  for (int i = 0; i < e->n; i++) {
    float *avg = e->avg[i].data;
    const float *w = tensors[i]->data;
    int64_t m = cx_tensor_numel(tensors[i]);
#pragma omp parallel for simd if (m >= PARALLEL_MIN)
    for (int64_t j = 0; j < m; j++) avg[j] = d * avg[j] + a * w[j];
  }
  e->updates++;
  return CX_OK;
}

cx_status cx_ema_swap(cx_ema *e, cx_tensor *const *tensors) {
  CX_TRY(check_list(e, tensors, "swap"));
  for (int i = 0; i < e->n; i++) {
    float *avg = e->avg[i].data, *w = tensors[i]->data;
    int64_t m = cx_tensor_numel(tensors[i]);
#pragma omp parallel for simd if (m >= PARALLEL_MIN)
    for (int64_t j = 0; j < m; j++) {
      float t = avg[j];
      avg[j] = w[j];
      w[j] = t;
    }
  }
  e->swapped = !e->swapped;
  return CX_OK;
}

bool cx_ema_swapped(const cx_ema *e) { return e->swapped; }

cx_status cx_ema_copy_to(const cx_ema *e, cx_tensor *const *tensors) {
  if (e->swapped)
    return cx_fail(CX_ERR_ARG, "EMA copy while the average is swapped in; swap it out first");
  CX_TRY(check_list(e, tensors, "copy"));
  for (int i = 0; i < e->n; i++) memcpy(tensors[i]->data, e->avg[i].data, cx_tensor_nbytes(&e->avg[i]));
  return CX_OK;
}

int cx_ema_count(const cx_ema *e) { return e->n; }
const char *cx_ema_name(const cx_ema *e, int i) { return i >= 0 && i < e->n ? e->names[i] : NULL; }
cx_tensor *cx_ema_tensor(cx_ema *e, int i) { return i >= 0 && i < e->n ? &e->avg[i] : NULL; }
int64_t cx_ema_updates(const cx_ema *e) { return e->updates; }
void cx_ema_set_updates(cx_ema *e, int64_t updates) { e->updates = updates; }
