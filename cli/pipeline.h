#ifndef CX_CLI_PIPELINE_H
#define CX_CLI_PIPELINE_H

/* compress pipeline FILE.toml (docs/pipeline.md): a pipeline file read into stages that run in
 * order, each optional. A stage trains one model with cx_train (train/trainer.h) and writes one
 * ONNX file; the later stages of the compression journey (prune, quantize) join this list with
 * the same shape: a training table, a model in, a model out. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/toml.h"
#include "../train/train_config.h"
#include "train_common.h"

typedef enum cx_stage_id {
  CX_STAGE_TEACHER, /* [teacher]: spec trained under [teacher.train], or onnx (as it is) */
  CX_STAGE_SCRATCH, /* [student.train]: the student from scratch, the baseline for the report */
  CX_STAGE_DISTILL, /* [distill]: the student trained from the teacher (knowledge distillation) */
  CX_STAGE_COUNT
} cx_stage_id;

typedef struct cx_pipeline_stage {
  const char *name;   /* "teacher", "scratch", "distill": for --only, --from and folders */
  const char *output; /* "teacher.onnx", "student_scratch.onnx", "student.onnx" */
  const char *model;  /* the output's row in the report: "teacher", "student (scratch)", ... */
  bool present;
  bool trains;        /* false: a teacher given as ONNX, exported again with metadata */
  const cx_toml *table;    /* the stage's table, for messages */
  const cx_toml *training; /* its training settings table (NULL when it does not train) */
  cx_train_config tc;      /* [data] + the training table; tc.doc is borrowed */
  char hash[CX_TRAIN_HASH_MAX + 1]; /* all it depends on: the manifest's, for skipping */
} cx_pipeline_stage;

typedef struct cx_pipeline {
  cx_toml *doc;
  char *path;
  char *out_dir;     /* [run] out_dir resolved, or NULL */
  int64_t seed;      /* [run] seed: each stage's seed unless its table sets one */
  int threads;
  int keep_checkpoints;
  cx_cli_export export;
  double temperature, alpha; /* [distill] */
  const cx_toml *data, *distill_node;
  cx_pipeline_stage stages[CX_STAGE_COUNT];
} cx_pipeline;

/* Parses and checks the file (keys, types, ranges, which tables go together); opens nothing but
 * the file and, for the stage hashes, stats the files it names. On failure p holds nothing. */
cx_status cx_pipeline_load(const char *path, cx_pipeline *p);
/* Loads every model the stages need and checks them against the data: the data files open,
 * input shapes and class counts agree between data, teacher and student. */
cx_status cx_pipeline_check(cx_pipeline *p);
void cx_pipeline_free(cx_pipeline *p);
/* The stage called name, or -1. */
int cx_pipeline_stage_find(const char *name);

/* ---- the stage manifest (cli/pipeline_manifest.c) ----
 * <out>/stages/<stage>.done: the hash of a complete stage (first line), then its results;
 * <out>/stages/<stage>.started: the checkpoint hash of the run its checkpoints belong to, then
 * the time spent in it before an interruption. Lines after the first are "key value". */

typedef struct cx_stage_result {
  double seconds;       /* wall time of the stage (load, train, export), over all its runs */
  double train_seconds; /* in the training loop, over all its runs; NAN: it did not train */
  double images_per_s;  /* training throughput (its last run); NAN: it did not train */
  int64_t steps;
  cx_eval_result val;   /* its model on the validation set; n 0: not evaluated */
  /* distillation: batches whose teacher outputs were computed, and read from the cache */
  int64_t teacher_batches, cached_batches;
} cx_stage_result;

/* Every time NAN, every count 0. */
cx_stage_result cx_stage_result_empty(void);
void cx_pipeline_manifest_path(const char *out, const char *stage, const char *what, char *buf,
                               size_t size);
/* Whether out/stages/<stage>.<what> is there with hash on its first line; when r is not NULL,
 * the results after it are read into r (those missing keep cx_stage_result_empty's values). */
bool cx_pipeline_manifest_read(const char *out, const char *stage, const char *what,
                               const char *hash, cx_stage_result *r);
/* Writes it (temporary name, renamed) with hash and, when r is not NULL, the results. */
cx_status cx_pipeline_manifest_write(const char *out, const char *stage, const char *what,
                                     const char *hash, const cx_stage_result *r);

/* ---- the report (cli/pipeline_report.c) ---- */

/* Writes out/report.md, report.html and report.json for every stage that is complete (its
 * output there and its manifest's hash current): each stage's model (top-1, top-5 and loss on
 * the validation set and its training time and throughput from the manifest; parameters, MACs,
 * file size and latency at batch 1 and 32, ours and ONNX Runtime's when it is installed,
 * measured from the ONNX file), the stages' curves from out/metrics.jsonl and the input
 * preprocessing. Stages that are not complete are left out; *models: the rows written (0: no
 * stage is complete, and no report is written). */
cx_status cx_pipeline_report(const cx_pipeline *p, const char *out, int *models);

/* ---- knowledge distillation (cli/pipeline_kd.c: the one place that connects distill/) ---- */

typedef struct cx_pipeline_kd cx_pipeline_kd;
/* Whether this build has knowledge distillation. */
bool cx_pipeline_kd_available(void);
/* Sets o->build_graph and o->feed to train with the KD loss against teacher; they take
 * o->user, which the caller points at a struct whose first member is the cx_pipeline_kd *. */
cx_status cx_pipeline_kd_begin(const cx_graph *teacher, double temperature, double alpha,
                               const char *cache_dir, cx_train_opts *o, cx_pipeline_kd **out);
/* Batches whose teacher outputs were computed (the teacher ran), and read from the cache. */
void cx_pipeline_kd_counts(const cx_pipeline_kd *kd, int64_t *teacher_batches,
                           int64_t *cached_batches);
cx_status cx_pipeline_kd_end(cx_pipeline_kd *kd);

#endif
