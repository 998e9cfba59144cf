/* The [tune] table: settings, and the search space as dotted pipeline keys (docs/tune.md). */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune.h"

static const char *const settings[] = {"trials", "budget", "sampler", "seed", "objective",
                                       "startup", "early_stop", "min_epochs", "reduction",
                                       "max_drop", "reference", "front", NULL};

/* ---- values ---- */

double cx_tune_dim_internal(const cx_tune_dim *d, double value) {
  return d->kind == CX_TUNE_LOG ? log(value) : value;
}

double cx_tune_dim_value(const cx_tune_dim *d, double x) {
  if (d->kind != CX_TUNE_LOG) return x;
  /* exp(log(lo)) may round past lo: a bound stays the bound, never a value the pipeline's own
   * range check refuses */
  if (x <= log(d->lo)) return d->lo;
  if (x >= log(d->hi)) return d->hi;
  double v = exp(x);
  return v < d->lo ? d->lo : v > d->hi ? d->hi : v;
}

void cx_tune_dim_write(FILE *f, const cx_tune_dim *d, double x) {
  if (d->kind == CX_TUNE_CHOICE) cx_tune_toml_value(f, cx_toml_at(d->choices, (size_t)x));
  else if (d->kind == CX_TUNE_INT) fprintf(f, "%lld", (long long)llround(x));
  else cx_tune_toml_float(f, cx_tune_dim_value(d, x));
}

/* ---- early stopping ---- */

int cx_tune_rung_epochs(const cx_tune_config *c, int k) {
  double e = c->min_epochs * pow(c->reduction, k);
  return e > 2147483647.0 ? 2147483647 : (int)e;
}

bool cx_tune_asha_promote(const double *others, int n, double v, int reduction) {
  /* v's rank among all n + 1: how many are strictly better */
  int better = 0;
  for (int i = 0; i < n; i++) better += others[i] > v;
  int k = (n + 1) / reduction; /* this many go on; at least the best one */
  return better < (k > 0 ? k : 1);
}

/* ---- durations ---- */

cx_status cx_tune_parse_duration(const cx_toml *node, double *seconds) {
  const char *s;
  CX_TRY(cx_toml_as_string(node, &s));
  double total = 0;
  const char *p = s;
  if (!*p) return cx_toml_fail(node, CX_ERR_FORMAT, "an empty duration");
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    double unit = *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : 0;
    if (end == p || !isdigit((unsigned char)*p) || !unit || !isfinite(v))
      return cx_toml_fail(node, CX_ERR_FORMAT, "a duration such as \"90s\", \"30m\", \"2h\" or "
                          "\"1h30m\", found \"%s\"", cx_printable(s));
    total += v * unit;
    p = end + 1;
  }
  *seconds = total;
  return CX_OK;
}

/* ---- dimensions ---- */

static bool is_number(const cx_toml *n) {
  cx_toml_type t = cx_toml_type_of(n);
  return t == CX_TOML_INT || t == CX_TOML_FLOAT;
}

/* [lo, hi]: two numbers, lo < hi (int: integers). */
static cx_status read_range(const cx_toml *a, cx_tune_dim *d) {
  if (cx_toml_type_of(a) != CX_TOML_ARRAY || cx_toml_len(a) != 2 ||
      !is_number(cx_toml_at(a, 0)) || !is_number(cx_toml_at(a, 1)))
    return cx_toml_fail(a, CX_ERR_FORMAT, "a range is two numbers [low, high]");
  CX_TRY(cx_toml_as_float(cx_toml_at(a, 0), &d->lo));
  CX_TRY(cx_toml_as_float(cx_toml_at(a, 1), &d->hi));
  if (!isfinite(d->lo) || !isfinite(d->hi))
    return cx_toml_fail(a, CX_ERR_FORMAT, "the bounds must be finite");
  if (d->lo == d->hi)
    return cx_toml_fail(a, CX_ERR_FORMAT, "an empty range [%g, %g]: give low < high, or set the "
                        "key in the pipeline instead of tuning it", d->lo, d->hi);
  if (d->lo > d->hi)
    return cx_toml_fail(a, CX_ERR_FORMAT, "an inverted range [%g, %g]: low comes first", d->lo,
                        d->hi);
  if (d->kind == CX_TUNE_LOG && d->lo <= 0)
    return cx_toml_fail(a, CX_ERR_FORMAT, "a log range needs low > 0, found %g", d->lo);
  if (d->kind == CX_TUNE_INT && (cx_toml_type_of(cx_toml_at(a, 0)) != CX_TOML_INT ||
                                 cx_toml_type_of(cx_toml_at(a, 1)) != CX_TOML_INT))
    return cx_toml_fail(a, CX_ERR_FORMAT, "an int range has integer bounds");
  return CX_OK;
}

