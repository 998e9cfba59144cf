/* First-order Taylor scores for channel pruning (prune/channel.h): a trainer extension that
 * adds |w * dL/dw| of every parameter element as each gradient becomes final. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "channel.h"

struct cx_channel_taylor {
  cx_program *train;
  int n;
  char **names;
  float **acc;        /* per parameter: the running sums */
  cx_tensor *tensors; /* host views of acc, the checkpoint state */
  cx_tensor **state;
  float *w, *g; /* staging for one parameter and its gradient */
  int64_t largest;
  cx_prune_scores scores;
  cx_status status; /* the first failure in grad_ready, reported before the update */
  char error[512];
};

static cx_status taylor_opened(void *self, cx_program *train) {
  cx_channel_taylor *t = self;
  t->train = train;
  t->n = cx_program_param_count(train);
  t->names = calloc((size_t)t->n + 1, sizeof *t->names);
  t->acc = calloc((size_t)t->n + 1, sizeof *t->acc);
  t->tensors = calloc((size_t)t->n + 1, sizeof *t->tensors);
  t->state = calloc((size_t)t->n + 1, sizeof *t->state);
  if (!t->names || !t->acc || !t->tensors || !t->state)
    return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (int i = 0; i < t->n; i++) {
    const cx_tensor *p = cx_program_param(train, i);
    int64_t n = cx_tensor_numel(p);
    t->names[i] = strdup(cx_program_param_name(train, i));
    t->acc[i] = calloc((size_t)n + 1, sizeof(float));
    if (!t->names[i] || !t->acc[i]) return cx_fail(CX_ERR_NOMEM, "out of memory");
    t->tensors[i] = cx_tensor_view(CX_F32, &p->shape, t->acc[i]);
    t->state[i] = &t->tensors[i];
    if (n > t->largest) t->largest = n;
  }
  t->w = malloc(((size_t)t->largest + 1) * sizeof(float));
  t->g = malloc(((size_t)t->largest + 1) * sizeof(float));
  if (!t->w || !t->g) return cx_fail(CX_ERR_NOMEM, "out of memory");
  t->scores = (cx_prune_scores){t->n, (const char *const *)t->names, (const float *const *)t->acc};
  return CX_OK;
}

/* Reads the parameter and its gradient through the backend (they may live on a device). */
static void taylor_grad_ready(void *self, int param, const cx_tensor *value, const cx_tensor *grad,
                              bool last_micro) {
  (void)last_micro; /* every micro-batch's gradient counts: its |w g| is part of the step's */
  cx_channel_taylor *t = self;
  if (t->status != CX_OK || param < 0 || param >= t->n || value->dtype != CX_F32 ||
      grad->dtype != CX_F32)
    return;
  cx_status s = cx_program_read(t->train, value, t->w);
  if (s == CX_OK) s = cx_program_read(t->train, grad, t->g);
  if (s != CX_OK) {
    t->status = s;
    snprintf(t->error, sizeof t->error, "prune: Taylor scores of '%s': %s", t->names[param],
             cx_last_error());
    return;
  }
  float *acc = t->acc[param];
  int64_t n = cx_tensor_numel(value);
  for (int64_t j = 0; j < n; j++) acc[j] += fabsf(t->w[j] * t->g[j]);
}

static cx_status taylor_before_update(void *self, cx_program *train) {
  (void)train;
  cx_channel_taylor *t = self;
  if (t->status != CX_OK) return cx_fail(t->status, "%s", t->error);
  return CX_OK;
}

static cx_status taylor_state(void *self, cx_train_ext_state *out) {
  cx_channel_taylor *t = self;
  *out = (cx_train_ext_state){t->n, (const char *const *)t->names, (cx_tensor *const *)t->state};
  return CX_OK;
}

cx_status cx_channel_taylor_new(cx_channel_taylor **out) {
  *out = calloc(1, sizeof **out);
  return *out ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

cx_train_ext cx_channel_taylor_ext(cx_channel_taylor *t) {
  return (cx_train_ext){.name = "taylor",
                        .self = t,
                        .opened = taylor_opened,
                        .grad_ready = taylor_grad_ready,
                        .before_update = taylor_before_update,
                        .state = taylor_state};
}

const cx_prune_scores *cx_channel_taylor_scores(const cx_channel_taylor *t) { return &t->scores; }

void cx_channel_taylor_free(cx_channel_taylor *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) {
    if (t->names) free(t->names[i]);
    if (t->acc) free(t->acc[i]);
  }
  free(t->names), free(t->acc), free(t->tensors), free(t->state), free(t->w), free(t->g);
  free(t);
}
