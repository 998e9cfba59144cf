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
#include "device.h"
#include "prune_config.h"
#include "quantize_config.h"
#include "train_common.h"

enum { CX_STAGE_COUNT = 5 }; /* the records of cx_stage_defs */

typedef struct cx_pipeline cx_pipeline;
typedef struct cx_pipeline_stage cx_pipeline_stage;
typedef struct cx_stage_run cx_stage_run;

/* A stage record (cli/pipeline_stages.c holds the table, in run order): everything that makes
 * one stage differ from another. The runner, the hashes, the manifest and the report only walk
 * the table; adding a stage is adding a record. NULL functions take the common behaviour. */
typedef struct cx_stage_def {
  const char *name;   /* "teacher", "scratch", "distill", "prune", "quantize": --only, folders */
  const char *output; /* "teacher.onnx", ... in the output folder */
  const char *model;  /* the output's row in the report: "teacher", "student (distilled)" */
  /* What the report's summary line compares the final model with: the teacher, and the
   * uncompressed student (the baseline); other stages are plain rows. */
  enum { CX_STAGE_ROW, CX_STAGE_TEACHER_ROW, CX_STAGE_BASELINE_ROW } report_role;
  /* The stages whose output model this one may take, nearest first, NULL-terminated: the first
   * present is its input (teacher -> distill -> prune -> quantize). NULL: it takes none. */
  const char *const *inputs;
  /* Reads its table(s): on success s->present says whether the file has the stage. */
  cx_status (*read)(cx_pipeline *p, cx_pipeline_stage *s);
  /* What its output depends on beyond its tables, files, seed, precision and its input's hash
   * (appended to buf). */
  void (*salt)(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf, size_t size);
  /* The model it trains; NULL: the model its table names (cx_cli_train_load_model). It runs
   * on the same cx_stage_run as begin and end, so what it opens in r->state (QAT's calibrated
   * extension) serves the training run, and end frees it whatever failed. */
  cx_status (*load_model)(cx_stage_run *r, cx_graph **g, char **old_input);
  /* Checks before anything runs, against the model the stage's table names (for a stage that
   * trains an earlier stage's output: the same architecture before that stage changed it). */
  cx_status (*check)(const cx_pipeline *p, const cx_pipeline_stage *s, const cx_graph *model);
  /* Before training: its trainer extensions (cx_stage_run_add); after (also after a failure,
   * and for a stage that does not train): its results into r->result, and what load_model and
   * begin opened freed. */
  cx_status (*begin)(cx_stage_run *r);
  /* After training that ran to its end, before `end`: the model to evaluate and export in place
   * of the trained one (*g replaced, the old graph freed; QAT: the trained weights with their
   * FakeQuantize nodes at the final scales). NULL: the trained model. */
  cx_status (*trained_model)(cx_stage_run *r, cx_graph **g);
  cx_status (*end)(cx_stage_run *r);
  /* A sentence for the report about its output model (the ONNX file at path), or nothing. */
  void (*report_note)(const cx_pipeline *p, const cx_pipeline_stage *s, const char *path,
                      char *buf, size_t size);
  /* Its accuracy is measured on its exported file, as our runtime imports it (the INT8 model:
   * the INT8 runtime, not the float simulation the stage trained). */
  bool score_output;
  /* What the model it trains is before training, when that is worth a top-1 of its own (QAT:
   * "PTQ, before QAT"; one-shot channel pruning: "pruned, before fine-tuning"), or NULL. The
   * runner then evaluates that model and the report's notes give the figure beside the
   * stage's. NULL function: never. */
  const char *(*start_label)(const cx_pipeline *p);
} cx_stage_def;

extern const cx_stage_def cx_stage_defs[CX_STAGE_COUNT];

struct cx_pipeline_stage {
  const cx_stage_def *def;
  const char *name, *output, *model; /* def's */
  bool present;
  bool trains;        /* false: a teacher given as ONNX, exported again with metadata */
  int input;          /* the stage whose output it takes (def->inputs), or -1 */
  const cx_toml *table;    /* the stage's table, for messages */
  const cx_toml *training; /* its training settings table (NULL when it does not train) */
  cx_train_config tc;      /* [data] + the training table; tc.doc is borrowed */
  char hash[CX_TRAIN_HASH_MAX + 1]; /* all it depends on, its input's hash included */
};

struct cx_pipeline {
  cx_toml *doc;
  char *path;
  char *out_dir;     /* [run] out_dir resolved, or NULL */
  int64_t seed;      /* [run] seed: each stage's seed unless its table sets one */
  cx_precision precision; /* [run] precision: likewise */
  int threads;
  int keep_checkpoints;
  const cx_backend *backend; /* [run] device's (cli/device.h), set by cx_pipeline_check */
  cx_cli_export export;
  double temperature, alpha; /* [distill] (its defaults without one) */
  cx_precision teacher_precision; /* [teacher] precision: its forward pass when distilled from */
  bool teacher_int8;              /* precision = "int8": that pass on the teacher quantized by PTQ
                                     (teacher_precision is then fp32: the float ops around) */
  const cx_toml *teacher_precision_node;
  cx_cli_prune prune;        /* [prune]'s pruning keys */
  cx_cli_quant quant;        /* [quantize]'s quantization keys */
  const cx_toml *data;
  cx_pipeline_stage stages[CX_STAGE_COUNT];
};

/* Parses and checks the file (keys, types, ranges, which tables go together); opens nothing but
 * the file and, for the stage hashes, stats the files it names. On failure p holds nothing. */
cx_status cx_pipeline_load(const char *path, cx_pipeline *p);
/* Chooses the backend (backend, or NULL: [run] device's) and checks that it computes in each
 * stage's precision; loads every model the stages need and checks them against the data: the
 * data files open, input shapes and class counts agree between data, teacher and student. */
