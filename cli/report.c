/* The report in three forms from one struct: Markdown for the terminal and README notes, HTML
 * with SVG charts for people, JSON for programs. */
#include "../core/file_replace.h"
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../train/metrics.h"

cx_report_model cx_report_model_empty(const char *name) {
  return (cx_report_model){.name = name, .top1 = NAN, .top5 = NAN, .ort_top1 = NAN, .val_loss = NAN,
                           .params = -1, .macs = -1, .params_nonzero = -1, .macs_effective = -1,
                           .onnx_bytes = -1, .onnx_gzip_bytes = -1, .cpu_ms = {NAN, NAN},
                           .ort_ms = {NAN, NAN}, .train_seconds = NAN, .train_images_per_s = NAN};
}

void cx_report_model_fail(cx_report_model *m, const char *fields, const char *reason,
                          const char *message) {
  if (m->n_errors >= CX_REPORT_ERRORS) return;
  cx_report_error *e = &m->errors[m->n_errors++];
  snprintf(e->fields, sizeof e->fields, "%s", fields);
  snprintf(e->reason, sizeof e->reason, "%s", reason);
  snprintf(e->message, sizeof e->message, "%s", message && *message ? message : reason);
}

/* Whether the space-separated list holds the word. */
static bool has_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
  return false;
}

const cx_report_error *cx_report_model_error(const cx_report_model *m, const char *field) {
  for (int i = 0; i < m->n_errors; i++)
    if (has_word(m->errors[i].fields, field)) return &m->errors[i];
  return NULL;
}

/* ---- numbers as people read them ---- */

typedef struct cell {
  char s[48];
} cell;

static cell fmt_pct(double v) {
  cell c = {"–"};
  if (isfinite(v)) snprintf(c.s, sizeof c.s, "%.2f%%", v);
  return c;
}

static cell fmt_count(int64_t v) {
  cell c = {"–"};
  if (v >= 1000000) snprintf(c.s, sizeof c.s, "%.2f M", (double)v / 1e6);
  else if (v >= 1000) snprintf(c.s, sizeof c.s, "%.1f k", (double)v / 1e3);
  else if (v >= 0) snprintf(c.s, sizeof c.s, "%lld", (long long)v);
  return c;
}

static cell fmt_bytes(int64_t v) {
  cell c = {"–"};
  if (v >= 1 << 20) snprintf(c.s, sizeof c.s, "%.2f MiB", (double)v / (1 << 20));
  else if (v >= 1024) snprintf(c.s, sizeof c.s, "%.1f KiB", (double)v / 1024);
  else if (v >= 0) snprintf(c.s, sizeof c.s, "%lld B", (long long)v);
  return c;
}

static cell fmt_ms(double v) {
  cell c = {"–"};
  if (isfinite(v)) snprintf(c.s, sizeof c.s, v < 10 ? "%.2f ms" : "%.1f ms", v);
  return c;
}

static cell fmt_time(double s) {
  cell c = {"–"};
  if (!isfinite(s)) return c;
  if (s < 60) snprintf(c.s, sizeof c.s, "%.1f s", s);
  else if (s < 3600) snprintf(c.s, sizeof c.s, "%d min %02d s", (int)(s / 60), (int)fmod(s, 60));
  else snprintf(c.s, sizeof c.s, "%d h %02d min", (int)(s / 3600), (int)fmod(s / 60, 60));
  return c;
}

static cell fmt_loss(double v) {
  cell c = {"–"};
  if (isfinite(v)) snprintf(c.s, sizeof c.s, "%.4f", v);
  return c;
}

static cell fmt_rate(double v) {
  cell c = {"–"};
  if (isfinite(v)) snprintf(c.s, sizeof c.s, "%.0f", v);
  return c;
}

/* A stage's data-parallel ranks ("1" for one process; "–" when it did not train here) and the
 * share of its step time spent waiting for the gradient reductions. */
