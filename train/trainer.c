#include "trainer.h"

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/program.h"
#include "checkpoint.h"
#include "diagnose.h"
#include "grad_clip.h"
#include "train_graph.h"
#include "train_profile.h"

cx_train_opts cx_train_defaults(void) {
  cx_train_opts o = {.batch_size = 128, .accum_steps = 1, .epochs = 1, .log_every = 50,
                     .loader = cx_loader_defaults(), .optim = cx_optim_defaults(CX_OPTIM_SGD),
                     .seed = 1, .diagnostics = true, .keep_checkpoints = 2};
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, o.optim.lr);
  o.loss_scaler = cx_loss_scaler_defaults();
  o.ema = cx_ema_defaults();
  for (int c = 0; c < 4; c++) o.val_aug.std[c] = 1;
  return o;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Sums over the steps since the last logged one. They go into checkpoints, so that a resumed
 * run logs the same means as an uninterrupted one. */
typedef struct window {
  double steps, loss, correct, images;
} window;

/* Tensors a checkpoint holds, by name. Those that live on the backend are read into host copies
 * to be written, and written back from them on resume; host ones are written as they are. */
typedef struct ck_list {
  int n, cap;
  const char **names;
  char **owned;     /* names made here ("<extension>/<name>"), else NULL */
  cx_tensor **at;   /* the tensors themselves */
  cx_tensor **host; /* what the checkpoint file reads and writes */
  bool *dev;        /* at[i] lives on the backend: host[i] is a copy */
} ck_list;

/* Everything one training run holds. */
typedef struct run {
  const cx_train_opts *o;
  FILE *log;
  cx_program *train, *eval;
  cx_loader *loader;
  cx_optimizer *opt;
  const cx_train_ext *ext; /* the extensions, in order */
  int n_ext;
  bool last_micro;         /* the micro-batch running is its step's last (grad_ready) */
  int micro_index;         /* of the micro-batch running, within its step */
  int world;               /* data-parallel ranks (o->loader.world); micro is this rank's share */
  bool interrupted;        /* a stop was requested (on any rank, when an extension reduces) */
  cx_status hook_status;   /* the first failure inside the grad hook, which returns nothing */
  char hook_error[1024];
  double sync_log, sync_run; /* seconds in the extensions' before_update (waiting for reductions) */
  bool has_before_update;    /* an extension has one */
  cx_tensor *input, *labels, *targets, *loss, *logits; /* in the training program */
  float *logits_host;      /* the logits, read back each micro-batch for the accuracy */
  int n_params;
  cx_tensor **params, **grads;
  cx_grad_ops *gops;     /* norms, clipping, scaling, accumulation on the program's backend */
  cx_tensor *const *acc; /* accumulated gradients (accum_steps > 1), gops's buffers */
  double *sq;            /* per-parameter squared norms of gradients and weights (diagnostics) */
  int64_t micro, classes, per_epoch, total;
  bool soft, bar_open;
  /* checkpoint contents: parameters and statistics (/params); optimizer state, the log window,
   * the loss scaler, the average, the extensions' state (/optimizer) */
  ck_list ck, ck_state;
  /* position: optimizer steps done; the next micro-batch is `batch` of epoch `epoch` */
  int64_t step, epoch, batch, start_step;
  window win;
  cx_tensor win_t;
  double t_start, t_log, wait_log, images_log; /* throughput since the last logged step */
  double seconds_before;                       /* training time of the runs before a resume */
  double step_seconds, images_run;             /* in training steps, this run */
  cx_diag diag;
  cx_layer_norm *layers;
  int n_layers, *layer_param;
  /* loss scaling: the scaler, the loss gradient's seed it sets, its checkpointed state */
  cx_loss_scaler scaler;
  cx_tensor *loss_seed;
  double scaler_state[3]; /* scale, good steps, skipped steps */
  cx_tensor scaler_t;
  cx_train_profiler prof;
  cx_ema *ema; /* NULL: no average kept */
  double ema_updates;
  cx_tensor ema_updates_t;
  bool device_off; /* the backend's device_stats failed once: no more GPU figures */
} run;

/* ---- setup ---- */

static cx_status alloc_fail(void) { return cx_fail(CX_ERR_NOMEM, "out of memory"); }

static cx_status list_params(run *r) {
  r->n_params = cx_program_param_count(r->train);
  size_t n = (size_t)r->n_params + 1;
  r->params = calloc(n, sizeof *r->params);
  r->grads = calloc(n, sizeof *r->grads);
  r->layers = calloc(n, sizeof *r->layers);
  r->layer_param = calloc(n, sizeof *r->layer_param);
  r->sq = calloc(2 * n, sizeof *r->sq);
  if (!r->params || !r->grads || !r->layers || !r->layer_param || !r->sq) return alloc_fail();
  for (int k = 0; k < r->n_params; k++) {
    r->params[k] = cx_program_param(r->train, k);
    r->grads[k] = cx_program_param_grad(r->train, k);
    if (r->params[k]->shape.ndim >= 2) { /* conv and linear weights: the layers diagnosed */
      r->layers[r->n_layers].name = cx_program_param_name(r->train, k);
      r->layer_param[r->n_layers++] = k;
    }
  }
  return CX_OK;
}

static cx_status create_optimizer(run *r) {
  const char **names = calloc((size_t)r->n_params + 1, sizeof *names);
  if (!names) return alloc_fail();
  for (int k = 0; k < r->n_params; k++) names[k] = cx_program_param_name(r->train, k);
  const cx_backend *b = cx_program_backend(r->train);
  cx_stream *st = cx_program_stream(r->train);
  cx_status s = cx_optimizer_create(&r->o->optim, b, st, r->n_params, r->params, names, &r->opt);
  free(names);
  if (s != CX_OK) return s;
  CX_TRY(cx_grad_ops_create(b, st, r->n_params, r->grads, r->o->accum_steps > 1, &r->gops));
  r->acc = cx_grad_accumulated(r->gops);
  return CX_OK;
}

/* ---- checkpoint lists ---- */

