#include "trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "grad_clip.h"
#include "train_graph.h"

cx_train_opts cx_train_defaults(void) {
  cx_train_opts o = {.batch_size = 128, .accum_steps = 1, .epochs = 1, .log_every = 50,
                     .loader = cx_loader_defaults(), .optim = cx_optim_defaults(CX_OPTIM_SGD),
                     .seed = 1};
  o.schedule = cx_schedule_defaults(CX_SCHEDULE_COSINE, o.optim.lr);
  return o;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Everything one training run holds. */
typedef struct run {
  const cx_train_opts *o;
  cx_program *train, *eval;
  cx_loader *loader;
  cx_optimizer *opt;
  int n_params;
  cx_tensor **params, **grads, **acc; /* acc: accumulated gradients (accum_steps > 1) */
  int64_t micro, classes;
  bool soft;
} run;

static cx_status open_program(run *r, const cx_graph *model) {
  const cx_train_opts *o = r->o;
  bool soft = o->loader.aug.mixup_alpha > 0 || o->loader.aug.cutmix_alpha > 0;
  cx_graph *g = NULL;
  if (o->build_graph) CX_TRY(o->build_graph(o->user, model, &g));
  else CX_TRY(cx_train_graph(model, o->label_smoothing, soft ? r->classes : 0, &g));
  cx_compile_opts co = {.batch = r->micro, .training = true, .loss = "loss",
                        .backend = cx_backend_cpu(), .seed = o->seed};
  cx_status s = cx_program_compile(g, &co, &r->train);
  cx_graph_free(g);
  if (s != CX_OK) return s;
  r->soft = soft;
  if (!o->quiet) cx_program_print(r->train, stdout);
  r->n_params = cx_program_param_count(r->train);
  r->params = calloc((size_t)r->n_params + 1, sizeof *r->params);
  r->grads = calloc((size_t)r->n_params + 1, sizeof *r->grads);
  const char **names = calloc((size_t)r->n_params + 1, sizeof *names);
  for (int k = 0; k < r->n_params; k++) {
    r->params[k] = cx_program_param(r->train, k);
    r->grads[k] = cx_program_param_grad(r->train, k);
    names[k] = cx_program_param_name(r->train, k);
  }
  s = cx_optimizer_create(&o->optim, r->n_params, r->params, names, &r->opt);
  free(names);
  if (s != CX_OK || o->accum_steps <= 1) return s;
  r->acc = calloc((size_t)r->n_params + 1, sizeof *r->acc);
  for (int k = 0; k < r->n_params; k++) {
    const cx_tensor *g = r->grads[k];
    r->acc[k] = malloc(sizeof(cx_tensor));
    *r->acc[k] = cx_tensor_view(CX_F32, &g->shape, malloc(cx_tensor_nbytes(g) + 1));
  }
  return CX_OK;
}

static void close_run(run *r) {
  cx_program_free(r->train);
  cx_program_free(r->eval);
  cx_loader_close(r->loader);
  cx_optimizer_free(r->opt);
  for (int k = 0; r->acc && k < r->n_params; k++) {
    free(r->acc[k]->data);
    free(r->acc[k]);
  }
  free(r->acc);
  free(r->params);
  free(r->grads);
}

static cx_status feed(run *r, const cx_batch *b) {
  cx_tensor *in = cx_program_tensor(r->train, "input");
  memcpy(in->data, b->images, cx_tensor_nbytes(in));
  if (r->soft) {
    cx_tensor *t = cx_program_tensor(r->train, "targets");
    memcpy(t->data, b->targets, cx_tensor_nbytes(t));
  } else {
    cx_tensor *t = cx_program_tensor(r->train, "labels");
    if (t) memcpy(t->data, b->labels, cx_tensor_nbytes(t));
  }
  return r->o->feed ? r->o->feed(r->o->user, r->train, b) : CX_OK;
}

/* Forward and backward of one micro-batch; a non-finite loss stops training naming the op. */
static cx_status micro_step(run *r, const cx_batch *b, double *loss, cx_eval_sums *acc) {
  CX_TRY(feed(r, b));
  CX_TRY(cx_program_forward(r->train));
  *loss = *(const float *)cx_program_tensor(r->train, "loss")->data;
  if (!isfinite(*loss)) {
    char where[600];
    CX_TRY(cx_program_locate_nonfinite(r->train, where, sizeof where));
    return cx_fail(CX_ERR_NUMERIC, "the loss became %g at this step: %s", *loss, where);
  }
  const cx_tensor *logits =
      cx_program_value_tensor(r->train, cx_program_graph(r->train)->outputs[1]);
  cx_logits_score(logits->data, b->size, r->classes, b->labels, acc);
  return cx_program_backward(r->train);
}

static cx_status apply_update(run *r, int64_t step, double *grad_norm, float *lr) {
  const cx_train_opts *o = r->o;
  cx_tensor **g = r->grads;
  if (r->acc) {
    cx_grad_scale(r->acc, r->n_params, 1.0f / (float)o->accum_steps);
    g = r->acc;
  }
  if (!cx_grads_finite(g, r->n_params)) {
    char where[600];
    CX_TRY(cx_program_locate_nonfinite(r->train, where, sizeof where));
    return cx_fail(CX_ERR_NUMERIC, "a gradient became NaN or Inf: %s", where);
  }
  *grad_norm = o->clip_norm > 0 ? cx_grad_clip_global_norm(g, r->n_params, o->clip_norm)
                                : cx_grad_global_norm(g, r->n_params);
  *lr = cx_schedule_lr(&o->schedule, step);
  return cx_optimizer_step(r->opt, g, *lr);
}

static void progress(const run *r, const cx_train_step_info *s, int64_t steps_total) {
  if (r->o->quiet) return;
  printf("epoch %lld step %lld/%lld  loss %.4f  acc %.1f%%  lr %.4g  |g| %.3g  %.0f img/s  "
         "(data wait %.0f%%)\n", (long long)s->epoch, (long long)s->step, (long long)steps_total,
         s->loss, s->accuracy, s->lr, s->grad_norm, s->images_per_s,
         100 * s->data_wait_s / (s->data_wait_s + s->compute_s + 1e-12));
  fflush(stdout);
}

static cx_status evaluate_epoch(run *r, const cx_graph *model, cx_eval_result *res) {
  const cx_train_opts *o = r->o;
  if (!r->eval) {
    cx_compile_opts co = {.batch = r->micro, .backend = cx_backend_cpu()};
    CX_TRY(cx_program_compile(model, &co, &r->eval));
  }
  CX_TRY(cx_program_copy_params(r->eval, r->train));
  return cx_evaluate_program(r->eval, o->val_path, o->val_part, &o->val_aug, res);
}

static cx_status train_epochs(run *r, cx_graph *model, cx_train_result *res) {
  const cx_train_opts *o = r->o;
  int64_t per_epoch = cx_loader_batches(r->loader) / o->accum_steps, step = 0;
  int64_t total = per_epoch * o->epochs;
  double t_start = now();
  for (int64_t epoch = 0; epoch < o->epochs; epoch++) {
    CX_TRY(cx_loader_epoch_begin(r->loader, epoch));
    double wait0 = cx_loader_wait_seconds(r->loader), t0 = now(), loss_sum = 0;
    cx_eval_sums acc = {0};
    int64_t images = 0;
    for (int64_t i = 0; i < per_epoch; i++) {
      for (int m = 0; m < o->accum_steps; m++) {
        cx_batch b;
        CX_TRY(cx_loader_next(r->loader, &b));
        if (step == 0 && m == 0) CX_TRY(cx_check_model_input(model, &b, o->train_path));
        double loss;
        CX_TRY(micro_step(r, &b, &loss, &acc));
        if (r->acc) CX_TRY(cx_grad_accumulate(r->acc, r->grads, r->n_params, m == 0));
        loss_sum += loss / o->accum_steps;
        images += b.size;
      }
      double gnorm = 0;
      float lr = 0;
      CX_TRY(apply_update(r, step, &gnorm, &lr));
      step++;
      if (step % o->log_every == 0 || i == per_epoch - 1) {
        double t = now(), wait = cx_loader_wait_seconds(r->loader) - wait0;
        cx_eval_result a = cx_eval_sums_result(&acc);
        cx_train_step_info s = {.step = step, .epoch = epoch, .loss = loss_sum / (double)(i + 1),
                                .lr = lr, .grad_norm = gnorm, .accuracy = a.top1,
                                .images_per_s = (double)images / (t - t0), .data_wait_s = wait,
                                .compute_s = t - t0 - wait};
        progress(r, &s, total);
        if (o->on_step) o->on_step(o->user, &s);
        res->final_loss = s.loss;
        res->images_per_s = s.images_per_s;
      }
    }
    res->data_wait_s += cx_loader_wait_seconds(r->loader) - wait0;
    if (o->val_path) {
      CX_TRY(evaluate_epoch(r, model, &res->val));
      if (!o->quiet)
        printf("epoch %lld: validation top-1 %.2f%%  top-5 %.2f%%  loss %.4f (%lld images)\n",
               (long long)epoch, res->val.top1, res->val.top5, res->val.loss,
               (long long)res->val.n);
      if (o->on_epoch) o->on_epoch(o->user, epoch, &res->val);
    }
  }
  res->steps = step;
  res->seconds = now() - t_start;
  return cx_program_store(r->train, model);
}

cx_status cx_train(cx_graph *model, const cx_train_opts *given, cx_train_result *res) {
  cx_train_opts o = *given;
  if (o.accum_steps <= 0) o.accum_steps = 1;
  if (o.log_every <= 0) o.log_every = 50;
  if (o.batch_size <= 0 || o.batch_size % o.accum_steps)
    return cx_fail(CX_ERR_ARG, "batch size %lld must be a positive multiple of the %d "
                   "accumulation steps", (long long)o.batch_size, o.accum_steps);
  memset(res, 0, sizeof *res);
  run r = {.o = &o, .micro = o.batch_size / o.accum_steps};
  cx_loader_opts lo = o.loader;
  lo.part = o.train_part;
  lo.batch_size = r.micro;
  lo.seed = o.seed;
  lo.drop_last = true; /* programs have a fixed batch */
  lo.shuffle = true;
  cx_status s = cx_loader_open(o.train_path, &lo, &r.loader);
  if (s == CX_OK) {
    r.classes = cx_loader_info(r.loader)->num_classes;
    int64_t steps = cx_loader_batches(r.loader) / o.accum_steps * o.epochs;
    if (steps <= 0)
      s = cx_fail(CX_ERR_ARG, "%s: too few images for one step of %lld", o.train_path,
                  (long long)o.batch_size);
    if (o.schedule.total_steps <= 0) o.schedule.total_steps = steps;
  }
  if (s == CX_OK) s = cx_schedule_check(&o.schedule);
  if (s == CX_OK) s = open_program(&r, model);
  if (s == CX_OK) s = train_epochs(&r, model, res);
  close_run(&r);
  return s;
}
