/* The pipeline's stage records, in run order (cli/pipeline.h: cx_stage_def). Each stage takes
 * the model of the first present stage in its `inputs`, so any may be left out:
 * teacher -> scratch, teacher -> distill -> prune -> quantize. */
#include <string.h>

#include "pipeline.h"

static const char *const from_teacher[] = {"teacher", NULL};
static const char *const from_student[] = {"distill", "scratch", NULL};
static const char *const from_compressed[] = {"prune", "distill", "scratch", NULL};

const cx_stage_def cx_stage_defs[CX_STAGE_COUNT] = {
    {.name = "teacher", .output = "teacher.onnx", .model = "teacher",
     .report_role = CX_STAGE_TEACHER_ROW, .read = cx_pipeline_read_teacher},
    {.name = "scratch", .output = "student_scratch.onnx", .model = "student (scratch)",
     .report_role = CX_STAGE_BASELINE_ROW, .read = cx_pipeline_read_scratch},
    {.name = "distill", .output = "student.onnx", .model = "student (distilled)",
     .inputs = from_teacher, .read = cx_pipeline_read_distill, .salt = cx_pipeline_distill_salt,
     .begin = cx_pipeline_distill_begin, .end = cx_pipeline_distill_end},
    {.name = "prune", .output = "student_pruned.onnx", .model = "student (pruned)",
     .inputs = from_student, .read = cx_pipeline_read_prune, .salt = cx_pipeline_prune_salt,
     .check = cx_pipeline_prune_check, .load_model = cx_pipeline_prune_model,
     .begin = cx_pipeline_prune_begin, .trained_model = cx_pipeline_prune_trained,
     .end = cx_pipeline_prune_end, .report_note = cx_pipeline_prune_note,
     .start_label = cx_pipeline_prune_start},
    {.name = "quantize", .output = "student_int8.onnx", .model = "student (INT8)",
     .inputs = from_compressed, .read = cx_pipeline_read_quantize,
     .salt = cx_pipeline_quantize_salt, .load_model = cx_pipeline_quantize_model,
     .begin = cx_pipeline_quantize_begin, .trained_model = cx_pipeline_quantize_trained,
     .end = cx_pipeline_quantize_end, .report_note = cx_pipeline_quantize_note,
     .start_label = cx_pipeline_quantize_start, .score_output = true},
};

cx_status cx_stage_run_add(cx_stage_run *r, const cx_train_ext *e) {
  int max = (int)(sizeof r->ext / sizeof *r->ext);
  if (r->n_ext == max)
    return cx_fail(CX_ERR_ARG, "%s: more than %d trainer extensions", r->s->name, max);
  r->ext[r->n_ext++] = *e;
  r->opts->extensions = r->ext;
  r->opts->n_extensions = r->n_ext;
  return CX_OK;
}

int cx_pipeline_stage_find(const char *name) {
  for (int i = 0; i < CX_STAGE_COUNT; i++)
    if (!strcmp(cx_stage_defs[i].name, name)) return i;
  return -1;
}