static cell ranks_text(const cx_report_stage *st) {
  cell c = {"–"};
  if (isfinite(st->images_per_s)) snprintf(c.s, sizeof c.s, "%d", st->ranks > 1 ? st->ranks : 1);
  return c;
}

static cell comm_text(const cx_report_stage *st) {
  return st->ranks > 1 ? fmt_pct(100 * st->comm_wait) : (cell){"–"};
}

static cell threads_text(const cx_report *r) {
  cell c = {"each runtime's default threads"};
  if (r->latency_threads > 0)
    snprintf(c.s, sizeof c.s, "%d thread%s", r->latency_threads, r->latency_threads > 1 ? "s" : "");
  return c;
}

/* ---- the model table's columns ----
 * One record per number of a model: its header in the tables (NULL: report.json only), its unit,
 * its report.json key (which also finds the error that left it empty) and how to read and
 * format it. Markdown, HTML and JSON all walk this table, so a new figure is one record here
 * (and its field in cx_report_model). */

typedef enum kind { PCT, LOSS, COUNT, BYTES, MS, TIME, RATE } kind;

typedef struct column {
  const char *header, *unit, *field;
  kind kind;
  double (*value)(const cx_report_model *m); /* NAN: not measured */
} column;

static double known(int64_t v) { return v < 0 ? NAN : (double)v; }
static double top1(const cx_report_model *m) { return m->top1; }
static double top5(const cx_report_model *m) { return m->top5; }
static double ort_top1(const cx_report_model *m) { return m->ort_top1; }
static double val_loss(const cx_report_model *m) { return m->val_loss; }
static double params(const cx_report_model *m) { return known(m->params); }
static double params_nonzero(const cx_report_model *m) { return known(m->params_nonzero); }
static double sparsity(const cx_report_model *m) {
  return m->params > 0 && m->params_nonzero >= 0
             ? 100.0 * (double)(m->params - m->params_nonzero) / (double)m->params : NAN;
}
static double macs(const cx_report_model *m) { return known(m->macs); }
static double macs_effective(const cx_report_model *m) { return known(m->macs_effective); }
static double onnx_bytes(const cx_report_model *m) { return known(m->onnx_bytes); }
static double onnx_gzip(const cx_report_model *m) { return known(m->onnx_gzip_bytes); }
static double cpu_b1(const cx_report_model *m) { return m->cpu_ms[0]; }
static double cpu_b32(const cx_report_model *m) { return m->cpu_ms[1]; }
static double ort_b1(const cx_report_model *m) { return m->ort_ms[0]; }
static double ort_b32(const cx_report_model *m) { return m->ort_ms[1]; }
static double train_s(const cx_report_model *m) { return m->train_seconds; }
static double train_rate(const cx_report_model *m) { return m->train_images_per_s; }

static const column columns[] = {
    {"top-1", "% of the validation set", "top1", PCT, top1},
    {"top-5", "% of the validation set", "top5", PCT, top5},
    {"ORT top-1", "% of the validation set, the ONNX file run by ONNX Runtime", "ort_top1", PCT,
     ort_top1},
    {"val loss", "mean cross-entropy", "val_loss", LOSS, val_loss},
    {"params", "trainable values", "params", COUNT, params},
    {"non-zero", "trainable values not exactly zero", "params_nonzero", COUNT, params_nonzero},
    {"sparsity", "% of the trainable values exactly zero", "sparsity", PCT, sparsity},
    {"MACs", "multiply-accumulates per image", "macs", COUNT, macs},
    {"eff. MACs", "multiply-accumulates per image with a non-zero weight", "macs_effective",
     COUNT, macs_effective},
    {"ONNX size", "bytes", "onnx_bytes", BYTES, onnx_bytes},
    {"gzip", "bytes, the file gzip-compressed (level 9)", "onnx_gzip_bytes", BYTES, onnx_gzip},
    {"CPU b1", "ms per batch of 1, compress", "cpu_ms_batch1", MS, cpu_b1},
    {"CPU b32", "ms per batch of 32, compress", "cpu_ms_batch32", MS, cpu_b32},
    {"ORT b1", "ms per batch of 1, ONNX Runtime", "ort_ms_batch1", MS, ort_b1},
    {"ORT b32", "ms per batch of 32, ONNX Runtime", "ort_ms_batch32", MS, ort_b32},
    {"training", "seconds in the training loop", "train_seconds", TIME, train_s},
    {NULL, "training images per second", "train_images_per_s", RATE, train_rate},
};
enum { COLUMNS = sizeof columns / sizeof columns[0] };

