/* Pipeline files: the tables of docs/pipeline.md read into stages, and checked before anything
 * trains. The [data] table and the training tables are read by train/train_config.c, as in a
 * `compress train` config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline.h"
#include "prune_config.h"

static const char *const top_keys[] = {"run", "data", "teacher", "student", "distill",
                                       "prune", "quantize", "export", NULL};
static const char *const run_keys[] = {"out_dir", "seed", "threads", "precision", "device",
                                       "keep_checkpoints", NULL};
static const char *const model_keys[] = {"spec", "onnx", "train", NULL};
/* [teacher] precision: its forward pass wherever a stage distils from it */
static const char *const teacher_keys[] = {"spec", "onnx", "train", "precision", NULL};
static const char *const distill_keys[] = {"temperature", "alpha", NULL};
static const char *const export_keys[] = {"opset", "fold_bn", NULL};

/* ---- small readers ---- */

static cx_status table(const cx_toml *parent, const char *key, const cx_toml **out) {
  *out = cx_toml_get(parent, key);
  if (*out && cx_toml_type_of(*out) != CX_TOML_TABLE)
    return cx_toml_fail(*out, CX_ERR_FORMAT, "must be a table");
  return CX_OK;
}

static cx_status int_in(const cx_toml *t, const char *key, int64_t fallback, int64_t lo,
                        int64_t hi, int64_t *out) {
  CX_TRY(cx_toml_int(t, key, fallback, out));
  if (cx_toml_get(t, key) && (*out < lo || *out > hi))
    return cx_toml_fail(cx_toml_get(t, key), CX_ERR_FORMAT, "%lld is out of range: %lld to %lld",
                        (long long)*out, (long long)lo, (long long)hi);
  return CX_OK;
}

static cx_status float_in(const cx_toml *t, const char *key, double fallback, double lo,
                          double hi, double *out) {
  CX_TRY(cx_toml_float(t, key, fallback, out));
  if (cx_toml_get(t, key) && !(*out >= lo && *out <= hi))
    return cx_toml_fail(cx_toml_get(t, key), CX_ERR_FORMAT, "%g is out of range: %g to %g", *out,
                        lo, hi);
  return CX_OK;
}

static char *resolve(const char *config, const char *path) {
  const char *slash = strrchr(config, '/');
  size_t dir = path[0] == '/' || !slash ? 0 : (size_t)(slash - config) + 1;
  char *out = malloc(dir + strlen(path) + 1);
  if (!out) return NULL;
  memcpy(out, config, dir);
  strcpy(out + dir, path);
  return out;
}

/* ---- tables ---- */