static cx_status ck_add(ck_list *l, const char *name, cx_tensor *t, bool dev) {
  if (l->n == l->cap) {
    int cap = l->cap * 2 + 16;
    const char **names = realloc(l->names, sizeof *names * (size_t)cap);
    if (names) l->names = names;
    char **owned = realloc(l->owned, sizeof *owned * (size_t)cap);
    if (owned) l->owned = owned;
    cx_tensor **at = realloc(l->at, sizeof *at * (size_t)cap);
    if (at) l->at = at;
    cx_tensor **host = realloc(l->host, sizeof *host * (size_t)cap);
    if (host) l->host = host;
    bool *d = realloc(l->dev, sizeof *d * (size_t)cap);
    if (d) l->dev = d;
    if (!names || !owned || !at || !host || !d) return alloc_fail();
    l->cap = cap;
  }
  int i = l->n;
  l->names[i] = name, l->owned[i] = NULL, l->at[i] = t, l->dev[i] = dev, l->host[i] = t;
  if (dev) {
    void *data = malloc(cx_tensor_nbytes(t) + 1);
    l->host[i] = malloc(sizeof(cx_tensor));
    if (!data || !l->host[i]) return free(data), free(l->host[i]), alloc_fail();
    *l->host[i] = cx_tensor_view(t->dtype, &t->shape, data);
  }
  l->n++;
  return CX_OK;
}

static void ck_free(ck_list *l) {
  for (int i = 0; i < l->n; i++) {
    if (l->dev[i]) free(l->host[i]->data), free(l->host[i]);
    free(l->owned[i]);
  }
  free(l->names), free(l->owned), free(l->at), free(l->host), free(l->dev);
}

/* Host copies of the backend tensors, before a checkpoint is written. */
static cx_status ck_download(const run *r, const ck_list *l) {
  for (int i = 0; i < l->n; i++)
    if (l->dev[i]) CX_TRY(cx_program_read(r->train, l->at[i], l->host[i]->data));
  return CX_OK;
}

/* The backend tensors from their host copies, after a checkpoint was read. */
static cx_status ck_upload(const run *r, const ck_list *l) {
  for (int i = 0; i < l->n; i++)
    if (l->dev[i]) CX_TRY(cx_program_write(r->train, l->at[i], l->host[i]->data));
  return CX_OK;
}

/* What a checkpoint holds: parameters and BatchNorm statistics (STATE values) under /params;
 * optimizer state, the log window, the loss scaler and each extension's state under
 * /optimizer. */
static cx_status list_checkpoint(run *r) {
  const cx_graph *g = cx_program_graph(r->train);
  for (int k = 0; k < r->n_params; k++)
    CX_TRY(ck_add(&r->ck, cx_program_param_name(r->train, k), r->params[k], true));
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].kind == CX_VALUE_STATE)
      CX_TRY(ck_add(&r->ck, g->values[v].name, cx_program_tensor(r->train, g->values[v].name),
                    true));
  for (int k = 0; k < cx_optimizer_state_count(r->opt); k++)
    CX_TRY(ck_add(&r->ck_state, cx_optimizer_state_name(r->opt, k),
                  cx_optimizer_state(r->opt, k), true));
  cx_shape four = {1, {4}}, three = {1, {3}};
  r->win_t = cx_tensor_view(CX_F64, &four, &r->win);
  CX_TRY(ck_add(&r->ck_state, "trainer/log_window", &r->win_t, false));
  if (!r->loss_seed) return CX_OK;
  r->scaler_t = cx_tensor_view(CX_F64, &three, r->scaler_state);
  return ck_add(&r->ck_state, "trainer/loss_scaler", &r->scaler_t, false);
}

/* Each extension's state as "<extension>/<name>". */
static cx_status list_extension_state(run *r) {
  for (int e = 0; e < r->n_ext; e++) {
    const cx_train_ext *x = &r->ext[e];
    cx_train_ext_state st = {0};
    if (x->state) CX_TRY(x->state(x->self, &st));
    for (int i = 0; i < st.n; i++) {
      size_t len = strlen(x->name) + strlen(st.names[i]) + 2;
      char *name = malloc(len);
      if (!name) return alloc_fail();
      snprintf(name, len, "%s/%s", x->name, st.names[i]);
      cx_status s = ck_add(&r->ck_state, name, st.tensors[i], false);
      if (s != CX_OK) return free(name), s;
      r->ck_state.owned[r->ck_state.n - 1] = name;
    }
  }
  return CX_OK;
}

/* The average starts as a copy of the initial weights; the checkpoint holds it as "ema/<name>"
 * tensors and its update count. */
static cx_status open_ema(run *r) {
  if (!r->o->use_ema) return CX_OK;
  CX_TRY(cx_ema_create(&r->o->ema, cx_program_backend(r->train), cx_program_stream(r->train),
                       r->ck.n, r->ck.at, r->ck.names, &r->ema));
  for (int i = 0; i < cx_ema_count(r->ema); i++)
    CX_TRY(ck_add(&r->ck_state, cx_ema_name(r->ema, i), cx_ema_tensor(r->ema, i), true));
  cx_shape one = {1, {1}};
  r->ema_updates_t = cx_tensor_view(CX_F64, &one, &r->ema_updates);
  return ck_add(&r->ck_state, "trainer/ema_updates", &r->ema_updates_t, false);
}

/* Runs f with the average in the training program's tensors (the live weights otherwise). */
static cx_status with_ema(run *r, cx_status (*f)(run *r, void *arg), void *arg) {
  if (!r->ema) return f(r, arg);
  CX_TRY(cx_ema_swap(r->ema, r->ck.at));
  cx_status s = f(r, arg);
  cx_status back = cx_ema_swap(r->ema, r->ck.at);
  return s != CX_OK ? s : back;
}

