/* LayerNormalization, LayerNormTrain and LayerNormGrad references, in double, from the ONNX
 * definition: X as [rows, cols] (core/ops/norm.h), each row normalised with its own mean and
 * biased variance. */

#include <math.h>

#include "../../core/ops/norm.h"
#include "ref.h"

static cx_status ref_ln(const cx_ref_args *a) {
  int64_t rows, cols;
  CX_TRY(cx_layer_norm_split(a->node, &a->in[0].shape, &rows, &cols));
  double eps = cx_node_float(a->node, "epsilon", 1e-5f);
  const double *x = a->in[0].data, *scale = a->in[1].data;
  const double *b = a->n_in > 2 ? a->in[2].data : NULL;
  for (int64_t r = 0; r < rows; r++) {
    const double *xr = x + r * cols;
    double m = 0, v = 0;
    for (int64_t j = 0; j < cols; j++) m += xr[j];
    m /= (double)cols;
    for (int64_t j = 0; j < cols; j++) v += (xr[j] - m) * (xr[j] - m);
    double invstd = 1 / sqrt(v / (double)cols + eps);
    for (int64_t j = 0; j < cols; j++)
      a->out[0].data[r * cols + j] = (xr[j] - m) * invstd * scale[j] + (b ? b[j] : 0);
    if (a->n_out > 1 && a->out[1].data) a->out[1].data[r] = m;
    if (a->n_out > 2 && a->out[2].data) a->out[2].data[r] = invstd;
  }
  return CX_OK;
}

/* dX = invstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dY * Scale, per row;
 * dScale = sum over rows of dY * xhat, dB = sum over rows of dY. */
static cx_status ref_ln_grad(const cx_ref_args *a) {
  int64_t rows, cols;
  CX_TRY(cx_layer_norm_split(a->node, &a->in[1].shape, &rows, &cols));
  const double *dy = a->in[0].data, *x = a->in[1].data, *scale = a->in[2].data;
  const double *mean = a->in[3].data, *invstd = a->in[4].data;
  for (int64_t r = 0; r < rows; r++) {
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < cols; j++) {
      double xhat = (x[r * cols + j] - mean[r]) * invstd[r], g = dy[r * cols + j] * scale[j];
      mg += g;
      mgx += g * xhat;
      a->out[1].data[j] += dy[r * cols + j] * xhat;
      a->out[2].data[j] += dy[r * cols + j];
    }
    mg /= (double)cols;
    mgx /= (double)cols;
    for (int64_t j = 0; j < cols; j++) {
      double xhat = (x[r * cols + j] - mean[r]) * invstd[r], g = dy[r * cols + j] * scale[j];
      a->out[0].data[r * cols + j] = invstd[r] * (g - mg - xhat * mgx);
    }
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_layer_norm[] = {
    {"LayerNormalization", ref_ln},
    {"LayerNormTrain", ref_ln},
    {"LayerNormGrad", ref_ln_grad},
    {NULL, NULL},
};
