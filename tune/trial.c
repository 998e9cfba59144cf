/* Trial records: trials/NNNN/trial.toml, what a tune reads back to continue (its coordinates
 * with all their digits, its status and results), and its line of trials.jsonl. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/file_replace.h"
#include "tune.h"

static const char *const status_names[] = {"running", "complete", "failed", "pruned"};

const char *cx_tune_status_name(cx_tune_status s) { return status_names[s]; }

static void write_float(FILE *f, const char *key, double v) {
  if (!isfinite(v)) return;
  fprintf(f, "%s = ", key);
  cx_tune_toml_float(f, v);
  fputc('\n', f);
}

cx_status cx_tune_trial_write(const char *dir, const cx_tune_space *sp, const cx_tune_trial *t) {
  char path[4200];
  snprintf(path, sizeof path, "%s/trial.toml", dir);
  cx_file_out o;
  CX_TRY(cx_file_out_open(path, &o));
  FILE *f = o.f;
  fprintf(f, "# compress tune: trial %d (its pipeline: pipeline.toml here)\n", t->number);
  fprintf(f, "number = %d\nstatus = \"%s\"\n", t->number, cx_tune_status_name(t->status));
  write_float(f, "value", t->value);
  write_float(f, "top1", t->top1);
  write_float(f, "top5", t->top5);
  write_float(f, "loss", t->loss);
  write_float(f, "seconds", t->seconds);
  write_float(f, "reference_top1", t->ref_top1);
  for (int c = 0; c < CX_TUNE_COSTS; c++) write_float(f, cx_tune_cost_name(c), t->cost[c]);
  fputs("shared = ", f);
  cx_tune_toml_string(f, t->shared);
  fputs("\nrungs = [", f);
  for (int r = 0; r < t->n_rungs; r++) fputs(r ? ", " : "", f), cx_tune_toml_float(f, t->rung[r]);
  fputs("]\n# the sampler's coordinates (log for log ranges, the index of a choice)\nx = [", f);
  for (int d = 0; d < sp->n; d++) fputs(d ? ", " : "", f), cx_tune_toml_float(f, t->x[d]);
  fputs("]\n\n[params]\n", f);
  for (int d = 0; d < sp->n; d++) {
    cx_tune_toml_string(f, sp->dims[d].key);
    fputs(" = ", f);
    cx_tune_dim_write(f, &sp->dims[d], t->x[d]);
    fputc('\n', f);
  }
  return cx_file_out_commit(&o);
}

static cx_status read_x(const cx_toml *doc, const cx_tune_space *sp, cx_tune_trial *t) {
  const cx_toml *x = cx_toml_get(doc, "x");
  if (!x || cx_toml_type_of(x) != CX_TOML_ARRAY || (int)cx_toml_len(x) != sp->n)
    return cx_toml_fail(x ? x : doc, CX_ERR_FORMAT, "x: %d coordinates, one per key of [tune]; "
                        "was the search space changed since this trial ran?", sp->n);
  for (int d = 0; d < sp->n; d++) CX_TRY(cx_toml_as_float(cx_toml_at(x, (size_t)d), &t->x[d]));
  /* the keys too: the same count with other names is another space */
  const cx_toml *params = cx_toml_get(doc, "params");
  for (int d = 0; d < sp->n; d++) {
    const cx_toml *p = cx_toml_at(params, (size_t)d);
    if (!p || strcmp(cx_toml_key(p), sp->dims[d].key))
      return cx_toml_fail(params ? params : doc, CX_ERR_FORMAT, "[params]: key %d is not '%s'; "
                          "the search space changed since this trial ran", d + 1,
                          sp->dims[d].key);
  }
  return CX_OK;
}

