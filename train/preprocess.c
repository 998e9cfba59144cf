/* Input preprocessing as ONNX metadata: what a model trained here records and eval reads back. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_config.h"

bool cx_preprocess_parse_scale(const char *s, double *scale) {
  char *end;
  errno = 0;
  double num = strtod(s, &end);
  if (end == s || errno) return false;
  double den = 1;
  if (*end == '/') {
    const char *d = end + 1;
    den = strtod(d, &end);
    if (end == d || errno) return false;
  }
  *scale = num / den;
  return !*end && isfinite(*scale) && *scale > 0;
}

bool cx_preprocess_parse_values(const char *s, float *v, int *n, bool positive) {
  *n = 0;
  for (const char *p = s;;) {
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    if (end == p || errno || !isfinite(x) || (positive && !(x > 0)) || *n == 4) return false;
    v[(*n)++] = (float)x;
    if (!*end) return true;
    if (*end != ',') return false;
    p = end + 1;
  }
}

/* out = (byte * scale - m) / s = (byte / 255 - m / (255 scale)) / (s / (255 scale)). */
void cx_preprocess_to_augment(const cx_preprocess *p, cx_augment *a) {
  double k = 255.0 * p->scale;
  for (int c = 0; c < 4; c++) {
    int i = p->channels == 1 ? 0 : c;
    bool set = c < p->channels || p->channels == 1;
    a->mean[c] = set ? (float)(p->mean[i] / k) : 0;
    a->std[c] = set ? (float)(p->std[i] / k) : 1;
  }
}

static cx_status bad(const char *key, const char *value, const char *want) {
  return cx_fail(CX_ERR_FORMAT, "model metadata '%s' = \"%s\": expected %s", key, value, want);
}

cx_status cx_preprocess_from_metadata(int n, const char *const *keys, const char *const *values,
                                      cx_preprocess *p, bool *found) {
  *found = false;
  *p = (cx_preprocess){.scale = 1.0 / 255};
  int n_mean = -1, n_std = -1;
  for (int i = 0; i < n; i++) {
    const char *k = keys[i], *v = values[i];
    if (!strcmp(k, CX_META_LAYOUT)) {
      if (strcmp(v, "NCHW")) return bad(k, v, "\"NCHW\" (the only layout compress reads)");
    } else if (!strcmp(k, CX_META_SCALE)) {
      if (!cx_preprocess_parse_scale(v, &p->scale)) return bad(k, v, "\"1/255\" or a number");
    } else if (!strcmp(k, CX_META_MEAN)) {
      if (!cx_preprocess_parse_values(v, p->mean, &n_mean, false))
        return bad(k, v, "1 to 4 comma-separated numbers");
    } else if (!strcmp(k, CX_META_STD)) {
      if (!cx_preprocess_parse_values(v, p->std, &n_std, true))
        return bad(k, v, "1 to 4 comma-separated positive numbers");
    } else {
      continue;
    }
    *found = true;
  }
  if (!*found) return CX_OK;
  if (n_mean < 0 || n_std < 0 || n_mean != n_std)
    return cx_fail(CX_ERR_FORMAT, "model metadata: '%s' and '%s' must both be there, with as "
                   "many values", CX_META_MEAN, CX_META_STD);
  p->channels = n_mean;
  return CX_OK;
}
