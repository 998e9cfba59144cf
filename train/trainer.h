#ifndef CX_TRAINER_H
#define CX_TRAINER_H

#include <signal.h>
#include <stdio.h>

#include "../core/backend.h"
#include "../core/graph.h"

struct cx_program;
#include "../data/data.h"
#include "ema.h"
#include "extension.h"
#include "loss_scale.h"
#include "optim.h"
#include "schedule.h"

/* The training loop every stage uses: a model graph (input "input" [N,C,H,W] f32, first output
 * the logits [N,classes]) is trained with softmax cross-entropy (label smoothing; soft targets
 * with mixup/cutmix) on an HDF5 data set, evaluated after each epoch, and its trained weights are
 * written back into the graph. */

typedef struct cx_eval_result {
  int64_t n;
  double loss, top1, top5; /* top-k in percent */
} cx_eval_result;

typedef struct cx_train_step_info {
  int64_t step, epoch;
  /* Means over the steps since the previous logged step: loss, and top-1 accuracy on the
   * training batches (percent). lr and grad_norm are those of this step. */
  double loss, lr, grad_norm, accuracy;
  double images_per_s, data_wait_s, compute_s; /* since the previous logged step */
  /* data parallelism: the ranks (images_per_s counts all of theirs), and the seconds since the
   * previous logged step spent waiting in the extensions' before_update (for the reductions) */
  int world;
  double sync_wait_s;
  double peak_memory_mb;                       /* the process's peak resident memory */
  double loss_scale;      /* the loss scale after this step; 0 when the loss is not scaled */
  int64_t skipped_steps;  /* steps skipped for overflow so far (dynamic loss scaling) */
  /* The device the programs run on, where the backend reports it (cx_backend.device_stats: the
   * GPU; false on the CPU): utilization in percent (-1: unknown), memory in use and in all (MiB,
   * every process's), and what the training program's memory plan allocated there (MiB). */
  bool device;
  int device_util;
  double device_memory_used_mb, device_memory_total_mb, device_plan_mb;
} cx_train_step_info;

typedef struct cx_train_opts {
  const char *train_path, *train_part; /* data set file and part ("" or NULL: main part) */
  const char *val_path, *val_part;     /* NULL: no evaluation */
  int64_t batch_size;                  /* images per optimizer step, over all ranks */
  int accum_steps;                     /* micro-batches per step (batch_size divisible); 0: 1 */
  int64_t epochs;
  /* workers, augmentation; batch and seed are set here. rank and world: data parallelism
   * (world ranks each train on batch_size / world images of every step: dist/dist.h) */
  cx_loader_opts loader;
  cx_augment val_aug;                  /* evaluation preprocessing (normalisation) */
  cx_optim_config optim;               /* its lr is unused: the schedule gives every step's */
  cx_schedule schedule;                /* lr: the base rate; total_steps 0: the whole run */
  float clip_norm;                     /* 0: no clipping */
  float label_smoothing;
  /* Loss scaling (docs/training.md): the loss gradient is seeded with the scale instead of 1 and
   * the gradients are unscaled before clipping. STATIC uses loss_scaler.scale throughout (an
   * overflow stops training, naming the op); DYNAMIC starts there and follows loss_scaler's
   * rules, skipping the optimizer update of a step whose gradients overflowed. */
  cx_loss_scale_mode loss_scale_mode;
  cx_loss_scaler loss_scaler;
  /* An exponential moving average of the parameters and BatchNorm statistics, updated after each
   * optimizer step (not after a skipped one). Evaluations and the trained model are then the
   * average's, as timm's ModelEma is used; the live weights stay in the checkpoints beside it. */
  bool use_ema;
  cx_ema_config ema;
  /* Gradient checkpointing: node-name prefixes, or the one entry "blocks" (cx_compile_opts). */
  const char *const *checkpoint_segments;
  int n_checkpoint_segments;
  uint64_t seed;
  cx_precision precision;              /* of the training and evaluation programs; default F32 */
  int threads;                         /* OpenMP threads for compute; 0: leave as set */
  int log_every;                       /* steps between logged steps; 0: 50 */
  bool quiet;                          /* no progress output (warnings still go to log) */
  bool progress_bar;                   /* one line redrawn with \r, with an ETA (a terminal) */
  FILE *log;                           /* progress and warnings; NULL: stdout */
  bool diagnostics;                    /* gradient and loss warnings (train/diagnose.h) */
  /* Checkpoints (docs/training.md): "<checkpoint_dir>/step-<N>.h5", written every
   * checkpoint_every steps (0: only at the end and when stopped), the newest keep_checkpoints
   * kept (0: 2). config_hash is written into each and checked on resume. */
  const char *checkpoint_dir;
  int64_t checkpoint_every;
  int keep_checkpoints;
  const char *config_hash;
  const char *resume_from;             /* a checkpoint to continue from; NULL: a fresh start */
  int64_t stop_after;                  /* stop with a checkpoint at this step; 0: never */
  const volatile sig_atomic_t *interrupt; /* set by a signal handler: the same, after this step */
  /* Profiling (train/train_profile.h): after profile_after steps of this run, profile_steps
   * steps (0: off) run with per-node timings; then the per-op and per-node tables (forward,
   * backward, waiting for data, optimizer) go to the log, the Chrome trace to profile_trace and
   * the tables as JSON to profile_json (either may be NULL). */
  int64_t profile_after, profile_steps;
  const char *profile_trace, *profile_json;
  int profile_top;                     /* rows of the per-node table; 0: all */
  /* Where the programs run (every parameter, gradient and optimizer state lives there); the
   * caller chooses it, train/ never names one. Required. */
  const cx_backend *backend;
  /* Extensions of the training loop, called in this order at each point they fill (KD, pruning,
   * quantization, data parallelism, metrics writers: train/extension.h). */
  const cx_train_ext *extensions;
  int n_extensions;
} cx_train_opts;