/* Loss scaling seeds backward with the scale: the loss's gradient input "loss@seed". */
static cx_status open_scaler(run *r) {
  const cx_train_opts *o = r->o;
  if (o->loss_scale_mode == CX_LOSS_SCALE_NONE) return CX_OK;
  r->scaler = o->loss_scaler;
  CX_TRY(cx_loss_scaler_check(&r->scaler));
  r->loss_seed = cx_program_tensor(r->train, "loss@seed");
  if (!r->loss_seed || cx_tensor_numel(r->loss_seed) != 1 || r->loss_seed->dtype != CX_F32)
    return cx_fail(CX_ERR_ARG, "loss scaling needs a scalar f32 loss named 'loss'");
  return CX_OK;
}

/* The training graph: the one extension that builds it, or the model with the trainer's
 * cross-entropy; then every extension's rewrite, in order. */
static cx_status build_train_graph(run *r, const cx_graph *model, bool soft, cx_graph **out) {
  const cx_train_ext *builder = NULL;
  for (int e = 0; e < r->n_ext; e++) {
    if (!r->ext[e].build_graph) continue;
    if (builder)
      return cx_fail(CX_ERR_ARG, "extensions '%s' and '%s' both build the training graph (its "
                     "loss); only one may", builder->name, r->ext[e].name);
    builder = &r->ext[e];
  }
  if (builder) CX_TRY(builder->build_graph(builder->self, model, out));
  else CX_TRY(cx_train_graph(model, r->o->label_smoothing, soft ? r->classes : 0, out));
  for (int e = 0; e < r->n_ext; e++) {
    if (!r->ext[e].wrap_graph) continue;
    cx_status s = r->ext[e].wrap_graph(r->ext[e].self, *out);
    if (s != CX_OK) return cx_graph_free(*out), *out = NULL, s;
  }
  return CX_OK;
}

/* Each parameter's gradient as backward finishes it: the extensions' per-micro-batch call, the
 * accumulation of this one gradient (so that the sum is complete now, not after backward), and,
 * on the step's last micro-batch, the extensions' call with what the update will read. */
static void grad_ready(void *user, int param, const cx_tensor *value, const cx_tensor *grad) {
  run *r = user;
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].grad_ready) r->ext[e].grad_ready(r->ext[e].self, param, value, grad,
                                                   r->last_micro);
  const cx_tensor *final = grad;
  if (r->acc && r->hook_status == CX_OK) {
    cx_status s = cx_grad_accumulate_one(r->gops, param, grad, r->micro_index == 0);
    if (s != CX_OK) {
      r->hook_status = s;
      snprintf(r->hook_error, sizeof r->hook_error, "%s", cx_last_error());
    }
    final = r->acc[param];
  }
  if (!r->last_micro || !final) return;
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].grad_final) r->ext[e].grad_final(r->ext[e].self, param, final);
}

/* The training program's tensors the loop reads and writes, and host room for what it reads. */
static cx_status find_io(run *r) {
  r->input = cx_program_tensor(r->train, "input");
  r->labels = cx_program_tensor(r->train, "labels");
  r->targets = cx_program_tensor(r->train, "targets");
  r->loss = cx_program_tensor(r->train, "loss");
  r->logits = (cx_tensor *)cx_program_value_tensor(r->train, cx_program_graph(r->train)->outputs[1]);
  if (!r->input || !r->loss || (r->soft && !r->targets))
    return cx_fail(CX_ERR_ARG, "the training graph has no 'input', 'loss'%s", r->soft ?
                   " or 'targets' (mixup/cutmix)" : "");
  r->logits_host = malloc(cx_tensor_nbytes(r->logits) + 1);
  return r->logits_host ? CX_OK : alloc_fail();
}

static cx_status open_extensions(run *r) {
  cx_program_set_grad_hook(r->train, grad_ready, r);
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].opened) CX_TRY(r->ext[e].opened(r->ext[e].self, r->train));
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].optimizer_ready)
      CX_TRY(r->ext[e].optimizer_ready(r->ext[e].self, r->opt, r->ema));
  return list_extension_state(r);
}

static cx_status open_program(run *r, const cx_graph *model) {
  const cx_train_opts *o = r->o;
  if (!o->backend) return cx_fail(CX_ERR_ARG, "cx_train: no backend given");
  r->soft = o->loader.aug.mixup_alpha > 0 || o->loader.aug.cutmix_alpha > 0;
  cx_graph *g = NULL;
  CX_TRY(build_train_graph(r, model, r->soft, &g));
  cx_compile_opts co = {.batch = r->micro, .training = true, .loss = "loss",
                        .backend = o->backend, .seed = o->seed,
                        .precision = o->precision,
                        .checkpoint_segments = o->checkpoint_segments,
                        .n_checkpoint_segments = o->n_checkpoint_segments};
  cx_status s = cx_program_compile(g, &co, &r->train);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  if (!o->quiet) cx_program_print(r->train, r->log);
  CX_TRY(list_params(r));
  CX_TRY(find_io(r));
  CX_TRY(create_optimizer(r));
  CX_TRY(open_scaler(r));
  CX_TRY(list_checkpoint(r));
  CX_TRY(open_ema(r));
  return open_extensions(r);
}

static void close_run(run *r) {
  cx_program_free(r->train);
  cx_program_free(r->eval);
  cx_loader_close(r->loader);
  cx_optimizer_free(r->opt);
  cx_grad_ops_free(r->gops);
  free(r->sq);
  free(r->params);
  free(r->grads);
  free(r->layers);
  free(r->layer_param);
  free(r->logits_host);
  ck_free(&r->ck);
  ck_free(&r->ck_state);
  cx_train_profiler_free(&r->prof);
  cx_ema_free(r->ema);
}

/* ---- checkpoints ---- */

/* The step of a file named "step-<digits>.h5", or -1. */
static int64_t checkpoint_step(const char *name) {
  long long step;
  int len = 0;
  if (sscanf(name, "step-%lld.h5%n", &step, &len) != 1 || name[len] || step < 0 ||
      strncmp(name, "step-", 5) || name[5] < '0' || name[5] > '9')
    return -1;
  return (int64_t)step;
}

