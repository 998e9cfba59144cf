/* `compress train` configs: TOML to cx_train_opts, with every key checked where it stands. */
#include "train_config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/graph_shapes.h"
#include "cpu_free.h"
#include "train_graph.h"

/* ---- keys ---- */

static const char *const top_keys[] = {"model", "data", "train", "run", NULL};
static const char *const model_keys[] = {"spec", "onnx", NULL};
static const char *const data_keys[] = {
    "train", "train_part", "val", "val_part", "batch", "workers", "crop", "pad", "flip",
    "cutout", "cutout_prob", "mixup", "cutmix", "mix_prob", "mean", "std", NULL};
const char *const cx_train_config_train_keys[] = {
    "epochs", "optimizer", "lr", "momentum", "nesterov", "weight_decay", "decay_norm_and_bias",
    "beta1", "beta2", "eps", "always_adapt", "schedule", "warmup_steps", "warmup_start_factor",
    "min_lr", "step_size", "gamma", "milestones", "pct_start", "div_factor", "final_div_factor",
    "total_steps", "clip_norm", "accum_steps", "label_smoothing", "seed", "checkpoint_every",
    "log_every", "diagnostics", "loss_scale", "checkpoint_segments", "precision", "ema_decay",
    "ema_warmup", "bn_l1", "sync_bn", NULL};
static const char *const run_keys[] = {"out_dir", "threads", "keep_checkpoints", "device", NULL};

/* Keys left out of the config hash: they change no step's numbers. */
static const char *const unhashed[] = {"run", "train.epochs", "train.log_every",
                                       "train.checkpoint_every", "train.diagnostics",
                                       "train.checkpoint_segments", "data.workers", NULL};

/* ---- typed getters with ranges ---- */

static cx_status get_int(const cx_toml *t, const char *key, int64_t fallback, int64_t lo,
                         int64_t hi, int64_t *out) {
  CX_TRY(cx_toml_int(t, key, fallback, out));
  const cx_toml *n = cx_toml_get(t, key);
  if (n && (*out < lo || *out > hi))
    return cx_toml_fail(n, CX_ERR_FORMAT, "%lld is out of range: %lld to %lld", (long long)*out,
                        (long long)lo, (long long)hi);
  return CX_OK;
}

static cx_status get_i32(const cx_toml *t, const char *key, int fallback, int lo, int hi,
                         int *out) {
  int64_t v;
  CX_TRY(get_int(t, key, fallback, lo, hi, &v));
  *out = (int)v;
  return CX_OK;
}

/* A float in [lo, hi]; lo_open excludes lo. */
static cx_status get_float(const cx_toml *t, const char *key, double fallback, double lo,
                           bool lo_open, double hi, float *out) {
  double v;
  CX_TRY(cx_toml_float(t, key, fallback, &v));
  const cx_toml *n = cx_toml_get(t, key);
  if (n && (!(v >= lo && v <= hi) || (lo_open && v == lo)))
    return cx_toml_fail(n, CX_ERR_FORMAT, "%g is out of range: %s%g to %g", v,
                        lo_open ? "above " : "", lo, hi);
  *out = (float)v;
  return CX_OK;
}

/* One of names (NULL-terminated), as its index. */
static cx_status get_choice(const cx_toml *t, const char *key, const char *fallback,
                            const char *const *names, int *out) {
  const char *v;
  CX_TRY(cx_toml_string(t, key, fallback, &v));
  for (int i = 0; names[i]; i++)
    if (!strcmp(v, names[i])) return *out = i, CX_OK;
  char list[256] = "";
  for (int i = 0; names[i]; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "",
             names[i]);
  return cx_toml_fail(cx_toml_get(t, key), CX_ERR_FORMAT, "unknown value \"%s\": one of %s", v,
                      list);
}

/* A key present although the chosen optimizer or schedule does not use it. */
static cx_status only_for(const cx_toml *t, const char *const *keys, const char *what,
                          const char *chosen) {
  for (int i = 0; keys[i]; i++) {
    const cx_toml *n = cx_toml_get(t, keys[i]);
    if (n) return cx_toml_fail(n, CX_ERR_FORMAT, "applies to %s, not \"%s\"", what, chosen);
  }
  return CX_OK;
}

void cx_train_config_where(const cx_toml *node, char *buf, size_t size) {
  cx_toml_pos p = cx_toml_key_where(node);
  char name[200];
  snprintf(buf, size, "%s:%d:%d: '%s'", p.file, p.line, p.col,
           cx_toml_path(node, name, sizeof name));
}

