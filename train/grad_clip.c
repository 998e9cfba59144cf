#include "grad_clip.h"

#include <math.h>
#include <string.h>

/* Tensors below this many elements are processed by one thread. */
#define PARALLEL_MIN 32768

static double sum_squares(const float *g, int64_t n) {
  double s = 0;
#pragma omp parallel for simd reduction(+ : s) if (n >= PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) s += (double)g[i] * g[i];
  return s;
}

float cx_grad_global_norm(cx_tensor *const *grads, int n) {
  double s = 0;
  for (int k = 0; k < n; k++)
    if (grads[k]) s += sum_squares(grads[k]->data, cx_tensor_numel(grads[k]));
  return (float)sqrt(s);
}

float cx_grad_clip_global_norm(cx_tensor *const *grads, int n, float max_norm) {
  float norm = cx_grad_global_norm(grads, n);
  double coef = (double)max_norm / ((double)norm + 1e-6);
  if (isfinite(norm) && coef < 1) cx_grad_scale(grads, n, (float)coef);
  return norm;
}

/* x * 0 is 0 for finite x and NaN for inf or NaN, so the sum says whether any was not finite,
 * in a loop that vectorises with no branch. */
static bool finite(const float *g, int64_t n) {
  float z = 0;
#pragma omp parallel for simd reduction(+ : z) if (n >= PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) z += g[i] * 0.0f;
  return z == 0;
}

bool cx_grads_finite(cx_tensor *const *grads, int n) {
  for (int k = 0; k < n; k++)
    if (grads[k] && !finite(grads[k]->data, cx_tensor_numel(grads[k]))) return false;
  return true;
}

void cx_grad_scale(cx_tensor *const *grads, int n, float factor) {
  for (int k = 0; k < n; k++) {
    if (!grads[k]) continue;
    float *g = grads[k]->data;
    int64_t m = cx_tensor_numel(grads[k]);
#pragma omp parallel for simd if (m >= PARALLEL_MIN)
    for (int64_t i = 0; i < m; i++) g[i] *= factor;
  }
}

static void add(float *acc, const float *g, int64_t n) {
#pragma omp parallel for simd if (n >= PARALLEL_MIN)
  for (int64_t i = 0; i < n; i++) acc[i] += g[i];
}

cx_status cx_grad_accumulate(cx_tensor *const *acc, cx_tensor *const *grads, int n, bool first) {
  for (int k = 0; k < n; k++) {
    if (!acc[k] && !grads[k]) continue;
    if (!acc[k] || !grads[k] || cx_tensor_numel(acc[k]) != cx_tensor_numel(grads[k])) {
      char a[CX_SHAPE_STR] = "none", b[CX_SHAPE_STR] = "none";
      if (acc[k]) cx_shape_str(&acc[k]->shape, a);
      if (grads[k]) cx_shape_str(&grads[k]->shape, b);
      return cx_fail(CX_ERR_SHAPE, "gradient accumulation: buffer %d is %s, its gradient %s", k,
                     a, b);
    }
    int64_t m = cx_tensor_numel(grads[k]);
    if (first) memcpy(acc[k]->data, grads[k]->data, sizeof(float) * (size_t)m);
    else add(acc[k]->data, grads[k]->data, m);
  }
  return CX_OK;
}
