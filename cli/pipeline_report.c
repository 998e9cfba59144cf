/* The pipeline's report (cli/report.h writes it): one row per complete stage, in the order of
 * the stage table, so that a stage added to the table (prune, quantize) gets its row and its
 * curves without a change here. What the runner knew when a stage ran (times, accuracy) comes
 * from the stage's manifest; what the files show (size, cost, latency) is measured now. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../data/data.h"
#include "../import/onnx.h"
#include "onnx_common.h"
#include "pipeline.h"
#include "report.h"

enum { RUNS = 20 }; /* latency: the median of this many runs */

typedef struct row {
  const cx_pipeline_stage *stage;
  cx_stage_result res;
  cx_report_model model;
  cx_report_stage curves;
  char path[CX_CLI_PATH_MAX];
} row;

typedef struct builder {
  const cx_pipeline *p;
  const char *out;
  row rows[CX_STAGE_COUNT];
  cx_report_model models[CX_STAGE_COUNT];
  cx_report_stage stages[CX_STAGE_COUNT];
  int n;
  cx_report_measurer ms;
  const char *teacher, *baseline; /* the rows the summary compares the last one with */
  char *class_names[256];
  char val_data[PATH_MAX];
  char note[4096];
} builder;

/* ---- one model ---- */

/* What could not be measured is in the row's cells; the terminal hears it too. */
static cx_status measure(builder *b, row *w) {
  cx_report_model *m = &w->model;
  CX_TRY(cx_report_measure_onnx(&b->ms, w->path, m));
  for (int i = 0; i < m->n_errors; i++)
    fprintf(stderr, "compress pipeline: warning: %s (%s): %s: %s\n", m->name, w->path,
            m->errors[i].reason, m->errors[i].message);
  return CX_OK;
}

static cx_status add_row(builder *b, const cx_pipeline_stage *s, const cx_stage_result *res) {
  row *w = &b->rows[b->n++];
  w->stage = s;
  w->res = *res;
  snprintf(w->path, sizeof w->path, "%s/%s", b->out, s->output);
  cx_report_model *m = &w->model;
  *m = cx_report_model_empty(s->model);
  m->arch = s->tc.model_spec ? s->tc.model_spec : s->tc.model_onnx;
  m->onnx_path = s->output; /* beside the report */
  if (res->val.n) m->top1 = res->val.top1, m->top5 = res->val.top5, m->val_loss = res->val.loss;
  m->train_seconds = res->train_seconds;
  m->train_images_per_s = res->images_per_s;
  return measure(b, w);
}

/* ---- curves ---- */

/* A stage's lines of metrics.jsonl have "stage":"<name>" (cx_cli_sinks). */
static void read_curves(builder *b, row *w) {
  char path[CX_CLI_PATH_MAX], stage[80];
  snprintf(path, sizeof path, "%s/metrics.jsonl", b->out);
  snprintf(stage, sizeof stage, "\"stage\":\"%s\"", w->stage->name);
  cx_report_stage *c = &w->curves;
  *c = (cx_report_stage){.name = w->stage->name, .seconds = w->res.seconds,
                         .images_per_s = w->res.images_per_s, .ranks = (int)w->res.ranks,
                         .comm_wait = w->res.comm_wait};
  if (cx_report_metrics_series(path, stage, "step", "loss", &c->loss) != CX_OK ||
      cx_report_metrics_series(path, stage, "epoch", "val_top1", &c->accuracy) != CX_OK)
    cx_error_clear(); /* no metrics file: a report without curves */
  c->loss.name = "loss";
  c->accuracy.name = "top-1";
}

/* ---- the input ---- */

static void class_names(builder *b, const cx_train_config *tc, cx_report_preprocess *pre) {
  cx_dataset *d = NULL;
  if (cx_dataset_open(tc->train_path, tc->opts.train_part, &d) != CX_OK) {
    cx_error_clear();
    return;
  }
  int64_t n = cx_dataset_get_info(d)->num_classes;
  pre->n_classes = (int)n;
  bool named = n <= 256 && cx_dataset_class_name(d, 0);
  for (int64_t i = 0; named && i < n; i++) b->class_names[i] = strdup(cx_dataset_class_name(d, i));
  for (int64_t i = 0; named && i < n; i++) named = b->class_names[i] != NULL;
  pre->class_names = named ? (const char *const *)b->class_names : NULL;
  cx_dataset_close(d);
}

/* The shortest decimal that reads back as the float v (0.286, not 0.28600001335144043). */
static double decimal(float v) {
  char buf[32];
  for (int digits = 1; digits < 9; digits++) {
    snprintf(buf, sizeof buf, "%.*g", digits, (double)v);
    if ((float)strtod(buf, NULL) == v) return strtod(buf, NULL);
  }
  return v;
}

/* What the exported models carry in their metadata (cx_cli_export_trained), from the same
 * source: [data] mean and std, the data set's classes, the model's input shape. */
