/* The masking trainer extension: masks computed from the live weights at the schedule's steps,
 * re-applied on the program's backend after every optimizer update to each pruned weight, its
 * optimizer state (momentum, Adam moments) and the EMA's copy, so pruned weights stay exactly
 * zero whatever the optimizer does with their gradients. The masks are checkpoint state. */
#include <stdlib.h>
#include <string.h>

#include "../core/op_call.h"
#include "../core/program.h"
#include "../train/ema.h"
#include "../train/optim.h"
#include "channel.h"
#include "mask.h"

/* What is masked for one target: the tensors of the backend that follow its weight. */
typedef struct slot {
  int param;           /* in the training program */
  cx_tensor mask;      /* f32 on the backend: the host mask as 0 and 1 */
  cx_op_call *mul, *add; /* t *= mask; t += 0 (a masked negative weight is -0: make it +0) */
  int n;
  cx_tensor *t[8];     /* the weight, its optimizer state, its average */
} slot;

struct cx_prune_masker {
  cx_prune_config c; /* globs dropped after open */
  char *model;
  FILE *log;
  cx_prune_targets t;
  cx_channel_masks *ch; /* gradual channel pruning: the analysis and the channels kept */
  /* checkpoint state: the masks (u8, 1 kept) and {masks on, their sparsity} */
  uint8_t **mask;
  double sched[2];
  cx_tensor *state;
  cx_tensor **state_ptr;
  char **state_names;
  /* the run's */
  cx_program *p;
  const cx_backend *b;
  cx_stream *s;
  slot *slot;
  float **w;      /* host copies of the live weights (one block) */
  float *staging; /* a mask as f32, uploaded */
  void *dev;      /* the masks and the zero on the backend */
  cx_tensor zero;
};

