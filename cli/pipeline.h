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
  cx_precision precision; /* [run] precision: likewise */
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

/* ---- knowledge distillation (cli/pipeline_kd.c: the one place that connects distill/) ---- */

typedef struct cx_pipeline_kd cx_pipeline_kd;
/* Whether this build has knowledge distillation. */
bool cx_pipeline_kd_available(void);
/* Sets o->build_graph and o->feed to train with the KD loss against teacher; they take
 * o->user, which the caller points at a struct whose first member is the cx_pipeline_kd *. */
cx_status cx_pipeline_kd_begin(const cx_graph *teacher, double temperature, double alpha,
                               const char *cache_dir, cx_train_opts *o, cx_pipeline_kd **out);
cx_status cx_pipeline_kd_end(cx_pipeline_kd *kd);

#endif