/* ---- paths ---- */

/* path relative to the config's folder (absolute paths as they are). */
static char *resolve(const char *config, const char *path) {
  const char *slash = strrchr(config, '/');
  size_t dir = path[0] == '/' || !slash ? 0 : (size_t)(slash - config) + 1;
  char *out = malloc(dir + strlen(path) + 1);
  if (!out) return NULL;
  memcpy(out, config, dir);
  strcpy(out + dir, path);
  return out;
}

static cx_status get_path(cx_train_config *c, const cx_toml *t, const char *key, char **out,
                          const cx_toml **node) {
  const char *v;
  *node = cx_toml_get(t, key);
  if (!*node) return CX_OK;
  CX_TRY(cx_toml_as_string(*node, &v));
  if (!*v) return cx_toml_fail(*node, CX_ERR_FORMAT, "an empty path");
  *out = resolve(c->path, v);
  return *out ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

/* ---- tables ---- */

static cx_status read_model(cx_train_config *c, const cx_toml *m) {
  CX_TRY(cx_toml_check_keys(m, model_keys));
  const cx_toml *spec = cx_toml_get(m, "spec"), *onnx = NULL;
  CX_TRY(get_path(c, m, "onnx", &c->model_onnx, &onnx));
  if (spec && onnx)
    return cx_toml_fail(onnx, CX_ERR_FORMAT, "give either [model] spec or onnx, not both");
  if (!spec && !onnx) {
    cx_toml_pos p = m ? cx_toml_where(m) : cx_toml_where(c->doc);
    return cx_fail(CX_ERR_FORMAT, "%s:%d:%d: [model] needs spec = \"<a built-in model spec>\" "
                   "or onnx = \"<a path>\"", p.file, p.line, p.col);
  }
  if (spec) CX_TRY(cx_toml_as_string(spec, &c->model_spec));
  c->model_node = spec ? spec : onnx;
  return CX_OK;
}

static cx_status read_channels(const cx_toml *d, const char *key, float *v, int *n,
                               const cx_toml **node, bool positive) {
  *node = cx_toml_get(d, key);
  if (!*node) return CX_OK;
  if (cx_toml_type_of(*node) != CX_TOML_ARRAY)
    return cx_toml_fail(*node, CX_ERR_FORMAT, "must be an array of numbers, one per channel");
  *n = (int)cx_toml_len(*node);
  if (*n < 1 || *n > 4)
    return cx_toml_fail(*node, CX_ERR_FORMAT, "%d values: 1 to 4 channels are supported", *n);
  for (int i = 0; i < *n; i++) {
    double x;
    CX_TRY(cx_toml_as_float(cx_toml_at(*node, (size_t)i), &x));
    if (!isfinite(x)) /* TOML has nan and inf; either would make every input NaN */
      return cx_toml_fail(cx_toml_at(*node, (size_t)i), CX_ERR_FORMAT, "must be a finite number");
    if (positive && !(x > 0))
      return cx_toml_fail(cx_toml_at(*node, (size_t)i), CX_ERR_FORMAT, "must be above 0");
    v[i] = (float)x;
  }
  return CX_OK;
}

static cx_status read_augment(const cx_toml *d, cx_augment *a) {
  static const char *const crops[] = {"none", "pad", "resized", NULL};
  static const cx_crop crop_of[] = {CX_CROP_NONE, CX_CROP_PAD, CX_CROP_RESIZED};
  int crop;
  CX_TRY(get_choice(d, "crop", "none", crops, &crop));
  a->crop = crop_of[crop];
  if (a->crop == CX_CROP_PAD) CX_TRY(get_i32(d, "pad", 4, 0, 1024, &a->pad));
  else CX_TRY(only_for(d, (const char *const[]){"pad", NULL}, "crop \"pad\"", crops[crop]));
  CX_TRY(cx_toml_bool(d, "flip", false, &a->flip));
  CX_TRY(get_i32(d, "cutout", 0, 0, 4096, &a->cutout_size));
  CX_TRY(get_float(d, "cutout_prob", a->cutout_size ? 1 : 0, 0, false, 1, &a->cutout_prob));
  CX_TRY(get_float(d, "mixup", 0, 0, false, 1e3, &a->mixup_alpha));
  CX_TRY(get_float(d, "cutmix", 0, 0, false, 1e3, &a->cutmix_alpha));
  return get_float(d, "mix_prob", 0, 0, false, 1, &a->mix_prob);
}

static cx_status read_data(cx_train_config *c, const cx_toml *d) {
  CX_TRY(cx_toml_check_keys(d, data_keys));
  cx_train_opts *o = &c->opts;
  const cx_toml *node;
  CX_TRY(cx_toml_need(d, "train", CX_TOML_STRING, &node));
  CX_TRY(get_path(c, d, "train", &c->train_path, &c->train_node));
  CX_TRY(get_path(c, d, "val", &c->val_path, &c->val_node));
  CX_TRY(cx_toml_string(d, "train_part", "", &o->train_part));
  CX_TRY(cx_toml_string(d, "val_part", "", &o->val_part));
  if (!c->val_node && cx_toml_get(d, "val_part"))
    return cx_toml_fail(cx_toml_get(d, "val_part"), CX_ERR_FORMAT, "needs [data] val (the file)");
  o->train_path = c->train_path;
  o->val_path = c->val_path;
  CX_TRY(get_int(d, "batch", 128, 1, 1 << 20, &o->batch_size));
  CX_TRY(get_i32(d, "workers", 0, 0, 64, &o->loader.workers));
  CX_TRY(read_augment(d, &o->loader.aug));
  cx_augment *a = &o->loader.aug;
  CX_TRY(read_channels(d, "mean", a->mean, &c->n_mean, &c->mean_node, false));
  CX_TRY(read_channels(d, "std", a->std, &c->n_std, &c->std_node, true));
  for (int i = 0; i < 4; i++) {
    o->val_aug.mean[i] = a->mean[i];
    o->val_aug.std[i] = a->std[i];
  }
  return CX_OK;
}

static cx_status read_optimizer(cx_train_config *c, const cx_toml *t) {
  static const char *const kinds[] = {"sgd", "adamw", "lamb", NULL};
  int kind;
  CX_TRY(get_choice(t, "optimizer", "sgd", kinds, &kind));
  cx_optim_config *oc = &c->opts.optim;
  *oc = cx_optim_defaults((cx_optim_kind)kind);
  CX_TRY(get_float(t, "lr", oc->lr, 0, true, 1e6, &oc->lr));
  CX_TRY(get_float(t, "weight_decay", oc->weight_decay, 0, false, 1e3, &oc->weight_decay));
  CX_TRY(cx_toml_bool(t, "decay_norm_and_bias", false, &oc->decay_norm_and_bias));
  static const char *const sgd_keys[] = {"momentum", "nesterov", NULL};
  static const char *const adam_keys[] = {"beta1", "beta2", "eps", NULL};
  if (oc->kind == CX_OPTIM_SGD) {
    CX_TRY(only_for(t, adam_keys, "optimizer \"adamw\" or \"lamb\"", kinds[kind]));
    CX_TRY(get_float(t, "momentum", oc->momentum, 0, false, 1, &oc->momentum));
    CX_TRY(cx_toml_bool(t, "nesterov", false, &oc->nesterov));
    if (oc->nesterov && oc->momentum <= 0)
      return cx_toml_fail(cx_toml_get(t, "nesterov"), CX_ERR_FORMAT, "needs momentum above 0");
  } else {
    CX_TRY(only_for(t, sgd_keys, "optimizer \"sgd\"", kinds[kind]));
    CX_TRY(get_float(t, "beta1", oc->beta1, 0, false, 1, &oc->beta1));
    CX_TRY(get_float(t, "beta2", oc->beta2, 0, false, 1, &oc->beta2));
    CX_TRY(get_float(t, "eps", oc->eps, 0, true, 1, &oc->eps));
  }
  if (oc->kind != CX_OPTIM_LAMB)
    CX_TRY(only_for(t, (const char *const[]){"always_adapt", NULL}, "optimizer \"lamb\"",
                    kinds[kind]));
  return cx_toml_bool(t, "always_adapt", false, &oc->always_adapt);
}

static cx_status read_milestones(const cx_toml *t, cx_schedule *s) {
  const cx_toml *m = cx_toml_get(t, "milestones");
  if (!m)
    return cx_toml_fail(t, CX_ERR_FORMAT, "schedule \"multistep\" needs milestones = [steps]");
  if (cx_toml_type_of(m) != CX_TOML_ARRAY || cx_toml_len(m) < 1 ||
      cx_toml_len(m) > CX_SCHEDULE_MAX_MILESTONES)
    return cx_toml_fail(m, CX_ERR_FORMAT, "must be an array of 1 to %d increasing step numbers",
                        CX_SCHEDULE_MAX_MILESTONES);
  s->n_milestones = (int)cx_toml_len(m);
  for (int i = 0; i < s->n_milestones; i++) {
    const cx_toml *e = cx_toml_at(m, (size_t)i);
    CX_TRY(cx_toml_as_int(e, &s->milestones[i]));
    if (s->milestones[i] < 0 || (i && s->milestones[i] <= s->milestones[i - 1]))
      return cx_toml_fail(e, CX_ERR_FORMAT, "milestones must be increasing step numbers");
  }
  return CX_OK;
}

static cx_status read_schedule_keys(const cx_toml *t, cx_schedule *s, const char *name) {
  static const char *const step_keys[] = {"step_size", NULL}, *const gamma[] = {"gamma", NULL},
                           *const ms[] = {"milestones", NULL}, *const cos[] = {"min_lr", NULL},
                           *const one[] = {"pct_start", "div_factor", "final_div_factor", NULL},
                           *const total[] = {"total_steps", NULL};
  bool stepped = s->kind == CX_SCHEDULE_STEP || s->kind == CX_SCHEDULE_MULTISTEP;
  if (s->kind != CX_SCHEDULE_STEP) CX_TRY(only_for(t, step_keys, "schedule \"step\"", name));
  if (!stepped) CX_TRY(only_for(t, gamma, "schedule \"step\" or \"multistep\"", name));
  if (s->kind != CX_SCHEDULE_MULTISTEP) CX_TRY(only_for(t, ms, "schedule \"multistep\"", name));
  if (s->kind != CX_SCHEDULE_COSINE) CX_TRY(only_for(t, cos, "schedule \"cosine\"", name));
  if (s->kind != CX_SCHEDULE_ONECYCLE) CX_TRY(only_for(t, one, "schedule \"onecycle\"", name));
  if (s->kind != CX_SCHEDULE_COSINE && s->kind != CX_SCHEDULE_ONECYCLE)
    CX_TRY(only_for(t, total, "schedule \"cosine\" or \"onecycle\"", name));
  if (s->kind == CX_SCHEDULE_STEP) {
    if (!cx_toml_get(t, "step_size"))
      return cx_toml_fail(t, CX_ERR_FORMAT, "schedule \"step\" needs step_size (steps)");
    CX_TRY(get_int(t, "step_size", 0, 1, INT64_MAX, &s->step_size));
  }
  if (stepped) CX_TRY(get_float(t, "gamma", s->gamma, 0, true, 1e3, &s->gamma));
  if (s->kind == CX_SCHEDULE_MULTISTEP) CX_TRY(read_milestones(t, s));
  CX_TRY(get_float(t, "min_lr", s->min_lr, 0, false, 1e6, &s->min_lr));
  CX_TRY(get_float(t, "pct_start", s->pct_start, 0, true, 1, &s->pct_start));
  CX_TRY(get_float(t, "div_factor", s->div_factor, 0, true, 1e12, &s->div_factor));
  CX_TRY(get_float(t, "final_div_factor", s->final_div_factor, 0, true, 1e12,
                   &s->final_div_factor));
  return get_int(t, "total_steps", 0, 1, INT64_MAX, &s->total_steps);
}

static cx_status read_schedule(cx_train_config *c, const cx_toml *t) {
  static const char *const kinds[] = {"constant", "step", "multistep", "cosine", "onecycle",
                                      NULL};
  static const cx_schedule_kind kind_of[] = {CX_SCHEDULE_CONSTANT, CX_SCHEDULE_STEP,
                                             CX_SCHEDULE_MULTISTEP, CX_SCHEDULE_COSINE,
                                             CX_SCHEDULE_ONECYCLE};
  int k;
  CX_TRY(get_choice(t, "schedule", "cosine", kinds, &k));
  cx_schedule *s = &c->opts.schedule;
  *s = cx_schedule_defaults(kind_of[k], c->opts.optim.lr);
  CX_TRY(get_int(t, "warmup_steps", 0, 0, INT64_MAX, &s->warmup_steps));
  CX_TRY(get_float(t, "warmup_start_factor", s->warmup_start_factor, 0, false, 1,
                   &s->warmup_start_factor));
  return read_schedule_keys(t, s, kinds[k]);
}

cx_status cx_train_config_read_precision(const cx_toml *t, cx_precision fallback,
                                         cx_precision *p) {
  static const char *const names[] = {"fp32", "bf16", "fp16", NULL};
  static const cx_precision of[] = {CX_PRECISION_F32, CX_PRECISION_BF16, CX_PRECISION_F16};
  int k;
  CX_TRY(get_choice(t, "precision", names[fallback], names, &k));
  *p = of[k];
  return CX_OK;
}

cx_status cx_train_config_check_precision(const cx_train_config *c, const cx_backend *b) {
  cx_precision p = c->opts.precision;
  if (p == CX_PRECISION_F32 || !b) return CX_OK;
  cx_status s = b->check_precision ? b->check_precision(b, p)
                : cx_fail(CX_ERR_UNSUPPORTED, "the %s backend computes only in fp32", b->name);
  if (s == CX_OK) return CX_OK;
  char why[400];
  snprintf(why, sizeof why, "%s", cx_last_error());
  if (!c->precision_node) return cx_fail(s, "%s: %s", c->path, why);
  return cx_toml_fail(c->precision_node, s, "%s", why);
}

/* loss_scale = "none" | "dynamic" | a number (a static scale). */
static cx_status read_loss_scale(cx_train_config *c, const cx_toml *t) {
  const cx_toml *n = cx_toml_get(t, "loss_scale");
  cx_train_opts *o = &c->opts;
  if (!n) return CX_OK;
  if (cx_toml_type_of(n) == CX_TOML_STRING) {
    static const char *const modes[] = {"none", "dynamic", NULL};
    int m;
    CX_TRY(get_choice(t, "loss_scale", "none", modes, &m));
    o->loss_scale_mode = m ? CX_LOSS_SCALE_DYNAMIC : CX_LOSS_SCALE_NONE;
    return CX_OK;
  }
  if (cx_toml_type_of(n) != CX_TOML_INT && cx_toml_type_of(n) != CX_TOML_FLOAT)
    return cx_toml_fail(n, CX_ERR_FORMAT, "must be \"none\", \"dynamic\" or a number (a static "
                        "scale)");
  CX_TRY(get_float(t, "loss_scale", 1, 0, true, 1e38, &o->loss_scaler.scale));
  o->loss_scale_mode = CX_LOSS_SCALE_STATIC;
  return CX_OK;
}

/* checkpoint_segments = "blocks" | ["layer1", "layer2.0", ...] (node-name prefixes). */
static cx_status read_segments(cx_train_config *c, const cx_toml *t) {
  const cx_toml *n = cx_toml_get(t, "checkpoint_segments");
  if (!n) return CX_OK;
  bool one = cx_toml_type_of(n) == CX_TOML_STRING;
  if (!one && cx_toml_type_of(n) != CX_TOML_ARRAY)
    return cx_toml_fail(n, CX_ERR_FORMAT, "must be \"blocks\" or an array of node-name "
                        "prefixes such as [\"layer1\", \"layer2.0\"]");
  size_t len = one ? 1 : cx_toml_len(n);
  c->segments = calloc(len + 1, sizeof *c->segments);
  if (!c->segments) return cx_fail(CX_ERR_NOMEM, "out of memory");
  for (size_t i = 0; i < len; i++) {
    const cx_toml *e = one ? n : cx_toml_at(n, i);
    CX_TRY(cx_toml_as_string(e, &c->segments[i]));
    if (!*c->segments[i] || (one && strcmp(c->segments[i], "blocks")))
      return cx_toml_fail(e, CX_ERR_FORMAT, one ? "a string here must be \"blocks\"; give "
                          "prefixes as an array" : "an empty prefix");
  }
  c->opts.checkpoint_segments = c->segments;
  c->opts.n_checkpoint_segments = (int)len;
  return CX_OK;
}

/* ema_decay turns the weight average on; ema_warmup ramps its decay up (train/ema.h). */
static cx_status read_ema(cx_train_config *c, const cx_toml *t) {
  cx_train_opts *o = &c->opts;
  o->use_ema = cx_toml_get(t, "ema_decay") != NULL;
  CX_TRY(get_float(t, "ema_decay", o->ema.decay, 0, true, 1, &o->ema.decay));
  if (!o->use_ema && cx_toml_get(t, "ema_warmup"))
    return cx_toml_fail(cx_toml_get(t, "ema_warmup"), CX_ERR_FORMAT, "needs ema_decay (the "
                        "average is off without it)");
  return cx_toml_bool(t, "ema_warmup", false, &o->ema.warmup);
}

static cx_status read_train(cx_train_config *c, const cx_toml *t, const char *const *extra) {
  const char *keys[64];
  int n = 0;
  for (int i = 0; cx_train_config_train_keys[i] && n < 63; i++) keys[n++] = cx_train_config_train_keys[i];
  for (int i = 0; extra && extra[i] && n < 63; i++) keys[n++] = extra[i];
  keys[n] = NULL;
  CX_TRY(cx_toml_check_keys(t, keys));
  cx_train_opts *o = &c->opts;
  const cx_toml *node;
  CX_TRY(cx_toml_need(t, "epochs", CX_TOML_INT, &node));
  CX_TRY(get_int(t, "epochs", 1, 1, 1 << 24, &o->epochs));
  CX_TRY(read_optimizer(c, t));
  CX_TRY(read_schedule(c, t));
  CX_TRY(get_float(t, "clip_norm", 0, 0, false, 1e12, &o->clip_norm));
  CX_TRY(get_i32(t, "accum_steps", 1, 1, 1 << 16, &o->accum_steps));
  if (o->batch_size % o->accum_steps)
    return cx_toml_fail(cx_toml_get(t, "accum_steps"), CX_ERR_FORMAT, "must divide [data] batch "
                        "(%lld): each step is accum_steps micro-batches of batch / accum_steps",
                        (long long)o->batch_size);
  CX_TRY(get_float(t, "label_smoothing", 0, 0, false, 0.999, &o->label_smoothing));
  CX_TRY(get_float(t, "bn_l1", 0, 0, false, 1, &c->bn_l1));
  CX_TRY(cx_toml_bool(t, "sync_bn", false, &c->sync_bn));
  CX_TRY(read_loss_scale(c, t));
  CX_TRY(read_ema(c, t));
  CX_TRY(read_segments(c, t));
  o->loader.aug.label_smoothing = o->label_smoothing; /* soft targets (mixup, cutmix) */
  int64_t seed;
  CX_TRY(get_int(t, "seed", 1, 0, INT64_MAX, &seed));
  o->seed = (uint64_t)seed;
  CX_TRY(get_int(t, "checkpoint_every", 0, 0, INT64_MAX, &o->checkpoint_every));
  CX_TRY(get_i32(t, "log_every", 50, 1, 1 << 30, &o->log_every));
  CX_TRY(cx_train_config_read_precision(t, CX_PRECISION_F32, &o->precision));
  c->precision_node = cx_toml_get(t, "precision");
  return cx_toml_bool(t, "diagnostics", true, &o->diagnostics);
}

static cx_status read_run(cx_train_config *c, const cx_toml *r) {
  CX_TRY(cx_toml_check_keys(r, run_keys));
  const cx_toml *node;
  CX_TRY(get_path(c, r, "out_dir", &c->out_dir, &node));
  CX_TRY(cx_train_config_read_threads(r, &c->threads));
  c->opts.threads = c->threads;
  const char *device; /* checked here; the caller maps it to opts.backend (cli/device.h) */
  CX_TRY(cx_train_config_read_device(r, &device));
  return get_i32(r, "keep_checkpoints", 2, 1, 1 << 20, &c->opts.keep_checkpoints);
}

cx_status cx_train_config_read_threads(const cx_toml *run, int *threads) {
  const cx_toml *n = cx_toml_get(run, "threads");
  if (!n || cx_toml_type_of(n) != CX_TOML_STRING)
    return get_i32(run, "threads", 0, 0, 1024, threads);
  const char *v;
  CX_TRY(cx_toml_as_string(n, &v));
  if (strcmp(v, "auto"))
    return cx_toml_fail(n, CX_ERR_FORMAT, "\"%s\": give a count (0 to 1024) or \"auto\"", v);
  cx_toml_pos at = cx_toml_where(n);
  char where[512];
  snprintf(where, sizeof where, "%s:%d:%d", at.file, at.line, at.col);
  *threads = cx_cpu_free_threads(where);
  return CX_OK;
}

cx_status cx_train_config_read_device(const cx_toml *run, const char **device) {
  static const char *const names[] = {"cpu", "cuda", "auto", NULL};
  int k;
  CX_TRY(get_choice(run, "device", "cpu", names, &k));
  *device = names[k];
  return CX_OK;
}

/* A table of the document, which must be a table if present. */
static cx_status table(const cx_toml *doc, const char *key, const cx_toml **out) {
  *out = cx_toml_get(doc, key);
  if (*out && cx_toml_type_of(*out) != CX_TOML_TABLE)
    return cx_toml_fail(*out, CX_ERR_FORMAT, "must be a table ([%s])", key);
  return CX_OK;
}

/* ---- the hash ---- */

typedef struct fnv {
  uint64_t h;
} fnv;

static void fnv_bytes(fnv *f, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) f->h = (f->h ^ b[i]) * 0x100000001b3ull;
}

