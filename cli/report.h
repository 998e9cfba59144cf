#ifndef CX_REPORT_H
#define CX_REPORT_H

/* The pipeline's report: models side by side (accuracy, size, cost, measured latency, training
 * time) and every stage's loss and accuracy curves, written as report.md, report.html (self-
 * contained, with inline SVG charts) and report.json (docs/distill.md lists its fields). Each
 * file is written under a temporary name and renamed into place. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/graph.h"
#include "../core/status.h"

/* One line of a chart: n points (x[i], y[i]); a non-finite y breaks the line. */
typedef struct cx_report_series {
  const char *name;
  int n;
  const double *x, *y;
} cx_report_series;

/* Why some of a model's numbers could not be measured (its ONNX does not import into our
 * runtime, ONNX Runtime refuses it, ...): their cells show the reason, report.json the message. */
typedef struct cx_report_error {
  char fields[128];  /* the report.json keys it leaves empty, space separated: "macs params" */
  char reason[32];   /* what their cells show: "not imported", "refused" */
  char message[480]; /* the whole message */
} cx_report_error;

enum { CX_REPORT_ERRORS = 6 };

typedef struct cx_report_model {
  const char *name;        /* "teacher", "student (distilled)", "student (scratch)" */
  const char *arch;        /* "resnet20", "mobilenet_v2:width=0.5", an ONNX path; may be NULL */
  const char *onnx_path;   /* the exported model, NULL if none */
  double top1, top5;       /* percent on the validation set; NAN: not measured */
  double ort_top1;         /* top-1 of the ONNX file in ONNX Runtime on the same set; NAN: none */
  double val_loss;         /* mean cross-entropy on the validation set; NAN: not measured */
  int64_t params, macs;    /* trainable values, MACs per image (cx_graph_measure_cost); -1: unknown */
  int64_t params_nonzero;  /* of the params, those not exactly zero; -1: unknown */
  int64_t macs_effective;  /* MACs whose weight is not exactly zero; -1: unknown */
  int64_t onnx_bytes;      /* -1: no file */
  int64_t onnx_gzip_bytes; /* the file gzip-compressed (cx_report_gzip_size); -1: unknown */
  double cpu_ms[2];        /* median ms per batch of 1 and 32 on our CPU runtime; NAN: none */
  double ort_ms[2];        /* the same in ONNX Runtime; NAN: not measured */
  double train_seconds;    /* NAN: not trained by this run */
  double train_images_per_s;
  int n_errors;
  cx_report_error errors[CX_REPORT_ERRORS];
} cx_report_model;

typedef struct cx_report_stage {
  const char *name;           /* "teacher", "distill", "scratch" */
  double seconds;             /* wall time of the stage; NAN: skipped (complete before) */
  double images_per_s;        /* training throughput (all ranks); NAN: none */
  int ranks;                  /* data-parallel ranks it trained on; 0 or 1: one process */
  double comm_wait;           /* with ranks > 1: share of step time waiting for reductions */
  cx_report_series loss;      /* training loss by step */
  cx_report_series accuracy;  /* validation top-1 (percent) by epoch */
} cx_report_stage;

/* How to feed the models: repeated from the ONNX metadata so any runtime can. */
typedef struct cx_report_preprocess {
  const char *layout;  /* "NCHW" */
  double pixel_scale;  /* what uint8 pixels are multiplied by first (1/255) */
  int channels;        /* 1 to 4: mean and std entries used */
  double mean[4], std[4];
  int64_t height, width;
  int n_classes;
  const char *const *class_names; /* n_classes names, or NULL */
} cx_report_preprocess;

typedef struct cx_report {
  const char *title;
  int n_models;
  const cx_report_model *models;
  int n_stages;
  const cx_report_stage *stages;
  cx_report_preprocess pre;
  const char *val_data;      /* the validation set the accuracies are from (HDF5); may be NULL */
  const char *val_part;      /* its part; NULL or "": the main one */
  int latency_runs;          /* runs the latency medians were taken over */
  int latency_threads;       /* threads both runtimes used; 0: their defaults */
  const char *ort_version;   /* NULL: ONNX Runtime not installed */
  const char *note;          /* a paragraph of free text, or NULL */
  /* The summary line compares the last model (the final one, in stage order) against the
   * models of these names; NULL (or the last model itself): that comparison is left out. */
  const char *teacher;       /* "teacher" */
  const char *baseline;      /* the uncompressed student: "student (scratch)" */
} cx_report;

/* A model with every number NAN (or -1): fill in what is known. */
cx_report_model cx_report_model_empty(const char *name);
/* Records that fields (report.json keys, space separated) could not be measured: reason is the
 * cells' short text, message the whole story. Past CX_REPORT_ERRORS it is dropped. */
void cx_report_model_fail(cx_report_model *m, const char *fields, const char *reason,
                          const char *message);
/* The error that left field empty, or NULL. */
const cx_report_error *cx_report_model_error(const cx_report_model *m, const char *field);