typedef struct cx_train_result {
  int64_t steps;                       /* optimizer steps done, counting those before a resume */
  int64_t resumed_step;                /* the checkpoint's step; 0 for a fresh start */
  int64_t total_steps;                 /* of the whole run */
  bool stopped;                        /* by stop_after or interrupt, before the end */
  /* seconds: the whole training's wall-clock time, counting runs before a resume (resumed_seconds
   * of it); images_per_s: while the last log line is pending, the rate since the previous one;
   * at the end, the mean over this run's training steps (data waits included; evaluation and
   * checkpoints not) */
  double seconds, resumed_seconds, images_per_s, data_wait_s, final_loss;
  cx_eval_result val;                  /* the last evaluation (n 0: none) */
  char checkpoint[4200];               /* the last checkpoint written ("" if none) */
  int64_t skipped_steps;               /* dynamic loss scaling: steps skipped for overflow */
  double loss_scale;                   /* the final loss scale; 0 when not scaled */
  int warnings;                        /* diagnostics given */
  /* data parallelism: the ranks; seconds in this run's training steps, and of them waiting in
   * the extensions' before_update (the gradient reductions not hidden behind backward) */
  int world;
  double step_seconds, sync_wait_s;
} cx_train_result;

/* Running sums for top-k and cross-entropy over batches of logits. */
typedef struct cx_eval_sums {
  int64_t n;
  double loss, top1, top5;
} cx_eval_sums;
void cx_logits_score(const float *logits, int64_t n, int64_t classes, const int64_t *labels,
                     cx_eval_sums *s);
cx_eval_result cx_eval_sums_result(const cx_eval_sums *s);
/* Whether the loader's images fit the model's input; the message names the data file. */
cx_status cx_check_model_input(const cx_graph *model, const cx_batch *b, const char *path);

cx_train_opts cx_train_defaults(void);
/* Every check cx_train makes of o before it compiles anything, and nothing else: the options,
 * the training data against the batch (at least one step an epoch), the schedule, and, with
 * resume_from, that checkpoint (whole, its format, config hash, seeds and data position those
 * of this run). It writes nothing, so that a caller runs it before it creates its outputs. */
cx_status cx_train_check(const cx_train_opts *o);
/* Trains model in place: on success (and when stopped) its parameters and BatchNorm statistics
 * are the trained ones. */
cx_status cx_train(cx_graph *model, const cx_train_opts *o, cx_train_result *r);

/* The newest "step-<N>.h5" in dir into path (size bytes); CX_ERR_IO naming dir when there is
 * none. */
cx_status cx_checkpoint_find_last(const char *dir, char *path, size_t size);

/* The same with an inference program already compiled (batch from its input). */
struct cx_program;
cx_status cx_evaluate_program(struct cx_program *p, const char *path, const char *part,
                              const cx_augment *pre, cx_eval_result *r);
/* Top-1/top-5 and mean cross-entropy of the model on a data set part. */
cx_status cx_evaluate(const cx_graph *model, const cx_backend *backend, const char *path,
                      const char *part, const cx_augment *pre, int64_t batch, cx_eval_result *r);

#endif
