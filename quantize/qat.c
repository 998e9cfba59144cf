/* QAT as a trainer extension. The graph the trainer trains is the folded model with the plan's
 * FakeQuantize nodes already in it (cx_quant_qat_graph): its scales are STATE initializers (or
 * PARAMs with LSQ), so the trainer's evaluation program, its checkpoints and its final store
 * all carry them like BatchNorm statistics, and the trained graph is the quantized model. The
 * extension runs the observers: every observe_every-th optimizer step, until epoch
 * freeze_observers_after begins, each activation site's batch min and max (read with
 * cx_program_read) move an exponential moving average that starts at the calibrated range, and
 * the new scale is written into the program. Their averages are checkpoint state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "internal.h"

struct cx_quant_qat {
  cx_quant_config c; /* keep_fp32 dropped after open */
  FILE *log;
  cx_quant_plan plan;
  cx_graph *graph;    /* the model with FakeQuantize nodes: what cx_train trains */
  char **scale_name, **zero_name; /* per site: its (leader's) initializers in graph */
  bool observe;       /* observers run at all (not LSQ, freeze_observers_after > 0) */
  /* checkpoint state: per site {lo, hi} of the moving average; {frozen, updates} */
  double *range, flags[2];
  cx_tensor state_t[2];
  cx_tensor *state_ptr[2];
  /* the run's */
  cx_program *p;
  const cx_tensor **value, **scale, **zero; /* per site */
  float *buf;
  size_t cap;
  double *seen; /* per site {-lo, hi} of this step's batch, reduced over the replicas */
};

static const char *const state_names[] = {"observer_range", "observer_flags"};

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static bool leader_act(const cx_quant_plan *p, int i) {
  return p->s[i].kind == CX_QUANT_ACTIVATION && p->s[i].share == i;
}

/* The range a calibrated scale and zero point stand for (the inverse of cx_quant_scale). */
static void site_range(const cx_quant_site *s, double *lo, double *hi) {
  double sc = s->scale[0], z = s->zero[0];
  *lo = (s->qmin - z) * sc, *hi = (s->qmax - z) * sc;
  if (s->qmin < 0) *lo = -*hi; /* symmetric: [-qmax, qmax] · scale */
}

static cx_status names_of(cx_quant_qat *q, const int *sid, const int *zid) {
  int n = q->plan.n;
  q->scale_name = calloc((size_t)n + 1, sizeof *q->scale_name);
  q->zero_name = calloc((size_t)n + 1, sizeof *q->zero_name);
  q->range = calloc(2 * (size_t)n + 1, sizeof *q->range);
  if (!q->scale_name || !q->zero_name || !q->range) return nomem();
  for (int i = 0; i < n; i++) {
    if (!(q->scale_name[i] = strdup(q->graph->values[sid[i]].name))) return nomem();
    if (zid[i] >= 0 && !(q->zero_name[i] = strdup(q->graph->values[zid[i]].name))) return nomem();
    if (leader_act(&q->plan, i)) site_range(&q->plan.s[i], &q->range[2 * i], &q->range[2 * i + 1]);
  }
  cx_shape rs = {1, {2 * (int64_t)n}}, two = {1, {2}};
  q->state_t[0] = cx_tensor_view(CX_F64, &rs, q->range);
  q->state_t[1] = cx_tensor_view(CX_F64, &two, q->flags);
  q->state_ptr[0] = &q->state_t[0], q->state_ptr[1] = &q->state_t[1];
  return CX_OK;
}

static cx_status build(cx_quant_qat *q, const cx_graph *model) {
  int n = q->plan.n;
  int *sid = calloc((size_t)n + 1, sizeof *sid), *zid = calloc((size_t)n + 1, sizeof *zid);
  cx_status s = sid && zid && (q->graph = cx_graph_clone(model)) ? CX_OK : nomem();
  if (s == CX_OK)
    s = cx_quant_insert_ids(q->graph, &q->plan, q->c.lsq ? CX_VALUE_PARAM : CX_VALUE_STATE, sid,
                            zid);
  if (s == CX_OK) s = names_of(q, sid, zid);
  free(sid), free(zid);
  return s;
}