static cx_status read_run(cx_pipeline *p, const cx_toml *r) {
  CX_TRY(cx_toml_check_keys(r, run_keys));
  const cx_toml *out = cx_toml_get(r, "out_dir");
  if (out) {
    const char *v;
    CX_TRY(cx_toml_as_string(out, &v));
    if (!*v) return cx_toml_fail(out, CX_ERR_FORMAT, "an empty path");
    if (!(p->out_dir = resolve(p->path, v))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  int64_t v;
  CX_TRY(int_in(r, "seed", 1, 0, INT64_MAX, &p->seed));
  CX_TRY(cx_train_config_read_threads(r, &p->threads));
  CX_TRY(int_in(r, "keep_checkpoints", 2, 1, 1 << 20, &v));
  p->keep_checkpoints = (int)v;
  CX_TRY(cx_train_config_read_precision(r, CX_PRECISION_F32, &p->precision));
  const char *device; /* checked here; cx_pipeline_check maps it (cli/device.h) */
  return cx_train_config_read_device(r, &device);
}

static cx_status read_export(cx_pipeline *p, const cx_toml *e) {
  CX_TRY(cx_toml_check_keys(e, export_keys));
  int64_t opset;
  CX_TRY(int_in(e, "opset", 13, 13, 17, &opset));
  p->export.opset = (int)opset;
  return cx_toml_bool(e, "fold_bn", false, &p->export.fold_bn);
}

/* The model of a stage from [teacher] or [student]: spec or onnx. */
static cx_status read_model(cx_pipeline *p, const cx_toml *m, cx_train_config *tc) {
  const cx_toml *spec = cx_toml_get(m, "spec"), *onnx = cx_toml_get(m, "onnx");
  char name[64];
  cx_toml_path(m, name, sizeof name);
  if (spec && onnx)
    return cx_toml_fail(onnx, CX_ERR_FORMAT, "give either [%s] spec or onnx, not both", name);
  if (!spec && !onnx)
    return cx_toml_fail(m, CX_ERR_FORMAT, "[%s] needs spec = \"<a built-in model spec>\" or "
                        "onnx = \"<a path>\"", name);
  tc->model_node = spec ? spec : onnx;
  if (spec) return cx_toml_as_string(spec, &tc->model_spec);
  const char *v;
  CX_TRY(cx_toml_as_string(onnx, &v));
  if (!*v) return cx_toml_fail(onnx, CX_ERR_FORMAT, "an empty path");
  tc->model_onnx = resolve(p->path, v);
  return tc->model_onnx ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
}

/* A stage's cx_train_config: [data], then the training table (NULL: data only). */
static cx_status read_stage(cx_pipeline *p, cx_pipeline_stage *s, const cx_toml *model,
                            const cx_toml *training, const char *const *extra) {
  cx_train_config *tc = &s->tc;
  tc->doc = p->doc;
  tc->opts = cx_train_defaults();
  if (!(tc->path = strdup(p->path))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  s->present = true;
  s->training = training;
  s->trains = training != NULL;
  CX_TRY(read_model(p, model, tc));
  CX_TRY(cx_train_config_read_data(tc, p->data));
  if (training) CX_TRY(cx_train_config_read_train(tc, training, extra));
  if (!cx_toml_get(training, "seed")) tc->opts.seed = (uint64_t)p->seed;
  if (!cx_toml_get(training, "precision")) {
    tc->opts.precision = p->precision;
    tc->precision_node = cx_toml_get(cx_toml_get(p->doc, "run"), "precision");
  }
  tc->threads = tc->opts.threads = p->threads;
  tc->opts.keep_checkpoints = p->keep_checkpoints;
  return CX_OK;
}

/* The rules between the model tables, before any stage reads its own. */
static cx_status check_models(cx_pipeline *p) {
  const cx_toml *t, *s, *tt = NULL, *st = NULL, *d = cx_toml_get(p->doc, "distill");
  CX_TRY(table(p->doc, "teacher", &t));
  CX_TRY(table(p->doc, "student", &s));
  CX_TRY(cx_toml_check_keys(t, teacher_keys));
  CX_TRY(cx_toml_check_keys(s, model_keys));
  CX_TRY(table(t, "train", &tt));
  CX_TRY(table(s, "train", &st));
  if (t && cx_toml_get(t, "spec") && !tt)
    return cx_toml_fail(t, CX_ERR_FORMAT, "a built-in teacher (spec) is trained from scratch: "
                        "add [teacher.train] with its settings (epochs = N, ...)");
  if (d && (!t || !s))
    return cx_toml_fail(d, CX_ERR_FORMAT, "[distill] needs a [teacher] and a [student]");
  if (s && !d && !st)
    return cx_toml_fail(s, CX_ERR_FORMAT, "the student is trained by [distill] or, from "
                        "scratch, under [student.train]: add one of them");
  return CX_OK;
}

cx_status cx_pipeline_read_teacher(cx_pipeline *p, cx_pipeline_stage *s) {
  const cx_toml *t = cx_toml_get(p->doc, "teacher");
  if (!t) return CX_OK;
  CX_TRY(read_stage(p, s, t, cx_toml_get(t, "train"), NULL));
  s->table = t;
  const cx_toml *n = cx_toml_get(t, "precision");
  const char *v = NULL;
  p->teacher_precision_node = n;
  CX_TRY(cx_toml_string(t, "precision", "fp32", &v));
  p->teacher_int8 = strcmp(v, "int8") == 0;
  if (p->teacher_int8) return CX_OK;
  if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0 && strcmp(v, "fp16") != 0)
    return cx_toml_fail(n, CX_ERR_FORMAT, "unknown value \"%s\": one of \"fp32\", \"bf16\", "
                        "\"fp16\", \"int8\" (the teacher's forward pass)", v);
  return cx_train_config_read_precision(t, CX_PRECISION_F32, &p->teacher_precision);
}

cx_status cx_pipeline_read_scratch(cx_pipeline *p, cx_pipeline_stage *s) {
  const cx_toml *m = cx_toml_get(p->doc, "student"), *st = cx_toml_get(m, "train");
  if (!st) return CX_OK;
  CX_TRY(read_stage(p, s, m, st, NULL));
  s->table = st;
  return CX_OK;
}

cx_status cx_pipeline_read_distill(cx_pipeline *p, cx_pipeline_stage *s) {
  const cx_toml *d = cx_toml_get(p->doc, "distill");
  if (!d) return CX_OK;
  if (!cx_pipeline_kd_available())
    return cx_toml_fail(d, CX_ERR_UNSUPPORTED, "knowledge distillation is not available in this "
                        "build (distill/ is not compiled in); remove [distill], or train the "
                        "student from scratch under [student.train]");
  CX_TRY(table(p->doc, "distill", &d));
  CX_TRY(read_stage(p, s, cx_toml_get(p->doc, "student"), d, distill_keys));
  s->table = d;
  CX_TRY(float_in(d, "temperature", 4, 1e-3, 1e3, &p->temperature));
  return float_in(d, "alpha", 0.9, 0, 1, &p->alpha);
}

void cx_pipeline_distill_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                              size_t size) {
  (void)s;
  size_t at = strlen(buf);
  snprintf(buf + at, size - at, "|T=%a|a=%a", p->temperature, p->alpha);
  cx_pipeline_teacher_salt(p, buf, size);
}

void cx_pipeline_teacher_salt(const cx_pipeline *p, char *buf, size_t size) {
  size_t at = strlen(buf);
  if (p->teacher_precision != CX_PRECISION_F32) /* fp32 keeps the hashes from before the key */
    snprintf(buf + at, size - at, "|teacher_precision=%d", (int)p->teacher_precision);
  else if (p->teacher_int8)
    snprintf(buf + at, size - at, "|teacher_int8");
}

/* [prune]: the training keys and the pruning keys (cli/prune_config.h); it prunes the student,
 * the output of [distill] or of [student.train]. */
cx_status cx_pipeline_read_prune(cx_pipeline *p, cx_pipeline_stage *s) {
  const cx_toml *t, *student = cx_toml_get(p->doc, "student");
  CX_TRY(table(p->doc, "prune", &t));
  if (!t) return CX_OK;
  if (!student || (!cx_toml_get(p->doc, "distill") && !cx_toml_get(student, "train")))
    return cx_toml_fail(t, CX_ERR_FORMAT, "[prune] prunes the student: add a [student] trained "
                        "by [distill] or under [student.train]");
  CX_TRY(read_stage(p, s, student, t, cx_cli_prune_keys));
  s->table = t;
  CX_TRY(cx_cli_prune_read(t, &p->prune));
  if (p->prune.allocate_sensitivity && !s->tc.val_path)
    return cx_toml_fail(cx_toml_get(t, "allocate"), CX_ERR_FORMAT, "\"sensitivity\" evaluates "
                        "every layer pruned alone on the validation data: add [data] val");
  return CX_OK;
}

static bool listed(const char *const *keys, const char *k) {
  for (int j = 0; keys[j]; j++)
    if (!strcmp(k, keys[j])) return true;
  return false;
}

/* PTQ does not train: a training key in its table is a mistake, not a default to ignore (any
 * other unknown key gets the usual message, with its did-you-mean). */
static cx_status refuse_training_keys(const cx_toml *t) {
  for (size_t i = 0; i < cx_toml_len(t); i++) {
    const char *k = cx_toml_key(cx_toml_at(t, i));
    if (!listed(cx_cli_quant_keys, k) && listed(cx_train_config_train_keys, k))
      return cx_toml_fail(cx_toml_at(t, i), CX_ERR_FORMAT, "'%s' is a training key, and "
                          "method = \"ptq\" does not train: set method = \"qat\" or remove "
                          "it", k);
  }
  return cx_toml_check_keys(t, cx_cli_quant_keys);
}

/* [quantize]: the quantization keys (cli/quantize_config.h) and, for QAT, the training keys; it
 * quantizes the student, the output of [prune], [distill] or [student.train]. */
cx_status cx_pipeline_read_quantize(cx_pipeline *p, cx_pipeline_stage *s) {
  const cx_toml *t, *student = cx_toml_get(p->doc, "student");
  CX_TRY(table(p->doc, "quantize", &t));
  if (!t) return CX_OK;
  if (!student || (!cx_toml_get(p->doc, "distill") && !cx_toml_get(student, "train")))
    return cx_toml_fail(t, CX_ERR_FORMAT, "[quantize] quantizes the student: add a [student] "
                        "trained by [distill] or under [student.train]");
  CX_TRY(cx_cli_quant_read(t, &p->quant));
  bool ptq = p->quant.c.method == CX_QUANT_PTQ;
  if (ptq) CX_TRY(refuse_training_keys(t));
  CX_TRY(read_stage(p, s, student, ptq ? NULL : t, cx_cli_quant_keys));
  s->table = t;
  /* calibration only: the table is still hashed as the stage's settings */
  if (ptq) s->training = t, s->trains = false;
  return CX_OK;
}

/* Each present stage's input: the first present stage of its record's list. */
static void find_inputs(cx_pipeline *p) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    cx_pipeline_stage *s = &p->stages[i];
    s->input = -1;
    for (const char *const *in = s->def->inputs; in && *in && s->input < 0; in++) {
      int k = cx_pipeline_stage_find(*in);
      if (k >= 0 && p->stages[k].present) s->input = k;
    }
  }
}

