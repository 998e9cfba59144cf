/* Offline augmentation: copy k of sample i is what the loader would draw for it in epoch k
 * (same seed), stored back as bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

typedef struct aug_job {
  cx_dataset *in;
  cx_dataset_writer *w;
  cx_aug_plan plan;
  uint64_t seed;
  int64_t block;
  uint8_t *src, *dst;
  float *img, *scratch;
} aug_job;

/* CHW floats holding byte values -> HWC bytes. */
static void to_bytes(const aug_job *j, const float *img, uint8_t *dst) {
  const cx_aug_plan *p = &j->plan;
  for (int64_t y = 0; y < p->oh; y++)
    for (int64_t x = 0; x < p->ow; x++)
      for (int64_t c = 0; c < p->c; c++) {
        long v = lroundf(img[(c * p->oh + y) * p->ow + x]);
        dst[(y * p->ow + x) * p->c + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
}

/* copy < 0: the originals. */
static cx_status write_copy(aug_job *j, int64_t copy) {
  const cx_dataset_info *in = cx_dataset_get_info(j->in);
  const int64_t *labels = cx_dataset_labels(j->in);
  int64_t in_bytes = in->h * in->w * in->c, out_bytes = j->plan.oh * j->plan.ow * in->c;
  for (int64_t at = 0; at < in->n; at += j->block) {
    int64_t count = in->n - at < j->block ? in->n - at : j->block;
    CX_TRY(cx_dataset_read(j->in, at, count, j->src));
    for (int64_t i = 0; copy >= 0 && i < count; i++) {
      uint64_t key = cx_data_key(j->seed, CX_SALT_SAMPLE, (uint64_t)copy, (uint64_t)(at + i));
      cx_aug_sample(&j->plan, j->src + i * in_bytes, key, j->img, j->scratch);
      to_bytes(j, j->img, j->dst + i * out_bytes);
    }
    CX_TRY(cx_dataset_writer_append(j->w, "", copy >= 0 ? j->dst : j->src, labels + at, count));
  }
  return CX_OK;
}

static cx_status make_writer(aug_job *j, const char *in_path, const char *out, int copies,
                             const char *tool, const char ***names) {
  const cx_dataset_info *in = cx_dataset_get_info(j->in);
  *names = NULL;
  if (cx_dataset_class_name(j->in, 0)) {
    if (!(*names = calloc((size_t)in->num_classes, sizeof **names)))
      return cx_fail(CX_ERR_NOMEM, "%s: out of memory", out);
    for (int64_t k = 0; k < in->num_classes; k++) (*names)[k] = cx_dataset_class_name(j->in, k);
  }
  char source[1200];
  snprintf(source, sizeof source, "augmented from %s (%d copies, seed %llu)", in_path, copies,
           (unsigned long long)j->seed);
  cx_dataset_meta m = {.h = j->plan.oh, .w = j->plan.ow, .c = in->c,
                       .num_classes = in->num_classes, .class_names = *names, .source = source,
                       .tool = tool};
  return cx_dataset_writer_create(out, &m, &j->w);
}

static cx_status run(aug_job *j, const char *in_path, const char *out, const cx_augment *a,
                     int copies, bool keep_original, const char *tool) {
  const cx_dataset_info *in = cx_dataset_get_info(j->in);
  if (cx_aug_mixing(a))
    return cx_fail(CX_ERR_ARG, "%s: mixup and cutmix make soft targets, which a data set file "
                   "does not hold; use them in the loader", out);
  CX_TRY(cx_aug_plan_make(a, in->h, in->w, in->c, &j->plan));
  for (int c = 0; c < 4; c++) j->plan.scale[c] = 1, j->plan.bias[c] = 0; /* keep byte values */
  if (keep_original && (j->plan.oh != in->h || j->plan.ow != in->w))
    return cx_fail(CX_ERR_ARG, "%s: the originals are %lldx%lld but the copies %lldx%lld; they "
                   "cannot share a file", out, (long long)in->w, (long long)in->h,
                   (long long)j->plan.ow, (long long)j->plan.oh);
  j->block = in->chunk_images;
  j->src = malloc((size_t)(j->block * in->h * in->w * in->c));
  j->dst = malloc((size_t)(j->block * j->plan.oh * j->plan.ow * in->c));
  j->img = malloc((size_t)(j->plan.oh * j->plan.ow * in->c) * sizeof(float));
  j->scratch = malloc(cx_aug_scratch_floats(&j->plan) * sizeof(float) + 64);
  if (!j->src || !j->dst || !j->img || !j->scratch)
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory", out);
  const char **names;
  cx_status s = make_writer(j, in_path, out, copies, tool, &names);
  free(names);
  if (s != CX_OK) return s;
  if (keep_original) s = write_copy(j, -1);
  for (int k = 0; s == CX_OK && k < copies; k++) s = write_copy(j, k);
  if (s != CX_OK) {
    cx_dataset_writer_abort(j->w);
    return s;
  }
  return cx_dataset_writer_finish(j->w);
}

cx_status cx_data_augment_file(const char *in, const char *part, const char *out,
                               const cx_augment *a, int copies, bool keep_original,
                               uint64_t seed, const char *tool) {
  if (copies < 1) return cx_fail(CX_ERR_ARG, "%s: copies must be at least 1", out);
  aug_job j = {.seed = seed};
  CX_TRY(cx_dataset_open(in, part, &j.in));
  cx_status s = run(&j, in, out, a, copies, keep_original, tool);
  cx_dataset_close(j.in);
  free(j.src);
  free(j.dst);
  free(j.img);
  free(j.scratch);
  return s;
}