/* A list of scalars of one type (an integer passes among floats), at least two. */
static cx_status read_choices(const cx_toml *a, cx_tune_dim *d) {
  size_t n = cx_toml_len(a);
  if (n < 2)
    return cx_toml_fail(a, CX_ERR_FORMAT, "%s: give at least two choices, or set the key in the "
                        "pipeline instead of tuning it", n ? "one choice" : "no choices");
  for (size_t i = 0; i < n; i++) {
    const cx_toml *v = cx_toml_at(a, i), *v0 = cx_toml_at(a, 0);
    cx_toml_type t = cx_toml_type_of(v);
    if (t == CX_TOML_TABLE || t == CX_TOML_ARRAY)
      return cx_toml_fail(v, CX_ERR_FORMAT, "a choice is a string, number or bool");
    if (t != cx_toml_type_of(v0) && !(is_number(v) && is_number(v0)))
      return cx_toml_fail(v, CX_ERR_FORMAT, "the choices are of one type: %s, then %s",
                          cx_toml_type_name(cx_toml_type_of(v0)), cx_toml_type_name(t));
  }
  d->kind = CX_TUNE_CHOICE;
  d->choices = a;
  d->n_choices = (int)n;
  d->lo = 0, d->hi = (double)(n - 1);
  return CX_OK;
}

static cx_status read_dim(const cx_toml *n, cx_tune_dim *d) {
  *d = (cx_tune_dim){.key = cx_toml_key(n), .node = n, .kind = CX_TUNE_FLOAT};
  cx_toml_type t = cx_toml_type_of(n);
  if (t == CX_TOML_ARRAY) {
    bool range = cx_toml_len(n) == 2 && is_number(cx_toml_at(n, 0)) &&
                 is_number(cx_toml_at(n, 1));
    return range ? read_range(n, d) : read_choices(n, d);
  }
  static const char *const kinds[] = {"float", "log", "int", "choice", NULL};
  if (t != CX_TOML_TABLE || cx_toml_len(n) != 1)
    return cx_toml_fail(n, CX_ERR_FORMAT, "a search range: [low, high], {log = [low, high]}, "
                        "{int = [low, high]} or a list of choices");
  CX_TRY(cx_toml_check_keys(n, kinds));
  const cx_toml *v = cx_toml_at(n, 0);
  const char *k = cx_toml_key(v);
  if (!strcmp(k, "choice")) {
    if (cx_toml_type_of(v) != CX_TOML_ARRAY)
      return cx_toml_fail(v, CX_ERR_FORMAT, "a list of choices");
    return read_choices(v, d);
  }
  d->kind = !strcmp(k, "log") ? CX_TUNE_LOG : !strcmp(k, "int") ? CX_TUNE_INT : CX_TUNE_FLOAT;
  return read_range(v, d);
}

/* ---- the objective ---- */

static void cost_list(char *buf, size_t size) {
  size_t at = 0;
  for (int k = 0; k < CX_TUNE_COSTS && at < size; k++)
    at += (size_t)snprintf(buf + at, size - at, "%s\"%s\"", k ? ", " : "",
                           cx_tune_cost_name((cx_tune_cost)k));
}