/* ---- hashes ---- */

/* Size and modification time of a file the stage reads (so a changed file reruns it). */
static void file_identity(const char *path, char *buf, size_t size) {
  struct stat st;
  size_t at = strlen(buf);
  if (path && stat(path, &st) == 0)
    snprintf(buf + at, size - at, "|%s:%lld:%lld.%09ld", path, (long long)st.st_size,
             (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
}

static void stage_hashes(cx_pipeline *p) {
  const cx_toml *exp = cx_toml_get(p->doc, "export");
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    cx_pipeline_stage *s = &p->stages[i];
    if (!s->present) continue;
    cx_train_config *tc = &s->tc;
    /* What a checkpoint must match to be resumed: as in compress train. */
    const cx_toml *step_nodes[] = {p->data, tc->model_node, s->training};
    cx_train_config_hash(3, step_nodes, (const char *const[]){"data", "model", "train"}, NULL,
                         tc->hash);
    tc->opts.config_hash = tc->hash;
    /* What the stage's output depends on: every key, the files, the seed, its input's hash
     * (so a change anywhere up the chain reruns every stage after it). Inputs come first in
     * the table, so their hashes are made. */
    char salt[8192];
    snprintf(salt, sizeof salt, "%s|seed=%lld|precision=%d|%s", s->name,
             (long long)tc->opts.seed, (int)tc->opts.precision,
             s->input >= 0 ? p->stages[s->input].hash : "");
    if (s->def->salt) s->def->salt(p, s, salt, sizeof salt);
    file_identity(tc->model_onnx, salt, sizeof salt);
    file_identity(tc->train_path, salt, sizeof salt);
    file_identity(tc->val_path, salt, sizeof salt);
    const cx_toml *all[] = {p->data, tc->model_node, s->training, exp};
    cx_train_config_hash(4, all, (const char *const[]){"all.data", "all.model", "all.train",
                                                       "all.export"}, salt, s->hash);
  }
}

/* ---- load ---- */

static cx_status read_all(cx_pipeline *p) {
  CX_TRY(cx_toml_check_keys(p->doc, top_keys));
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_stage_def *d = &cx_stage_defs[i];
    p->stages[i] = (cx_pipeline_stage){.def = d, .name = d->name, .output = d->output,
                                       .model = d->model, .input = -1};
  }
  const cx_toml *r, *e;
  p->temperature = 4, p->alpha = 0.9; /* [distill]'s defaults, for every stage that distils */
  CX_TRY(table(p->doc, "run", &r));
  CX_TRY(table(p->doc, "data", &p->data));
  CX_TRY(table(p->doc, "export", &e));
  CX_TRY(read_run(p, r));
  CX_TRY(read_export(p, e));
  if (!p->data) return cx_fail(CX_ERR_FORMAT, "%s: no [data] table (train = \"<file.h5>\")",
                               p->path);
  if (!cx_toml_get(p->doc, "teacher") && !cx_toml_get(p->doc, "student"))
    return cx_fail(CX_ERR_FORMAT, "%s: nothing to do: no [teacher] and no [student]", p->path);
  CX_TRY(check_models(p));
  for (int i = 0; i < CX_STAGE_COUNT; i++) CX_TRY(cx_stage_defs[i].read(p, &p->stages[i]));
  find_inputs(p);
  stage_hashes(p);
  return CX_OK;
}