static cell format(kind k, double v) {
  switch (k) {
  case PCT: return fmt_pct(v);
  case LOSS: return fmt_loss(v);
  case COUNT: return fmt_count(isfinite(v) ? (int64_t)v : -1);
  case BYTES: return fmt_bytes(isfinite(v) ? (int64_t)v : -1);
  case MS: return fmt_ms(v);
  case TIME: return fmt_time(v);
  case RATE: return fmt_rate(v);
  }
  return (cell){"?"};
}

/* A cell: the number, or why it is missing ("not imported"), or a dash. */
static cell model_cell(const cx_report_model *m, const column *c) {
  double v = c->value(m);
  const cx_report_error *e = isfinite(v) ? NULL : cx_report_model_error(m, c->field);
  if (!e) return format(c->kind, v);
  cell out;
  snprintf(out.s, sizeof out.s, "%s", e->reason);
  return out;
}

/* ---- the summary line ---- */

typedef struct text {
  char *buf;
  size_t size, at;
} text;

static void add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(text *t, const char *fmt, ...) {
  if (t->at >= t->size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->buf + t->at, t->size - t->at, fmt, ap);
  va_end(ap);
  if (n > 0) t->at = t->at + (size_t)n < t->size ? t->at + (size_t)n : t->size - 1;
}

static const cx_report_model *find_model(const cx_report *r, const char *name) {
  for (int m = 0; name && m < r->n_models; m++)
    if (r->models[m].name && !strcmp(r->models[m].name, name)) return &r->models[m];
  return NULL;
}

/* How many times ref's cost is fin's; NAN if either is unknown. */
static double times(double ref, double fin) {
  return isfinite(ref) && isfinite(fin) && ref > 0 && fin > 0 ? ref / fin : NAN;
}

/* "4.6x fewer MACs", or "1.3x more MACs" below 1. */
static void ratio(text *t, int *items, double x, const char *fewer, const char *more) {
  if (!isfinite(x)) return;
  add(t, "%s%.1fx %s", (*items)++ ? ", " : "", x >= 1 ? x : 1 / x, x >= 1 ? fewer : more);
}

/* One comparison, "... vs <ref>"; nothing when no number is known on both sides. Against the
 * baseline (usually the same architecture) the cost and speed ratios are left out when neither
 * MACs nor file size differ by 5%: a latency ratio there would be measurement noise. */
static void compare(text *t, const cx_report_model *fin, const cx_report_model *ref, bool all) {
  bool eff = fin->macs_effective >= 0 && ref->macs_effective >= 0;
  double macs_x = eff ? times(known(ref->macs_effective), known(fin->macs_effective))
                      : times(known(ref->macs), known(fin->macs));
  double file_x = times(known(ref->onnx_bytes), known(fin->onnx_bytes));
  bool ort = isfinite(times(ref->ort_ms[0], fin->ort_ms[0]));
  double speed_x = ort ? times(ref->ort_ms[0], fin->ort_ms[0])
                       : times(ref->cpu_ms[0], fin->cpu_ms[0]);
  if (!all && !(fabs(macs_x - 1) >= 0.05) && !(fabs(file_x - 1) >= 0.05))
    macs_x = file_x = speed_x = NAN;
  text part = {t->buf + t->at, t->size - t->at, 0};
  int items = 0;
  add(&part, "%s", t->at ? "; " : "");
  ratio(&part, &items, macs_x, "fewer MACs", "more MACs");
  ratio(&part, &items, file_x, "smaller file", "larger file");
  const char *where = ort ? "ONNX Runtime" : "compress";
  char faster[64], slower[64];
  snprintf(faster, sizeof faster, "faster in %s (batch 1)", where);
  snprintf(slower, sizeof slower, "slower in %s (batch 1)", where);
  ratio(&part, &items, speed_x, faster, slower);
  double d = fin->top1 - ref->top1;
  if (isfinite(d)) add(&part, "%s%+.2f points top-1", items++ ? ", " : "", d);
  if (!items) {
    part.buf[0] = '\0';
    return;
  }
  add(&part, " vs %s", ref->name ? ref->name : "?");
  t->at += part.at;
}