cx_status cx_quant_qat_open(const cx_graph *model, const cx_quant_plan *calibrated,
                            const cx_quant_config *c, FILE *log, cx_quant_qat **out) {
  *out = NULL;
  CX_TRY(cx_quant_config_check(c));
  for (int i = 0; i < calibrated->n; i++)
    if (!calibrated->s[i].calibrated)
      return cx_fail(CX_ERR_ARG, "quantize: QAT starts from calibrated scales; '%s' has none "
                     "(run cx_quant_calibrate first)", calibrated->s[i].value);
  cx_quant_qat *q = calloc(1, sizeof *q);
  if (!q) return nomem();
  q->c = *c;
  q->c.keep_fp32 = NULL, q->c.n_keep_fp32 = 0;
  q->log = log;
  q->observe = !c->lsq && c->freeze_observers_after > 0;
  cx_status s = cx_quant_plan_copy(calibrated, &q->plan);
  if (s == CX_OK) s = build(q, model);
  if (s != CX_OK) return cx_quant_qat_close(q), s;
  *out = q;
  return CX_OK;
}

cx_graph *cx_quant_qat_graph(cx_quant_qat *q) { return q->graph; }

/* ---- the extension ---- */

/* The observed values stay readable after the step: graph outputs are never reused. */
static cx_status wrap_graph(void *self, cx_graph *train) {
  cx_quant_qat *q = self;
  if (!q->observe) return CX_OK;
  for (int i = 0; i < q->plan.n; i++) {
    if (q->plan.s[i].kind != CX_QUANT_ACTIVATION) continue;
    int v = cx_graph_find_value(train, q->plan.s[i].value);
    if (v < 0)
      return cx_fail(CX_ERR_ARG, "quantize: the training graph has no value '%s'",
                     q->plan.s[i].value);
    bool out = false;
    for (int k = 0; k < train->n_outputs; k++) out |= train->outputs[k] == v;
    if (!out && train->values[v].kind == CX_VALUE_ACT) cx_graph_mark_output(train, v);
  }
  return cx_graph_status(train);
}

static cx_status find(cx_program *p, const char *name, const cx_tensor **t) {
  if (!(*t = cx_program_tensor(p, name)))
    return cx_fail(CX_ERR_ARG, "quantize: the training program has no value '%s'", name);
  return CX_OK;
}

static cx_status opened(void *self, cx_program *p) {
  cx_quant_qat *q = self;
  int n = q->plan.n;
  q->p = p;
  free(q->value), free(q->scale), free(q->zero);
  free(q->seen);
  q->value = calloc((size_t)n + 1, sizeof *q->value);
  q->scale = calloc((size_t)n + 1, sizeof *q->scale);
  q->zero = calloc((size_t)n + 1, sizeof *q->zero);
  q->seen = calloc(2 * (size_t)n + 1, sizeof *q->seen);
  if (!q->value || !q->scale || !q->zero || !q->seen) return nomem();
  for (int i = 0; i < n; i++) {
    CX_TRY(find(p, q->scale_name[i], &q->scale[i]));
    if (q->zero_name[i]) CX_TRY(find(p, q->zero_name[i], &q->zero[i]));
    if (q->observe && q->plan.s[i].kind == CX_QUANT_ACTIVATION)
      CX_TRY(find(p, q->plan.s[i].value, &q->value[i]));
  }
  return CX_OK;
}

/* Observers stop when the first batch of epoch freeze_observers_after is fed. */
static cx_status feed(void *self, cx_program *train, const cx_batch *b) {
  cx_quant_qat *q = self;
  (void)train;
  if (b->epoch >= q->c.freeze_observers_after) q->flags[0] = 1;
  return CX_OK;
}