/* Writes dir/report.md, dir/report.html and dir/report.json. */
cx_status cx_report_write(const cx_report *r, const char *dir);
/* The three forms, each to a stream (what cx_report_write writes). */
cx_status cx_report_markdown(const cx_report *r, FILE *f);
cx_status cx_report_html(const cx_report *r, FILE *f);
cx_status cx_report_json(const cx_report *r, FILE *f);

/* The sentence above the tables, e.g. "student (distilled): 4.6x fewer MACs, 2.6x smaller file,
 * 1.9x faster in ONNX Runtime (batch 1), -1.76 points top-1 vs teacher; +0.13 points top-1 vs
 * student (scratch)"; numbers missing on either side are left out. Returns false (buf empty)
 * when there is nothing to say. */
bool cx_report_summary(const cx_report *r, char *buf, size_t size);

/* ---- measurements ---- */

/* Bytes of the file compressed by zlib in gzip format at level 9 (what Python's
 * gzip.compress(data) gives): how far sparse or repetitive weights would shrink in transit. */
cx_status cx_report_gzip_size(const char *path, int64_t *bytes);

/* What measuring a list of models shares: settings, and what it learned about ONNX Runtime. */
typedef struct cx_report_measurer {
  int runs;             /* latency: the median of this many runs */
  int threads;          /* both runtimes; 0: their defaults */
  bool ort_missing;     /* ONNX Runtime is not installed (found out once, not tried again) */
  const char *val_data; /* the validation set for ONNX Runtime's top-1 (NULL: not measured) */
  const char *val_part; /* its part; NULL or "": the main one */
  char ort_version[64]; /* set when ONNX Runtime ran */
} cx_report_measurer;

/* Everything the report measures from a model's ONNX file into m: file and gzip size, cost,
 * latency at batch 1 and 32 on our runtime and in ONNX Runtime, and ONNX Runtime's top-1 on
 * ms->val_data when it is set. What cannot be measured (the
 * file does not import, a runtime refuses it) is recorded in m's errors and the rest is still
 * measured, so this fails only on bad arguments. */
cx_status cx_report_measure_onnx(cx_report_measurer *ms, const char *path, cx_report_model *m);

/* Median milliseconds of `runs` forward passes of an inference program of `model` at `batch`
 * (after two warm-up runs), on inputs of 0.5, with `threads` OpenMP threads (0: the default;
 * the caller's setting is restored). */
cx_status cx_report_cpu_latency(const cx_graph *model, int64_t batch, int runs, int threads,
                                double *ms);

/* The same in ONNX Runtime, through $CX_PYTHON (else /opt/compress-venv/bin/python3, the venv of scripts/install-deps.sh, else /usr/bin/python3) and an embedded script;
 * CX_ERR_UNSUPPORTED when python or onnxruntime is missing. threads 0: ONNX Runtime's default.
 * version (may be NULL) receives onnxruntime's version. */
cx_status cx_report_ort_latency(const char *onnx_path, int64_t batch, int runs, int threads,
                                double *ms, char *version, size_t version_size);

/* Top-1 (percent) of the file in ONNX Runtime on an HDF5 data set (its "images" and "labels",
 * in the group part or at the root), preprocessed as the file's compress.input_* metadata says;
 * through the same python as cx_report_ort_latency, which also needs h5py here. */
cx_status cx_report_ort_top1(const char *onnx_path, const char *data, const char *part,
                             int threads, double *top1);

/* A curve from a metrics.jsonl file (train/metrics.h): the lines that contain `filter` (NULL:
 * all) and both keys, as (x_key, y_key) pairs; *x and *y are malloc'ed. x rises: a line whose x
 * is not above the last one's starts a later run (a stage run again, or resumed from an earlier
 * step), whose points replace those from its x on. A missing file gives an error, a file without
 * such lines an empty series. */
cx_status cx_report_metrics_series(const char *path, const char *filter, const char *x_key,
                                   const char *y_key, cx_report_series *out);
void cx_report_series_free(cx_report_series *s);

/* ---- SVG ---- */

typedef struct cx_svg_chart {
  const char *title, *x_label, *y_label;
  int width, height; /* pixels; 0: 560 x 320 */
  int n_series;
  const cx_report_series *series;
} cx_svg_chart;

/* An <svg> element (well-formed XML) with axes, ticks, a legend and one line per series. */
void cx_svg_line_chart(FILE *f, const cx_svg_chart *c);
/* The same frame with the points of series[0] as dots, point i labelled names[i], no lines. */
void cx_svg_point_chart(FILE *f, const cx_svg_chart *c, const char *const *names);
/* Points against each other: every series' points as dots in its colour, with a legend;
 * series[0]'s labelled names[i] (may be NULL); the later series (a Pareto front, sorted by x)
 * drawn over it, joined by a line. */
void cx_svg_scatter_chart(FILE *f, const cx_svg_chart *c, const char *const *names);
/* Text escaped for XML and HTML (& < > " '). */
void cx_xml_text(FILE *f, const char *s);

#endif