bool cx_report_summary(const cx_report *r, char *buf, size_t size) {
  if (!size) return false;
  buf[0] = '\0';
  if (r->n_models < 2) return false;
  const cx_report_model *fin = &r->models[r->n_models - 1];
  const cx_report_model *teacher = find_model(r, r->teacher), *base = find_model(r, r->baseline);
  text head = {buf, size, 0};
  add(&head, "%s: ", fin->name ? fin->name : "?");
  text body = {buf + head.at, size - head.at, 0};
  if (teacher && teacher != fin) compare(&body, fin, teacher, true);
  if (base && base != fin) compare(&body, fin, base, false);
  if (!body.at) buf[0] = '\0';
  return body.at > 0;
}

static void preprocess_text(FILE *f, const cx_report_preprocess *p, bool html) {
  const char *li = html ? "<li>" : "- ", *end = html ? "</li>\n" : "\n";
  fprintf(f, "%sinput: %s, float32, [N, %d, %lld, %lld]%s", li, p->layout ? p->layout : "NCHW",
          p->channels, (long long)p->height, (long long)p->width, end);
  fprintf(f, "%spixels: uint8 values times %.9g, then (x - mean) / std per channel%s", li,
          p->pixel_scale, end);
  fprintf(f, "%smean:", li);
  for (int c = 0; c < p->channels; c++) fprintf(f, " %.6g", p->mean[c]);
  fprintf(f, "; std:");
  for (int c = 0; c < p->channels; c++) fprintf(f, " %.6g", p->std[c]);
  fprintf(f, "%s%sclasses (%d):", end, li, p->n_classes);
  for (int c = 0; c < p->n_classes && p->class_names; c++) {
    fputs(c ? ", " : " ", f);
    if (html) cx_xml_text(f, p->class_names[c]);
    else fputs(p->class_names[c], f);
  }
  fputs(end, f);
}

/* ---- Markdown ---- */

/* Every error of every model, as "name: message (fields)", for the notes under the tables. */
static void error_notes(const cx_report *r, FILE *f, bool html) {
  bool any = false;
  for (int m = 0; m < r->n_models; m++) any |= r->models[m].n_errors > 0;
  if (!any) return;
  fputs(html ? "<p>Not measured:</p>\n<ul>\n" : "\nNot measured:\n\n", f);
  for (int m = 0; m < r->n_models; m++)
    for (int i = 0; i < r->models[m].n_errors; i++) {
      const cx_report_error *e = &r->models[m].errors[i];
      fputs(html ? "<li>" : "- ", f);
      if (html) {
        cx_xml_text(f, r->models[m].name);
        fprintf(f, " (%s): ", e->fields);
        cx_xml_text(f, e->message);
      } else {
        fprintf(f, "%s (%s): %s", r->models[m].name, e->fields, e->message);
      }
      fputs(html ? "</li>\n" : "\n", f);
    }
  if (html) fputs("</ul>\n", f);
}

