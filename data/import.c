/* What every importer shares: the validation split and the checks on labels. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* The val samples are the first round(fraction * n) of a permutation drawn from (seed, n). */
static cx_status val_mask(cx_import_sink *s, double fraction, uint64_t seed) {
  int64_t n = s->n, k = (int64_t)llround(fraction * (double)n);
  if (k <= 0) return CX_OK;
  int64_t *perm = malloc((size_t)n * sizeof *perm);
  s->is_val = calloc((size_t)n, 1);
  if (!perm || !s->is_val) {
    free(perm);
    return cx_fail(CX_ERR_NOMEM, "%s: out of memory for the validation split", s->out);
  }
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  uint64_t key = cx_data_key(seed, CX_SALT_SPLIT, (uint64_t)n, 0);
  for (int64_t i = 0; i < k; i++) {
    int64_t j = i + (int64_t)cx_data_rand_below(key, (uint64_t)i, (uint64_t)(n - i));
    int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
    s->is_val[perm[i]] = 1;
  }
  free(perm);
  return CX_OK;
}

cx_status cx_import_sink_open(cx_import_sink *s, const char *out, const cx_dataset_meta *m,
                              int64_t n, const cx_import_opts *o) {
  *s = (cx_import_sink){.n = n, .num_classes = m->num_classes, .out = out,
                       .image_bytes = m->h * m->w * m->c};
  if (o->val_fraction < 0 || o->val_fraction >= 1)
    return cx_fail(CX_ERR_ARG, "%s: validation fraction %g is not in [0, 1)", out,
                   o->val_fraction);
  CX_TRY(val_mask(s, o->val_fraction, o->seed));
  cx_status st = cx_dataset_writer_create(out, m, &s->w);
  if (st != CX_OK) {
    free(s->is_val);
    s->is_val = NULL;
  }
  return st;
}

cx_status cx_import_sink_add(cx_import_sink *s, int64_t i, const uint8_t *images,
                             const int64_t *labels, int64_t count) {
  /* Runs of samples that go to the same part are appended together. */
  for (int64_t a = 0; a < count;) {
    bool val = s->is_val && s->is_val[i + a];
    int64_t b = a + 1;
    while (b < count && (s->is_val && s->is_val[i + b]) == val) b++;
    CX_TRY(cx_dataset_writer_append(s->w, val ? "val" : "", images + a * s->image_bytes,
                                    labels + a, b - a));
    a = b;
  }
  return CX_OK;
}

cx_status cx_import_sink_finish(cx_import_sink *s) {
  cx_status st = cx_dataset_writer_finish(s->w);
  s->w = NULL;
  free(s->is_val);
  s->is_val = NULL;
  return st;
}

void cx_import_sink_abort(cx_import_sink *s) {
  cx_dataset_writer_abort(s->w);
  s->w = NULL;
  free(s->is_val);
  s->is_val = NULL;
}

cx_status cx_import_check_labels(const char *path, const int64_t *labels, int64_t n,
                                 int64_t num_classes) {
  for (int64_t i = 0; i < n; i++)
    if (labels[i] < 0 || labels[i] >= num_classes)
      return cx_fail(CX_ERR_FORMAT, "%s: label %lld at index %lld is out of range [0, %lld)",
                     path, (long long)labels[i], (long long)i, (long long)num_classes);
  return CX_OK;
}

int64_t cx_import_num_classes(const cx_import_opts *o, const int64_t *labels, int64_t n) {
  if (o->class_names && o->num_class_names > 0) return o->num_class_names;
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    if (labels[i] >= k) k = labels[i] + 1;
  return k;
}
