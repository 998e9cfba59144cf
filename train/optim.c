#include "optim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op_call.h"

/* State slices start on 64-byte boundaries so that vector loads of each tensor are aligned. */
#define CX_OPTIM_ALIGN 16 /* floats */

static const char *const op_names[] = {"SGDUpdate", "AdamWUpdate", "LAMBUpdate"};

typedef struct cx_optim_param {
  cx_tensor *t;
  char *name;
  bool decay;
  cx_op_call *update;
} cx_optim_param;

struct cx_optimizer {
  cx_optim_config c;
  const cx_backend *b;
  cx_stream *s;
  int n, per_param; /* parameters; state tensors per parameter */
  int64_t steps;
  cx_optim_param *p;
  cx_tensor *state;    /* n * per_param views into block */
  char **state_names;
  void *block;
  /* the update's scalar inputs on the backend: the learning rate (f32) at byte 0 and the step
   * (int64) at byte 8 of hyper, written by one upload of all 16 bytes (hyper_t) per step */
  void *hyper;
  cx_tensor lr_t, step_t, hyper_t;
};
static const char *const kind_names[] = {"sgd", "adamw", "lamb"};

const char *cx_optim_kind_name(cx_optim_kind kind) {
  return kind >= CX_OPTIM_SGD && kind <= CX_OPTIM_LAMB ? kind_names[kind] : "?";
}

cx_status cx_optim_kind_parse(const char *name, cx_optim_kind *out) {
  for (int k = CX_OPTIM_SGD; k <= CX_OPTIM_LAMB; k++)
    if (name && strcmp(name, kind_names[k]) == 0) {
      *out = (cx_optim_kind)k;
      return CX_OK;
    }
  return cx_fail(CX_ERR_ARG, "unknown optimizer '%s'; expected sgd, adamw or lamb",
                 name ? name : "(null)");
}

cx_optim_config cx_optim_defaults(cx_optim_kind kind) {
  cx_optim_config c = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.999f};
  switch (kind) {
  case CX_OPTIM_SGD: c.lr = 0.1f, c.momentum = 0.9f; break;
  case CX_OPTIM_ADAMW: c.lr = 1e-3f, c.eps = 1e-8f, c.weight_decay = 1e-2f; break;
  case CX_OPTIM_LAMB: c.lr = 1e-3f, c.eps = 1e-6f, c.weight_decay = 1e-2f; break;
  }
  return c;
}

static cx_status check_config(const cx_optim_config *c) {
  if (c->kind < CX_OPTIM_SGD || c->kind > CX_OPTIM_LAMB)
    return cx_fail(CX_ERR_ARG, "optimizer: unknown kind %d", (int)c->kind);
  const char *k = cx_optim_kind_name(c->kind);
  if (!(c->weight_decay >= 0))
    return cx_fail(CX_ERR_ARG, "%s: weight_decay %g must be >= 0", k, c->weight_decay);
  if (c->kind == CX_OPTIM_SGD) {
    if (!(c->momentum >= 0 && c->momentum < 1))
      return cx_fail(CX_ERR_ARG, "sgd: momentum %g must be in [0, 1)", c->momentum);
    if (c->nesterov && c->momentum == 0)
      return cx_fail(CX_ERR_ARG, "sgd: nesterov needs momentum > 0");
    return CX_OK;
  }
  if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
    return cx_fail(CX_ERR_ARG, "%s: betas (%g, %g) must be in [0, 1)", k, c->beta1, c->beta2);
  if (!(c->eps > 0)) return cx_fail(CX_ERR_ARG, "%s: eps %g must be > 0", k, c->eps);
  return CX_OK;
}

static cx_status check_tensor(const cx_optimizer *o, const cx_tensor *t, const char *what,
                              const char *name) {
  char buf[CX_SHAPE_STR];
  if (!t || !t->data) return cx_fail(CX_ERR_ARG, "optimizer: %s '%s' has no data", what, name);
  if (t->dtype != CX_F32)
    return cx_fail(CX_ERR_ARG, "optimizer: %s '%s' is %s; it updates f32 master weights", what,
                   name, cx_dtype_name(t->dtype));
  if (t->device.kind != o->b->device)
    return cx_fail(CX_ERR_UNSUPPORTED, "optimizer: %s '%s' is not on the %s backend", what, name,
                   o->b->name);
  if (!cx_tensor_is_contiguous(t))
    return cx_fail(CX_ERR_ARG, "optimizer: %s '%s' %s is not contiguous", what, name,
                   cx_shape_str(&t->shape, buf));
  return CX_OK;
}

static int64_t padded(int64_t n) {
  return (n + CX_OPTIM_ALIGN - 1) / CX_OPTIM_ALIGN * CX_OPTIM_ALIGN;
}

static int states_per_param(const cx_optim_config *c) {
  if (c->kind == CX_OPTIM_SGD) return c->momentum > 0 ? 1 : 0;
  return 2;
}