/* front = "<cost>" (PARETO only; default "latency") */
static cx_status read_front(const cx_toml *t, cx_tune_config *c) {
  const cx_toml *n = cx_toml_get(t, "front");
  char list[160];
  cost_list(list, sizeof list);
  if (n && c->goal != CX_TUNE_GOAL_PARETO)
    return cx_toml_fail(n, CX_ERR_FORMAT, "front is the cost axis of objective = \"pareto\"");
  if (c->goal != CX_TUNE_GOAL_PARETO) return CX_OK;
  const char *s;
  CX_TRY(cx_toml_string(t, "front", "latency", &s));
  int k = cx_tune_cost_find(s);
  if (k < 0)
    return cx_toml_fail(n, CX_ERR_FORMAT, "front: one of %s, found \"%s\"", list,
                        cx_printable(s));
  c->cost = (cx_tune_cost)k;
  return CX_OK;
}

/* max_drop and reference: only with a minimised cost or the front, where accuracy is a
 * constraint rather than the goal */
static cx_status read_constraint(const cx_toml *t, cx_tune_config *c) {
  const cx_toml *d = cx_toml_get(t, "max_drop");
  c->reference_node = cx_toml_get(t, "reference");
  c->max_drop = NAN;
  if (d && c->goal == CX_TUNE_GOAL_METRIC)
    return cx_toml_fail(d, CX_ERR_FORMAT, "max_drop bounds the accuracy a smaller model may "
                        "lose: it needs objective = \"macs\", \"latency\", \"size\" (or "
                        "another cost) or \"pareto\"");
  if (c->reference_node && !d)
    return cx_toml_fail(c->reference_node, CX_ERR_FORMAT, "reference is what max_drop counts "
                        "from: set max_drop too");
  if (d) {
    CX_TRY(cx_toml_as_float(d, &c->max_drop));
    if (!(c->max_drop >= 0) || !isfinite(c->max_drop))
      return cx_toml_fail(d, CX_ERR_FORMAT, "max_drop is points of top-1, 0 or more, found %g",
                          c->max_drop);
  }
  /* which stage is a valid reference depends on the pipeline: cli checks it */
  return cx_toml_string(t, "reference", "distill", &c->reference);
}

/* objective: METRIC ("<stage>.<metric>", "top1", none), a cost name, or "pareto" */
static cx_status read_objective(const cx_toml *t, cx_tune_config *c) {
  c->objective_node = cx_toml_get(t, "objective");
  c->goal = CX_TUNE_GOAL_METRIC;
  if (c->objective_node) CX_TRY(cx_toml_as_string(c->objective_node, &c->objective));
  const char *o = c->objective;
  int k = o ? cx_tune_cost_find(o) : -1;
  if (o && !strcmp(o, "top1")) c->objective = NULL; /* the last stage's top-1 */
  else if (k >= 0) c->goal = CX_TUNE_GOAL_MIN, c->cost = (cx_tune_cost)k;
  else if (o && !strcmp(o, "pareto")) c->goal = CX_TUNE_GOAL_PARETO;
  else if (o && !strchr(o, '.')) {
    char list[160];
    cost_list(list, sizeof list);
    return cx_toml_fail(c->objective_node, CX_ERR_FORMAT, "an objective is \"top1\", "
                        "\"<stage>.top1\" (.top5, .loss), \"pareto\" or a cost to minimise: "
                        "%s; found \"%s\"", list, cx_printable(o));
  }
  CX_TRY(read_front(t, c));
  CX_TRY(read_constraint(t, c));
  if (c->goal != CX_TUNE_GOAL_METRIC && c->asha)
    return cx_toml_fail(cx_toml_get(t, "early_stop"), CX_ERR_FORMAT, "early_stop = \"asha\" "
                        "stops the least accurate trials, which with objective = \"%s\" are "
                        "often the best ones: use early_stop = \"none\"", o);
  return CX_OK;
}

/* ---- settings ---- */

