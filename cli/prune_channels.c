/* Channel pruning as the command and the stage run it: Taylor importance's scoring pass and
 * allocate = "sensitivity"'s per-layer ratios before the channels are chosen.
 *
 * Taylor importance (docs/prune.md, "Importance"): the model's training loss (softmax
 * cross-entropy on the labels) runs forward and backward on `batches` batches of the training
 * data, without any update, and prune/channel_taylor.c's extension adds |w * dL/dw| of every
 * parameter as each gradient is final. The images get the evaluation preprocessing
 * (normalisation, no random augmentation) and the loader is seeded by the run's seed, so the
 * scores, and with them the pruned graph, are the same on every run: a resumed stage rebuilds the
 * same smaller graph. */
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../core/program_input.h"
#include "../train/train_graph.h"
#include "commands.h"
#include "prune_config.h"

static cx_status no_data(void) {
  return cx_fail(CX_ERR_ARG, "importance \"taylor\" ranks channels by gradients, which need "
                 "training data (compress prune: --data TRAIN.h5)");
}

static void grad_ready(void *user, int param, const cx_tensor *value, const cx_tensor *grad) {
  cx_train_ext *e = user;
  e->grad_ready(e->self, param, value, grad, true);
}

static cx_status compile(const cx_graph *model, const cx_train_opts *o, int64_t micro,
                         cx_program **p) {
  cx_graph *m = cx_graph_clone(model), *tg = NULL;
  if (!m) return cx_fail(CX_ERR_NOMEM, "out of memory");
  char *old = NULL;
  cx_cli_rename_input(m, &old);
  free(old);
  cx_status s = cx_train_graph(m, 0, 0, &tg);
  cx_graph_free(m);
  cx_compile_opts co = {.batch = micro, .training = true, .loss = "loss", .backend = o->backend,
                        .seed = o->seed, .precision = o->precision,
                        .checkpoint_segments = o->checkpoint_segments,
                        .n_checkpoint_segments = o->n_checkpoint_segments};
  if (s == CX_OK) s = cx_program_compile(tg, &co, p);
  cx_graph_free(tg);
  return s;
}

static cx_status open_loader(const cx_train_opts *o, int64_t micro, cx_loader **l) {
  cx_loader_opts lo = cx_loader_defaults();
  lo.part = o->train_part;
  lo.batch_size = micro;
  lo.seed = o->seed;
  lo.drop_last = true; /* the program has one batch size */
  lo.workers = o->loader.workers;
  lo.aug = o->val_aug;
  CX_TRY(cx_loader_open(o->train_path, &lo, l));
  if (cx_loader_batches(*l) < 1)
    return cx_fail(CX_ERR_ARG, "%s: fewer images than one batch of %lld", o->train_path,
                   (long long)micro);
  return CX_OK;
}

cx_status cx_cli_prune_pass_open(const cx_graph *model, const cx_train_opts *o,
                                 cx_cli_prune_pass *pass) {
  *pass = (cx_cli_prune_pass){.path = o->train_path};
  int64_t micro = o->batch_size / (o->accum_steps > 1 ? o->accum_steps : 1);
  cx_status s = compile(model, o, micro, &pass->p);
  if (s == CX_OK) s = open_loader(o, micro, &pass->l);
  if (s != CX_OK) cx_cli_prune_pass_close(pass);
  return s;
}

void cx_cli_prune_pass_close(cx_cli_prune_pass *pass) {
  cx_loader_close(pass->l);
  cx_program_free(pass->p);
  pass->l = NULL, pass->p = NULL;
}

cx_status cx_cli_prune_pass_forward(cx_cli_prune_pass *pass) {
  cx_batch b;
  CX_TRY(cx_loader_next(pass->l, &b));
  if (b.size == 0) {
    CX_TRY(cx_loader_epoch_begin(pass->l, ++pass->epoch));
    CX_TRY(cx_loader_next(pass->l, &b));
  }
  if (pass->batches++ == 0)
    CX_TRY(cx_check_model_input(cx_program_graph(pass->p), &b, pass->path));
  size_t per = (size_t)(b.c * b.h * b.w) * sizeof(float);
  CX_TRY(cx_program_write_input(pass->p, "input", b.images, per * (size_t)b.size));
  CX_TRY(cx_program_write_input(pass->p, "labels", b.labels, sizeof(int64_t) * (size_t)b.size));
  return cx_program_forward(pass->p);
}

cx_status cx_cli_prune_taylor(const cx_graph *model, const cx_train_opts *o, int batches,
                              cx_channel_taylor **out) {
  *out = NULL;
  if (!o->train_path) return no_data();
  cx_cli_prune_pass pass;
  cx_channel_taylor *t = NULL;
  cx_train_ext e;
  cx_status s = cx_cli_prune_pass_open(model, o, &pass);
  if (s == CX_OK) s = cx_channel_taylor_new(&t);
  if (s == CX_OK) e = cx_channel_taylor_ext(t), s = e.opened(e.self, pass.p);
  if (s == CX_OK) cx_program_set_grad_hook(pass.p, grad_ready, &e);
  for (int i = 0; s == CX_OK && i < batches; i++) {
    s = cx_cli_prune_pass_forward(&pass);
    if (s == CX_OK) s = cx_program_backward(pass.p);
    if (s == CX_OK) s = e.before_update(e.self, pass.p); /* the extension's first failure */
  }
  cx_cli_prune_pass_close(&pass);
  if (s != CX_OK) return cx_channel_taylor_free(t), s;
  *out = t;
  return CX_OK;
}

