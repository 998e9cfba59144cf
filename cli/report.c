/* The report in three forms from one struct: Markdown for the terminal and README notes, HTML
 * with SVG charts for people, JSON for programs. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../train/metrics.h"

cx_report_model cx_report_model_empty(const char *name) {
  return (cx_report_model){.name = name, .top1 = NAN, .top5 = NAN, .val_loss = NAN,
                           .params = -1, .macs = -1,
                           .onnx_bytes = -1, .cpu_ms = {NAN, NAN}, .ort_ms = {NAN, NAN},
                           .train_seconds = NAN, .train_images_per_s = NAN};
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

static cell threads_text(const cx_report *r) {
  cell c = {"each runtime's default threads"};
  if (r->latency_threads > 0)
    snprintf(c.s, sizeof c.s, "%d thread%s", r->latency_threads, r->latency_threads > 1 ? "s" : "");
  return c;
}

/* The columns of the model table, shared by Markdown and HTML. */
enum { COLUMNS = 12 };
static const char *const headers[COLUMNS] = {
    "model", "top-1", "top-5", "val loss", "params", "MACs", "ONNX size", "CPU b1", "CPU b32",
    "ORT b1", "ORT b32", "training"};

static void model_cells(const cx_report_model *m, cell out[COLUMNS]) {
  snprintf(out[0].s, sizeof out[0].s, "%s", m->name ? m->name : "?");
  out[1] = fmt_pct(m->top1);
  out[2] = fmt_pct(m->top5);
  out[3] = fmt_loss(m->val_loss);
  out[4] = fmt_count(m->params);
  out[5] = fmt_count(m->macs);
  out[6] = fmt_bytes(m->onnx_bytes);
  out[7] = fmt_ms(m->cpu_ms[0]);
  out[8] = fmt_ms(m->cpu_ms[1]);
  out[9] = fmt_ms(m->ort_ms[0]);
  out[10] = fmt_ms(m->ort_ms[1]);
  out[11] = fmt_time(m->train_seconds);
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

cx_status cx_report_markdown(const cx_report *r, FILE *f) {
  fprintf(f, "# %s\n\n", r->title ? r->title : "compress report");
  for (int i = 0; i < COLUMNS; i++) fprintf(f, "| %s ", headers[i]);
  fprintf(f, "|\n");
  for (int i = 0; i < COLUMNS; i++) fprintf(f, i ? "|---:" : "|---");
  fprintf(f, "|\n");
  for (int m = 0; m < r->n_models; m++) {
    cell c[COLUMNS];
    model_cells(&r->models[m], c);
    for (int i = 0; i < COLUMNS; i++) fprintf(f, "| %s ", c[i].s);
    fprintf(f, "|\n");
  }
  fprintf(f, "\nLatency: median milliseconds per batch over %d runs (batch 1 and 32) with %s; "
          "CPU is compress's own runtime, ORT is ONNX Runtime %s.\n", r->latency_runs,
          threads_text(r).s, r->ort_version ? r->ort_version : "(not installed: not measured)");
  if (r->val_data)
    fprintf(f, "Accuracy and loss: on %s%s%s.\n", r->val_data, r->val_part && *r->val_part ?
            ", part " : "", r->val_part ? r->val_part : "");
  if (r->n_stages)
    fprintf(f, "\n## Stages\n\n| stage | time | training img/s |\n|---|---:|---:|\n");
  for (int s = 0; s < r->n_stages; s++) {
    const cx_report_stage *st = &r->stages[s];
    fprintf(f, "| %s | %s | %s |\n", st->name, isfinite(st->seconds) ? fmt_time(st->seconds).s
            : "skipped (complete)", fmt_rate(st->images_per_s).s);
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
  fprintf(f, "<table>\n<tr>");
  for (int i = 0; i < COLUMNS; i++) fprintf(f, "<th>%s</th>", headers[i]);
  fprintf(f, "</tr>\n");
  for (int m = 0; m < r->n_models; m++) {
    cell c[COLUMNS];
    model_cells(&r->models[m], c);
    fprintf(f, "<tr>");
    for (int i = 0; i < COLUMNS; i++) {
      fprintf(f, "<td>");
      cx_xml_text(f, c[i].s);
      fprintf(f, "</td>");
    }
    fprintf(f, "</tr>\n");
  }
  fprintf(f, "</table>\n<p>Latency: median milliseconds per batch over %d runs with %s; CPU is "
          "compress&#39;s own runtime, ORT is ONNX Runtime ", r->latency_runs, threads_text(r).s);
  cx_xml_text(f, r->ort_version ? r->ort_version : "(not installed: not measured)");
  fprintf(f, ".</p>\n");
  if (!r->val_data) return;
  fprintf(f, "<p>Accuracy and loss: on ");
  cx_xml_text(f, r->val_data);
  if (r->val_part && *r->val_part) fprintf(f, ", part "), cx_xml_text(f, r->val_part);
  fprintf(f, ".</p>\n");
}

static void html_stages(const cx_report *r, FILE *f) {
  if (!r->n_stages) return;
  fprintf(f, "<h2>Stages</h2>\n<table>\n<tr><th>stage</th><th>time</th><th>training img/s</th>"
          "</tr>\n");
  for (int s = 0; s < r->n_stages; s++) {
    const cx_report_stage *st = &r->stages[s];
    fprintf(f, "<tr><td>");
    cx_xml_text(f, st->name);
    fprintf(f, "</td><td>%s</td><td>%s</td></tr>\n",
            isfinite(st->seconds) ? fmt_time(st->seconds).s : "skipped (complete)",
            fmt_rate(st->images_per_s).s);
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
  const char *keys[] = {"top1", "top5", "val_loss", "cpu_ms_batch1", "cpu_ms_batch32",
                        "ort_ms_batch1", "ort_ms_batch32", "train_seconds", "train_images_per_s"};
  const double vals[] = {m->top1, m->top5, m->val_loss, m->cpu_ms[0], m->cpu_ms[1],
                         m->ort_ms[0], m->ort_ms[1], m->train_seconds, m->train_images_per_s};
  for (int i = 0; i < 9; i++) {
    fprintf(f, ",\"%s\":", keys[i]);
    json_num(f, vals[i]);
  }
  fprintf(f, ",\"params\":");
  json_int(f, m->params);
  fprintf(f, ",\"macs\":");
  json_int(f, m->macs);
  fprintf(f, ",\"onnx_bytes\":");
  json_int(f, m->onnx_bytes);
  fputc('}', f);
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
  fprintf(f, ",\n\"models\":[");
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
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) return cx_fail(CX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
  cx_status s = w(r, f);
  if (fclose(f) != 0 && s == CX_OK)
    s = cx_fail(CX_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
  if (s == CX_OK && rename(tmp, path) != 0)
    s = cx_fail(CX_ERR_IO, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
  if (s != CX_OK) unlink(tmp);
  return s;
}

cx_status cx_report_write(const cx_report *r, const char *dir) {
  CX_TRY(write_one(r, dir, "report.md", cx_report_markdown));
  CX_TRY(write_one(r, dir, "report.html", cx_report_html));
  return write_one(r, dir, "report.json", cx_report_json);
}
