/* A stage command's options as TOML tables (cli/stage_args.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../train/cpu_free.h"
#include "device.h"
#include "stage_args.h"

/* A TOML basic string of v (quotes and backslashes escaped, control characters refused). */
static char *quoted(const char *v) {
  size_t n = strlen(v);
  char *s = malloc(2 * n + 3), *o = s;
  if (!s) return NULL;
  *o++ = '"';
  for (const char *p = v; *p; p++) {
    if ((unsigned char)*p < 0x20) return free(s), NULL;
    if (*p == '"' || *p == '\\') *o++ = '\\';
    *o++ = *p;
  }
  *o++ = '"', *o = 0;
  return s;
}

static char *line(const char *key, const char *value, bool string) {
  char *v = string ? quoted(value) : strdup(value);
  if (!v) return NULL;
  size_t n = strlen(key) + strlen(v) + 4;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s = %s", key, v);
  free(v);
  return s;
}

static const cx_stage_flag *find(const cx_stage_flag *f, const char *name) {
  for (; f && f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

/* A repeatable option: its values collect into one array line. */
static int add_to_list(char **lines, int *n, const char *key, const char *value) {
  char *q = quoted(value);
  if (!q) return -1;
  for (int i = 0; i < *n; i++) {
    size_t kl = strlen(key);
    if (strncmp(lines[i], key, kl) || lines[i][kl] != ' ') continue;
    size_t len = strlen(lines[i]) + strlen(q) + 3;
    char *s = malloc(len);
    if (!s) return free(q), -1;
    snprintf(s, len, "%.*s, %s]", (int)strlen(lines[i]) - 1, lines[i], q);
    free(lines[i]), free(q);
    lines[i] = s;
    return 0;
  }
  size_t len = strlen(key) + strlen(q) + 6;
  if (*n == CX_STAGE_ARGS_MAX || !(lines[*n] = malloc(len))) return free(q), -1;
  snprintf(lines[(*n)++], len, "%s = [%s]", key, q);
  free(q);
  return 0;
}

static int add(const cx_command *c, char **lines, int *n, char *l, const char *arg) {
  if (!l || *n == CX_STAGE_ARGS_MAX)
    return free(l), cx_cli_usage_error(c, "option '%s': a value TOML cannot hold", arg);
  lines[(*n)++] = l;
  return 0;
}

/* Options that are [data] and [train] keys, the same for every stage command. */
static const cx_stage_flag data_flags[] = {{"--data", "train", true, NULL},
                                           {"--val", "val", true, NULL},
                                           {"--batch", "batch", false, NULL},
                                           {NULL, NULL, false, NULL}};
static const cx_stage_flag train_flags[] = {{"--epochs", "epochs", false, NULL},
                                            {"--lr", "lr", false, NULL},
                                            {NULL, NULL, false, NULL}};
static const char *const other_valued[] = {"-o", "--output", "--svg", "--device", "--threads",
                                           "--train", NULL};

static int other(const cx_command *c, const char *o, const char *v, cx_stage_args *a) {
  if (!strcmp(o, "--train")) {
    if (!strchr(v, '=')) return cx_cli_usage_error(c, "--train '%s': give KEY=VALUE", v);
    return add(c, a->train_lines, &a->n_train, strdup(v), o);
  }
  if (!strcmp(o, "-o") || !strcmp(o, "--output")) a->out = v;
  else if (!strcmp(o, "--svg")) a->svg = v;
  else if (!strcmp(o, "--device")) a->device = v;
  else if (!strcmp(o, "--threads") && !strcmp(v, "auto")) a->threads = cx_cpu_free_threads(o);
  else if (!strcmp(o, "--threads")) {
    char *end;
    long t = strtol(v, &end, 10);
    if (*end || t < 0 || t > 1024)
      return cx_cli_usage_error(c, "--threads '%s': 0 to 1024 or auto", v);
    a->threads = (int)t;
  } else return cx_cli_usage_error(c, "unknown option '%s'", o);
  return 0;
}

/* An option with a value: argv[*i] is the option, argv[*i + 1] its value. */
static int valued(const cx_command *c, int argc, char **argv, int *i, cx_stage_args *a) {
  const char *o = argv[*i];
  if (*i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", o);
  const char *v = argv[++*i];
  const cx_stage_flag *f;
  if ((f = find(a->spec->flags, o)))
    return add(c, a->stage_lines, &a->n_stage, line(f->key, v, f->string), o);
  if ((f = find(train_flags, o)))
    return add(c, a->train_lines, &a->n_train, line(f->key, v, f->string), o);
  if ((f = find(data_flags, o))) {
    if (!strcmp(o, "--data")) a->data = v;
    return add(c, a->data_lines, &a->n_data, line(f->key, v, f->string), o);
  }
  if ((f = find(a->spec->lists, o)))
    return add_to_list(a->stage_lines, &a->n_stage, f->key, v)
               ? cx_cli_usage_error(c, "option '%s': a value TOML cannot hold", o) : 0;
  return other(c, o, v, a);
}

static bool has_value(const cx_stage_args_spec *spec, const char *o) {
  if (find(spec->flags, o) || find(spec->lists, o) || find(train_flags, o) ||
      find(data_flags, o))
    return true;
  for (int i = 0; other_valued[i]; i++)
    if (!strcmp(other_valued[i], o)) return true;
  return false;
}

static int check(const cx_command *c, bool need_out, const char *need_data,
                 const cx_stage_args *a) {
  if (!a->model)
    return cx_cli_usage_error(c, "%s", "a model (an ONNX file or a built-in spec) is needed");
  if (need_out && !a->out) return cx_cli_usage_error(c, "%s", "-o OUT.onnx is needed");
  if (need_data && !a->data) return cx_cli_usage_error(c, "--data %s is needed", need_data);
  if (!a->data && (a->n_train || a->n_data))
    return cx_cli_usage_error(c, "%s", "the training options need --data TRAIN.h5");
  return 0;
}

int cx_stage_args_parse(const cx_command *c, const cx_stage_args_spec *spec, int argc,
                        char **argv, bool need_out, const char *need_data, cx_stage_args *a) {
  memset(a, 0, sizeof *a);
  a->spec = spec;
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    const cx_stage_flag *sw = find(spec->switches, o);
    int rc = 0;
    if (!strcmp(o, "--quiet")) a->quiet = true;
    else if (!strcmp(o, "--json")) a->json = true;
    else if (sw) rc = add(c, a->stage_lines, &a->n_stage, line(sw->key, sw->value, sw->string), o);
    else if (has_value(spec, o)) rc = valued(c, argc, argv, &i, a);
    else if (o[0] == '-' && o[1]) rc = cx_cli_usage_error(c, "unknown option '%s'", o);
    else if (!a->model) a->model = o;
    else rc = cx_cli_usage_error(c, "unexpected argument '%s'", o);
    if (rc) return cx_stage_args_free(a, NULL), rc;
  }
  int rc = check(c, need_out, need_data, a);
  if (rc) cx_stage_args_free(a, NULL);
  return rc;
}

static void append(char **text, size_t *len, const char *s) {
  size_t n = strlen(s);
  char *t = *text ? realloc(*text, *len + n + 2) : malloc(n + 2);
  if (!t) return;
  memcpy(t + *len, s, n);
  t[*len + n] = '\n', t[*len + n + 1] = 0;
  *text = t, *len += n + 1;
}

/* The tables as one document; mean and std from the model's preprocessing when it has some. */
static char *document(const cx_stage_args *a, const cx_preprocess *pre) {
  char *text = NULL, buf[256];
  size_t len = 0;
  snprintf(buf, sizeof buf, "[%s]", a->spec->table);
  append(&text, &len, buf);
  for (int i = 0; i < a->n_stage; i++) append(&text, &len, a->stage_lines[i]);
  append(&text, &len, "[data]");
  for (int i = 0; i < a->n_data; i++) append(&text, &len, a->data_lines[i]);
  for (int k = 0; pre && k < 2; k++) {
    const float *v = k ? pre->std : pre->mean;
    int at = snprintf(buf, sizeof buf, "%s = [", k ? "std" : "mean");
    for (int c = 0; c < pre->channels; c++)
      at += snprintf(buf + at, sizeof buf - (size_t)at, "%s%.9g", c ? ", " : "", (double)v[c]);
    snprintf(buf + at, sizeof buf - (size_t)at, "]");
    append(&text, &len, buf);
  }
  append(&text, &len, "[train]");
  for (int i = 0; i < a->n_train; i++) append(&text, &len, a->train_lines[i]);
  return text;
}

/* The model's preprocessing from its metadata, if it has any. */
static bool model_preprocessing(const cx_onnx_info *info, cx_preprocess *pre) {
  const char *keys[32], *values[32];
  for (int k = 0; k < info->n_metadata; k++)
    keys[k] = info->metadata[k][0], values[k] = info->metadata[k][1];
  bool found = false;
  return cx_preprocess_from_metadata(info->n_metadata, keys, values, pre, &found) == CX_OK &&
         found;
}

static cx_status read_training(cx_stage_args *a, bool train, cx_train_config *tc) {
  char name[64];
  tc->doc = a->doc;
  tc->opts = cx_train_defaults();
  snprintf(name, sizeof name, "compress %s", a->spec->table);
  if (!(tc->path = strdup(name))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  CX_TRY(cx_train_config_read_data(tc, cx_toml_get(a->doc, "data")));
  if (train) CX_TRY(cx_train_config_read_train(tc, cx_toml_get(a->doc, "train"), NULL));
  tc->threads = tc->opts.threads = a->threads;
  cx_status s = cx_cli_backend(a->device ? a->device : "cpu", &tc->opts.backend);
  if (s != CX_OK) return cx_error_prefix("--device"), s;
  return cx_train_config_check_precision(tc, tc->opts.backend);
}

cx_status cx_stage_args_read(cx_stage_args *a, const cx_onnx_info *info, bool train,
                             cx_train_config *tc) {
  memset(tc, 0, sizeof *tc);
  cx_preprocess pre;
  bool have_pre = info && model_preprocessing(info, &pre);
  char *text = document(a, have_pre ? &pre : NULL);
  if (!text) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = cx_toml_parse_string(text, "options", &a->doc);
  free(text);
  if (s == CX_OK && a->data) s = read_training(a, train, tc);
  return s;
}

void cx_stage_args_free(cx_stage_args *a, cx_train_config *tc) {
  for (int i = 0; i < a->n_stage; i++) free(a->stage_lines[i]);
  for (int i = 0; i < a->n_train; i++) free(a->train_lines[i]);
  for (int i = 0; i < a->n_data; i++) free(a->data_lines[i]);
  a->n_stage = a->n_train = a->n_data = 0;
  if (tc && tc->path) {
    cx_train_config_free(tc); /* frees the document too */
    a->doc = NULL;
  }
  cx_toml_free(a->doc);
  a->doc = NULL;
}