cx_status cx_report_markdown(const cx_report *r, FILE *f) {
  fprintf(f, "# %s\n\n", r->title ? r->title : "compress report");
  char summary[1024];
  if (cx_report_summary(r, summary, sizeof summary)) fprintf(f, "%s\n\n", summary);
  fprintf(f, "| model ");
  for (int i = 0; i < COLUMNS; i++)
    if (columns[i].header) fprintf(f, "| %s ", columns[i].header);
  fprintf(f, "|\n|---");
  for (int i = 0; i < COLUMNS; i++)
    if (columns[i].header) fprintf(f, "|---:");
  fprintf(f, "|\n");
  for (int m = 0; m < r->n_models; m++) {
    const cx_report_model *mo = &r->models[m];
    fprintf(f, "| %s ", mo->name ? mo->name : "?");
    for (int i = 0; i < COLUMNS; i++)
      if (columns[i].header) fprintf(f, "| %s ", model_cell(mo, &columns[i]).s);
    fprintf(f, "|\n");
  }
  error_notes(r, f, false);
  fprintf(f, "\nLatency: median milliseconds per batch over %d runs (batch 1 and 32) with %s; "
          "CPU is compress's own runtime, ORT is ONNX Runtime %s.\n", r->latency_runs,
          threads_text(r).s, r->ort_version ? r->ort_version : "(not installed: not measured)");
  if (r->val_data)
    fprintf(f, "Accuracy and loss: on %s%s%s.\n", r->val_data, r->val_part && *r->val_part ?
            ", part " : "", r->val_part ? r->val_part : "");
  if (r->n_stages)
    fprintf(f, "\n## Stages\n\n| stage | time | training img/s | ranks | comm wait |\n"
            "|---|---:|---:|---:|---:|\n");
  for (int s = 0; s < r->n_stages; s++) {
    const cx_report_stage *st = &r->stages[s];
    fprintf(f, "| %s | %s | %s | %s | %s |\n", st->name, isfinite(st->seconds) ?
            fmt_time(st->seconds).s : "skipped (complete)", fmt_rate(st->images_per_s).s,
            ranks_text(st).s, comm_text(st).s);
  }
  fprintf(f, "\n## Preprocessing\n\n");
  preprocess_text(f, &r->pre, false);
  if (r->note) fprintf(f, "\n%s\n", r->note);
  fprintf(f, "\nLoss and accuracy curves: report.html. The same numbers: report.json.\n");
  return ferror(f) ? cx_fail(CX_ERR_IO, "writing the Markdown report failed") : CX_OK;
}

/* ---- HTML ---- */

static const char *const css =
    "body{font-family:sans-serif;margin:2em;color:#222;max-width:72em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}"
    "figure{display:inline-block;margin:0 1em 1em 0}";

static void html_models(const cx_report *r, FILE *f) {
  char summary[1024];
  if (cx_report_summary(r, summary, sizeof summary)) {
    fprintf(f, "<p><strong>");
    cx_xml_text(f, summary);
    fprintf(f, "</strong></p>\n");
  }
  fprintf(f, "<table>\n<tr><th>model</th>");
  for (int i = 0; i < COLUMNS; i++) {
    if (!columns[i].header) continue;
    fprintf(f, "<th title=\"");
    cx_xml_text(f, columns[i].unit);
    fprintf(f, "\">");
    cx_xml_text(f, columns[i].header);
    fprintf(f, "</th>");
  }
  fprintf(f, "</tr>\n");
  for (int m = 0; m < r->n_models; m++) {
    const cx_report_model *mo = &r->models[m];
    fprintf(f, "<tr><td>");
    cx_xml_text(f, mo->name ? mo->name : "?");
    fprintf(f, "</td>");
    for (int i = 0; i < COLUMNS; i++) {
      if (!columns[i].header) continue;
      const cx_report_error *e = isfinite(columns[i].value(mo))
                                     ? NULL : cx_report_model_error(mo, columns[i].field);
      fprintf(f, "<td");
      if (e) fprintf(f, " title=\""), cx_xml_text(f, e->message), fprintf(f, "\"");
      fprintf(f, ">");
      cx_xml_text(f, model_cell(mo, &columns[i]).s);
      fprintf(f, "</td>");
    }
    fprintf(f, "</tr>\n");
  }
  fprintf(f, "</table>\n");
  error_notes(r, f, true);
  fprintf(f, "<p>Latency: median milliseconds per batch over %d runs with %s; CPU is "
          "compress&#39;s own runtime, ORT is ONNX Runtime ", r->latency_runs, threads_text(r).s);
  cx_xml_text(f, r->ort_version ? r->ort_version : "(not installed: not measured)");
  fprintf(f, ".</p>\n");
  if (!r->val_data) return;
  fprintf(f, "<p>Accuracy and loss: on ");
  cx_xml_text(f, r->val_data);
  if (r->val_part && *r->val_part) fprintf(f, ", part "), cx_xml_text(f, r->val_part);
  fprintf(f, ".</p>\n");
}