static cx_status read_all(const cx_toml *doc, const cx_tune_space *sp, cx_tune_trial *t) {
  int64_t n;
  const char *status, *shared;
  CX_TRY(cx_toml_int(doc, "number", 0, &n));
  t->number = (int)n;
  CX_TRY(cx_toml_string(doc, "status", "running", &status));
  t->status = CX_TUNE_RUNNING;
  for (int s = 0; s < 4; s++)
    if (!strcmp(status, status_names[s])) t->status = (cx_tune_status)s;
  CX_TRY(cx_toml_float(doc, "value", NAN, &t->value));
  CX_TRY(cx_toml_float(doc, "top1", NAN, &t->top1));
  CX_TRY(cx_toml_float(doc, "top5", NAN, &t->top5));
  CX_TRY(cx_toml_float(doc, "loss", NAN, &t->loss));
  CX_TRY(cx_toml_float(doc, "seconds", 0, &t->seconds));
  CX_TRY(cx_toml_float(doc, "reference_top1", NAN, &t->ref_top1));
  for (int c = 0; c < CX_TUNE_COSTS; c++)
    CX_TRY(cx_toml_float(doc, cx_tune_cost_name(c), NAN, &t->cost[c]));
  CX_TRY(cx_toml_string(doc, "shared", "", &shared));
  snprintf(t->shared, sizeof t->shared, "%s", shared);
  const cx_toml *rungs = cx_toml_get(doc, "rungs");
  if (rungs && (cx_toml_type_of(rungs) != CX_TOML_ARRAY || cx_toml_len(rungs) > CX_TUNE_MAX_RUNGS))
    return cx_toml_fail(rungs, CX_ERR_FORMAT, "at most %d numbers", CX_TUNE_MAX_RUNGS);
  t->n_rungs = (int)cx_toml_len(rungs);
  for (int r = 0; r < t->n_rungs; r++)
    CX_TRY(cx_toml_as_float(cx_toml_at(rungs, (size_t)r), &t->rung[r]));
  return read_x(doc, sp, t);
}

cx_status cx_tune_trial_read(const char *dir, const cx_tune_space *sp, cx_tune_trial *t) {
  char path[4200];
  snprintf(path, sizeof path, "%s/trial.toml", dir);
  cx_toml *doc = NULL;
  memset(t, 0, sizeof *t);
  CX_TRY(cx_toml_parse_file(path, &doc));
  cx_status s = read_all(doc, sp, t);
  cx_toml_free(doc);
  return s;
}

static void json_number(FILE *f, const char *key, double v) {
  fprintf(f, ", \"%s\": ", key);
  if (isfinite(v)) cx_tune_toml_float(f, v);
  else fputs("null", f);
}

void cx_tune_trial_json(FILE *f, const cx_tune_space *sp, const cx_tune_trial *t,
                        const char *objective) {
  fprintf(f, "{\"trial\": %d, \"status\": \"%s\", \"params\": {", t->number,
          cx_tune_status_name(t->status));
  for (int d = 0; d < sp->n; d++) {
    if (d) fputs(", ", f);
    cx_tune_toml_string(f, sp->dims[d].key); /* scalars: TOML's text is JSON's */
    fputs(": ", f);
    cx_tune_dim_write(f, &sp->dims[d], t->x[d]);
  }
  fputs("}, \"objective\": ", f);
  cx_tune_toml_string(f, objective);
  json_number(f, "value", t->value);
  json_number(f, "top1", t->top1);
  json_number(f, "top5", t->top5);
  json_number(f, "loss", t->loss);
  json_number(f, "seconds", t->seconds);
  for (int c = 0; c < CX_TUNE_COSTS; c++) json_number(f, cx_tune_cost_name(c), t->cost[c]);
  json_number(f, "reference_top1", t->ref_top1);
  fprintf(f, ", \"feasible\": %s", t->status != CX_TUNE_COMPLETE ? "null"
                                   : t->feasible                 ? "true"
                                                                 : "false");
  fputs(", \"rungs\": [", f);
  for (int r = 0; r < t->n_rungs; r++) fputs(r ? ", " : "", f), cx_tune_toml_float(f, t->rung[r]);
  fputs("], \"shared\": ", f);
  cx_tune_toml_string(f, t->shared);
  fprintf(f, ", \"folder\": \"trials/%04d\"}\n", t->number);
}