/* The steps of the checkpoints in dir, in *steps (malloc'd), newest first. */
static cx_status checkpoint_steps(const char *dir, int64_t **steps, int *n) {
  *steps = NULL, *n = 0;
  DIR *d = opendir(dir);
  if (!d && errno == ENOENT)
    return cx_fail(CX_ERR_IO, "%s: no such folder, so no checkpoint", dir);
  if (!d) return cx_fail(CX_ERR_IO, "%s: cannot open: %s", dir, strerror(errno));
  int cap = 0;
  for (struct dirent *e; (e = readdir(d));) {
    int64_t s = checkpoint_step(e->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      int64_t *more = realloc(*steps, sizeof **steps * (size_t)(cap = cap * 2 + 8));
      if (!more) return closedir(d), free(*steps), *steps = NULL, alloc_fail();
      *steps = more;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  for (int i = 1; i < *n; i++) /* insertion sort, newest first */
    for (int j = i; j > 0 && (*steps)[j] > (*steps)[j - 1]; j--) {
      int64_t t = (*steps)[j];
      (*steps)[j] = (*steps)[j - 1], (*steps)[j - 1] = t;
    }
  return CX_OK;
}

static void checkpoint_name(const char *dir, int64_t step, char *path, size_t size) {
  snprintf(path, size, "%s/step-%08lld.h5", dir, (long long)step);
}

cx_status cx_checkpoint_find_last(const char *dir, char *path, size_t size) {
  int64_t *steps;
  int n;
  CX_TRY(checkpoint_steps(dir, &steps, &n));
  if (n > 0) checkpoint_name(dir, steps[0], path, size);
  free(steps);
  if (n == 0) return cx_fail(CX_ERR_IO, "%s: no checkpoint (step-<N>.h5) to resume from", dir);
  return CX_OK;
}

/* Keeps the newest `keep` checkpoints; a file that will not go is left (and said nothing of). */
static void prune_checkpoints(const char *dir, int keep) {
  int64_t *steps;
  int n;
  if (checkpoint_steps(dir, &steps, &n) != CX_OK) return;
  char path[4200];
  for (int i = keep; i < n; i++) {
    checkpoint_name(dir, steps[i], path, sizeof path);
    remove(path);
  }
  free(steps);
}

static cx_status save_checkpoint(run *r, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].checkpoint) CX_TRY(r->ext[e].checkpoint(r->ext[e].self, r->train, r->step));
  if (!o->checkpoint_dir) return CX_OK;
  if (mkdir(o->checkpoint_dir, 0777) != 0 && errno != EEXIST)
    return cx_fail(CX_ERR_IO, "%s: cannot create: %s", o->checkpoint_dir, strerror(errno));
  cx_checkpoint_meta m = {.step = r->step, .epoch = r->epoch, .batch = r->batch,
                          .seed = o->seed, .data_seed = o->seed,
                          .rng_counter = cx_program_step(r->train),
                          .seconds = r->seconds_before + now() - r->t_start};
  snprintf(m.config_hash, sizeof m.config_hash, "%s", o->config_hash ? o->config_hash : "");
  r->scaler_state[0] = r->scaler.scale;
  r->scaler_state[1] = r->scaler.good_steps;
  r->scaler_state[2] = (double)r->scaler.skipped;
  if (r->ema) r->ema_updates = (double)cx_ema_updates(r->ema);
  char path[4200];
  checkpoint_name(o->checkpoint_dir, r->step, path, sizeof path);
  CX_TRY(ck_download(r, &r->ck));
  CX_TRY(ck_download(r, &r->ck_state));
  CX_TRY(cx_checkpoint_save(path, &m, r->ck.n, r->ck.names,
                            (const cx_tensor *const *)r->ck.host, r->ck_state.n,
                            r->ck_state.names, (const cx_tensor *const *)r->ck_state.host));
  snprintf(res->checkpoint, sizeof res->checkpoint, "%s", path);
  prune_checkpoints(o->checkpoint_dir, o->keep_checkpoints > 0 ? o->keep_checkpoints : 2);
  return CX_OK;
}

/* Whether the checkpoint's meta belongs to this run: its config hash, its seeds, and a data
 * position inside this run's epochs (cx_train_check and restore). */
static cx_status check_resume(const cx_train_opts *o, int64_t per_epoch,
                              const cx_checkpoint_meta *m) {
  if (o->config_hash && strcmp(o->config_hash, m->config_hash))
    return cx_fail(CX_ERR_ARG, "%s: the checkpoint was written for config hash %s, but this "
                   "run's config hash is %s: refusing to resume from a different configuration",
                   o->resume_from, m->config_hash, o->config_hash);
  if (m->seed != o->seed || m->data_seed != o->seed)
    return cx_fail(CX_ERR_ARG, "%s: written with seed %llu, but this run's seed is %llu",
                   o->resume_from, (unsigned long long)m->seed, (unsigned long long)o->seed);
  int64_t end = per_epoch * o->accum_steps;
  if (m->epoch < 0 || m->batch < 0 || m->batch > end || m->batch % o->accum_steps ||
      (m->epoch == o->epochs && m->batch) || m->epoch > o->epochs)
    return cx_fail(CX_ERR_ARG, "%s: its data position (epoch %lld, batch %lld) is not one of "
                   "this run (%lld epochs of %lld batches)", o->resume_from, (long long)m->epoch,
                   (long long)m->batch, (long long)o->epochs, (long long)end);
  /* every step takes accum_steps batches: a step that disagrees with the position is damage */
  int64_t step = m->epoch * per_epoch + m->batch / o->accum_steps;
  if (m->step != step)
    return cx_fail(CX_ERR_ARG, "%s: its step %lld does not match its data position (epoch %lld, "
                   "batch %lld is step %lld of this run)", o->resume_from, (long long)m->step,
                   (long long)m->epoch, (long long)m->batch, (long long)step);
  return CX_OK;
}