static void fnv_str(fnv *f, const char *s) { fnv_bytes(f, s, strlen(s) + 1); }

static bool is_unhashed(const char *path) {
  for (int i = 0; unhashed[i]; i++)
    if (!strcmp(path, unhashed[i])) return true;
  return false;
}

static int by_key(const void *a, const void *b) {
  return strcmp(cx_toml_key(*(const cx_toml *const *)a), cx_toml_key(*(const cx_toml *const *)b));
}

/* Values in a canonical form: tables by sorted key, floats exactly, strings with their length. */
static void hash_node(fnv *f, const cx_toml *n, const char *path) {
  char buf[64];
  cx_toml_type t = cx_toml_type_of(n);
  fnv_bytes(f, &(char){(char)('0' + t)}, 1);
  if (t == CX_TOML_TABLE) {
    size_t len = cx_toml_len(n);
    const cx_toml **kids = malloc(sizeof *kids * (len + 1));
    if (!kids) return;
    for (size_t i = 0; i < len; i++) kids[i] = cx_toml_at(n, i);
    qsort(kids, len, sizeof *kids, by_key);
    for (size_t i = 0; i < len; i++) {
      char sub[512];
      snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", cx_toml_key(kids[i]));
      if (is_unhashed(sub)) continue;
      fnv_str(f, cx_toml_key(kids[i]));
      hash_node(f, kids[i], sub);
    }
    free(kids);
  } else if (t == CX_TOML_ARRAY) {
    snprintf(buf, sizeof buf, "%zu", cx_toml_len(n));
    fnv_str(f, buf);
    for (size_t i = 0; i < cx_toml_len(n); i++) hash_node(f, cx_toml_at(n, i), path);
  } else if (t == CX_TOML_STRING) {
    snprintf(buf, sizeof buf, "%zu", cx_toml_len(n));
    fnv_str(f, buf);
    fnv_bytes(f, cx_toml_bytes(n), cx_toml_len(n));
  } else {
    int64_t i = 0;
    double d = 0;
    bool b = false;
    if (t == CX_TOML_INT) cx_toml_as_int(n, &i), snprintf(buf, sizeof buf, "%lld", (long long)i);
    if (t == CX_TOML_FLOAT) cx_toml_as_float(n, &d), snprintf(buf, sizeof buf, "%a", d);
    if (t == CX_TOML_BOOL) cx_toml_as_bool(n, &b), snprintf(buf, sizeof buf, "%d", b);
    fnv_str(f, buf);
  }
}

