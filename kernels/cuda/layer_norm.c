/* Layer normalization on the GPU: LayerNormalization (optional B, optional Mean and InvStdDev
 * outputs), LayerNormTrain (the same, Mean and InvStdDev always written) and
 * LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB), as kernels/cpu/layer_norm.c
 * computes them: X seen as [rows, cols] from `axis` (cx_layer_norm_split), statistics in double
 * rounded to f32, epsilon added in double (stash_type changes nothing: the statistics are wider
 * than f32 anyway). Plain row-major tensors only.
 *
 * Scratch (device, LayerNormGrad only): 2 * p * cols doubles, the per-chunk partial sums of
 * dScale and dB, folded in a fixed order. */
#include "../../core/op.h"
#include "../../core/ops/norm.h"
#include "cuda.h"
#include "layer_norm_launch.h"

/* Rows per chunk of the parameter sums: enough to amortise a block, few enough to fill the GPU;
 * fewer chunks for wide rows, so that the partials stay within PART_DOUBLES. */
enum { PART_ROWS = 64, MAX_PARTS = 128, PART_DOUBLES = 1 << 22 };

static cx_status geom_of(const cx_kernel_args *a, int xi, cx_ln_geom *g) {
  CX_TRY(cx_layer_norm_split(a->node, &a->in[xi].shape, &g->rows, &g->cols));
  int64_t p = (g->rows + PART_ROWS - 1) / PART_ROWS, cap = MAX_PARTS;
  if (g->cols > 0 && PART_DOUBLES / (2 * g->cols) < cap) cap = PART_DOUBLES / (2 * g->cols);
  if (p > cap) p = cap;
  g->p = (int)(p < 1 ? 1 : p);
  return CX_OK;
}

static size_t scratch_of(cx_ln_geom g) { return 2 * (size_t)g.p * (size_t)g.cols * sizeof(double); }

static cx_status plain(const cx_kernel_args *a, const cx_tensor *const *t, int n) {
  for (int i = 0; i < n; i++)
    if (t[i]->data && !cx_tensor_is_contiguous(t[i]))
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): the CUDA kernel takes plain row-major "
                     "tensors only", a->node->name, a->node->op->name);
  return CX_OK;
}

static const float *opt_in(const cx_kernel_args *a, int k) {
  return a->n_in > k && a->in[k].data ? cx_cuda_f32(&a->in[k]) : NULL;
}

static float *opt_out(const cx_kernel_args *a, int k) {
  return a->n_out > k && a->out[k].data ? cx_cuda_f32(&a->out[k]) : NULL;
}

/* LayerNormalization and LayerNormTrain: (X, Scale[, B]) -> (Y[, Mean[, InvStdDev]]) */
static cx_status ln_run(const cx_kernel_args *a) {
  const cx_tensor *args[] = {&a->in[0], &a->in[1], a->n_in > 2 ? &a->in[2] : &a->in[1],
                             &a->out[0]};
  CX_TRY(plain(a, args, 4));
  cx_ln_geom g;
  CX_TRY(geom_of(a, 0, &g));
  /* cols == 0 with rows > 0 still writes the statistics (NaN, as the CPU's 0 / 0) */
  if (g.rows == 0) return CX_OK;
  cx_cuda_ln_forward(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->in[1]), opt_in(a, 2),
                     cx_cuda_f32(&a->out[0]), opt_out(a, 1), opt_out(a, 2),
                     cx_node_float(a->node, "epsilon", 1e-5f), g, cx_cuda_stream(a->stream)->s);
  CX_CUDA_LAUNCHED();
  return CX_OK;
}

static cx_status ln_grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  *state = NULL;
  cx_ln_geom g;
  CX_TRY(geom_of(a, 1, &g));
  *scratch = scratch_of(g);
  return CX_OK;
}

/* LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB); dScale and dB may be
 * omitted */
static cx_status ln_grad_run(const cx_kernel_args *a) {
  const cx_tensor *args[] = {&a->in[0], &a->in[1], &a->in[2], &a->out[0]};
  CX_TRY(plain(a, args, 4));
  cx_ln_geom g;
  CX_TRY(geom_of(a, 1, &g));
  cudaStream_t st = cx_cuda_stream(a->stream)->s;
  const float *dy = cx_cuda_f32(&a->in[0]), *x = cx_cuda_f32(&a->in[1]);
  const float *mean = cx_cuda_f32(&a->in[3]), *inv = cx_cuda_f32(&a->in[4]);
  float *dx = opt_out(a, 0), *ds = opt_out(a, 1), *db = opt_out(a, 2);
  if (dx && g.rows > 0 && g.cols > 0) {
    cx_cuda_ln_grad_dx(dy, x, cx_cuda_f32(&a->in[2]), mean, inv, dx, g, st);
    CX_CUDA_LAUNCHED();
  }
  /* rows == 0 still writes zeros, as the CPU does */
  if ((ds || db) && g.cols > 0) {
    if (!a->scratch || scratch_of(g) == 0)
      return cx_fail(CX_ERR_BACKEND, "node '%s' (LayerNormGrad): not prepared", a->node->name);
    cx_cuda_ln_grad_params(dy, x, mean, inv, a->scratch, ds, db, g, st);
    CX_CUDA_LAUNCHED();
  }
  return CX_OK;
}

const cx_kernel cx_cuda_layer_norm[] = {
    {"LayerNormalization", NULL, ln_run, NULL, 0, NULL, 0},
    {"LayerNormTrain", NULL, ln_run, NULL, 0, NULL, 0},
    {"LayerNormGrad", ln_grad_prepare, ln_grad_run, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