static cx_status restore(run *r) {
  const cx_train_opts *o = r->o;
  cx_checkpoint_meta m;
  CX_TRY(cx_checkpoint_load(o->resume_from, o->config_hash, &m, r->ck.n, r->ck.names,
                            r->ck.host, r->ck_state.n, r->ck_state.names, r->ck_state.host));
  CX_TRY(check_resume(o, r->per_epoch, &m));
  CX_TRY(ck_upload(r, &r->ck));
  CX_TRY(ck_upload(r, &r->ck_state));
  if (r->loss_seed) {
    r->scaler.scale = (float)r->scaler_state[0];
    r->scaler.good_steps = (int)r->scaler_state[1];
    r->scaler.skipped = (int64_t)r->scaler_state[2];
  }
  if (r->ema) cx_ema_set_updates(r->ema, (int64_t)r->ema_updates);
  /* the optimizer counts the updates it made: skipped steps made none */
  cx_optimizer_set_step_count(r->opt, m.step - r->scaler.skipped);
  r->step = r->start_step = m.step;
  r->seconds_before = m.seconds;
  r->epoch = m.epoch;
  r->batch = m.batch;
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].resumed) CX_TRY(r->ext[e].resumed(r->ext[e].self, r->train));
  return CX_OK;
}

/* ---- one step ---- */

/* The batch (full: the loader drops a short last one) and each extension's inputs. Random ops
 * (Dropout) draw by (step, sample): the same numbers whatever the rank count, the accumulation
 * and a resume. */
static cx_status feed(run *r, const cx_batch *b) {
  cx_program_set_step(r->train, (uint64_t)r->step);
  cx_program_set_rows(r->train, (cx_batch_rows){b->order_first, b->order_stride});
  CX_TRY(cx_program_write(r->train, r->input, b->images));
  if (r->soft) CX_TRY(cx_program_write(r->train, r->targets, b->targets));
  else if (r->labels) CX_TRY(cx_program_write(r->train, r->labels, b->labels));
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].feed) CX_TRY(r->ext[e].feed(r->ext[e].self, r->train, b));
  return CX_OK;
}

/* Forward and backward of one micro-batch; a non-finite loss stops training naming the op. */
static cx_status micro_step(run *r, const cx_batch *b, double *loss, cx_eval_sums *acc) {
  CX_TRY(feed(r, b));
  CX_TRY(cx_program_forward(r->train));
  float value;
  CX_TRY(cx_program_read(r->train, r->loss, &value));
  *loss = value;
  if (!isfinite(*loss)) {
    char where[600];
    CX_TRY(cx_program_locate_nonfinite(r->train, where, sizeof where));
    return cx_fail(CX_ERR_NUMERIC, "the loss became %g at step %lld: %s", *loss,
                   (long long)r->step + 1, where);
  }
  CX_TRY(cx_program_read(r->train, r->logits, r->logits_host));
  cx_logits_score(r->logits_host, b->size, r->classes, b->labels, acc);
  if (r->loss_seed) CX_TRY(cx_program_write(r->train, r->loss_seed, &r->scaler.scale));
  CX_TRY(cx_program_backward(r->train));
  if (r->hook_status != CX_OK) return cx_fail(r->hook_status, "%s", r->hook_error);
  return cx_train_profiler_micro(&r->prof, r->train, r->step + 1);
}

static void note(run *r, const char *fmt, const char *text) {
  if (r->bar_open) fputc('\n', r->log);
  r->bar_open = false;
  fprintf(r->log, fmt, text);
  fflush(r->log);
}

/* On logged steps: per-layer norms for the gradient diagnostics, before clipping. */
static cx_status diagnose_gradients(run *r, cx_tensor *const *g, double global,
                                    cx_train_result *res) {
  double *grad = r->sq, *weight = r->sq + r->n_params;
  CX_TRY(cx_grad_sq_norms(r->gops, g, grad));
  CX_TRY(cx_grad_sq_norms(r->gops, r->params, weight));
  for (int i = 0; i < r->n_layers; i++) {
    int k = r->layer_param[i];
    r->layers[i].grad = sqrt(grad[k]);
    r->layers[i].weight = sqrt(weight[k]);
  }
  const char *w = cx_diag_gradients(&r->diag, r->step + 1, global, r->layers, r->n_layers);
  if (w) note(r, "warning: %s\n", w), res->warnings++;
  return CX_OK;
}

/* Unscales the gradients (loss scaling) and checks them. Non-finite ones stop training, naming
 * the op, except under dynamic loss scaling, which skips the step (*skip) and backs off. */
static cx_status unscale_check(run *r, cx_tensor *const *g, bool *skip) {
  bool dynamic = r->o->loss_scale_mode == CX_LOSS_SCALE_DYNAMIC, finite;
  CX_TRY(r->loss_seed ? cx_loss_scaler_unscale(&r->scaler, r->gops, g, &finite)
                      : cx_grads_finite(r->gops, g, &finite));
  if (dynamic) cx_loss_scaler_update(&r->scaler, finite);
  *skip = !finite && dynamic && r->scaler.scale >= FLT_MIN;
  if (finite || *skip) return CX_OK;
  char where[600];
  CX_TRY(cx_program_locate_nonfinite(r->train, where, sizeof where));
  if (dynamic)
    return cx_fail(CX_ERR_NUMERIC, "the loss scale fell to %g after %lld skipped steps: the "
                   "gradients are NaN or Inf at any scale (step %lld): %s", r->scaler.scale,
                   (long long)r->scaler.skipped, (long long)r->step + 1, where);
  return cx_fail(CX_ERR_NUMERIC, "a gradient became NaN or Inf at step %lld%s: %s",
                 (long long)r->step + 1, r->loss_seed ? " (static loss scale: lower it, or use "
                 "\"dynamic\")" : "", where);
}

/* Extensions after the optimizer (masks re-applied before the average takes the weights). */
static cx_status after_update(run *r, bool updated) {
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].after_update)
      CX_TRY(r->ext[e].after_update(r->ext[e].self, r->train, r->step + 1, updated));
  return CX_OK;
}