static cx_status batch_range(cx_quant_qat *q, int leader, double *lo, double *hi) {
  *lo = INFINITY, *hi = -INFINITY;
  for (int i = 0; i < q->plan.n; i++) {
    if (q->plan.s[i].kind != CX_QUANT_ACTIVATION || q->plan.s[i].share != leader) continue;
    const cx_tensor *t = q->value[i];
    size_t bytes = cx_tensor_nbytes(t);
    if (bytes > q->cap) {
      float *f = realloc(q->buf, bytes);
      if (!f) return nomem();
      q->buf = f, q->cap = bytes;
    }
    CX_TRY(cx_program_read(q->p, t, q->buf));
    for (int64_t e = 0; e < cx_tensor_numel(t); e++) {
      if (!isfinite(q->buf[e])) continue; /* a step skipped for overflow: not a sample */
      *lo = fmin(*lo, q->buf[e]), *hi = fmax(*hi, q->buf[e]);
    }
  }
  return CX_OK;
}

static cx_status write_scale(cx_quant_qat *q, int i) {
  CX_TRY(cx_program_write(q->p, q->scale[i], q->plan.s[i].scale));
  return q->zero[i] ? cx_program_write(q->p, q->zero[i], q->plan.s[i].zero) : CX_OK;
}

/* Each site's batch range; in a data-parallel run the range of the whole global batch (min and
 * max over the replicas, one all-reduce of 2 doubles a site), so that every rank moves the
 * same averages and holds the same scales. */
static cx_status observe_ranges(cx_quant_qat *q) {
  for (int i = 0; i < q->plan.n; i++) {
    double lo = INFINITY, hi = -INFINITY;
    if (leader_act(&q->plan, i)) CX_TRY(batch_range(q, i, &lo, &hi));
    q->seen[2 * i] = -lo, q->seen[2 * i + 1] = hi;
  }
  const cx_replicas *r = cx_program_replicas(q->p);
  return r ? r->reduce(r->user, q->seen, 2 * (int64_t)q->plan.n, CX_REDUCE_MAX) : CX_OK;
}

static cx_status observe(cx_quant_qat *q) {
  double m = q->c.observer_momentum;
  CX_TRY(observe_ranges(q));
  for (int i = 0; i < q->plan.n; i++) {
    if (!leader_act(&q->plan, i)) continue;
    double lo = -q->seen[2 * i], hi = q->seen[2 * i + 1];
    if (!(lo <= hi)) continue;
    q->range[2 * i] += m * (fmin(lo, 0) - q->range[2 * i]);
    q->range[2 * i + 1] += m * (fmax(hi, 0) - q->range[2 * i + 1]);
    cx_quant_site_set_range(&q->plan.s[i], (float)q->range[2 * i], (float)q->range[2 * i + 1]);
  }
  cx_quant_share_scales(&q->plan);
  for (int i = 0; i < q->plan.n; i++)
    if (q->plan.s[i].kind == CX_QUANT_ACTIVATION) CX_TRY(write_scale(q, i));
  q->flags[1]++;
  return CX_OK;
}

/* LSQ's scales are trained, and a step can take one to 0 or below, which FakeQuantize (and
 * the exported QuantizeLinear) cannot take: after every update each is kept at least
 * LSQ_FLOOR of its calibrated value (the plan's, which observers do not move under LSQ). */
enum { LSQ_FLOOR_INV = 1000 };