static void preprocessing(builder *b, cx_report *r) {
  const cx_train_config *tc = &b->rows[0].stage->tc;
  cx_report_preprocess *pre = &r->pre;
  *pre = (cx_report_preprocess){.layout = "NCHW", .pixel_scale = 1.0 / 255};
  cx_graph *g = NULL;
  if (cx_onnx_import(b->rows[0].path, &g, NULL) == CX_OK) {
    int in = 0;
    cx_cli_graph_inputs(g, &in, 1);
    const cx_shape *s = &g->values[in].shape;
    if (s->ndim == 4) pre->channels = (int)s->d[1], pre->height = s->d[2], pre->width = s->d[3];
  }
  cx_graph_free(g);
  cx_error_clear();
  if (pre->channels > 4) pre->channels = 4;
  for (int c = 0; c < pre->channels; c++) {
    pre->mean[c] = decimal(tc->opts.val_aug.mean[c]);
    pre->std[c] = decimal(tc->opts.val_aug.std[c]);
  }
  class_names(b, tc, pre);
  if (tc->val_path && realpath(tc->val_path, b->val_data)) r->val_data = b->val_data;
  else if (tc->val_path) r->val_data = tc->val_path;
  r->val_part = tc->opts.val_part;
}

/* ---- the whole ---- */

static void note_add(builder *b, const char *text) {
  size_t at = strlen(b->note);
  if (text[0]) snprintf(b->note + at, sizeof b->note - at, "%s%s", at ? " " : "", text);
}

/* What the rows cannot say: the teacher cache's use, and each record's own note. */
static void notes(builder *b) {
  char text[1024];
  for (int i = 0; i < b->n; i++) {
    const row *w = &b->rows[i];
    const cx_stage_result *res = &w->res;
    if (res->teacher_batches || res->cached_batches) {
      snprintf(text, sizeof text, "Knowledge distillation (stage %s): the teacher's outputs "
               "were computed for %lld batches and read from the teacher cache for %lld.",
               w->stage->name, (long long)res->teacher_batches, (long long)res->cached_batches);
      note_add(b, text);
    }
    const char *label = w->stage->def->start_label ? w->stage->def->start_label(b->p) : NULL;
    if (label && res->start.n) {
      snprintf(text, sizeof text, "Stage %s, %s: top-1 %.2f%%, top-5 %.2f%% on the validation "
               "set (%lld images).", w->stage->name, label, res->start.top1, res->start.top5,
               (long long)res->start.n);
      note_add(b, text);
    }
    text[0] = 0;
    if (w->stage->def->report_note) w->stage->def->report_note(b->p, w->stage, w->path, text,
                                                               sizeof text);
    note_add(b, text);
  }
}

static void builder_free(builder *b) {
  for (int i = 0; i < b->n; i++) {
    cx_report_series_free(&b->rows[i].curves.loss);
    cx_report_series_free(&b->rows[i].curves.accuracy);
  }
  for (int i = 0; i < 256; i++) free(b->class_names[i]);
  free(b);
}

static cx_status collect(builder *b) {
  for (int i = 0; i < CX_STAGE_COUNT; i++) {
    const cx_pipeline_stage *s = &b->p->stages[i];
    cx_stage_result res;
    char path[CX_CLI_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", b->out, s->output);
    if (!s->present || access(path, F_OK) != 0 ||
        !cx_pipeline_manifest_read(b->out, s->name, "done", s->hash, &res))
      continue;
    CX_TRY(add_row(b, s, &res));
    /* the summary's references: the teacher, and the student trained without compression */
    if (s->def->report_role == CX_STAGE_TEACHER_ROW) b->teacher = s->model;
    if (s->def->report_role == CX_STAGE_BASELINE_ROW) b->baseline = s->model;
    read_curves(b, &b->rows[b->n - 1]);
  }
  return CX_OK;
}

cx_status cx_pipeline_report(const cx_pipeline *p, const char *out, int *models) {
  builder *b = calloc(1, sizeof *b);
  if (!b) return cx_fail(CX_ERR_NOMEM, "out of memory");
  b->p = p, b->out = out;
  b->ms = (cx_report_measurer){.runs = RUNS, .threads = p->threads};
  for (int i = 0; i < CX_STAGE_COUNT && !b->ms.val_data; i++) /* [data] is every stage's */
    if (p->stages[i].present && p->stages[i].tc.val_path)
      b->ms.val_data = p->stages[i].tc.val_path, b->ms.val_part = p->stages[i].tc.opts.val_part;
  cx_status s = collect(b);
  *models = b->n;
  if (s != CX_OK || b->n == 0) {
    builder_free(b);
    return s;
  }
  char title[CX_CLI_PATH_MAX + 32];
  snprintf(title, sizeof title, "compress pipeline %s", p->path);
  cx_report r = {.title = title, .n_models = b->n, .models = b->models, .n_stages = b->n,
                 .stages = b->stages, .latency_runs = RUNS, .latency_threads = p->threads};
  for (int i = 0; i < b->n; i++) b->models[i] = b->rows[i].model, b->stages[i] = b->rows[i].curves;
  preprocessing(b, &r);
  if (!b->ms.ort_missing && b->ms.ort_version[0]) r.ort_version = b->ms.ort_version;
  r.teacher = b->teacher, r.baseline = b->baseline;
  notes(b);
  if (b->note[0]) r.note = b->note;
  s = cx_report_write(&r, out);
  builder_free(b);
  return s;
}