/* Top-1 against batch-1 latency, one labelled point per model: the trade-off at a glance. The
 * latency of the runtime that measured more of the models (ONNX Runtime on a tie), so that
 * every point is on one axis. */
static void html_tradeoff(const cx_report *r, FILE *f) {
  int n_ort = 0, n_cpu = 0;
  for (int m = 0; m < r->n_models; m++) {
    n_ort += isfinite(r->models[m].top1) && isfinite(r->models[m].ort_ms[0]);
    n_cpu += isfinite(r->models[m].top1) && isfinite(r->models[m].cpu_ms[0]);
  }
  bool ort = n_ort >= n_cpu;
  if (!(ort ? n_ort : n_cpu)) return;
  double *x = calloc((size_t)r->n_models, sizeof *x), *y = calloc((size_t)r->n_models, sizeof *y);
  const char **names = calloc((size_t)r->n_models, sizeof *names);
  if (x && y && names) {
    for (int m = 0; m < r->n_models; m++) {
      x[m] = ort ? r->models[m].ort_ms[0] : r->models[m].cpu_ms[0];
      y[m] = r->models[m].top1;
      names[m] = r->models[m].name;
    }
    cx_report_series pts = {"models", r->n_models, x, y};
    cx_svg_chart c = {"Top-1 against latency", ort ? "ONNX Runtime ms, batch 1"
                      : "compress ms, batch 1", "top-1 (%)", 0, 0, 1, &pts};
    fprintf(f, "<figure>\n");
    cx_svg_point_chart(f, &c, names);
    fprintf(f, "</figure>\n");
  }
  free(x);
  free(y);
  free(names);
}

static void html_stages(const cx_report *r, FILE *f) {
  if (!r->n_stages) return;
  fprintf(f, "<h2>Stages</h2>\n<table>\n<tr><th>stage</th><th>time</th><th>training img/s</th>"
          "<th>ranks</th><th>comm wait</th></tr>\n");
  for (int s = 0; s < r->n_stages; s++) {
    const cx_report_stage *st = &r->stages[s];
    fprintf(f, "<tr><td>");
    cx_xml_text(f, st->name);
    fprintf(f, "</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n",
            isfinite(st->seconds) ? fmt_time(st->seconds).s : "skipped (complete)",
            fmt_rate(st->images_per_s).s, ranks_text(st).s, comm_text(st).s);
  }
  fprintf(f, "</table>\n");
}

static void html_charts(const cx_report *r, FILE *f) {
  if (!r->n_stages) return;
  cx_report_series *loss = calloc((size_t)r->n_stages, sizeof *loss);
  cx_report_series *acc = calloc((size_t)r->n_stages, sizeof *acc);
  int nl = 0, na = 0;
  for (int s = 0; loss && acc && s < r->n_stages; s++) {
    const cx_report_stage *st = &r->stages[s];
    if (st->loss.n) loss[nl] = st->loss, loss[nl++].name = st->name;
    if (st->accuracy.n) acc[na] = st->accuracy, acc[na++].name = st->name;
  }
  fprintf(f, "<h2>Training curves</h2>\n");
  if (nl) {
    cx_svg_chart c = {"Training loss", "step", "loss", 0, 0, nl, loss};
    fprintf(f, "<figure>\n");
    cx_svg_line_chart(f, &c);
    fprintf(f, "</figure>\n");
  }
  if (na) {
    cx_svg_chart c = {"Validation top-1", "epoch", "top-1 (%)", 0, 0, na, acc};
    fprintf(f, "<figure>\n");
    cx_svg_line_chart(f, &c);
    fprintf(f, "</figure>\n");
  }
  if (!nl && !na) fprintf(f, "<p>No curves were recorded.</p>\n");
  free(loss);
  free(acc);
}

