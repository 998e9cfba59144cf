/* Taylor importance for channel pruning (docs/prune.md, "Importance"): a scoring pass before the
 * channels are chosen. The model's training loss (softmax cross-entropy on the labels) is run
 * forward and backward on `batches` batches of the training data, without any update, and
 * prune/channel_taylor.c's extension adds |w * dL/dw| of every parameter as each gradient is
 * final. The images get the evaluation preprocessing (normalisation, no random augmentation) and
 * the loader is seeded by the run's seed, so the scores, and with them the pruned graph, are the
 * same on every run: a resumed stage rebuilds the same smaller graph. */
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

/* One forward and backward pass on the next batch (a new epoch after the last one). */
static cx_status score_batch(cx_program *p, cx_loader *l, int64_t *epoch, const char *path,
                             bool first) {
  cx_batch b;
  CX_TRY(cx_loader_next(l, &b));
  if (b.size == 0) {
    CX_TRY(cx_loader_epoch_begin(l, ++*epoch));
    CX_TRY(cx_loader_next(l, &b));
  }
  if (first) CX_TRY(cx_check_model_input(cx_program_graph(p), &b, path));
  size_t per = (size_t)(b.c * b.h * b.w) * sizeof(float);
  CX_TRY(cx_program_write_input(p, "input", b.images, per * (size_t)b.size));
  CX_TRY(cx_program_write_input(p, "labels", b.labels, sizeof(int64_t) * (size_t)b.size));
  CX_TRY(cx_program_forward(p));
  return cx_program_backward(p);
}

cx_status cx_cli_prune_taylor(const cx_graph *model, const cx_train_opts *o, int batches,
                              cx_channel_taylor **out) {
  *out = NULL;
  if (!o->train_path) return no_data();
  int64_t micro = o->batch_size / (o->accum_steps > 1 ? o->accum_steps : 1);
  cx_program *p = NULL;
  cx_loader *l = NULL;
  cx_channel_taylor *t = NULL;
  cx_train_ext e;
  int64_t epoch = 0;
  cx_status s = compile(model, o, micro, &p);
  if (s == CX_OK) s = open_loader(o, micro, &l);
  if (s == CX_OK) s = cx_channel_taylor_new(&t);
  if (s == CX_OK) e = cx_channel_taylor_ext(t), s = e.opened(e.self, p);
  if (s == CX_OK) cx_program_set_grad_hook(p, grad_ready, &e);
  for (int i = 0; s == CX_OK && i < batches; i++) {
    s = score_batch(p, l, &epoch, o->train_path, i == 0);
    if (s == CX_OK) s = e.before_update(e.self, p); /* the extension's first failure, if any */
  }
  cx_loader_close(l);
  cx_program_free(p);
  if (s != CX_OK) return cx_channel_taylor_free(t), s;
  *out = t;
  return CX_OK;
}

cx_status cx_cli_prune_channels(const cx_graph *g, const cx_cli_prune *p, const cx_train_opts *o,
                                FILE *log, cx_graph **out, cx_prune_channel_stats *st) {
  *out = NULL;
  if (p->c.importance != CX_IMPORTANCE_TAYLOR) return cx_prune_channels(g, &p->c, NULL, log, out, st);
  if (!o || !o->train_path) return no_data();
  cx_channel_taylor *t = NULL;
  CX_TRY(cx_cli_prune_taylor(g, o, p->taylor_batches, &t));
  if (log)
    fprintf(log, "prune: Taylor scores from %d batches of %s\n", p->taylor_batches,
            o->train_path);
  cx_status s = cx_prune_channels(g, &p->c, cx_channel_taylor_scores(t), log, out, st);
  cx_channel_taylor_free(t);
  return s;
}