static void config_hash(const cx_toml *doc, char *out) {
  fnv f = {0xcbf29ce484222325ull};
  hash_node(&f, doc, "");
  snprintf(out, CX_TRAIN_HASH_MAX + 1, "fnv1a64:%016llx", (unsigned long long)f.h);
}

void cx_train_config_hash(int n, const cx_toml *const *nodes, const char *const *names,
                          const char *salt, char *out) {
  fnv f = {0xcbf29ce484222325ull};
  for (int i = 0; i < n; i++) {
    if (!nodes[i]) continue;
    fnv_str(&f, names[i]);
    hash_node(&f, nodes[i], names[i]);
  }
  if (salt) fnv_str(&f, salt);
  snprintf(out, CX_TRAIN_HASH_MAX + 1, "fnv1a64:%016llx", (unsigned long long)f.h);
}

cx_status cx_train_config_read_data(cx_train_config *c, const cx_toml *data) {
  return read_data(c, data);
}

cx_status cx_train_config_read_train(cx_train_config *c, const cx_toml *train,
                                     const char *const *extra) {
  return read_train(c, train, extra);
}

/* ---- load ---- */

static cx_status read_all(cx_train_config *c) {
  const cx_toml *m, *d, *t, *r;
  CX_TRY(cx_toml_check_keys(c->doc, top_keys));
  CX_TRY(table(c->doc, "model", &m));
  CX_TRY(table(c->doc, "data", &d));
  CX_TRY(table(c->doc, "train", &t));
  CX_TRY(table(c->doc, "run", &r));
  CX_TRY(read_model(c, m));
  if (!d) return cx_fail(CX_ERR_FORMAT, "%s: no [data] table (train = \"<file.h5>\")", c->path);
  CX_TRY(read_data(c, d));
  if (!t) return cx_fail(CX_ERR_FORMAT, "%s: no [train] table (epochs = N)", c->path);
  CX_TRY(read_train(c, t, NULL));
  CX_TRY(read_run(c, r));
  config_hash(c->doc, c->hash);
  c->opts.config_hash = c->hash;
  return CX_OK;
}