static cx_status read_settings(const cx_toml *t, cx_tune_config *c) {
  int64_t v;
  CX_TRY(cx_toml_int(t, "trials", 16, &v));
  if (v < 1 || v > 100000)
    return cx_toml_fail(cx_toml_get(t, "trials"), CX_ERR_FORMAT, "1 to 100000 trials");
  c->trials = (int)v;
  CX_TRY(cx_toml_int(t, "startup", 10, &v));
  if (v < 1 || v > 100000)
    return cx_toml_fail(cx_toml_get(t, "startup"), CX_ERR_FORMAT, "1 to 100000 random trials");
  c->sampler.n_startup = (int)v;
  CX_TRY(cx_toml_int(t, "seed", 1, &v));
  if (v < 0) return cx_toml_fail(cx_toml_get(t, "seed"), CX_ERR_FORMAT, "a seed >= 0");
  c->sampler.seed = (uint64_t)v;
  const char *s;
  CX_TRY(cx_toml_string(t, "sampler", "tpe", &s));
  if (strcmp(s, "tpe") && strcmp(s, "random"))
    return cx_toml_fail(cx_toml_get(t, "sampler"), CX_ERR_FORMAT, "\"tpe\" or \"random\", found "
                        "\"%s\"", cx_printable(s));
  c->sampler.kind = !strcmp(s, "tpe") ? CX_TUNE_TPE : CX_TUNE_RANDOM;
  c->sampler.n_candidates = 24;
  c->sampler.prior_weight = 1;
  CX_TRY(cx_toml_string(t, "early_stop", "none", &s));
  if (strcmp(s, "none") && strcmp(s, "asha"))
    return cx_toml_fail(cx_toml_get(t, "early_stop"), CX_ERR_FORMAT, "\"asha\" or \"none\", "
                        "found \"%s\"", cx_printable(s));
  c->asha = !strcmp(s, "asha");
  CX_TRY(cx_toml_int(t, "min_epochs", 1, &v));
  if (v < 1 || v > 1000000)
    return cx_toml_fail(cx_toml_get(t, "min_epochs"), CX_ERR_FORMAT, "at least 1 epoch");
  c->min_epochs = (int)v;
  CX_TRY(cx_toml_int(t, "reduction", 4, &v));
  if (v < 2 || v > 1000)
    return cx_toml_fail(cx_toml_get(t, "reduction"), CX_ERR_FORMAT, "a reduction factor of 2 "
                        "to 1000");
  c->reduction = (int)v;
  CX_TRY(read_objective(t, c));
  c->budget_node = cx_toml_get(t, "budget");
  if (c->budget_node) {
    CX_TRY(cx_tune_parse_duration(c->budget_node, &c->budget_s));
    if (c->budget_s <= 0)
      return cx_toml_fail(c->budget_node, CX_ERR_FORMAT, "a budget above 0");
  }
  return CX_OK;
}

cx_status cx_tune_config_read(const cx_toml *tune, const char *file, cx_tune_config *c) {
  memset(c, 0, sizeof *c);
  if (!tune || cx_toml_type_of(tune) != CX_TOML_TABLE)
    return cx_fail(CX_ERR_FORMAT, "%s: no [tune] table (trials = N and the keys to search, "
                   "\"distill.lr\" = {log = [1e-3, 0.3]}, ...)", file);
  /* the settings are the keys without a dot; check them alone */
  const char *allowed[CX_TUNE_MAX_DIMS + 16];
  int na = 0;
  for (int i = 0; settings[i]; i++) allowed[na++] = settings[i];
  for (size_t i = 0; i < cx_toml_len(tune); i++) {
    const cx_toml *n = cx_toml_at(tune, i);
    if (!strchr(cx_toml_key(n), '.')) continue;
    if (c->space.n == CX_TUNE_MAX_DIMS)
      return cx_toml_fail(n, CX_ERR_FORMAT, "more than %d keys to search", CX_TUNE_MAX_DIMS);
    CX_TRY(read_dim(n, &c->space.dims[c->space.n]));
    allowed[na++] = c->space.dims[c->space.n++].key;
  }
  allowed[na] = NULL;
  CX_TRY(cx_toml_check_keys(tune, allowed));
  if (!c->space.n)
    return cx_toml_fail(tune, CX_ERR_FORMAT, "no keys to search: add dotted pipeline keys such as "
                        "\"distill.lr\" = {log = [1e-3, 0.3]}");
  return read_settings(tune, c);
}
