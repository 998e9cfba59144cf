/* The pruning keys of docs/prune.md, from a TOML table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_keys.h"
#include "prune_config.h"

const char *const cx_cli_prune_keys[] = {
    "method", "sparsity", "scope", "importance", "initial_sparsity", "start", "end", "every",
    "include", "exclude", "round_to", "taylor_batches", "allocate", "recalibrate_bn", NULL};

/* method = "magnitude", "channel" or "N:M" ("2:4"). */
static cx_status read_method(const cx_toml *t, cx_prune_config *c) {
  const cx_toml *n = cx_toml_get(t, "method");
  if (!n) return CX_OK;
  const char *v;
  CX_TRY(cx_toml_as_string(n, &v));
  int a, b, used = 0;
  if (!strcmp(v, "magnitude")) c->method = CX_PRUNE_MAGNITUDE;
  else if (!strcmp(v, "channel")) c->method = CX_PRUNE_CHANNEL;
  else if (sscanf(v, "%d:%d%n", &a, &b, &used) == 2 && !v[used] && a > 0 && a < b && b <= 64) {
    c->method = CX_PRUNE_NM;
    c->n = a, c->m = b;
    c->sparsity = 1.0 - (double)a / b;
  } else
    return cx_toml_fail(n, CX_ERR_FORMAT, "\"%s\" is not a method: \"magnitude\", \"channel\" or "
                        "\"N:M\" such as \"2:4\"", v);
  return CX_OK;
}

static cx_status read_numbers(const cx_toml *t, cx_prune_config *c) {
  int64_t v;
  if (c->method == CX_PRUNE_NM && cx_toml_get(t, "sparsity"))
    return cx_toml_fail(cx_toml_get(t, "sparsity"), CX_ERR_FORMAT, "an N:M method fixes the "
                        "sparsity (1 - N/M): remove this key");
  CX_TRY(cx_toml_float(t, "sparsity", c->sparsity, &c->sparsity));
  CX_TRY(cx_cli_key_range(t, "sparsity", c->sparsity, 0, 1, true));
  CX_TRY(cx_toml_float(t, "initial_sparsity", c->initial_sparsity, &c->initial_sparsity));
  CX_TRY(cx_cli_key_range(t, "initial_sparsity", c->initial_sparsity, 0, c->sparsity, false));
  CX_TRY(cx_toml_int(t, "start", c->start, &c->start));
  CX_TRY(cx_cli_key_range(t, "start", (double)c->start, 0, 1e15, false));
  CX_TRY(cx_toml_int(t, "end", c->start, &c->end));
  CX_TRY(cx_cli_key_range(t, "end", (double)c->end, (double)c->start, 1e15, false));
  CX_TRY(cx_toml_int(t, "every", c->every, &c->every));
  CX_TRY(cx_cli_key_range(t, "every", (double)c->every, 1, 1e15, false));
  CX_TRY(cx_toml_int(t, "round_to", c->round_to, &v));
  CX_TRY(cx_cli_key_range(t, "round_to", (double)v, 0, 4096, false));
  c->round_to = (int)v;
  return CX_OK;
}

/* The scoring pass's length: only for Taylor importance, which alone reads gradients. */
static cx_status read_taylor(const cx_toml *t, cx_cli_prune *p) {
  int64_t v;
  const cx_toml *n = cx_toml_get(t, "taylor_batches");
  if (n && p->c.importance != CX_IMPORTANCE_TAYLOR)
    return cx_toml_fail(n, CX_ERR_FORMAT, "is for importance = \"taylor\" only");
  CX_TRY(cx_toml_int(t, "taylor_batches", 32, &v));
  CX_TRY(cx_cli_key_range(t, "taylor_batches", (double)v, 1, 1e6, false));
  p->taylor_batches = (int)v;
  return CX_OK;
}

/* One-shot channel pruning recalibrates BatchNorm on 32 batches by default (where there is
 * training data); the other methods keep training with masks, which BatchNorm follows. */
static cx_status read_recalibrate(const cx_toml *t, cx_cli_prune *p) {
  int64_t v;
  const cx_toml *n = cx_toml_get(t, "recalibrate_bn");
  bool once = cx_prune_channel_once(&p->c);
  if (n && !once)
    return cx_toml_fail(n, CX_ERR_FORMAT, "recalibrates after a one-shot channel cut: it is for "
                        "method = \"channel\" with start = end = 0");
  CX_TRY(cx_toml_int(t, "recalibrate_bn", once ? 32 : 0, &v));
  CX_TRY(cx_cli_key_range(t, "recalibrate_bn", (double)v, 0, 1e6, false));
  p->recalibrate_bn = (int)v;
  return CX_OK;
}

cx_status cx_cli_prune_read(const cx_toml *t, cx_cli_prune *p) {
  static const char *const scopes[] = {"global", "layer", NULL};
  static const char *const importances[] = {"l1", "l2", "bn", "taylor", NULL};
  memset(p, 0, sizeof *p);
  p->c = cx_prune_defaults();
  p->table = t;
  cx_prune_config *c = &p->c;
  int scope, importance;
  CX_TRY(read_method(t, c));
  CX_TRY(cx_cli_key_one_of(t, "scope", scopes, (int)c->scope, &scope));
  CX_TRY(cx_cli_key_one_of(t, "importance", importances, (int)c->importance, &importance));
  c->scope = (cx_prune_scope)scope;
  c->importance = (cx_prune_importance)importance;
  CX_TRY(read_numbers(t, c));
  CX_TRY(read_taylor(t, p));
  CX_TRY(read_recalibrate(t, p));
  static const char *const allocations[] = {"importance", "sensitivity", NULL};
  int allocate;
  CX_TRY(cx_cli_key_one_of(t, "allocate", allocations, 0, &allocate));
  p->allocate_sensitivity = allocate == 1;
  if (p->allocate_sensitivity && c->method != CX_PRUNE_CHANNEL)
    return cx_toml_fail(cx_toml_get(t, "allocate"), CX_ERR_FORMAT, "\"sensitivity\" allocates "
                        "channels: it is for method = \"channel\"");
  if (p->allocate_sensitivity && cx_prune_channel_gradual(c))
    return cx_toml_fail(cx_toml_get(t, "allocate"), CX_ERR_FORMAT, "\"sensitivity\" allocates "
                        "channels once, before training: it is for one-shot channel pruning "
                        "(start = end = 0)");
  size_t n = cx_toml_len(cx_toml_get(t, "include")) + cx_toml_len(cx_toml_get(t, "exclude"));
  if (!(p->globs = calloc(n + 1, sizeof *p->globs))) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_status s = cx_cli_key_globs(t, "include", p->globs, &c->n_include);
  if (s == CX_OK) s = cx_cli_key_globs(t, "exclude", p->globs + c->n_include, &c->n_exclude);
  c->include = p->globs;
  c->exclude = p->globs + c->n_include;
  if (s == CX_OK) s = cx_prune_config_check(c);
  if (s != CX_OK) cx_error_prefix(cx_toml_path(t, (char[64]){0}, 64));
  if (s != CX_OK) cx_cli_prune_free(p);
  return s;
}

void cx_cli_prune_free(cx_cli_prune *p) {
  free(p->globs);
  p->globs = NULL;
}

const char *cx_cli_prune_method_name(const cx_prune_config *c, char *buf, size_t size) {
  if (c->method == CX_PRUNE_NM) snprintf(buf, size, "%d:%d", c->n, c->m);
  else snprintf(buf, size, "%s", c->method == CX_PRUNE_CHANNEL ? "channel" : "magnitude");
  return buf;
}