static cx_status apply_update(run *r, bool logged, double *grad_norm, float *lr,
                              cx_train_result *res) {
  const cx_train_opts *o = r->o;
  cx_tensor *const *g = r->grads;
  /* On a stream, backward may still be running: wait for it first (the finite check below
   * waits anyway), so that the time counted is the extensions' own, a data-parallel step's
   * exposed communication. */
  if (r->has_before_update) CX_TRY(cx_program_wait(r->train));
  double t_sync = now();
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].before_update) CX_TRY(r->ext[e].before_update(r->ext[e].self, r->train));
  r->sync_log += now() - t_sync, r->sync_run += now() - t_sync;
  if (r->acc) {
    CX_TRY(cx_grad_scale(r->gops, r->acc, 1.0f / (float)o->accum_steps));
    g = r->acc;
  }
  bool skip;
  CX_TRY(unscale_check(r, g, &skip));
  *lr = cx_schedule_lr(&o->schedule, r->step);
  if (skip) { /* as GradScaler: no update, but the step (and the schedule) moves on */
    *grad_norm = INFINITY;
    return after_update(r, false);
  }
  float norm;
  if (logged && o->diagnostics) {
    CX_TRY(cx_grad_global_norm(r->gops, g, &norm));
    CX_TRY(diagnose_gradients(r, g, norm, res));
  }
  CX_TRY(o->clip_norm > 0 ? cx_grad_clip_global_norm(r->gops, g, o->clip_norm, &norm)
                          : cx_grad_global_norm(r->gops, g, &norm));
  *grad_norm = norm;
  double t0 = now();
  CX_TRY(cx_optimizer_step(r->opt, g, *lr));
  CX_TRY(after_update(r, true));
  if (r->ema) CX_TRY(cx_ema_update(r->ema, r->ck.at));
  CX_TRY(cx_program_profile_wait(r->train)); /* its row: the update's time on a stream */
  return cx_train_profiler_host(&r->prof, CX_TRAIN_PROFILE_OPTIMIZER, t0, now() - t0, r->step + 1);
}

/* The step's totals summed over the ranks by the one extension that reduces them (else they
 * are this process's, the whole batch's). */
static cx_status reduce_metrics(run *r, double m[4]) {
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].reduce_metrics) return r->ext[e].reduce_metrics(r->ext[e].self, m, 4);
  return CX_OK;
}

/* The micro-batches of one optimizer step and the update. */
static cx_status train_step(run *r, bool logged, double *gnorm, float *lr, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  cx_eval_sums acc = {0};
  double loss_sum = 0, t_step = now();
  for (int m = 0; m < o->accum_steps; m++) {
    cx_batch b;
    double t0 = now();
    CX_TRY(cx_loader_next(r->loader, &b));
    CX_TRY(cx_train_profiler_host(&r->prof, CX_TRAIN_PROFILE_DATA, t0, now() - t0, r->step + 1));
    if (r->step == r->start_step && m == 0) CX_TRY(cx_check_model_input(
        cx_program_graph(r->train), &b, o->train_path));
    double loss;
    r->last_micro = m == o->accum_steps - 1;
    r->micro_index = m;
    CX_TRY(micro_step(r, &b, &loss, &acc));
    loss_sum += loss / o->accum_steps;
    /* every rank's batch is full (the loader drops a short last one): the global count */
    r->images_log += (double)(b.size * r->world);
    r->images_run += (double)(b.size * r->world);
  }
  CX_TRY(apply_update(r, logged, gnorm, lr, res));
  double m[4] = {loss_sum, acc.top1, (double)acc.n, o->interrupt && *o->interrupt};
  CX_TRY(reduce_metrics(r, m));
  r->step_seconds += now() - t_step;
  r->step++;
  r->batch += o->accum_steps;
  r->win.steps += 1;
  r->win.loss += m[0] / r->world; /* each rank's loss is the mean over its share */
  r->win.correct += m[1];
  r->win.images += m[2];
  r->interrupted = m[3] > 0;
  return CX_OK;
}

/* ---- progress ---- */

static double peak_memory_mb(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? (double)u.ru_maxrss / 1024.0 : 0;
}

static void format_duration(double s, char *buf, size_t size) {
  long t = (long)(s + 0.5);
  if (t >= 3600) snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else if (t >= 60) snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
  else snprintf(buf, size, "%lds", t);
}

/* "GPU 87% 3.21/79.19 GiB (plan 1.52 GiB)": what the backend's device is doing, after the CPU
 * figures (nothing when the backend reports no device). A plan under a GiB is in MiB. */
static void progress_device(run *r, const cx_train_step_info *s, bool bar) {
  if (!s->device) return;
  fputs(bar ? " GPU" : "  GPU", r->log);
  if (s->device_util >= 0) fprintf(r->log, " %d%%", s->device_util);
  if (bar) {
    fprintf(r->log, " %.1fG", s->device_memory_used_mb / 1024);
    return;
  }
  fprintf(r->log, " %.2f/%.2f GiB", s->device_memory_used_mb / 1024,
          s->device_memory_total_mb / 1024);
  if (s->device_plan_mb >= 1024) fprintf(r->log, " (plan %.2f GiB)", s->device_plan_mb / 1024);
  else fprintf(r->log, " (plan %.1f MiB)", s->device_plan_mb);
}

