/* PTQ calibration: weight scales from the weights, activation scales from observers fed by an
 * inference program of the float graph over calibration batches; and PTQ in one call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

void cx_quant_site_set_range(cx_quant_site *s, float lo, float hi) {
  s->zero_channels = 0;
  s->calibrated = true;
  if (!cx_quant_scale(lo, hi, s->qmin, s->qmax, &s->scale[0], &s->zero[0]))
    s->zero_channels = 1, s->first_zero = 0;
}

void cx_quant_share_scales(cx_quant_plan *p) {
  for (int i = 0; i < p->n; i++) {
    cx_quant_site *s = &p->s[i], *l = &p->s[s->share];
    if (s->share == i) continue;
    memcpy(s->scale, l->scale, sizeof *s->scale * (size_t)s->channels);
    memcpy(s->zero, l->zero, sizeof *s->zero * (size_t)s->channels);
    s->zero_channels = l->zero_channels, s->first_zero = l->first_zero;
    s->calibrated = l->calibrated;
  }
}

/* max |w| per channel along the site's axis: [C, inner] for axis 0, [outer, C] for axis 1 (a
 * 2-D [K, N] weight). */
static void weight_site_scales(cx_quant_site *s, const float *w, int64_t numel) {
  int64_t c = s->channels, inner = s->axis == 0 ? numel / c : 1, outer = s->axis == 0 ? 1 : numel / c;
  s->zero_channels = 0;
  for (int64_t j = 0; j < c; j++) {
    float amax = 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t i = 0; i < inner; i++) amax = fmaxf(amax, fabsf(w[(o * c + j) * inner + i]));
    if (!cx_quant_scale(-amax, amax, s->qmin, s->qmax, &s->scale[j], &s->zero[j]))
      if (s->zero_channels++ == 0) s->first_zero = j;
  }
  s->calibrated = true;
}

cx_status cx_quant_weight_scales(const cx_graph *g, cx_quant_plan *p) {
  for (int i = 0; i < p->n; i++) {
    cx_quant_site *s = &p->s[i];
    if (s->kind != CX_QUANT_WEIGHT) continue;
    int v = cx_graph_find_value(g, s->value);
    if (v < 0 || !g->values[v].init || g->values[v].dtype != CX_F32)
      return cx_fail(CX_ERR_ARG, "quantize: weight '%s' of '%s' is not an f32 initializer of "
                     "the graph", s->value, s->node);
    weight_site_scales(s, g->values[v].init, cx_shape_numel(&g->values[v].shape));
  }
  return CX_OK;
}

/* ---- activations ---- */

typedef struct calib {
  cx_quant_plan *p;
  cx_quant_observer **obs; /* per leader activation site */
  const char **names;      /* the values read from the program */
  int n_names;
  float *buf;
  size_t cap;
} calib;

static cx_status observe_batch(calib *k, cx_quant_runner *r, const cx_batch *b) {
  for (int i = 0; i < k->p->n; i++) {
    const cx_quant_site *s = &k->p->s[i];
    if (s->kind != CX_QUANT_ACTIVATION) continue;
    int64_t n;
    CX_TRY(cx_quant_runner_rows(r, s->value, b, &k->buf, &k->cap, &n));
    CX_TRY(cx_quant_observer_add(k->obs[s->share], k->buf, n, s->value));
  }
  return CX_OK;
}

static cx_status run_observers(calib *k, const cx_graph *g, const cx_quant_config *c,
                               const cx_backend *b, const cx_quant_data *d, const char *model) {
  cx_quant_runner r;
  CX_TRY(cx_quant_runner_open(g, k->names, k->n_names, b, d, c->calibration_batches, &r));
  cx_status s = CX_OK;
  int64_t batches = 0;
  for (;;) {
    cx_batch batch;
    bool done;
    if ((s = cx_quant_runner_next(&r, &batch, &done)) != CX_OK || done) break;
    if ((s = observe_batch(k, &r, &batch)) != CX_OK) break;
    batches++;
  }
  cx_quant_runner_close(&r);
  if (s == CX_OK && batches == 0)
    s = cx_fail(CX_ERR_ARG, "%s: quantize: %s has no calibration images", model, d->path);
  return s;
}

