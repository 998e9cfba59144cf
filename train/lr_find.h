#ifndef CX_LR_FIND_H
#define CX_LR_FIND_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/graph.h"
#include "../core/backend.h"
#include "../data/data.h"
#include "optim.h"

/* The learning-rate range test (Smith 2017, "Cyclical Learning Rates"; fastai's lr_find): from a
 * fresh model, train one step on each successive batch with the learning rate growing
 * exponentially from min_lr to max_lr, record the loss and its bias-corrected exponential moving
 * average, and stop once the average exceeds `diverge` times the best one. A good rate lies where
 * the smoothed loss falls fastest; fastai's other rule is a tenth of the rate of the lowest
 * smoothed loss. docs/lr_find.md describes both. */

typedef struct cx_lr_find_opts {
  const char *path, *part;  /* training data set and part (NULL: main part) */
  int64_t batch;
  double min_lr, max_lr;    /* the range, min_lr > 0, max_lr > min_lr */
  int steps;                /* steps across the range (it may stop earlier) */
  double beta;              /* smoothing of the loss (default 0.98) */
  double diverge;           /* stop when the smoothed loss exceeds this times the best (4) */
  cx_optim_config optim;    /* its lr is ignored */
  cx_augment aug;           /* preprocessing of the batches (normalisation) */
  uint64_t seed;
  const cx_backend *backend; /* where the program runs; required */
  int workers;              /* loader threads; 0: the loader's default */
  bool quiet;               /* no progress lines on stderr */
} cx_lr_find_opts;

typedef struct cx_lr_find_result {
  int n;                       /* steps taken */
  double *lr, *loss, *smooth;  /* per step: its rate, its loss, the smoothed loss */
  bool diverged;               /* stopped early: loss above diverge x best, or not finite */
  int steepest;                /* the step of the steepest fall of the smoothed loss, or -1 */
  int lowest;                  /* the step of the lowest smoothed loss */
  double suggested_lr;         /* lr[steepest] (lr[lowest] / 10 when the curve never falls) */
  double min_div10_lr;         /* lr[lowest] / 10 */
} cx_lr_find_result;

/* min 1e-6, max 10, 100 steps, beta 0.98, diverge 4, SGD with momentum 0.9 and no weight decay,
 * batch 64. */
cx_lr_find_opts cx_lr_find_defaults(void);

/* Runs the test on `model` (input "input", first output the logits; its weights are left as
 * they are: the test trains a copy). r is filled on success and freed with cx_lr_find_free. */
cx_status cx_lr_find(const cx_graph *model, const cx_lr_find_opts *o, cx_lr_find_result *r);
void cx_lr_find_free(cx_lr_find_result *r);

/* The rate of step i of a run over [min_lr, max_lr] in `steps` steps. */
double cx_lr_find_rate(const cx_lr_find_opts *o, int i);
/* Fills smooth[] from loss[] (bias-corrected EMA), then steepest, lowest and both suggestions:
 * the steepest descent is the most negative slope of the smoothed loss against log10(lr)
 * (central differences) between the first tenth of the steps and the lowest point (nor in the
 * last 5 steps), as fastai skips the first tenth and the last 5. No fall there: steepest -1. */
void cx_lr_find_analyse(cx_lr_find_result *r, double beta);

/* An SVG chart: loss and smoothed loss against the rate (log axis, decades labelled), the
 * suggestion marked. Written to a temporary name and renamed. */
cx_status cx_lr_find_svg(const cx_lr_find_result *r, const char *path);

#endif