static void progress(run *r, const cx_train_step_info *s) {
  if (r->o->quiet) return;
  double elapsed = now() - r->t_start, done = (double)(s->step - r->start_step);
  char eta[32];
  format_duration(done > 0 ? elapsed / done * (double)(r->total - s->step) : 0, eta, sizeof eta);
  double wait = 100 * s->data_wait_s / (s->data_wait_s + s->compute_s + 1e-12);
  if (r->o->progress_bar) {
    enum { W = 24 };
    int fill = (int)(W * (double)s->step / (double)(r->total ? r->total : 1));
    char bar[W + 1];
    for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
    bar[W] = 0;
    fprintf(r->log, "\r[%s] %3.0f%% ep %lld step %lld/%lld loss %.4f acc %.1f%% lr %.3g "
            "%.0f img/s%s", bar, 100.0 * (double)s->step / (double)r->total,
            (long long)s->epoch, (long long)s->step, (long long)r->total, s->loss, s->accuracy,
            s->lr, s->images_per_s, s->world > 1 ? " (all ranks)" : "");
    progress_device(r, s, true);
    fprintf(r->log, " ETA %s\033[K", eta);
    r->bar_open = true;
  } else {
    fprintf(r->log, "epoch %lld step %lld/%lld  loss %.4f  acc %.1f%%  lr %.4g  |g| %.3g  "
            "%.0f img/s  (data wait %.0f%%)", (long long)s->epoch, (long long)s->step,
            (long long)r->total, s->loss, s->accuracy, s->lr, s->grad_norm, s->images_per_s,
            wait);
    if (s->world > 1)
      fprintf(r->log, "  %d ranks, comm wait %.0f%%", s->world,
              100 * s->sync_wait_s / (s->data_wait_s + s->compute_s + 1e-12));
    progress_device(r, s, false);
    fprintf(r->log, "  ETA %s", eta);
    if (s->loss_scale > 0)
      fprintf(r->log, "  loss scale %g (%lld skipped)", s->loss_scale, (long long)s->skipped_steps);
    fputc('\n', r->log);
  }
  fflush(r->log);
}

/* The device's figures into s, where the backend reports them (device_stats: the GPU; the CPU
 * has none and its lines stay as they were). Monitoring never stops training: a failure is told
 * once and the figures are left out from then on. */
static void read_device(run *r, cx_train_step_info *s) {
  const cx_backend *b = cx_program_backend(r->train);
  if (!b->device_stats || r->device_off) return;
  cx_device_stats d;
  if (b->device_stats(b, &d) != CX_OK) {
    r->device_off = true;
    note(r, "warning: GPU monitoring stops: %s\n", cx_last_error());
    return;
  }
  s->device = true;
  s->device_util = d.util_percent;
  s->device_memory_used_mb = (double)d.mem_used / 1048576.0;
  s->device_memory_total_mb = (double)d.mem_total / 1048576.0;
  s->device_plan_mb = (double)cx_program_device_bytes(r->train) / 1048576.0;
}

static void log_step(run *r, double gnorm, float lr, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  double t = now(), wait = cx_loader_wait_seconds(r->loader);
  double steps = r->win.steps > 0 ? r->win.steps : 1;
  double images = r->win.images > 0 ? r->win.images : 1;
  cx_train_step_info s = {.step = r->step, .epoch = r->epoch, .loss = r->win.loss / steps,
                          .lr = lr, .grad_norm = gnorm, .accuracy = 100 * r->win.correct / images,
                          .images_per_s = r->images_log / (t - r->t_log),
                          .data_wait_s = wait - r->wait_log,
                          .compute_s = t - r->t_log - (wait - r->wait_log),
                          .sync_wait_s = r->sync_log, .world = r->world,
                          .peak_memory_mb = peak_memory_mb(),
                          .loss_scale = r->loss_seed ? r->scaler.scale : 0,
                          .skipped_steps = r->scaler.skipped};
  read_device(r, &s);
  progress(r, &s);
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].on_step) r->ext[e].on_step(r->ext[e].self, &s);
  if (o->diagnostics) {
    const char *w = cx_diag_loss(&r->diag, r->step, s.loss);
    if (w) note(r, "warning: %s\n", w), res->warnings++;
  }
  res->final_loss = s.loss;
  res->images_per_s = s.images_per_s;
  r->win = (window){0};
  r->t_log = t, r->wait_log = wait, r->images_log = 0, r->sync_log = 0;
}

/* ---- epochs ---- */

static cx_status copy_to_eval(run *r, void *unused) {
  (void)unused;
  return cx_program_copy_params(r->eval, r->train);
}

static cx_status store_model(run *r, void *model) { return cx_program_store(r->train, model); }

static cx_status evaluate_epoch(run *r, const cx_graph *model, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  if (!r->eval) {
    cx_compile_opts co = {.batch = r->micro, .backend = o->backend, .precision = o->precision,
                          .params_copied_in = true}; /* copy_to_eval */
    CX_TRY(cx_program_compile(model, &co, &r->eval));
  }
  CX_TRY(with_ema(r, copy_to_eval, NULL));
  CX_TRY(cx_evaluate_program(r->eval, o->val_path, o->val_part, &o->val_aug, &res->val));
  if (!o->quiet) {
    char line[200];
    snprintf(line, sizeof line, "epoch %lld: validation top-1 %.2f%%  top-5 %.2f%%  loss %.4f "
             "(%lld images)", (long long)r->epoch, res->val.top1, res->val.top5, res->val.loss,
             (long long)res->val.n);
    note(r, "%s\n", line);
  }
  for (int e = 0; e < r->n_ext; e++)
    if (r->ext[e].on_epoch) r->ext[e].on_epoch(r->ext[e].self, r->epoch, r->step, &res->val);
  return CX_OK;
}

/* Skips the micro-batches of the epoch done before the checkpoint (the order and augmentation
 * are functions of (seed, epoch, sample), so the rest of the epoch is as it was). */
static cx_status skip_batches(run *r, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    cx_batch b;
    CX_TRY(cx_loader_next(r->loader, &b));
  }
  return CX_OK;
}

static bool stop_now(const run *r) {
  const cx_train_opts *o = r->o;
  return (o->stop_after > 0 && r->step >= o->stop_after) || r->interrupted;
}

/* One epoch from r->batch; *stopped when stop_after or an interrupt ended it early. */
static cx_status train_epoch(run *r, cx_train_result *res, bool *stopped) {
  const cx_train_opts *o = r->o;
  int64_t end = r->per_epoch * o->accum_steps;
  CX_TRY(cx_loader_epoch_begin(r->loader, r->epoch));
  if (r->batch < end) CX_TRY(skip_batches(r, r->batch));
  while (r->batch < end) {
    bool last = r->batch + o->accum_steps >= end;
    bool logged = (r->step + 1) % o->log_every == 0 || last;
    double gnorm = 0;
    float lr = 0;
    CX_TRY(cx_train_profiler_begin(&r->prof, r->train, r->step + 1));
    CX_TRY(train_step(r, logged, &gnorm, &lr, res));
    if (logged) log_step(r, gnorm, lr, res);
    *stopped = stop_now(r);
    bool final = *stopped || r->step == r->total;
    if (r->bar_open && r->prof.on && (final || r->step >= r->prof.last)) { /* the table below */
      fputc('\n', r->log);
      r->bar_open = false;
    }
    CX_TRY(cx_train_profiler_end(&r->prof, r->train, r->step, final, r->log));
    if (*stopped || (o->checkpoint_every > 0 && r->step % o->checkpoint_every == 0))
      CX_TRY(save_checkpoint(r, res));
    if (*stopped) return CX_OK;
  }
  return CX_OK;
}