cx_status cx_train_config_load(const char *path, cx_train_config *c) {
  memset(c, 0, sizeof *c);
  c->opts = cx_train_defaults();
  c->path = strdup(path);
  if (!c->path) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = cx_toml_parse_file(path, &c->doc);
  if (s == CX_OK) s = read_all(c);
  if (s != CX_OK) cx_train_config_free(c);
  return s;
}

void cx_train_config_free(cx_train_config *c) {
  cx_toml_free(c->doc);
  free(c->path);
  free(c->model_onnx);
  free(c->train_path);
  free(c->val_path);
  free(c->out_dir);
  free(c->segments);
  memset(c, 0, sizeof *c);
}

/* ---- checks against the data and the model ---- */

static cx_status at(const cx_toml *node, cx_status s) {
  char where[400];
  cx_train_config_where(node, where, sizeof where);
  cx_error_prefix("%s", where);
  return s;
}

static cx_status data_info(const cx_toml *node, const char *path, const char *part,
                           cx_dataset_info *info) {
  cx_dataset *d = NULL;
  cx_status s = cx_dataset_open(path, part, &d);
  if (s != CX_OK) return at(node, s);
  *info = *cx_dataset_get_info(d);
  cx_dataset_close(d);
  return CX_OK;
}

static cx_status check_channels(const cx_train_config *c, const cx_dataset_info *in) {
  const cx_toml *nodes[2] = {c->mean_node, c->std_node};
  int counts[2] = {c->n_mean, c->n_std};
  for (int k = 0; k < 2; k++)
    if (nodes[k] && counts[k] != in->c)
      return cx_toml_fail(nodes[k], CX_ERR_FORMAT, "%d value(s), but the images of %s have %lld "
                          "channel(s)", counts[k], c->train_path, (long long)in->c);
  return CX_OK;
}