static const char *state_prefix(const cx_optim_config *c, int j) {
  if (c->kind == CX_OPTIM_SGD) return "momentum_buffer";
  return j == 0 ? "exp_avg" : "exp_avg_sq";
}

static cx_status add_params(cx_optimizer *o, cx_tensor *const *params, const char *const *names) {
  for (int i = 0; i < o->n; i++) {
    char fallback[32];
    snprintf(fallback, sizeof fallback, "param%d", i);
    const char *name = names && names[i] ? names[i] : fallback;
    CX_TRY(check_tensor(o, params[i], "parameter", name));
    o->p[i].t = params[i];
    o->p[i].decay = o->c.decay_norm_and_bias || params[i]->shape.ndim >= 2;
    if (!(o->p[i].name = strdup(name))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  return CX_OK;
}

static cx_tensor backend_view(const cx_optimizer *o, cx_dtype t, const cx_shape *s, void *data) {
  cx_tensor v = cx_tensor_view(t, s, data);
  v.device.kind = o->b->device;
  return v;
}

/* One zeroed block of the backend holds every state tensor. */
static cx_status add_state(cx_optimizer *o) {
  int64_t total = 0;
  for (int i = 0; i < o->n; i++) total += padded(cx_tensor_numel(o->p[i].t)) * o->per_param;
  size_t bytes = sizeof(float) * (size_t)(total > 0 ? total : 1);
  if (!(o->block = o->b->alloc(bytes)))
    return cx_fail(CX_ERR_NOMEM, "out of memory for optimizer state (%zu bytes)", bytes);
  o->b->memset_zero(o->block, bytes, o->s);
  int m = o->n * o->per_param;
  o->state = calloc((size_t)m + 1, sizeof *o->state);
  o->state_names = calloc((size_t)m + 1, sizeof *o->state_names);
  if (!o->state || !o->state_names) return cx_fail(CX_ERR_NOMEM, "out of memory");
  float *at = o->block;
  for (int i = 0; i < o->n; i++)
    for (int j = 0; j < o->per_param; j++) {
      int k = i * o->per_param + j;
      o->state[k] = backend_view(o, CX_F32, &o->p[i].t->shape, at);
      at += padded(cx_tensor_numel(o->p[i].t));
      size_t len = strlen(state_prefix(&o->c, j)) + strlen(o->p[i].name) + 2;
      if (!(o->state_names[k] = malloc(len))) return cx_fail(CX_ERR_NOMEM, "out of memory");
      snprintf(o->state_names[k], len, "%s/%s", state_prefix(&o->c, j), o->p[i].name);
    }
  return CX_OK;
}

static cx_status add_hyper(cx_optimizer *o) {
  if (!(o->hyper = o->b->alloc(16))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_shape scalar = {0}, bytes = {1, {16}};
  o->lr_t = backend_view(o, CX_F32, &scalar, o->hyper);
  o->step_t = backend_view(o, CX_S64, &scalar, (char *)o->hyper + 8);
  o->hyper_t = backend_view(o, CX_U8, &bytes, o->hyper);
  return CX_OK;
}

/* The update op's inputs for parameter i: R, T (AdamW, LAMB), X, G, state. */
static int update_inputs(const cx_optimizer *o, int i, const cx_tensor *g, cx_tensor *in) {
  int k = 0;
  in[k++] = o->lr_t;
  if (o->c.kind != CX_OPTIM_SGD) in[k++] = o->step_t;
  in[k++] = *o->p[i].t;
  in[k++] = *g;
  for (int j = 0; j < o->per_param; j++) in[k++] = o->state[i * o->per_param + j];
  return k;
}

/* One update op per parameter, prepared for the parameter's shape (its gradient's). */
static cx_status add_updates(cx_optimizer *o) {
  const cx_optim_config *c = &o->c;
  for (int i = 0; i < o->n; i++) {
    float wd = o->p[i].decay ? c->weight_decay : 0.0f;
    cx_attr sgd[] = {{.name = "momentum", .type = CX_ATTR_FLOAT, .f = c->momentum},
                     {.name = "nesterov", .type = CX_ATTR_INT, .i = c->nesterov},
                     {.name = "weight_decay", .type = CX_ATTR_FLOAT, .f = wd}};
    cx_attr adam[] = {{.name = "weight_decay", .type = CX_ATTR_FLOAT, .f = wd},
                      {.name = "beta1", .type = CX_ATTR_FLOAT, .f = c->beta1},
                      {.name = "beta2", .type = CX_ATTR_FLOAT, .f = c->beta2},
                      {.name = "epsilon", .type = CX_ATTR_FLOAT, .f = c->eps},
                      {.name = "always_adapt", .type = CX_ATTR_INT, .i = c->always_adapt}};
    cx_tensor in[6];
    char name[300];
    snprintf(name, sizeof name, "%s(%s)", op_names[c->kind], o->p[i].name);
    bool is_sgd = c->kind == CX_OPTIM_SGD;
    cx_op_call_desc d = {.op = op_names[c->kind], .name = name, .attrs = is_sgd ? sgd : adam,
                         .n_attrs = is_sgd ? 3 : c->kind == CX_OPTIM_LAMB ? 5 : 4, .in = in,
                         .n_in = update_inputs(o, i, o->p[i].t, in)};
    CX_TRY(cx_op_call_create(o->b, o->s, &d, &o->p[i].update));
  }
  return CX_OK;
}

cx_status cx_optimizer_create(const cx_optim_config *c, const cx_backend *b, cx_stream *s, int n,
                              cx_tensor *const *params, const char *const *names,
                              cx_optimizer **out) {
  *out = NULL;
  CX_TRY(check_config(c));
  if (n < 0 || (n > 0 && !params))
    return cx_fail(CX_ERR_ARG, "optimizer: %d parameters and no list of them", n);
  cx_optimizer *o = calloc(1, sizeof *o);
  if (!o) return cx_fail(CX_ERR_NOMEM, "out of memory");
  o->c = *c;
  o->b = b;
  o->s = s;
  o->n = n;
  o->per_param = states_per_param(c);
  o->p = calloc((size_t)n + 1, sizeof *o->p);
  cx_status st = o->p ? add_params(o, params, names) : cx_fail(CX_ERR_NOMEM, "out of memory");
  if (st == CX_OK) st = add_state(o);
  if (st == CX_OK) st = add_hyper(o);
  if (st == CX_OK) st = add_updates(o);
  if (st != CX_OK) {
    cx_optimizer_free(o);
    return st;
  }
  *out = o;
  return CX_OK;
}

void cx_optimizer_free(cx_optimizer *o) {
  if (!o) return;
  for (int i = 0; o->p && i < o->n; i++) {
    free(o->p[i].name);
    cx_op_call_free(o->p[i].update);
  }
  for (int k = 0; o->state_names && k < o->n * o->per_param; k++) free(o->state_names[k]);
  free(o->p);
  free(o->state);
  free(o->state_names);
  if (o->block) o->b->free(o->block);
  if (o->hyper) o->b->free(o->hyper);
  free(o);
}

static cx_status check_grad(const cx_optimizer *o, int i, const cx_tensor *g) {
  char a[CX_SHAPE_STR], b[CX_SHAPE_STR];
  const char *name = o->p[i].name;
  if (!g) return cx_fail(CX_ERR_ARG, "optimizer: no gradient for '%s'", name);
  CX_TRY(check_tensor(o, g, "gradient of", name));
  if (!cx_shape_equal(&g->shape, &o->p[i].t->shape))
    return cx_fail(CX_ERR_SHAPE, "optimizer: gradient of '%s' is %s; the parameter is %s", name,
                   cx_shape_str(&g->shape, a), cx_shape_str(&o->p[i].t->shape, b));
  return CX_OK;
}

cx_status cx_optimizer_step(cx_optimizer *o, cx_tensor *const *grads, float lr) {
  if (!(lr >= 0) || isinf(lr))
    return cx_fail(CX_ERR_ARG, "optimizer: learning rate %g must be finite and >= 0", lr);
  for (int i = 0; i < o->n; i++) CX_TRY(check_grad(o, i, grads ? grads[i] : NULL));
  int64_t t = o->steps + 1;
  unsigned char hyper[16] = {0};
  memcpy(hyper, &lr, sizeof lr);
  memcpy(hyper + 8, &t, sizeof t);
  CX_TRY(cx_backend_upload(o->b, &o->hyper_t, hyper, o->s));
  o->steps = t;
  for (int i = 0; i < o->n; i++) {
    cx_tensor in[6];
    update_inputs(o, i, grads[i], in);
    CX_TRY(cx_op_call_run(o->p[i].update, in, NULL));
  }
  return CX_OK;
}

const cx_optim_config *cx_optimizer_config(const cx_optimizer *o) { return &o->c; }
int cx_optimizer_param_count(const cx_optimizer *o) { return o->n; }

const char *cx_optimizer_param_name(const cx_optimizer *o, int i) {
  return i >= 0 && i < o->n ? o->p[i].name : NULL;
}

bool cx_optimizer_decays(const cx_optimizer *o, int i) {
  return i >= 0 && i < o->n && o->p[i].decay && o->c.weight_decay > 0;
}

int cx_optimizer_state_count(const cx_optimizer *o) { return o->n * o->per_param; }

const char *cx_optimizer_state_name(const cx_optimizer *o, int i) {
  return i >= 0 && i < cx_optimizer_state_count(o) ? o->state_names[i] : NULL;
}

cx_tensor *cx_optimizer_state(cx_optimizer *o, int i) {
  return i >= 0 && i < cx_optimizer_state_count(o) ? &o->state[i] : NULL;
}

int64_t cx_optimizer_step_count(const cx_optimizer *o) { return o->steps; }
void cx_optimizer_set_step_count(cx_optimizer *o, int64_t steps) { o->steps = steps; }