static cx_status train_epochs(run *r, cx_graph *model, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  r->t_start = r->t_log = now();
  r->wait_log = cx_loader_wait_seconds(r->loader);
  for (; r->epoch < o->epochs; r->epoch++, r->batch = 0) {
    bool stopped = false;
    CX_TRY(train_epoch(r, res, &stopped));
    if (stopped) {
      res->stopped = true;
      break;
    }
    if (o->val_path) CX_TRY(evaluate_epoch(r, model, res));
  }
  if (r->bar_open) fputc('\n', r->log);
  res->steps = r->step;
  res->skipped_steps = r->scaler.skipped;
  res->loss_scale = r->loss_seed ? r->scaler.scale : 0;
  res->seconds = r->seconds_before + now() - r->t_start;
  res->resumed_seconds = r->seconds_before;
  if (r->step_seconds > 0) res->images_per_s = r->images_run / r->step_seconds;
  res->world = r->world;
  res->step_seconds = r->step_seconds;
  res->sync_wait_s = r->sync_run;
  res->data_wait_s = cx_loader_wait_seconds(r->loader);
  if (!res->stopped) CX_TRY(save_checkpoint(r, res));
  return with_ema(r, store_model, model);
}

/* ---- entry ---- */

static cx_status check_opts(cx_train_opts *o) {
  if (o->accum_steps <= 0) o->accum_steps = 1;
  if (o->log_every <= 0) o->log_every = 50;
  if (!o->log) o->log = stdout;
  if (o->batch_size <= 0 || o->batch_size % o->accum_steps)
    return cx_fail(CX_ERR_ARG, "batch size %lld must be a positive multiple of the %d "
                   "accumulation steps", (long long)o->batch_size, o->accum_steps);
  int world = o->loader.world > 0 ? o->loader.world : 1;
  if (o->batch_size % ((int64_t)o->accum_steps * world))
    return cx_fail(CX_ERR_ARG, "batch %lld (the global batch) is not divisible by %d ranks%s: "
                   "each rank trains on an equal share of every batch; choose a batch that is "
                   "a multiple of %lld", (long long)o->batch_size, world,
                   o->accum_steps > 1 ? " times the accumulation steps" : "",
                   (long long)o->accum_steps * world);
  if (o->epochs < 0) return cx_fail(CX_ERR_ARG, "epochs %lld < 0", (long long)o->epochs);
  return CX_OK;
}

static cx_status open_loader(run *r, cx_train_opts *o) {
  cx_loader_opts lo = o->loader;
  lo.part = o->train_part;
  lo.batch_size = r->micro; /* this rank's share; rank and world come with o->loader */
  lo.seed = o->seed;
  if (lo.world <= 0) lo.world = 1;
  lo.drop_last = true; /* programs have a fixed batch */
  lo.shuffle = true;
  CX_TRY(cx_loader_open(o->train_path, &lo, &r->loader));
  r->classes = cx_loader_info(r->loader)->num_classes;
  r->per_epoch = cx_loader_batches(r->loader) / o->accum_steps;
  r->total = r->per_epoch * o->epochs;
  if (r->per_epoch <= 0)
    return cx_fail(CX_ERR_ARG, "%s: too few images for one step of %lld", o->train_path,
                   (long long)o->batch_size);
  if (o->schedule.total_steps <= 0) o->schedule.total_steps = r->total;
  return cx_schedule_check(&o->schedule);
}

cx_status cx_train_check(const cx_train_opts *given) {
  cx_train_opts o = *given;
  CX_TRY(check_opts(&o));
  run r = {.o = &o, .world = o.loader.world > 0 ? o.loader.world : 1};
  r.micro = o.batch_size / o.accum_steps / r.world;
  for (int e = 0; e < r.n_ext; e++) r.has_before_update |= r.ext[e].before_update != NULL;
  cx_status s = open_loader(&r, &o);
  cx_loader_close(r.loader);
  if (s != CX_OK || !o.resume_from) return s;
  cx_checkpoint_meta m;
  CX_TRY(cx_checkpoint_peek(o.resume_from, &m));
  return check_resume(&o, r.per_epoch, &m);
}

cx_status cx_train(cx_graph *model, const cx_train_opts *given, cx_train_result *res) {
  cx_train_opts o = *given;
  memset(res, 0, sizeof *res);
  CX_TRY(check_opts(&o));
  if (o.threads > 0) omp_set_num_threads(o.threads);
  run r = {.o = &o, .log = o.log, .ext = o.extensions, .n_ext = o.n_extensions,
           .world = o.loader.world > 0 ? o.loader.world : 1};
  r.micro = o.batch_size / o.accum_steps / r.world;
  for (int e = 0; e < r.n_ext; e++) r.has_before_update |= r.ext[e].before_update != NULL;
  cx_status s = open_loader(&r, &o);
  r.diag.classes = r.classes;
  if (s == CX_OK) s = open_program(&r, model);
  if (s == CX_OK && o.resume_from) s = restore(&r);
  r.prof = (cx_train_profiler){.trace_path = o.profile_trace, .json_path = o.profile_json,
                               .top = o.profile_top};
  cx_train_profiler_init(&r.prof, o.profile_after, o.profile_steps, r.start_step, r.total);
  res->resumed_step = r.start_step;
  res->total_steps = r.total;
  if (s == CX_OK) s = train_epochs(&r, model, res);
  close_run(&r);
  return s;
}
