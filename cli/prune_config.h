#ifndef CX_CLI_PRUNE_CONFIG_H
#define CX_CLI_PRUNE_CONFIG_H

/* The pruning keys (docs/prune.md), read from the pipeline's [prune] table or from the options of
 * `compress prune`, which the command writes as such a table: one reader, one set of messages. */

#include "../core/program.h"
#include "../core/toml.h"
#include "../prune/channel.h"
#include "../prune/prune.h"
#include "../train/trainer.h"

/* The keys read_prune_config takes, NULL-terminated (the training keys come on top). */
extern const char *const cx_cli_prune_keys[];

typedef struct cx_cli_prune {
  cx_prune_config c;
  const char **globs; /* include then exclude, pointing into the document; owned array */
  const cx_toml *table;
  int taylor_batches; /* importance "taylor": batches of the scoring pass (cli/prune_channels.c) */
  int recalibrate_bn; /* channel: batches of BatchNorm recalibration after the cut; 0: none */
  bool allocate_sensitivity; /* allocate = "sensitivity": per-layer ratios from the scan */
} cx_cli_prune;

/* Reads the keys of t (other keys are the caller's) into p->c and checks them. */
cx_status cx_cli_prune_read(const cx_toml *t, cx_cli_prune *p);
void cx_cli_prune_free(cx_cli_prune *p);
/* "magnitude", "2:4", "channel" (for messages and the report). */
const char *cx_cli_prune_method_name(const cx_prune_config *c, char *buf, size_t size);

/* ---- sensitivity (cli/prune_sensitivity.c) ---- */

enum { CX_CLI_SENSITIVITY_STEPS = 9 };
extern const double cx_cli_sensitivity_levels[CX_CLI_SENSITIVITY_STEPS]; /* 0.1 ... 0.9 */

/* Where a model is evaluated: a data set part, its preprocessing, the backend. */
typedef struct cx_cli_eval_data {
  const char *path, *part;
  const cx_augment *pre;
  const cx_backend *backend;
} cx_cli_eval_data;

typedef struct cx_cli_sensitivity {
  int n;          /* rows */
  char **names;   /* magnitude: the prunable layers; channel: the unfrozen groups' producers */
  double base;    /* top-1 of the model as given */
  double *top1;   /* [n][CX_CLI_SENSITIVITY_STEPS]: with only that row pruned at each level */
} cx_cli_sensitivity;

/* Each row of c's selection pruned alone at every level (magnitude: the layer's weights at that
 * sparsity; channel: that fraction of the group's channels, ranked by c's importance, taylor
 * the scores for "taylor") and evaluated on ev; a line per row to log (may be NULL). */
cx_status cx_cli_sensitivity_scan(const cx_graph *model, const cx_prune_config *c,
                                  const cx_prune_scores *taylor, const char *name,
                                  const cx_cli_eval_data *ev, FILE *log,
                                  cx_cli_sensitivity *out);
void cx_cli_sensitivity_free(cx_cli_sensitivity *s);

/* ---- passes over the training data (cli/prune_channels.c) ---- */

/* The model with its cross-entropy loss compiled for training at o's micro-batch, and a loader
 * of o's training data (o->train_path, part, seed; the evaluation preprocessing, no random
 * augmentation; full batches): the passes that read training data before the channels are
 * chosen (Taylor scores) or after they are cut (BatchNorm recalibration). Seeded, so a resumed
 * stage sees the same batches and rebuilds the same graph. */
typedef struct cx_cli_prune_pass {
  cx_program *p;
  cx_loader *l;
  const char *path;
  int64_t epoch, batches;
} cx_cli_prune_pass;

cx_status cx_cli_prune_pass_open(const cx_graph *model, const cx_train_opts *o,
                                 cx_cli_prune_pass *pass);
/* The next batch (a new epoch after the last) written into the program and run forward. */
cx_status cx_cli_prune_pass_forward(cx_cli_prune_pass *pass);
void cx_cli_prune_pass_close(cx_cli_prune_pass *pass);

/* ---- Taylor importance (cli/prune_channels.c) ---- */

/* The scoring pass: the model's cross-entropy loss forward and backward on `batches` batches of
 * o's training data (o->train_path, part, micro-batch size, seed, evaluation preprocessing, on
 * o->backend), no update; *out holds the accumulated |w * dL/dw| (cx_channel_taylor_scores).
 * The model is not changed. */
cx_status cx_cli_prune_taylor(const cx_graph *model, const cx_train_opts *o, int batches,
                              cx_channel_taylor **out);
/* ---- BatchNorm recalibration (cli/prune_recalibrate.c) ---- */

/* EagleEye's "adaptive BN" (Li et al. 2020; in PyTorch: momentum=None and forward passes in
 * train mode): after a cut that changed what every later layer sees, the running statistics
 * still describe the model before it. They are re-estimated from `batches` passes over o's
 * training data (cx_cli_prune_pass), each batch's mean and unbiased variance weighted equally,
 * and written into the model's BatchNormalization initializers; nothing else changes. *n_bn:
 * the BatchNormalization nodes recalibrated (0: none, the model is left as it is). */
cx_status cx_cli_prune_recalibrate(cx_graph *model, const cx_train_opts *o, int batches,
                                   int *n_bn);

/* cx_prune_channels with p's configuration; for importance "taylor" the scores come from the
 * scoring pass on o's training data first (o NULL or without training data: an error that says
 * so); with training data and recalibrate_bn > 0 the pruned graph's BatchNorm statistics are
 * recalibrated after. */
cx_status cx_cli_prune_channels(const cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                                FILE *log, cx_graph **out, cx_prune_channel_stats *st);

#endif