cx_status cx_report_html(const cx_report *r, FILE *f) {
  const char *title = r->title ? r->title : "compress report";
  fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>");
  cx_xml_text(f, title);
  fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", css);
  cx_xml_text(f, title);
  fprintf(f, "</h1>\n");
  html_models(r, f);
  html_tradeoff(r, f);
  html_stages(r, f);
  html_charts(r, f);
  fprintf(f, "<h2>Preprocessing</h2>\n<ul>\n");
  preprocess_text(f, &r->pre, true);
  fprintf(f, "</ul>\n");
  if (r->note) {
    fprintf(f, "<p>");
    cx_xml_text(f, r->note);
    fprintf(f, "</p>\n");
  }
  fprintf(f, "</body>\n</html>\n");
  return ferror(f) ? cx_fail(CX_ERR_IO, "writing the HTML report failed") : CX_OK;
}

/* ---- JSON ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  char buf[40];
  fputs(cx_json_number(v, buf), f);
}

static void json_int(FILE *f, int64_t v) {
  if (v < 0) fputs("null", f);
  else fprintf(f, "%lld", (long long)v);
}

static void json_array(FILE *f, const double *v, int n) {
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputc(',', f);
    json_num(f, v[i]);
  }
  fputc(']', f);
}

static void json_model(FILE *f, const cx_report_model *m) {
  fprintf(f, "{\"name\":");
  json_str(f, m->name);
  fprintf(f, ",\"arch\":");
  if (m->arch) json_str(f, m->arch);
  else fputs("null", f);
  fprintf(f, ",\"onnx\":");
  if (m->onnx_path) json_str(f, m->onnx_path);
  else fputs("null", f);
  for (int i = 0; i < COLUMNS; i++) {
    fprintf(f, ",\"%s\":", columns[i].field);
    double v = columns[i].value(m);
    if (columns[i].kind == COUNT || columns[i].kind == BYTES)
      json_int(f, isfinite(v) ? (int64_t)v : -1);
    else json_num(f, v);
  }
  /* each field left empty by an error: {"macs": {"reason": "not imported", "message": ...}} */
  fprintf(f, ",\"errors\":{");
  int n = 0;
  for (int i = 0; i < COLUMNS; i++) {
    const cx_report_error *e = cx_report_model_error(m, columns[i].field);
    if (!e || isfinite(columns[i].value(m))) continue;
    fprintf(f, "%s\"%s\":{\"reason\":", n++ ? "," : "", columns[i].field);
    json_str(f, e->reason);
    fprintf(f, ",\"message\":");
    json_str(f, e->message);
    fputc('}', f);
  }
  fprintf(f, "}}");
}

static void json_series(FILE *f, const cx_report_series *s) {
  fprintf(f, "{\"x\":");
  json_array(f, s->x, s->n);
  fprintf(f, ",\"y\":");
  json_array(f, s->y, s->n);
  fputc('}', f);
}

static void json_stage(FILE *f, const cx_report_stage *s) {
  fprintf(f, "{\"name\":");
  json_str(f, s->name);
  fprintf(f, ",\"seconds\":");
  json_num(f, s->seconds);
  fprintf(f, ",\"images_per_s\":");
  json_num(f, s->images_per_s);
  fprintf(f, ",\"ranks\":%d,\"comm_wait_fraction\":", s->ranks > 1 ? s->ranks : 1);
  json_num(f, s->ranks > 1 ? s->comm_wait : NAN);
  fprintf(f, ",\"loss\":");
  json_series(f, &s->loss);
  fprintf(f, ",\"val_top1\":");
  json_series(f, &s->accuracy);
  fputc('}', f);
}

