/* The distill stage's record functions: the one place where the pipeline meets distill/ (the KD
 * training graph, the inference-only teacher and its output cache, as a trainer extension). A
 * build without distill/ says so when it reads [distill]: the stage is refused before anything
 * trains, never run without the KD loss. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../export/onnx_export.h"
#include "../import/onnx.h"
#include "commands.h"
#include "pipeline.h"
#include "quantize_run.h"

#if defined(__has_include)
#if __has_include("../distill/distill.h")
#define CX_HAVE_DISTILL 1
#endif
#endif

#ifdef CX_HAVE_DISTILL
#include "../distill/distill.h"

bool cx_pipeline_kd_available(void) { return true; }

/* What a stage's distillation holds until its end. */
typedef struct kd_run {
  cx_kd *kd;
  cx_graph *int8; /* the teacher quantized, for [teacher] precision = "int8" */
} kd_run;

/* [teacher] precision = "int8": the teacher quantized by PTQ with the quantize command's defaults
 * (per-channel INT8 weights, INT8 activations calibrated on the stage's first training batches
 * as evaluation preprocesses them), written as QDQ ONNX and read back, so that the INT8
 * runtime's compile pass (core/quant_fuse.h) fuses it as it fuses any QDQ file. Each process
 * writes a file of its own (data-parallel ranks calibrate on the same batches, alike) and removes
 * it. */
static cx_status teacher_int8(cx_stage_run *r, const cx_graph *teacher, cx_graph **out) {
  cx_quant_config c = cx_quant_defaults();
  cx_cli_quant_job j = {.config = &c, .train = (cx_train_config *)&r->s->tc,
                       .model_name = "teacher"};
  cx_graph *q = NULL;
  CX_TRY(cx_cli_quant_ptq(&j, teacher, &q, NULL, NULL));
  char tmp[CX_CLI_PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/.teacher_int8.%ld.onnx", r->out, (long)getpid());
  cx_status s = cx_onnx_export(q, tmp, NULL);
  cx_graph_free(q);
  if (s == CX_OK) s = cx_onnx_import(tmp, out, NULL);
  unlink(tmp);
  if (s == CX_OK && !r->opts->quiet)
    printf("%s: the teacher runs in INT8 (PTQ, %s calibration on %d batches of the training "
           "data)\n", r->s->name, cx_quant_calibrator_name(c.calibrator),
           (int)c.calibration_batches);
  return s;
}

/* Distils with teacher: its outputs are cached in <out>/teacher_cache, keyed by what they depend
 * on (the teacher, the data, the augmentation), so a later stage that sees the same batches reads
 * them back. */
cx_status cx_pipeline_kd_begin(cx_stage_run *r, const cx_graph *teacher, void **kd_out) {
  cx_train_opts *o = r->opts;
  kd_run *k = calloc(1, sizeof *k);
  if (!k) return cx_fail(CX_ERR_NOMEM, "out of memory");
  *kd_out = k;
  if (r->p->teacher_int8) {
    CX_TRY(teacher_int8(r, teacher, &k->int8));
    teacher = k->int8;
  }
  char cache[CX_CLI_PATH_MAX];
  snprintf(cache, sizeof cache, "%s/teacher_cache", r->out);
  cx_kd_teacher_spec t = {.graph = teacher, .precision = r->p->teacher_precision, .weight = 1,
                          .name = "teacher"};
  cx_kd_opts ko = {.kd = cx_kd_config_defaults(), .n_teachers = 1, .teachers = &t,
                   .cache_dir = cache, .quiet = o->quiet};
  ko.kd.temperature = (float)r->p->temperature;
  ko.kd.alpha = (float)r->p->alpha;
  ko.kd.label_smoothing = o->label_smoothing;
  ko.kd.soft_targets = o->loader.aug.mixup_alpha > 0 || o->loader.aug.cutmix_alpha > 0;
  ko.kd.seed = o->seed;
  CX_TRY(cx_kd_open(&ko, o, &k->kd));
  cx_train_ext e = cx_kd_extension(k->kd);
  return cx_stage_run_add(r, &e);
}

cx_status cx_pipeline_kd_end(cx_stage_run *r, void *kd_in) {
  kd_run *k = kd_in;
  if (!k) return CX_OK;
  cx_status s = CX_OK;
  if (k->kd) {
    cx_kd_stats st = cx_kd_get_stats(k->kd);
    r->result->teacher_batches += st.teacher_batches;
    r->result->cached_batches += st.cached_batches;
    s = cx_kd_close(k->kd);
  }
  cx_graph_free(k->int8);
  free(k);
  return s;
}

#else

bool cx_pipeline_kd_available(void) { return false; }

cx_status cx_pipeline_kd_begin(cx_stage_run *r, const cx_graph *teacher, void **kd) {
  (void)r, (void)teacher, (void)kd;
  return cx_fail(CX_ERR_UNSUPPORTED, "knowledge distillation is not available in this build");
}

cx_status cx_pipeline_kd_end(cx_stage_run *r, void *kd) {
  (void)r, (void)kd;
  return CX_OK;
}

#endif

bool cx_pipeline_has_teacher(const cx_pipeline *p) {
  return p->stages[cx_pipeline_stage_find("teacher")].present;
}

void cx_pipeline_kd_tune_salt(const cx_pipeline *p, char *buf, size_t size) {
  size_t at = strlen(buf);
  if (!cx_pipeline_has_teacher(p)) return;
  snprintf(buf + at, size - at, "|kd|T=%a|a=%a", p->temperature, p->alpha);
  cx_pipeline_teacher_salt(p, buf, size);
}

cx_status cx_pipeline_kd_tune_begin(cx_stage_run *r, cx_pipeline_kd_tune *t) {
  *t = (cx_pipeline_kd_tune){0};
  if (!cx_pipeline_has_teacher(r->p) || !cx_pipeline_kd_available()) return CX_OK;
  char path[CX_CLI_PATH_MAX], *old = NULL;
  snprintf(path, sizeof path, "%s/%s", r->out,
           r->p->stages[cx_pipeline_stage_find("teacher")].output);
  CX_TRY(cx_onnx_import(path, &t->teacher, NULL));
  cx_cli_rename_input(t->teacher, &old);
  free(old);
  return cx_pipeline_kd_begin(r, t->teacher, &t->kd);
}

cx_status cx_pipeline_kd_tune_end(cx_stage_run *r, cx_pipeline_kd_tune *t) {
  cx_status s = cx_pipeline_kd_end(r, t->kd);
  cx_graph_free(t->teacher);
  *t = (cx_pipeline_kd_tune){0};
  return s;
}

/* The distill stage's teacher is its input stage's model. */
cx_status cx_pipeline_distill_begin(cx_stage_run *r) {
  if (!r->input) return cx_fail(CX_ERR_ARG, "distill: no teacher model");
  return cx_pipeline_kd_begin(r, r->input, &r->state);
}

cx_status cx_pipeline_distill_end(cx_stage_run *r) {
  void *kd = r->state;
  r->state = NULL;
  return cx_pipeline_kd_end(r, kd);
}