/* allocate = "sensitivity": c's ratios from the scan of every unfrozen group on o's validation
 * data (*fraction and names, freed by the caller, hold what c points to). */
static cx_status allocate(const cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                          const cx_prune_scores *taylor, FILE *log, cx_cli_sensitivity *sens,
                          double **fraction, cx_prune_config *c) {
  if (!o || !o->val_path)
    return cx_fail(CX_ERR_ARG, "allocate = \"sensitivity\" evaluates every layer pruned alone: "
                   "it needs validation data ([data] val; compress prune: --val VAL.h5)");
  cx_cli_eval_data ev = {o->val_path, o->val_part, &o->val_aug, o->backend};
  CX_TRY(cx_cli_sensitivity_scan(g, &p->c, taylor, "the model", &ev, log, sens));
  int n = sens->n, L = CX_CLI_SENSITIVITY_STEPS;
  cx_channel_groups *cg = NULL;
  double *drop = malloc((size_t)n * (size_t)L * sizeof *drop);
  *fraction = malloc((size_t)n * sizeof **fraction);
  cx_status s = drop && *fraction ? cx_channel_groups_build(g, NULL, &cg)
                                  : cx_fail(CX_ERR_NOMEM, "out of memory");
  double *score = s == CX_OK ? malloc(((size_t)cg->n_units + 1) * sizeof *score) : NULL;
  if (s == CX_OK && !score) s = cx_fail(CX_ERR_NOMEM, "out of memory");
  if (s == CX_OK) s = cx_channel_select(cg, &p->c, NULL);
  if (s == CX_OK) s = cx_channel_importance(cg, p->c.importance, taylor, NULL, score);
  for (int j = 0; s == CX_OK && j < n * L; j++) drop[j] = sens->base - sens->top1[j];
  if (s == CX_OK)
    s = cx_channel_allocate(cg, &p->c, score, n, (const char *const *)sens->names, L,
                            cx_cli_sensitivity_levels, drop, *fraction);
  for (int i = 0; s == CX_OK && log && i < n; i++)
    fprintf(log, "prune: %s: %.0f%% of its channels (sensitivity)\n", sens->names[i],
            100 * (*fraction)[i]);
  *c = p->c;
  c->ratio_nodes = (const char *const *)sens->names, c->ratios = *fraction, c->n_ratios = n;
  free(drop), free(score);
  cx_channel_groups_free(cg);
  return s;
}

/* After the cut: BatchNorm recalibration where there is training data (the key given without
 * it is an error; its default is then skipped, and the log says so). */
static cx_status recalibrate(cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                             FILE *log) {
  bool data = o && o->train_path, asked = p->table && cx_toml_get(p->table, "recalibrate_bn");
  int n_bn = 0;
  if (p->recalibrate_bn <= 0 || (!data && !asked)) {
    if (log && p->recalibrate_bn > 0)
      fprintf(log, "prune: BatchNorm statistics as before the cut (recalibrating them needs "
              "training data: --data)\n");
    return CX_OK;
  }
  CX_TRY(cx_cli_prune_recalibrate(g, o, p->recalibrate_bn, &n_bn));
  if (log && n_bn)
    fprintf(log, "prune: BatchNorm statistics of %d layers recalibrated on %d batches of %s\n",
            n_bn, p->recalibrate_bn, o->train_path);
  return CX_OK;
}

cx_status cx_cli_prune_channels(const cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                                FILE *log, cx_graph **out, cx_prune_channel_stats *st) {
  *out = NULL;
  cx_channel_taylor *t = NULL;
  if (p->c.importance == CX_IMPORTANCE_TAYLOR) {
    if (!o || !o->train_path) return no_data();
    CX_TRY(cx_cli_prune_taylor(g, o, p->taylor_batches, &t));
    if (log)
      fprintf(log, "prune: Taylor scores from %d batches of %s\n", p->taylor_batches,
              o->train_path);
  }
  const cx_prune_scores *scores = t ? cx_channel_taylor_scores(t) : NULL;
  cx_prune_config c = p->c;
  cx_cli_sensitivity sens = {0};
  double *fraction = NULL;
  cx_status s = p->allocate_sensitivity
                    ? allocate(g, p, o, scores, log, &sens, &fraction, &c) : CX_OK;
  if (s == CX_OK) s = cx_prune_channels(g, &c, scores, log, out, st);
  if (s == CX_OK) s = recalibrate(*out, p, o, log);
  if (s != CX_OK) cx_graph_free(*out), *out = NULL;
  cx_cli_sensitivity_free(&sens);
  free(fraction);
  cx_channel_taylor_free(t);
  return s;
}
