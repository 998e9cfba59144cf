#ifndef CX_SCHEDULE_H
#define CX_SCHEDULE_H

#include <stdint.h>

#include "../core/status.h"

/* Learning-rate schedules, as a pure function of the step: cx_schedule_lr(s, t) is the learning
 * rate of optimizer step t (from 0), so a resumed run needs only the step counter. Steps are
 * counted from the start of training for every schedule, warmup included; docs/training.md gives
 * each formula.
 *
 *   constant    lr
 *   step        lr * gamma^floor(t / step_size)
 *   multistep   lr * gamma^(number of milestones <= t)
 *   cosine      from lr at the end of warmup to min_lr at total_steps (PyTorch's
 *               CosineAnnealingLR after a LinearLR warmup), min_lr after
 *   onecycle    PyTorch's OneCycleLR with cosine annealing: from lr/div_factor up to lr (max_lr)
 *               over the first pct_start of total_steps, then down to
 *               lr/(div_factor*final_div_factor) at total_steps - 1
 *
 * Warmup: for t < warmup_steps, lr(t) = L * (f + (1 - f) * t / warmup_steps), where L is the
 * schedule's value at step warmup_steps and f = warmup_start_factor (PyTorch's LinearLR). */

typedef enum cx_schedule_kind {
  CX_SCHEDULE_CONSTANT,
  CX_SCHEDULE_STEP,
  CX_SCHEDULE_MULTISTEP,
  CX_SCHEDULE_COSINE,
  CX_SCHEDULE_ONECYCLE,
} cx_schedule_kind;

#define CX_SCHEDULE_MAX_MILESTONES 16

typedef struct cx_schedule {
  cx_schedule_kind kind;
  float lr;                   /* base learning rate; onecycle: max_lr */
  int64_t warmup_steps;       /* 0: none */
  float warmup_start_factor;  /* default 0.1 */
  int64_t total_steps;        /* cosine, onecycle */
  int64_t step_size;          /* step */
  float gamma;                /* step, multistep; default 0.1 */
  int64_t milestones[CX_SCHEDULE_MAX_MILESTONES]; /* multistep, increasing */
  int n_milestones;
  float min_lr;               /* cosine; default 0 */
  float pct_start, div_factor, final_div_factor; /* onecycle; default 0.3, 25, 1e4 */
} cx_schedule;

/* The defaults above for `kind` at base rate lr; the caller sets the steps it needs. */
cx_schedule cx_schedule_defaults(cx_schedule_kind kind, float lr);
const char *cx_schedule_kind_name(cx_schedule_kind kind); /* "constant", "step", ... */
cx_status cx_schedule_kind_parse(const char *name, cx_schedule_kind *out);

/* Whether the fields `kind` uses make sense; CX_ERR_ARG naming the field otherwise. */
cx_status cx_schedule_check(const cx_schedule *s);

/* The learning rate of step t (t < 0 counts as 0). Computed in double. */
float cx_schedule_lr(const cx_schedule *s, int64_t t);

#endif
