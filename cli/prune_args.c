/* `compress prune` options as TOML tables: each option is one "key = value" line, so the
 * pipeline's readers check them and their messages name the option's key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "prune_args.h"

typedef struct flag {
  const char *name, *key;
  bool string; /* the value is quoted as a TOML string */
} flag;

/* Options that are [prune] keys. */
static const flag prune_flags[] = {
    {"--method", "method", true},     {"--sparsity", "sparsity", false},
    {"--scope", "scope", true},       {"--importance", "importance", true},
    {"--round-to", "round_to", false}, {"--start", "start", false},
    {"--end", "end", false},           {"--every", "every", false},
    {"--initial-sparsity", "initial_sparsity", false},
    {"--taylor-batches", "taylor_batches", false},
    {"--allocate", "allocate", true},
    {NULL, NULL, false}};
static const flag train_flags[] = {{"--epochs", "epochs", false}, {"--lr", "lr", false},
                                   {NULL, NULL, false}};

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

static const flag *find(const flag *f, const char *name) {
  for (; f->name; f++)
    if (!strcmp(f->name, name)) return f;
  return NULL;
}

/* --include and --exclude collect into one array line each. */
static int add_glob(char **lines, int *n, const char *key, const char *glob) {
  char *q = quoted(glob);
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
  if (*n == CX_PRUNE_ARGS_MAX || !(lines[*n] = malloc(len))) return free(q), -1;
  snprintf(lines[(*n)++], len, "%s = [%s]", key, q);
  free(q);
  return 0;
}

static int add(const cx_command *c, char **lines, int *n, char *l, const char *arg) {
  if (!l || *n == CX_PRUNE_ARGS_MAX)
    return free(l), cx_cli_usage_error(c, "option '%s': a value TOML cannot hold", arg);
  lines[(*n)++] = l;
  return 0;
}

/* Options that are [data] keys, and the other valued ones. */
static const flag data_flags[] = {{"--data", "train", true}, {"--val", "val", true},
                                  {"--batch", "batch", false}, {NULL, NULL, false}};

/* An option with a value: argv[*i] is the option, argv[*i + 1] its value. */
static int valued(const cx_command *c, int argc, char **argv, int *i, cx_prune_args *a) {
  const char *o = argv[*i];
  if (*i + 1 >= argc) return cx_cli_usage_error(c, "option '%s' needs a value", o);
  const char *v = argv[++*i];
  const flag *f;
  if ((f = find(prune_flags, o))) return add(c, a->prune_lines, &a->n_prune, line(f->key, v, f->string), o);
  if ((f = find(train_flags, o))) return add(c, a->train_lines, &a->n_train, line(f->key, v, f->string), o);
  if ((f = find(data_flags, o))) {
    if (!strcmp(o, "--data")) a->data = v;
    return add(c, a->data_lines, &a->n_data, line(f->key, v, f->string), o);
  }
  if (!strcmp(o, "--include") || !strcmp(o, "--exclude"))
    return add_glob(a->prune_lines, &a->n_prune, o + 2, v)
               ? cx_cli_usage_error(c, "option '%s': a value TOML cannot hold", o) : 0;
  if (!strcmp(o, "--train")) {
    if (!strchr(v, '=')) return cx_cli_usage_error(c, "--train '%s': give KEY=VALUE", v);
    return add(c, a->train_lines, &a->n_train, strdup(v), o);
  }
  if (!strcmp(o, "-o") || !strcmp(o, "--output")) a->out = v;
  else if (!strcmp(o, "--svg")) a->svg = v;
  else if (!strcmp(o, "--device")) a->device = v;
  else if (!strcmp(o, "--threads")) {
    char *end;
    long t = strtol(v, &end, 10);
    if (*end || t < 0 || t > 1024) return cx_cli_usage_error(c, "--threads '%s': 0 to 1024", v);
    a->threads = (int)t;
  } else return cx_cli_usage_error(c, "unknown option '%s'", o);
  return 0;
}

