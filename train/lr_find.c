#include "lr_find.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program_input.h"
#include "optim_program.h"
#include "train_graph.h"
#include "trainer.h"

cx_lr_find_opts cx_lr_find_defaults(void) {
  cx_lr_find_opts o = {.batch = 64, .min_lr = 1e-6, .max_lr = 10, .steps = 100, .beta = 0.98,
                       .diverge = 4, .optim = cx_optim_defaults(CX_OPTIM_SGD)};
  o.optim.momentum = 0.9f;
  o.optim.weight_decay = 0;
  return o;
}

double cx_lr_find_rate(const cx_lr_find_opts *o, int i) {
  if (o->steps <= 1) return o->min_lr;
  return o->min_lr * pow(o->max_lr / o->min_lr, (double)i / (double)(o->steps - 1));
}

void cx_lr_find_free(cx_lr_find_result *r) {
  free(r->lr);
  free(r->loss);
  free(r->smooth);
  memset(r, 0, sizeof *r);
}

/* ---- analysis ---- */

/* Steps [from, to) to search for the steepest fall: like fastai, not the first tenth (the
 * average of a few noisy losses) nor the last 5 steps; and only up to the lowest point, since a
 * fall after it is a recovery from a spike, not a rate that trains. */
static void search_range(int n, int lowest, int *from, int *to) {
  *from = n / 10;
  *to = n >= 20 ? n - 5 : n;
  if (*to > lowest + 1) *to = lowest + 1;
}

/* Slope of the smoothed loss against log10(lr) at step i (central differences inside). */
static double slope(const cx_lr_find_result *r, int n, int i) {
  int a = i > 0 ? i - 1 : i, b = i < n - 1 ? i + 1 : i;
  double dx = log10(r->lr[b]) - log10(r->lr[a]);
  return dx > 0 ? (r->smooth[b] - r->smooth[a]) / dx : 0;
}

void cx_lr_find_analyse(cx_lr_find_result *r, double beta) {
  double avg = 0;
  int n = 0; /* the finite prefix */
  for (int i = 0; i < r->n; i++) {
    avg = beta * avg + (1 - beta) * r->loss[i];
    r->smooth[i] = avg / (1 - pow(beta, i + 1));
    if (n == i && isfinite(r->smooth[i])) n = i + 1;
  }
  r->lowest = 0;
  for (int i = 1; i < n; i++)
    if (r->smooth[i] < r->smooth[r->lowest]) r->lowest = i;
  r->min_div10_lr = n > 0 ? r->lr[r->lowest] / 10 : 0;
  r->steepest = -1;
  int from, to;
  search_range(n, r->lowest, &from, &to);
  double best = 0;
  for (int i = from; i < to && n > 1; i++) {
    double s = slope(r, n, i);
    if (s < best) best = s, r->steepest = i;
  }
  r->suggested_lr = r->steepest >= 0 ? r->lr[r->steepest] : r->min_div10_lr;
}

/* ---- the run ---- */

typedef struct lr_run {
  cx_program *p;
  cx_optimizer *opt;
  cx_loader *loader;
  int64_t epoch;
} lr_run;

static cx_status check_opts(const cx_lr_find_opts *o) {
  if (!(o->min_lr > 0 && o->max_lr > o->min_lr))
    return cx_fail(CX_ERR_ARG, "lr-find: the range [%g, %g] needs 0 < min < max", o->min_lr,
                   o->max_lr);
  if (o->steps < 2) return cx_fail(CX_ERR_ARG, "lr-find: %d steps; at least 2", o->steps);
  if (!(o->beta >= 0 && o->beta < 1))
    return cx_fail(CX_ERR_ARG, "lr-find: smoothing %g must be in [0, 1)", o->beta);
  if (!(o->diverge > 1)) return cx_fail(CX_ERR_ARG, "lr-find: divergence factor %g must be > 1",
                                        o->diverge);
  if (o->batch < 1) return cx_fail(CX_ERR_ARG, "lr-find: batch %lld", (long long)o->batch);
  return CX_OK;
}