static cx_status nomem(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static int64_t numel(const cx_prune_target *t) { return t->outer * t->channels * t->inner; }

/* ---- open ---- */

static cx_status make_state(cx_prune_masker *m) {
  int n = m->t.n;
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += numel(&m->t.t[i]);
  m->mask = calloc((size_t)n + 1, sizeof *m->mask);
  m->state = calloc((size_t)n + 3, sizeof *m->state);
  m->state_ptr = calloc((size_t)n + 3, sizeof *m->state_ptr);
  m->state_names = calloc((size_t)n + 3, sizeof *m->state_names);
  uint8_t *block = malloc((size_t)total + 1);
  if (!m->mask || !m->state || !m->state_ptr || !m->state_names || !block)
    return free(block), nomem();
  memset(block, 1, (size_t)total);
  for (int i = 0; i < n; i++) m->mask[i] = block, block += numel(&m->t.t[i]);
  for (int i = 0; i < n; i++) {
    const cx_prune_target *t = &m->t.t[i];
    size_t len = strlen(t->weight_name) + 6;
    if (!(m->state_names[i] = malloc(len))) return nomem();
    snprintf(m->state_names[i], len, "mask/%s", t->weight_name);
    cx_shape s = {1, {numel(t)}};
    m->state[i] = cx_tensor_view(CX_U8, &s, m->mask[i]);
    m->state_ptr[i] = &m->state[i];
  }
  if (!(m->state_names[n] = strdup("schedule"))) return nomem();
  cx_shape two = {1, {2}};
  m->state[n] = cx_tensor_view(CX_F64, &two, m->sched);
  m->state_ptr[n] = &m->state[n];
  if (!m->ch) return CX_OK;
  if (!(m->state_names[n + 1] = strdup("channels"))) return nomem();
  m->state[n + 1] = cx_channel_masks_state(m->ch);
  m->state_ptr[n + 1] = &m->state[n + 1];
  return CX_OK;
}

cx_status cx_prune_mask_open(const cx_graph *model, const char *name, const cx_prune_config *c,
                             FILE *log, cx_prune_masker **out) {
  *out = NULL;
  CX_TRY(cx_prune_config_check(c));
  if (cx_prune_channel_once(c))
    return cx_fail(CX_ERR_ARG, "prune: one-shot channel pruning (start = end = 0) rewrites the "
                   "graph before training; the masking extension is for a gradual schedule");
  cx_prune_masker *m = calloc(1, sizeof *m);
  if (!m || !(m->model = strdup(name ? name : "the model"))) return free(m), nomem();
  m->c = *c;
  m->log = log;
  cx_status s;
  if (c->method != CX_PRUNE_CHANNEL) s = cx_prune_select(model, c, m->model, &m->t);
  else if ((s = cx_channel_masks_open(model, c, log, &m->ch, &m->t)) != CX_OK)
    cx_error_prefix("%s", m->model);
  if (s == CX_OK && c->method == CX_PRUNE_NM) s = cx_prune_nm_fit(&m->t, c, m->model, log);
  if (s == CX_OK) s = make_state(m);
  m->c.include = m->c.exclude = NULL, m->c.n_include = m->c.n_exclude = 0;
  if (s != CX_OK) return cx_prune_mask_close(m), s;
  *out = m;
  return CX_OK;
}

/* ---- the run's tensors ---- */

static cx_tensor backend_view(const cx_prune_masker *m, const cx_shape *s, void *data) {
  cx_tensor v = cx_tensor_view(CX_F32, s, data);
  v.device.kind = m->b->device;
  return v;
}

static int find_param(cx_program *p, const char *name) {
  for (int k = 0; k < cx_program_param_count(p); k++)
    if (!strcmp(cx_program_param_name(p, k), name)) return k;
  return -1;
}

static cx_status upload_masks(cx_prune_masker *m) {
  for (int i = 0; i < m->t.n; i++) {
    for (int64_t e = 0; e < numel(&m->t.t[i]); e++) m->staging[e] = m->mask[i][e];
    CX_TRY(cx_backend_upload(m->b, &m->slot[i].mask, m->staging, m->s));
  }
  return CX_OK;
}

/* Backend masks start on 64-byte boundaries, as the optimizer's state does. */
#define ALIGN_FLOATS 16

static int64_t padded(int64_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

/* The backend's masks (the host's, uploaded: all ones before the first update) and the Mul and
 * Add of each target. */
static cx_status open_slots(cx_prune_masker *m) {
  int64_t total = 0, largest = 0;
  for (int i = 0; i < m->t.n; i++) {
    total += padded(numel(&m->t.t[i]));
    largest = numel(&m->t.t[i]) > largest ? numel(&m->t.t[i]) : largest;
  }
  m->dev = m->b->alloc(sizeof(float) * (size_t)(total + ALIGN_FLOATS));
  m->staging = malloc(sizeof(float) * (size_t)(largest + 1));
  m->w = calloc((size_t)m->t.n + 1, sizeof *m->w);
  float *host = malloc(sizeof(float) * (size_t)(total + 1));
  if (!m->dev || !m->staging || !m->w || !host) return free(host), nomem();
  m->b->memset_zero(m->dev, sizeof(float), m->s);
  cx_shape scalar = {0};
  m->zero = backend_view(m, &scalar, m->dev);
  float *at = (float *)m->dev + ALIGN_FLOATS;
  for (int i = 0; i < m->t.n; i++) {
    slot *sl = &m->slot[i];
    cx_tensor *w = cx_program_param(m->p, sl->param);
    m->w[i] = host, host += numel(&m->t.t[i]);
    sl->mask = backend_view(m, &w->shape, at);
    at += padded(numel(&m->t.t[i]));
    char name[300];
    snprintf(name, sizeof name, "Mul(mask %s)", m->t.t[i].weight_name);
    cx_op_call_desc d = {.op = "Mul", .name = name, .in = (cx_tensor[]){*w, sl->mask}, .n_in = 2,
                         .out = w, .n_out = 1};
    CX_TRY(cx_op_call_create(m->b, m->s, &d, &sl->mul));
    snprintf(name, sizeof name, "Add(mask %s)", m->t.t[i].weight_name);
    d = (cx_op_call_desc){.op = "Add", .name = name, .in = (cx_tensor[]){*w, m->zero},
                          .n_in = 2, .out = w, .n_out = 1};
    CX_TRY(cx_op_call_create(m->b, m->s, &d, &sl->add));
    sl->t[sl->n++] = w;
  }
  return upload_masks(m);
}

/* What a run made (a masker may serve several runs: the masks stay). */
static void close_run(cx_prune_masker *m) {
  for (int i = 0; m->slot && i < m->t.n; i++) {
    cx_op_call_free(m->slot[i].mul);
    cx_op_call_free(m->slot[i].add);
  }
  if (m->dev) m->b->free(m->dev);
  if (m->w) free(m->w[0]);
  free(m->w), free(m->staging), free(m->slot);
  m->dev = NULL, m->w = NULL, m->staging = NULL, m->slot = NULL;
}

static cx_status opened(void *self, cx_program *p) {
  cx_prune_masker *m = self;
  close_run(m);
  m->p = p, m->b = cx_program_backend(p), m->s = cx_program_stream(p);
  m->slot = calloc((size_t)m->t.n + 1, sizeof *m->slot);
  if (!m->slot) return nomem();
  for (int i = 0; i < m->t.n; i++) {
    const cx_prune_target *t = &m->t.t[i];
    if ((m->slot[i].param = find_param(p, t->weight_name)) < 0)
      return cx_fail(CX_ERR_ARG, "%s: prune: weight '%s' of node '%s' is not a trained parameter "
                     "of the training program (a constant cannot be fine-tuned)", m->model,
                     t->weight_name, t->node_name);
    if (cx_tensor_numel(cx_program_param(p, m->slot[i].param)) != numel(t))
      return cx_fail(CX_ERR_ARG, "%s: prune: parameter '%s' has another size in the training "
                     "program than in the model", m->model, t->weight_name);
  }
  return open_slots(m);
}

/* ---- masks ---- */

/* Every masked tensor times its mask. */
static cx_status apply(cx_prune_masker *m) {
  for (int i = 0; i < m->t.n; i++) {
    slot *sl = &m->slot[i];
    for (int k = 0; k < sl->n; k++) {
      CX_TRY(cx_op_call_run(sl->mul, (cx_tensor[]){*sl->t[k], sl->mask}, sl->t[k]));
      CX_TRY(cx_op_call_run(sl->add, (cx_tensor[]){*sl->t[k], m->zero}, sl->t[k]));
    }
  }
  return CX_OK;
}

static void log_update(const cx_prune_masker *m, int64_t step) {
  if (!m->log) return;
  if (m->ch) {
    cx_tensor kept = cx_channel_masks_state(m->ch);
    int64_t n = cx_tensor_numel(&kept), k = 0;
    for (int64_t u = 0; u < n; u++) k += ((const uint8_t *)kept.data)[u];
    fprintf(m->log, "prune: step %lld: %lld of %lld channels kept, %.1f%% of the MACs\n",
            (long long)step, (long long)k, (long long)n, 100 * (1 - m->sched[1]));
    fflush(m->log);
    return;
  }
  int64_t zeros = 0, total = 0;
  for (int i = 0; i < m->t.n; i++)
    for (int64_t e = 0; e < numel(&m->t.t[i]); e++) zeros += !m->mask[i][e], total++;
  fprintf(m->log, "prune: step %lld: %lld of %lld weights in %d layers masked (%.1f%%)\n",
          (long long)step, (long long)zeros, (long long)total, m->t.n,
          100.0 * (double)zeros / (double)(total ? total : 1));
  fflush(m->log);
}

/* New masks from the live weights at the schedule's sparsity for `step`. The old masks go on
 * first, so weights pruned before are zero and stay pruned (sparsity never falls). */
static cx_status update_masks(cx_prune_masker *m, int64_t step) {
  if (m->sched[0]) CX_TRY(apply(m));
  for (int i = 0; i < m->t.n; i++)
    CX_TRY(cx_program_read(m->p, cx_program_param(m->p, m->slot[i].param), m->w[i]));
  double s = cx_prune_schedule_sparsity(&m->c, step);
  if (m->ch) {
    CX_TRY(cx_channel_masks_update(m->ch, &m->t, (const float *const *)m->w, s, m->mask));
    s = 1 - cx_channel_masks_macs_kept(m->ch);
  } else {
    CX_TRY(cx_prune_masks(&m->c, &m->t, (const float *const *)m->w, s, m->mask));
  }
  m->sched[0] = 1;
  m->sched[1] = m->c.method == CX_PRUNE_NM ? 1 - (double)m->c.n / m->c.m : s;
  CX_TRY(upload_masks(m));
  log_update(m, step);
  return apply(m);
}

/* The optimizer's state tensors of parameter `name` ("<kind>/<name>") and its average
 * ("ema/<name>") join the weight in its slot. */
static cx_status add_followers(cx_prune_masker *m, slot *sl, const char *name, cx_optimizer *o,
                               cx_ema *ema) {
  size_t len = strlen(name);
  for (int k = 0; k < cx_optimizer_state_count(o); k++) {
    const char *s = cx_optimizer_state_name(o, k), *slash = strchr(s, '/');
    if (!slash || strcmp(slash + 1, name)) continue;
    if (sl->n == (int)(sizeof sl->t / sizeof *sl->t))
      return cx_fail(CX_ERR_ARG, "%s: prune: '%s' has more tensors following it than expected",
                     m->model, name);
    sl->t[sl->n++] = cx_optimizer_state(o, k);
  }
  for (int k = 0; ema && k < cx_ema_count(ema); k++) {
    const char *s = cx_ema_name(ema, k);
    if (strncmp(s, "ema/", 4) || strlen(s) != len + 4 || strcmp(s + 4, name)) continue;
    if (sl->n == (int)(sizeof sl->t / sizeof *sl->t))
      return cx_fail(CX_ERR_ARG, "%s: prune: '%s' has more tensors following it than expected",
                     m->model, name);
    sl->t[sl->n++] = cx_ema_tensor(ema, k);
  }
  return CX_OK;
}

static cx_status optimizer_ready(void *self, cx_optimizer *o, cx_ema *ema) {
  cx_prune_masker *m = self;
  for (int i = 0; i < m->t.n; i++)
    CX_TRY(add_followers(m, &m->slot[i], m->t.t[i].weight_name, o, ema));
  /* one-shot or a schedule from step 0: the masks go on before the first update */
  return cx_prune_schedule_is_step(&m->c, 0) ? update_masks(m, 0) : CX_OK;
}

static cx_status after_update(void *self, cx_program *p, int64_t step, bool updated) {
  cx_prune_masker *m = self;
  (void)p, (void)updated; /* a skipped update changed nothing, but applying is harmless */
  if (cx_prune_schedule_is_step(&m->c, step)) return update_masks(m, step);
  return m->sched[0] ? apply(m) : CX_OK;
}

static cx_status state(void *self, cx_train_ext_state *out) {
  cx_prune_masker *m = self;
  *out = (cx_train_ext_state){.n = m->t.n + 1 + (m->ch != NULL), .names = (const char *const *)m->state_names,
                              .tensors = m->state_ptr};
  return CX_OK;
}

/* The checkpoint's masks are in the host tensors; the weights, optimizer state and average it
 * restored were saved masked. */
static cx_status resumed(void *self, cx_program *p) {
  (void)p;
  return upload_masks(self);
}

cx_train_ext cx_prune_mask_extension(cx_prune_masker *m) {
  return (cx_train_ext){.name = "prune", .self = m, .opened = opened,
                        .optimizer_ready = optimizer_ready, .after_update = after_update,
                        .state = state, .resumed = resumed};
}

const cx_prune_targets *cx_prune_mask_targets(const cx_prune_masker *m) { return &m->t; }

const uint8_t *cx_prune_mask_of(const cx_prune_masker *m, int i) {
  return i >= 0 && i < m->t.n ? m->mask[i] : NULL;
}

double cx_prune_mask_sparsity(const cx_prune_masker *m) { return m->sched[0] ? m->sched[1] : 0; }

cx_status cx_prune_mask_rewrite(cx_prune_masker *m, const cx_graph *trained, FILE *log,
                                cx_graph **out, cx_prune_channel_stats *st) {
  *out = NULL;
  if (!m->ch) return cx_fail(CX_ERR_ARG, "prune: only channel masks rewrite the graph");
  return cx_channel_masks_rewrite(m->ch, trained, log, out, st);
}

cx_status cx_prune_mask_cut(cx_prune_masker *m, FILE *log, cx_graph **g) {
  cx_graph *out = NULL;
  cx_prune_channel_stats st;
  CX_TRY(cx_prune_mask_rewrite(m, *g, log, &out, &st));
  cx_graph_free(*g);
  *g = out;
  return CX_OK;
}

void cx_prune_mask_close(cx_prune_masker *m) {
  if (!m) return;
  close_run(m);
  if (m->mask) free(m->mask[0]);
  free(m->mask);
  for (int i = 0; m->state_names && i <= m->t.n + 1; i++) free(m->state_names[i]);
  free(m->state_names);
  free(m->state);
  free(m->state_ptr);
  cx_prune_targets_free(&m->t);
  cx_channel_masks_free(m->ch);
  free(m->model);
  free(m);
}