static bool has_value(const char *o) {
  static const char *const others[] = {"-o", "--output", "--svg", "--device", "--threads",
                                       "--include", "--exclude", "--train", NULL};
  if (find(prune_flags, o) || find(train_flags, o) || find(data_flags, o)) return true;
  for (int i = 0; others[i]; i++)
    if (!strcmp(others[i], o)) return true;
  return false;
}

int cx_prune_args_parse(const cx_command *c, int argc, char **argv, bool scan, cx_prune_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    const char *o = argv[i];
    int rc = 0;
    if (!strcmp(o, "--quiet")) a->quiet = true;
    else if (!strcmp(o, "--json")) a->json = true;
    else if (has_value(o)) rc = valued(c, argc, argv, &i, a);
    else if (o[0] == '-' && o[1]) rc = cx_cli_usage_error(c, "unknown option '%s'", o);
    else if (!a->model) a->model = o;
    else rc = cx_cli_usage_error(c, "unexpected argument '%s'", o);
    if (rc) return cx_prune_args_free(a, NULL, NULL), rc;
  }
  int rc = 0;
  if (!a->model) rc = cx_cli_usage_error(c, "%s", "a model (an ONNX file or a built-in spec) is needed");
  else if (!scan && !a->out) rc = cx_cli_usage_error(c, "%s", "-o OUT.onnx is needed");
  else if (scan && !a->data) rc = cx_cli_usage_error(c, "%s", "--data VAL.h5 is needed");
  else if (!scan && !a->data && (a->n_train || a->n_data))
    rc = cx_cli_usage_error(c, "%s", "the fine-tune options need --data TRAIN.h5");
  if (rc) cx_prune_args_free(a, NULL, NULL);
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
static char *document(const cx_prune_args *a, const cx_preprocess *pre) {
  char *text = NULL, buf[256];
  size_t len = 0;
  append(&text, &len, "[prune]");
  for (int i = 0; i < a->n_prune; i++) append(&text, &len, a->prune_lines[i]);
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

static cx_status read_training(cx_prune_args *a, cx_train_config *tc) {
  tc->doc = a->doc;
  tc->opts = cx_train_defaults();
  if (!(tc->path = strdup("compress prune"))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  CX_TRY(cx_train_config_read_data(tc, cx_toml_get(a->doc, "data")));
  CX_TRY(cx_train_config_read_train(tc, cx_toml_get(a->doc, "train"), NULL));
  tc->threads = tc->opts.threads = a->threads;
  cx_status s = cx_cli_backend(a->device ? a->device : "cpu", &tc->opts.backend);
  if (s != CX_OK) return cx_error_prefix("--device"), s;
  return cx_train_config_check_precision(tc, tc->opts.backend);
}

cx_status cx_prune_args_read(cx_prune_args *a, const cx_onnx_info *info, cx_cli_prune *p,
                             cx_train_config *tc) {
  memset(p, 0, sizeof *p);
  memset(tc, 0, sizeof *tc);
  cx_preprocess pre;
  bool have_pre = info && model_preprocessing(info, &pre);
  char *text = document(a, have_pre ? &pre : NULL);
  if (!text) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = cx_toml_parse_string(text, "options", &a->doc);
  free(text);
  if (s == CX_OK) s = cx_cli_prune_read(cx_toml_get(a->doc, "prune"), p);
  if (s == CX_OK && a->data) s = read_training(a, tc);
  return s;
}

void cx_prune_args_free(cx_prune_args *a, cx_cli_prune *p, cx_train_config *tc) {
  for (int i = 0; i < a->n_prune; i++) free(a->prune_lines[i]);
  for (int i = 0; i < a->n_train; i++) free(a->train_lines[i]);
  for (int i = 0; i < a->n_data; i++) free(a->data_lines[i]);
  a->n_prune = a->n_train = a->n_data = 0;
  if (p) cx_cli_prune_free(p);
  if (tc && tc->path) {
    cx_train_config_free(tc); /* frees the document too */
    a->doc = NULL;
  }
  cx_toml_free(a->doc);
  a->doc = NULL;
}
