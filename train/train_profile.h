#ifndef CX_TRAIN_PROFILE_H
#define CX_TRAIN_PROFILE_H

/* Profiling a window of a training run (cx_train_opts.profile_*; `compress train --profile`):
 * the training program keeps per-node timings for the window's steps, the trainer adds what it
 * times itself (waiting for data, the optimizer), and at the window's end the per-op and per-node
 * tables of train/profile.h go to the log, their JSON form and a Chrome trace to files.
 * Internal to train/trainer.c. */

#include <stdio.h>

#include "profile.h"

typedef struct cx_train_profiler {
  int64_t first, last;  /* the steps profiled (1-based, inclusive); first 0: off */
  const char *trace_path, *json_path;
  int top;
  cx_trace *trace;
  double data_s, optim_s; /* host phases over the window */
  bool on;
} cx_train_profiler;

enum { CX_TRAIN_PROFILE_DATA, CX_TRAIN_PROFILE_OPTIMIZER };

/* The window: `after` steps of the run (which starts after step `start`, ends at `total`)
 * unprofiled, then `steps` profiled; a run too short for both gets half its steps as warm-up. */
void cx_train_profiler_init(cx_train_profiler *tp, int64_t after, int64_t steps, int64_t start,
                            int64_t total);
/* Before step `step`: switches the program's timings on at the window's first step. */
cx_status cx_train_profiler_begin(cx_train_profiler *tp, cx_program *p, int64_t step);
/* After each micro-batch's forward and backward pass: its nodes go into the trace. */
cx_status cx_train_profiler_micro(cx_train_profiler *tp, const cx_program *p, int64_t step);
/* A phase the trainer timed (start on cx_profile_now's clock). */
cx_status cx_train_profiler_host(cx_train_profiler *tp, int phase, double start, double seconds,
                                 int64_t step);
/* After step `step` (final: the run ends with it): at the window's end, prints the tables to f,
 * writes the files and switches timings off. */
cx_status cx_train_profiler_end(cx_train_profiler *tp, cx_program *p, int64_t step, bool final,
                                FILE *f);
void cx_train_profiler_free(cx_train_profiler *tp);

#endif
