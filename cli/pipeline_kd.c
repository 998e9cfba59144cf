/* The one place where the pipeline's [distill] stage meets distill/ (the KD training graph,
 * the inference-only teacher and its output cache). A build without distill/ says so: the stage
 * is refused before anything trains, never run without the KD loss. */
#include <stdlib.h>

#include "pipeline.h"

#if defined(__has_include)
#if __has_include("../distill/distill.h")
#define CX_HAVE_DISTILL 1
#endif
#endif

#ifdef CX_HAVE_DISTILL
#include "../distill/distill.h"

struct cx_pipeline_kd {
  cx_kd *kd;
};

/* o->user points at a struct whose first member is the cx_pipeline_kd *. */
static cx_kd *kd_of(void *user) { return (*(cx_pipeline_kd **)user)->kd; }

static cx_status build_graph(void *user, const cx_graph *model, cx_graph **out) {
  return cx_kd_build_graph(kd_of(user), model, out);
}

static cx_status feed(void *user, struct cx_program *train, const cx_batch *b) {
  return cx_kd_feed(kd_of(user), train, b);
}

bool cx_pipeline_kd_available(void) { return true; }

cx_status cx_pipeline_kd_begin(const cx_graph *teacher, double temperature, double alpha,
                               const char *cache_dir, cx_train_opts *o, cx_pipeline_kd **out) {
  cx_pipeline_kd *k = calloc(1, sizeof *k);
  if (!k) return cx_fail(CX_ERR_NOMEM, "out of memory");
  cx_kd_teacher_spec t = {.graph = teacher, .weight = 1, .name = "teacher"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t,
                   .cache_dir = cache_dir, .quiet = o->quiet};
  ko.kd.temperature = (float)temperature;
  ko.kd.alpha = (float)alpha;
  ko.kd.label_smoothing = o->label_smoothing;
  ko.kd.soft_targets = o->loader.aug.mixup_alpha > 0 || o->loader.aug.cutmix_alpha > 0;
  ko.kd.seed = o->seed;
  cx_status s = cx_kd_open(&ko, o, &k->kd);
  if (s != CX_OK) return free(k), s;
  o->build_graph = build_graph;
  o->feed = feed;
  *out = k;
  return CX_OK;
}

void cx_pipeline_kd_counts(const cx_pipeline_kd *k, int64_t *teacher_batches,
                           int64_t *cached_batches) {
  cx_kd_stats st = cx_kd_get_stats(k->kd);
  *teacher_batches = st.teacher_batches;
  *cached_batches = st.cached_batches;
}

cx_status cx_pipeline_kd_end(cx_pipeline_kd *k) {
  if (!k) return CX_OK;
  cx_status s = cx_kd_close(k->kd);
  free(k);
  return s;
}

#else

bool cx_pipeline_kd_available(void) { return false; }

cx_status cx_pipeline_kd_begin(const cx_graph *teacher, double temperature, double alpha,
                               const char *cache_dir, cx_train_opts *o, cx_pipeline_kd **out) {
  (void)teacher, (void)temperature, (void)alpha, (void)cache_dir, (void)o;
  *out = NULL;
  return cx_fail(CX_ERR_UNSUPPORTED, "knowledge distillation is not available in this build");
}

void cx_pipeline_kd_counts(const cx_pipeline_kd *k, int64_t *teacher_batches,
                           int64_t *cached_batches) {
  (void)k;
  *teacher_batches = *cached_batches = 0;
}

cx_status cx_pipeline_kd_end(cx_pipeline_kd *k) {
  (void)k;
  return CX_OK;
}

#endif