/* The logits' class count, from shape inference for one image. */
static cx_status model_classes(const cx_graph *model, int64_t *classes) {
  cx_shape s;
  CX_TRY(cx_graph_value_shape(model, cx_model_logits(model), 1, &s));
  *classes = s.ndim == 2 ? s.d[1] : -1;
  return CX_OK;
}

static cx_status check_model(const cx_train_config *c, const cx_graph *model,
                             const cx_dataset_info *in) {
  int v = cx_graph_find_value(model, "input");
  if (v < 0) return cx_toml_fail(c->model_node, CX_ERR_ARG, "the model has no input 'input'");
  const cx_shape *s = &model->values[v].shape;
  char shape[CX_SHAPE_STR];
  if (s->ndim != 4 || s->d[1] != in->c || s->d[2] != in->h || s->d[3] != in->w)
    return cx_toml_fail(c->model_node, CX_ERR_SHAPE, "the model's input is %s ([N,C,H,W]), but "
                        "%s holds images of %lldx%lldx%lld (CxHxW)", cx_shape_str(s, shape),
                        c->train_path, (long long)in->c, (long long)in->h, (long long)in->w);
  int64_t classes;
  if (cx_model_logits(model) < 0)
    return cx_toml_fail(c->model_node, CX_ERR_ARG, "the model has no output");
  cx_status st = model_classes(model, &classes);
  if (st != CX_OK) return at(c->model_node, st);
  if (classes != in->num_classes)
    return cx_toml_fail(c->model_node, CX_ERR_SHAPE, "the model has %lld classes (its logits), "
                        "but %s has %lld", (long long)classes, c->train_path,
                        (long long)in->num_classes);
  return CX_OK;
}

cx_status cx_train_config_check(const cx_train_config *c, const cx_graph *model) {
  cx_dataset_info tr, va;
  CX_TRY(data_info(c->train_node, c->train_path, c->opts.train_part, &tr));
  if (c->val_path) {
    CX_TRY(data_info(c->val_node, c->val_path, c->opts.val_part, &va));
    if (va.c != tr.c || va.h != tr.h || va.w != tr.w || va.num_classes != tr.num_classes)
      return cx_toml_fail(c->val_node, CX_ERR_SHAPE, "%s holds %lldx%lldx%lld images of %lld "
                          "classes, but %s %lldx%lldx%lld of %lld", c->val_path, (long long)va.c,
                          (long long)va.h, (long long)va.w, (long long)va.num_classes,
                          c->train_path, (long long)tr.c, (long long)tr.h, (long long)tr.w,
                          (long long)tr.num_classes);
  }
  CX_TRY(cx_train_config_check_precision(c, c->opts.backend));
  CX_TRY(check_channels(c, &tr));
  return check_model(c, model, &tr);
}
