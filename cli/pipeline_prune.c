/* The prune stage's record functions: the one place where the pipeline meets prune/. One-shot
 * channel pruning rewrites the input model before it is fine-tuned (so a resumed run rebuilds
 * the same smaller graph; Taylor importance's scoring pass and the sensitivity scan are
 * deterministic, cli/prune_channels.c); magnitude, N:M and gradual channel pruning keep their
 * masks with a trainer extension, and gradual channel pruning rewrites the trained model.
 * When the pipeline has a teacher, the fine-tuning distils from it, reading the teacher cache. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../import/onnx.h"
#include "../prune/channel.h"
#include "../prune/mask.h"
#include "commands.h"
#include "pipeline.h"

typedef struct prune_run {
  cx_pipeline_kd_tune kd;
  cx_prune_masker *masker;
} prune_run;

void cx_pipeline_prune_salt(const cx_pipeline *p, const cx_pipeline_stage *s, char *buf,
                            size_t size) {
  (void)s;
  cx_pipeline_kd_tune_salt(p, buf, size);
}

/* A dry run on the [student] architecture: globs that match nothing, layers N:M cannot divide,
 * a MAC target channel pruning cannot reach, a model with nothing to prune. */
cx_status cx_pipeline_prune_check(const cx_pipeline *p, const cx_pipeline_stage *s,
                                  const cx_graph *model) {
  const cx_prune_config *c = &p->prune.c;
  cx_status st;
  if (cx_prune_channel_gradual(c)) {
    cx_prune_masker *m = NULL;
    st = cx_prune_mask_open(model, s->model, c, NULL, &m);
    cx_prune_mask_close(m);
    if (st != CX_OK) return cx_error_prefix("%s", s->name), st;
  }
  if (c->method == CX_PRUNE_CHANNEL) {
    /* which channels go depends on the importance, whether the target is reachable does not:
     * Taylor's scores need the training run, so the dry run ranks by L1 */
    cx_prune_config dry = *c;
    if (dry.importance == CX_IMPORTANCE_TAYLOR) dry.importance = CX_IMPORTANCE_L1;
    cx_graph *out = NULL;
    cx_prune_channel_stats cs;
    st = cx_prune_channels(model, &dry, NULL, NULL, &out, &cs);
    cx_graph_free(out);
  } else {
    cx_graph *g = cx_graph_clone(model);
    st = g ? cx_prune_mask_graph(g, c, s->model) : cx_fail(CX_ERR_NOMEM, "out of memory");
    cx_graph_free(g);
  }
  if (st != CX_OK) cx_error_prefix("%s", s->name);
  return st;
}

cx_status cx_pipeline_prune_model(cx_stage_run *r, cx_graph **g, char **old_input) {
  const cx_prune_config *c = &r->p->prune.c;
  *old_input = NULL;
  if (!r->input) return cx_fail(CX_ERR_ARG, "prune: no input model");
  if (!cx_prune_channel_once(c)) {
    *g = cx_graph_clone(r->input);
    return *g ? CX_OK : cx_fail(CX_ERR_NOMEM, "out of memory");
  }
  cx_prune_channel_stats cs;
  CX_TRY(cx_cli_prune_channels(r->input, &r->p->prune, r->opts, r->opts->quiet ? NULL : stdout,
                               g, &cs));
  printf("prune: %lld of %lld channels removed, MACs %.2fM -> %.2fM (%.1f%%)\n",
         (long long)(cs.channels_before - cs.channels_after), (long long)cs.channels_before,
         cs.macs_before / 1e6,
         cs.macs_after / 1e6, 100.0 * (double)cs.macs_after / (double)cs.macs_before);
  return CX_OK;
}

/* One-shot channel pruning cuts the graph before training: what the cut alone costs. (Masks
 * come with training, so before it the model is the input's.) */
const char *cx_pipeline_prune_start(const cx_pipeline *p) {
  return cx_prune_channel_once(&p->prune.c) ? "pruned, before fine-tuning" : NULL;
}

/* Where the masks' lines go: the trainer's progress stream (stdout unless it names one). */
static FILE *progress_log(const cx_stage_run *r) {
  return r->opts->quiet ? NULL : r->opts->log ? r->opts->log : stdout;
}

cx_status cx_pipeline_prune_begin(cx_stage_run *r) {
  const cx_prune_config *c = &r->p->prune.c;
  prune_run *pr = calloc(1, sizeof *pr);
  if (!pr) return cx_fail(CX_ERR_NOMEM, "out of memory");
  r->state = pr;
  CX_TRY(cx_pipeline_kd_tune_begin(r, &pr->kd));
  if (cx_prune_channel_once(c)) return CX_OK; /* the graph is already smaller */
  CX_TRY(cx_prune_mask_open(r->input, r->s->model, c, progress_log(r), &pr->masker));
  cx_train_ext e = cx_prune_mask_extension(pr->masker);
  return cx_stage_run_add(r, &e);
}

/* Gradual channel pruning: the trained, masked model rewritten for the channels kept. */
cx_status cx_pipeline_prune_trained(cx_stage_run *r, cx_graph **g) {
  prune_run *pr = r->state;
  if (!pr || !pr->masker || !cx_prune_channel_gradual(&r->p->prune.c)) return CX_OK;
  return cx_prune_mask_cut(pr->masker, progress_log(r), g);
}

cx_status cx_pipeline_prune_end(cx_stage_run *r) {
  prune_run *pr = r->state;
  if (!pr) return CX_OK;
  cx_status st = cx_pipeline_kd_tune_end(r, &pr->kd);
  cx_prune_mask_close(pr->masker);
  free(pr);
  r->state = NULL;
  return st;
}

/* The method, what it reached on the prunable weights of the file, and for N:M whether every
 * pruned layer holds the pattern (what sparse tensor cores need). */
void cx_pipeline_prune_note(const cx_pipeline *p, const cx_pipeline_stage *s, const char *path,
                            char *buf, size_t size) {
  const cx_prune_config *c = &p->prune.c;
  char method[32];
  cx_cli_prune_method_name(c, method, sizeof method);
  cx_graph *g = NULL;
  cx_prune_targets t = {0};
  if (c->method == CX_PRUNE_CHANNEL || cx_onnx_import(path, &g, NULL) != CX_OK ||
      cx_prune_select(g, c, path, &t) != CX_OK ||
      (c->method == CX_PRUNE_NM && cx_prune_nm_fit(&t, c, path, NULL) != CX_OK)) {
    snprintf(buf, size, "Pruning (stage %s): %s.", s->name, method);
    cx_graph_free(g);
    return;
  }
  cx_prune_count all;
  cx_prune_count_zeros(g, &t, NULL, &all);
  int holds = 0;
  for (int i = 0; c->method == CX_PRUNE_NM && i < t.n; i++)
    holds += cx_prune_nm_holds(&t.t[i], g->values[t.t[i].weight].init, c->n, c->m);
  size_t at = (size_t)snprintf(buf, size, "Pruning (stage %s): %s, %.1f%% of the %lld prunable "
                               "weights are zero", s->name, method,
                               all.total ? 100.0 * (double)all.zeros / (double)all.total : 0.0,
                               (long long)all.total);
  if (c->method == CX_PRUNE_NM && at < size)
    snprintf(buf + at, size - at, "; the %d:%d pattern holds in %d of the %d layers", c->n, c->m,
             holds, t.n);
  if (at < size) snprintf(buf + strlen(buf), size - strlen(buf), ".");
  cx_prune_targets_free(&t);
  cx_graph_free(g);
}