static cx_status keep_scales_positive(cx_quant_qat *q) {
  for (int i = 0; i < q->plan.n; i++) {
    const cx_quant_site *st = &q->plan.s[i];
    size_t bytes = cx_tensor_nbytes(q->scale[i]);
    if (bytes > q->cap) {
      float *f = realloc(q->buf, bytes);
      if (!f) return nomem();
      q->buf = f, q->cap = bytes;
    }
    CX_TRY(cx_program_read(q->p, q->scale[i], q->buf));
    bool low = false;
    for (int64_t j = 0; j < st->channels; j++) {
      float floor = st->scale[j] / LSQ_FLOOR_INV;
      if (q->buf[j] < floor) q->buf[j] = floor, low = true; /* NaN is the trainer's to refuse */
    }
    if (low) CX_TRY(cx_program_write(q->p, q->scale[i], q->buf));
  }
  return CX_OK;
}

static cx_status after_update(void *self, cx_program *train, int64_t step, bool updated) {
  cx_quant_qat *q = self;
  (void)train;
  if (q->c.lsq && updated) CX_TRY(keep_scales_positive(q));
  if (!q->observe || q->flags[0] != 0 || !updated || step % q->c.observe_every != 0)
    return CX_OK;
  return observe(q);
}

static cx_status state(void *self, cx_train_ext_state *out) {
  cx_quant_qat *q = self;
  *out = (cx_train_ext_state){.n = 2, .names = state_names, .tensors = q->state_ptr};
  return CX_OK;
}

cx_train_ext cx_quant_qat_ext(cx_quant_qat *q) {
  return (cx_train_ext){.name = "quantize", .self = q, .wrap_graph = wrap_graph,
                        .opened = opened, .feed = feed, .after_update = after_update,
                        .state = state};
}

/* ---- the result ---- */

/* The trained graph's scale initializers into the plan. */
static cx_status read_scales(cx_quant_plan *p, const cx_graph *g, char **scale, char **zero) {
  for (int i = 0; i < p->n; i++) {
    cx_quant_site *s = &p->s[i];
    int v = cx_graph_find_value(g, scale[i]), z = zero[i] ? cx_graph_find_value(g, zero[i]) : -1;
    if (v < 0 || !g->values[v].init || (zero[i] && (z < 0 || !g->values[z].init)))
      return cx_fail(CX_ERR_ARG, "quantize: the trained graph has no scale '%s'", scale[i]);
    memcpy(s->scale, g->values[v].init, sizeof *s->scale * (size_t)s->channels);
    if (z >= 0) memcpy(s->zero, g->values[z].init, sizeof *s->zero * (size_t)s->channels);
  }
  return CX_OK;
}

cx_status cx_quant_qat_finish(cx_quant_qat *q, const cx_graph *trained, cx_graph **quantized,
                              cx_quant_plan *plan) {
  *quantized = NULL;
  if (plan) *plan = (cx_quant_plan){0};
  CX_TRY(read_scales(&q->plan, trained, q->scale_name, q->zero_name));
  cx_graph *g = cx_graph_clone(trained);
  if (!g) return nomem();
  /* the final scales are constants: what the exporter writes as Q/DQ parameters */
  for (int i = 0; i < q->plan.n; i++) {
    g->values[cx_graph_find_value(g, q->scale_name[i])].kind = CX_VALUE_CONST;
    if (q->zero_name[i]) g->values[cx_graph_find_value(g, q->zero_name[i])].kind = CX_VALUE_CONST;
  }
  cx_quant_snap_bias(g);
  cx_status s = plan ? cx_quant_plan_copy(&q->plan, plan) : CX_OK;
  if (s != CX_OK) return cx_graph_free(g), s;
  *quantized = g;
  return CX_OK;
}

void cx_quant_qat_close(cx_quant_qat *q) {
  if (!q) return;
  for (int i = 0; i < q->plan.n; i++) {
    if (q->scale_name) free(q->scale_name[i]);
    if (q->zero_name) free(q->zero_name[i]);
  }
  free(q->scale_name), free(q->zero_name), free(q->range);
  free(q->value), free(q->scale), free(q->zero), free(q->buf), free(q->seen);
  cx_quant_plan_free(&q->plan);
  cx_graph_free(q->graph);
  free(q);
}