cx_status cx_pipeline_check(cx_pipeline *p, const cx_backend *backend);
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
  double images_per_s;  /* training throughput (its last run, all ranks); NAN: it did not train */
  int64_t steps;
  /* data parallelism (its last run): the ranks (0: it did not train), and the share of the
   * training steps' time spent waiting for the gradient reductions */
  int64_t ranks;
  double comm_wait;
  cx_eval_result val;   /* its model on the validation set; n 0: not evaluated */
  cx_eval_result start; /* its model before training (cx_stage_def.start_label); n 0: none */
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
 * the validation set and its training time and throughput from the manifest; parameters total
 * and non-zero, MACs dense and effective, file and gzip size and latency at batch 1 and 32, ours
 * and ONNX Runtime's when it is installed, measured from the ONNX file; a cell that could not be
 * measured says why), a summary line (the final model against the report_role rows), the
 * stages' curves from out/metrics.jsonl and the input preprocessing. Stages that are not
 * complete are left out; *models: the rows written (0: no stage is complete, and no report is
 * written). */
cx_status cx_pipeline_report(const cx_pipeline *p, const char *out, int *models);

/* ---- running a stage (cli/cmd_pipeline.c runs, the records' functions fill in) ---- */

struct cx_stage_run {
  const cx_pipeline *p;
  const cx_pipeline_stage *s;
  const char *out;          /* the output folder */
  const cx_graph *input;    /* the input stage's output model, or NULL */
  cx_train_opts *opts;      /* the stage's training options */
  cx_stage_result *result;  /* begin/end add their counts to it */
  void *state;              /* the record's own, from load_model or begin until end */
  cx_train_ext ext[8];      /* the training run's extensions: opts->extensions points here */
  int n_ext;
};
/* Appends an extension to the stage's training run (after the metrics writers). */
cx_status cx_stage_run_add(cx_stage_run *r, const cx_train_ext *e);

/* The records' functions (cli/pipeline_config.c reads, cli/pipeline_kd.c distils). */
cx_status cx_pipeline_read_teacher(cx_pipeline *p, cx_pipeline_stage *s);
cx_status cx_pipeline_read_scratch(cx_pipeline *p, cx_pipeline_stage *s);
cx_status cx_pipeline_read_distill(cx_pipeline *p, cx_pipeline_stage *s);
void cx_pipeline_distill_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                              size_t size);
/* Whether this build has knowledge distillation. */
bool cx_pipeline_kd_available(void);
/* Adds distillation from teacher to the stage's run (*kd: what _end closes, adding the teacher's
 * batch counts to r->result); the temperature and alpha are [distill]'s. */
cx_status cx_pipeline_kd_begin(cx_stage_run *r, const cx_graph *teacher, void **kd);
cx_status cx_pipeline_kd_end(cx_stage_run *r, void *kd);
/* A later stage's fine-tune (prune, QAT) distils from the pipeline's teacher, teacher.onnx, when
 * the file has a [teacher] and the build has distill/ (else _begin adds nothing): the teacher's
 * graph and the KD state, which _end closes. The salt appends what the distillation depends on. */
typedef struct cx_pipeline_kd_tune {
  cx_graph *teacher;
  void *kd;
} cx_pipeline_kd_tune;
bool cx_pipeline_has_teacher(const cx_pipeline *p);
void cx_pipeline_kd_tune_salt(const cx_pipeline *p, char *buf, size_t size);
/* What the teacher's precision adds to the hash of every stage that distils. */
void cx_pipeline_teacher_salt(const cx_pipeline *p, char *buf, size_t size);
cx_status cx_pipeline_kd_tune_begin(cx_stage_run *r, cx_pipeline_kd_tune *t);
cx_status cx_pipeline_kd_tune_end(cx_stage_run *r, cx_pipeline_kd_tune *t);
cx_status cx_pipeline_distill_begin(cx_stage_run *r);
cx_status cx_pipeline_distill_end(cx_stage_run *r);
/* The prune stage (cli/pipeline_prune.c). */
cx_status cx_pipeline_read_prune(cx_pipeline *p, cx_pipeline_stage *s);
void cx_pipeline_prune_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                            size_t size);
cx_status cx_pipeline_prune_check(const cx_pipeline *p, const cx_pipeline_stage *s,
                                  const cx_graph *model);
cx_status cx_pipeline_prune_model(cx_stage_run *r, cx_graph **g, char **old_input);
cx_status cx_pipeline_prune_begin(cx_stage_run *r);
cx_status cx_pipeline_prune_trained(cx_stage_run *r, cx_graph **g);
cx_status cx_pipeline_prune_end(cx_stage_run *r);
void cx_pipeline_prune_note(const cx_pipeline *p, const cx_pipeline_stage *s, const char *path,
                            char *buf, size_t size);
const char *cx_pipeline_prune_start(const cx_pipeline *p);
/* The quantize stage (cli/pipeline_quantize.c). */
cx_status cx_pipeline_read_quantize(cx_pipeline *p, cx_pipeline_stage *s);
void cx_pipeline_quantize_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                               size_t size);
cx_status cx_pipeline_quantize_model(cx_stage_run *r, cx_graph **g, char **old_input);
cx_status cx_pipeline_quantize_begin(cx_stage_run *r);
cx_status cx_pipeline_quantize_trained(cx_stage_run *r, cx_graph **g);
cx_status cx_pipeline_quantize_end(cx_stage_run *r);
void cx_pipeline_quantize_note(const cx_pipeline *p, const cx_pipeline_stage *s,
                               const char *path, char *buf, size_t size);
const char *cx_pipeline_quantize_start(const cx_pipeline *p);

#endif