cx_status cx_pipeline_load(const char *path, cx_pipeline *p) {
  memset(p, 0, sizeof *p);
  p->path = strdup(path);
  if (!p->path) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = cx_toml_parse_file(path, &p->doc);
  if (s == CX_OK) s = read_all(p);
  if (s != CX_OK) cx_pipeline_free(p);
  return s;
}

void cx_pipeline_free(cx_pipeline *p) {
  cx_cli_prune_free(&p->prune);
  cx_cli_quant_free(&p->quant);
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    p->stages[i].tc.doc = NULL; /* the pipeline's */
    if (p->stages[i].tc.path) cx_train_config_free(&p->stages[i].tc);
  }
  cx_toml_free(p->doc);
  free(p->path);
  free(p->out_dir);
  memset(p, 0, sizeof *p);
}

/* ---- checks before training ---- */

cx_status cx_pipeline_check(cx_pipeline *p, const cx_backend *backend) {
  if (backend) p->backend = backend;
  else CX_TRY(cx_cli_backend_of(cx_toml_get(p->doc, "run"), &p->backend));
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    cx_pipeline_stage *s = &p->stages[i];
    s->tc.opts.backend = p->backend;
    if (!s->present) continue;
    CX_TRY(cx_train_config_check_precision(&s->tc, p->backend));
    /* Every stage against the model its table names (a later stage's model has the same inputs
     * and classes as that one): its data and training keys, then the record's own checks. */
    cx_graph *g = NULL;
    char *old = NULL;
    cx_status st = cx_cli_train_load_model(&s->tc, &g, &old);
    if (st == CX_OK) st = cx_train_config_check(&s->tc, g);
    if (st == CX_OK && s->def->check) st = s->def->check(p, s, g);
    free(old);
    cx_graph_free(g);
    CX_TRY(st);
  }
  /* the teacher's forward pass, in the words of the key that asks for it */
  cx_train_config tp = {.path = p->path, .precision_node = p->teacher_precision_node};
  tp.opts.precision = p->teacher_precision;
  return cx_train_config_check_precision(&tp, p->backend);
}
