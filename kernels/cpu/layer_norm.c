/* LayerNormalization, LayerNormTrain and LayerNormGrad on the CPU. X is [rows, cols] (the
 * normalised trailing axes are contiguous: core/ops/norm.h); a row's statistics are summed in
 * double, so a long row (ViT's 768 channels) keeps f32 precision, and rows run in parallel.
 * dScale and dB are sums over rows, computed per column block in a fixed order so that they do
 * not depend on the thread count. */

#include <math.h>
#include <stdint.h>

#include "../../core/ops/norm.h"
#include "cpu.h"

enum { PAR_MIN = 1 << 14, COL_BLOCK = 64 };

/* A row's mean (rounded to f32, as the normalisation uses it) and 1 / sqrt(variance + eps), the
 * sums in double. The simd reductions let them vectorise (a fixed order of lanes for a given
 * build and CPU): ViT-B/16's LayerNorms took 3 ns an element in scalar double loops. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static void
row_stats(const float *x, int64_t n, float eps, float *mean, float *inv) {
  double s = 0, v = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t j = 0; j < n; j++) s += x[j];
  float m = (float)(s / (double)n);
#pragma omp simd reduction(+ : v)
  for (int64_t j = 0; j < n; j++) v += (double)(x[j] - m) * (x[j] - m);
  *mean = m;
  *inv = (float)(1 / sqrt(v / (double)n + eps));
}

static cx_status run_ln(const cx_kernel_args *a) {
  int64_t rows, cols;
  CX_TRY(cx_layer_norm_split(a->node, &a->in[0].shape, &rows, &cols));
  float eps = cx_node_float(a->node, "epsilon", 1e-5f);
  const float *x = cx_f32(&a->in[0]), *scale = cx_f32(&a->in[1]);
  const float *b = a->n_in > 2 && a->in[2].data ? cx_f32(&a->in[2]) : NULL;
  float *y = cx_f32(&a->out[0]);
  float *mean = a->n_out > 1 && a->out[1].data ? cx_f32(&a->out[1]) : NULL;
  float *inv = a->n_out > 2 && a->out[2].data ? cx_f32(&a->out[2]) : NULL;
#pragma omp parallel for if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * cols;
    float *yr = y + r * cols;
    float m, is;
    row_stats(xr, cols, eps, &m, &is);
    if (b)
      for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * is * scale[j] + b[j];
    else
      for (int64_t j = 0; j < cols; j++) yr[j] = (xr[j] - m) * is * scale[j];
    if (mean) mean[r] = m;
    if (inv) inv[r] = is;
  }
  return CX_OK;
}

/* LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB) */
static cx_status run_ln_grad(const cx_kernel_args *a) {
  int64_t rows, cols;
  CX_TRY(cx_layer_norm_split(a->node, &a->in[1].shape, &rows, &cols));
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *scale = cx_f32(&a->in[2]);
  const float *mean = cx_f32(&a->in[3]), *inv = cx_f32(&a->in[4]);
  float *dx = cx_f32(&a->out[0]);
  float *ds = a->out[1].data ? cx_f32(&a->out[1]) : NULL;
  float *db = a->n_out > 2 && a->out[2].data ? cx_f32(&a->out[2]) : NULL;
#pragma omp parallel for if (rows * cols > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    const float *dyr = dy + r * cols, *xr = x + r * cols;
    float m = mean[r], is = inv[r];
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < cols; j++) {
      float g = dyr[j] * scale[j];
      mg += g;
      mgx += (double)g * ((xr[j] - m) * is);
    }
    float a1 = (float)(mg / (double)cols), a2 = (float)(mgx / (double)cols);
    for (int64_t j = 0; j < cols; j++)
      dx[r * cols + j] = is * (dyr[j] * scale[j] - a1 - (xr[j] - m) * is * a2);
  }
  int64_t blocks = (cols + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for if (rows * cols > PAR_MIN)
  for (int64_t k = 0; k < blocks; k++) {
    int64_t j0 = k * COL_BLOCK, j1 = j0 + COL_BLOCK < cols ? j0 + COL_BLOCK : cols;
    double s[COL_BLOCK] = {0}, t[COL_BLOCK] = {0};
    for (int64_t r = 0; r < rows; r++)
      for (int64_t j = j0; j < j1; j++) {
        float d = dy[r * cols + j];
        s[j - j0] += (double)d * ((x[r * cols + j] - mean[r]) * inv[r]);
        t[j - j0] += d;
      }
    for (int64_t j = j0; j < j1; j++) {
      if (ds) ds[j] = (float)s[j - j0];
      if (db) db[j] = (float)t[j - j0];
    }
  }
  return CX_OK;
}

const cx_kernel cx_cpu_layer_norm[] = {
    {"LayerNormalization", NULL, run_ln, NULL, 0, NULL, 0},
    {"LayerNormTrain", NULL, run_ln, NULL, 0, NULL, 0},
    {"LayerNormGrad", NULL, run_ln_grad, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