static void json_preprocess(FILE *f, const cx_report_preprocess *p) {
  fprintf(f, "{\"layout\":");
  json_str(f, p->layout ? p->layout : "NCHW");
  fprintf(f, ",\"dtype\":\"float32\",\"channels\":%d,\"height\":%lld,\"width\":%lld,"
          "\"pixel_scale\":", p->channels, (long long)p->height, (long long)p->width);
  json_num(f, p->pixel_scale);
  fprintf(f, ",\"mean\":");
  json_array(f, p->mean, p->channels);
  fprintf(f, ",\"std\":");
  json_array(f, p->std, p->channels);
  fprintf(f, ",\"num_classes\":%d,\"class_names\":[", p->n_classes);
  for (int c = 0; c < p->n_classes && p->class_names; c++) {
    if (c) fputc(',', f);
    json_str(f, p->class_names[c]);
  }
  fprintf(f, "]}");
}

cx_status cx_report_json(const cx_report *r, FILE *f) {
  char created[32];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
  fprintf(f, "{\"format\":\"compress.report\",\"format_version\":1,\"created\":\"%s\",\"title\":",
          created);
  json_str(f, r->title ? r->title : "compress report");
  fprintf(f, ",\n\"preprocessing\":");
  json_preprocess(f, &r->pre);
  fprintf(f, ",\n\"validation\":{\"data\":");
  if (r->val_data) json_str(f, r->val_data);
  else fputs("null", f);
  fprintf(f, ",\"part\":");
  json_str(f, r->val_part ? r->val_part : "");
  fputc('}', f);
  fprintf(f, ",\n\"latency_runs\":%d,\"latency_threads\":%d,\"onnxruntime\":", r->latency_runs,
          r->latency_threads);
  if (r->ort_version) json_str(f, r->ort_version);
  else fputs("null", f);
  fprintf(f, ",\n\"teacher\":");
  if (r->teacher) json_str(f, r->teacher);
  else fputs("null", f);
  fprintf(f, ",\"baseline\":");
  if (r->baseline) json_str(f, r->baseline);
  else fputs("null", f);
  char summary[1024];
  fprintf(f, ",\"summary\":");
  if (cx_report_summary(r, summary, sizeof summary)) json_str(f, summary);
  else fputs("null", f);
  fprintf(f, ",\n\"columns\":[");
  for (int i = 0; i < COLUMNS; i++) {
    fprintf(f, "%s{\"field\":\"%s\",\"header\":", i ? "," : "", columns[i].field);
    if (columns[i].header) json_str(f, columns[i].header);
    else fputs("null", f);
    fprintf(f, ",\"unit\":");
    json_str(f, columns[i].unit);
    fputc('}', f);
  }
  fprintf(f, "],\n\"models\":[");
  for (int m = 0; m < r->n_models; m++) {
    fputs(m ? ",\n" : "\n", f);
    json_model(f, &r->models[m]);
  }
  fprintf(f, "],\n\"stages\":[");
  for (int s = 0; s < r->n_stages; s++) {
    fputs(s ? ",\n" : "\n", f);
    json_stage(f, &r->stages[s]);
  }
  fprintf(f, "],\n\"note\":");
  if (r->note) json_str(f, r->note);
  else fputs("null", f);
  fprintf(f, "}\n");
  return ferror(f) ? cx_fail(CX_ERR_IO, "writing the JSON report failed") : CX_OK;
}

/* ---- files ---- */

typedef cx_status (*writer)(const cx_report *, FILE *);

static cx_status write_one(const cx_report *r, const char *dir, const char *name, writer w) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  cx_file_out out;
  CX_TRY(cx_file_out_open(path, &out));
  cx_status s = w(r, out.f);
  if (s != CX_OK) return cx_file_out_abort(&out), s;
  return cx_file_out_commit(&out);
}

cx_status cx_report_write(const cx_report *r, const char *dir) {
  CX_TRY(write_one(r, dir, "report.md", cx_report_markdown));
  CX_TRY(write_one(r, dir, "report.html", cx_report_html));
  return write_one(r, dir, "report.json", cx_report_json);
}