static cx_status set_ranges(calib *k, const cx_quant_config *c) {
  for (int i = 0; i < k->p->n; i++) {
    cx_quant_site *s = &k->p->s[i];
    if (s->kind != CX_QUANT_ACTIVATION || s->share != i) continue;
    float lo, hi;
    CX_TRY(cx_quant_observer_range(k->obs[i], c, s->value, &lo, &hi));
    cx_quant_site_set_range(s, lo, hi);
  }
  cx_quant_share_scales(k->p);
  return CX_OK;
}

static cx_status calibrate(calib *k, const cx_graph *g, const cx_quant_config *c,
                           const cx_backend *b, const cx_quant_data *d, const char *model) {
  cx_quant_plan *p = k->p;
  for (int i = 0; i < p->n; i++) {
    if (p->s[i].kind != CX_QUANT_ACTIVATION) continue;
    k->names[k->n_names++] = p->s[i].value;
    /* The image input keeps its whole range: normalisation makes it bounded, with no outliers
     * to clip, and a clipped input changes what the first conv sees everywhere (Fashion-MNIST's
     * background, half of all pixels, is a spike the histogram calibrators cut into). */
    int v = cx_graph_find_value(g, p->s[i].value);
    bool input = v >= 0 && g->values[v].kind == CX_VALUE_INPUT;
    if (p->s[i].share == i)
      CX_TRY(cx_quant_observer_new(input ? CX_CALIB_MINMAX : c->calibrator, &k->obs[i]));
  }
  CX_TRY(run_observers(k, g, c, b, d, model));
  return set_ranges(k, c);
}

cx_status cx_quant_calibrate(const cx_graph *g, cx_quant_plan *p, const cx_quant_config *c,
                             const cx_backend *b, const cx_quant_data *d, const char *model) {
  if (!model) model = "the model";
  CX_TRY(cx_quant_config_check(c));
  CX_TRY(cx_quant_weight_scales(g, p));
  calib k = {.p = p};
  k.obs = calloc((size_t)p->n + 1, sizeof *k.obs);
  k.names = calloc((size_t)p->n + 1, sizeof *k.names);
  cx_status s = k.obs && k.names ? calibrate(&k, g, c, b, d, model) : nomem();
  for (int i = 0; k.obs && i < p->n; i++) cx_quant_observer_free(k.obs[i]);
  free(k.obs), free(k.names), free(k.buf);
  return s;
}

cx_status cx_quant_ptq(const cx_graph *model, const cx_quant_config *c, const cx_backend *b,
                       const cx_quant_data *d, const char *name, cx_graph **quantized,
                       cx_graph **folded, cx_quant_plan *plan) {
  *quantized = NULL;
  if (folded) *folded = NULL;
  if (plan) *plan = (cx_quant_plan){0};
  cx_graph *f = NULL, *q = NULL;
  cx_quant_plan p = {0};
  CX_TRY(cx_quant_fold_bn(model, &f, NULL));
  cx_status s = cx_quant_plan_make(f, c, name, &p);
  if (s == CX_OK) s = cx_quant_calibrate(f, &p, c, b, d, name);
  if (s == CX_OK) s = (q = cx_graph_clone(f)) ? CX_OK : nomem();
  if (s == CX_OK) s = cx_quant_insert(q, &p, CX_VALUE_CONST);
  if (s == CX_OK) cx_quant_snap_bias(q);
  if (s != CX_OK) {
    cx_graph_free(f), cx_graph_free(q), cx_quant_plan_free(&p);
    return s;
  }
  *quantized = q;
  if (folded) *folded = f;
  else cx_graph_free(f);
  if (plan) *plan = p;
  else cx_quant_plan_free(&p);
  return CX_OK;
}