static cx_status run_open(const cx_graph *model, const cx_lr_find_opts *o, lr_run *run) {
  cx_graph *g = NULL;
  CX_TRY(cx_train_graph(model, 0, 0, &g));
  cx_compile_opts co = {.batch = o->batch, .training = true, .loss = "loss",
                        .backend = o->backend, .seed = o->seed};
  cx_status s = cx_program_compile(g, &co, &run->p);
  cx_graph_free(g);
  if (s == CX_OK) s = cx_optimizer_for_program(&o->optim, run->p, &run->opt);
  cx_loader_opts lo = cx_loader_defaults();
  lo.part = o->part;
  lo.batch_size = o->batch;
  lo.seed = o->seed;
  lo.drop_last = true; /* the program has one batch size */
  lo.workers = o->workers;
  lo.aug = o->aug;
  if (s == CX_OK) s = cx_loader_open(o->path, &lo, &run->loader);
  if (s == CX_OK && cx_loader_batches(run->loader) < 1)
    s = cx_fail(CX_ERR_ARG, "%s: fewer images than one batch of %lld", o->path,
                (long long)o->batch);
  return s;
}

static void run_close(lr_run *run) {
  cx_loader_close(run->loader);
  cx_optimizer_free(run->opt);
  cx_program_free(run->p);
}

/* The next batch, starting another epoch at the end of one. */
static cx_status next_batch(lr_run *run, cx_batch *b) {
  CX_TRY(cx_loader_next(run->loader, b));
  if (b->size > 0) return CX_OK;
  CX_TRY(cx_loader_epoch_begin(run->loader, ++run->epoch));
  return cx_loader_next(run->loader, b);
}

/* Trains on one batch at rate lr; *loss is the loss before the update. */
static cx_status train_step(lr_run *run, const cx_graph *model, const cx_lr_find_opts *o, int i,
                            double lr, double *loss) {
  cx_batch b;
  CX_TRY(next_batch(run, &b));
  if (i == 0) CX_TRY(cx_check_model_input(model, &b, o->path));
  size_t per = (size_t)(b.c * b.h * b.w) * sizeof(float); /* whole batches: drop_last */
  CX_TRY(cx_program_write_input(run->p, "input", b.images, per * (size_t)b.size));
  CX_TRY(cx_program_write_input(run->p, "labels", b.labels, sizeof(int64_t) * (size_t)b.size));
  CX_TRY(cx_program_forward(run->p));
  float value;
  CX_TRY(cx_program_read(run->p, cx_program_tensor(run->p, "loss"), &value));
  *loss = value;
  if (!isfinite(*loss)) return CX_OK;
  CX_TRY(cx_program_backward(run->p));
  return cx_optimizer_step_program(run->opt, run->p, (float)lr);
}

static cx_status sweep(lr_run *run, const cx_graph *model, const cx_lr_find_opts *o,
                       cx_lr_find_result *r) {
  double avg = 0, best = INFINITY;
  for (int i = 0; i < o->steps; i++) {
    double lr = cx_lr_find_rate(o, i), loss;
    CX_TRY(train_step(run, model, o, i, lr, &loss));
    r->lr[i] = lr;
    r->loss[i] = loss;
    r->n = i + 1;
    avg = o->beta * avg + (1 - o->beta) * loss;
    double smooth = avg / (1 - pow(o->beta, i + 1));
    if (!o->quiet && (i % 10 == 0 || i == o->steps - 1))
      fprintf(stderr, "lr-find: step %d/%d  lr %.3g  loss %.4f  smoothed %.4f\n", i + 1, o->steps,
              lr, loss, smooth);
    if (!isfinite(smooth) || (i > 0 && smooth > o->diverge * best)) {
      r->diverged = true;
      if (!o->quiet)
        fprintf(stderr, "lr-find: stopped at lr %.3g: the loss diverged\n", lr);
      break;
    }
    if (smooth < best) best = smooth;
  }
  return CX_OK;
}

cx_status cx_lr_find(const cx_graph *model, const cx_lr_find_opts *o, cx_lr_find_result *r) {
  memset(r, 0, sizeof *r);
  CX_TRY(check_opts(o));
  size_t n = (size_t)o->steps;
  r->lr = calloc(n, sizeof(double));
  r->loss = calloc(n, sizeof(double));
  r->smooth = calloc(n, sizeof(double));
  if (!r->lr || !r->loss || !r->smooth) {
    cx_lr_find_free(r);
    return cx_fail(CX_ERR_NOMEM, "lr-find: out of memory");
  }
  lr_run run = {0};
  cx_status s = run_open(model, o, &run);
  if (s == CX_OK) s = sweep(&run, model, o, r);
  run_close(&run);
  if (s != CX_OK) {
    cx_lr_find_free(r);
    return s;
  }
  cx_lr_find_analyse(r, o->beta);
  return CX_OK;
}
