/* Conv and ConvGrad on cuDNN's convolution API: descriptors and algorithms chosen once in prepare
 * (heuristics, no benchmarking), the largest workspace among the algorithms a node runs reported
 * as its scratch. Plain NCHW f32 activations, OIHW weights.
 *
 * Math types by precision:
 *   F32   CUDNN_FMA_MATH. CUDNN_DEFAULT_MATH would not do: since cuDNN 8 it lets f32 convolutions
 *         run as TF32 on Ampere and later (10-bit mantissa), far outside the 1e-4 the CPU
 *         reference is compared at; FMA_MATH keeps every engine on f32 FMAs (as PyTorch does with
 *         allow_tf32 off). FFT algorithms are skipped too: their rounding grows with the map size.
 *   F16   CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: tensor cores on our f32 tensors, operands
 *         converted down inside cuDNN, accumulation in f32.
 *   BF16  the same: the legacy API has no way to ask for bf16 rounding of f32 tensors (that would
 *         take bf16 copies of X and W and the graph API), so BF16 gets F16's tensor-core path.
 *
 * cuDNN pads symmetrically only. Asymmetric pads (explicit, or from auto_pad SAME_*) keep the
 * smaller pad of each axis in cuDNN and put the rest into an explicitly padded copy X' of X in
 * scratch (conv_kernels.cu): Conv and dW read X', dX is computed as dX' and cropped. */
#include <limits.h>
#include <stdlib.h>

#include "../../core/op.h"
#include "../../core/ops/conv.h"
#include "conv_launch.h"
#include "cuda.h"

typedef struct conv_state {
  cx_conv_geom g;
  cudnnTensorDescriptor_t x, y, b;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  bool want[3]; /* ConvGrad: dX, dW, dB */
  size_t ws;    /* cuDNN's workspace, at the start of scratch */
  /* asymmetric pads: X' [n, c_in, hp, wp] holds X at (top, left), after the workspace */
  bool padx;
  int64_t hp, wp, top, left;
  size_t xp_at;
} conv_state;

static void conv_release(void *p) {
  conv_state *s = p;
  if (!s) return;
  if (s->x) cudnnDestroyTensorDescriptor(s->x);
  if (s->y) cudnnDestroyTensorDescriptor(s->y);
  if (s->b) cudnnDestroyTensorDescriptor(s->b);
  if (s->w) cudnnDestroyFilterDescriptor(s->w);
  if (s->conv) cudnnDestroyConvolutionDescriptor(s->conv);
  free(s);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The pads cuDNN applies (the smaller of each axis) and X' for the rest. */
static void plan_padding(conv_state *s) {
  const cx_conv_geom *g = &s->g;
  int64_t ph = min64(g->pt, g->pb), pw = min64(g->pl, g->pr);
  s->top = g->pt - ph, s->left = g->pl - pw;
  s->hp = g->h + g->pt + g->pb - 2 * ph, s->wp = g->w + g->pl + g->pr - 2 * pw;
  s->padx = s->hp != g->h || s->wp != g->w;
}

static bool fits_int(const conv_state *s) {
  const cx_conv_geom *g = &s->g;
  int64_t v[] = {g->n, g->c_in, s->hp, s->wp, g->c_out, g->kh, g->kw, g->oh, g->ow, g->group,
                 g->sh, g->sw, g->dh, g->dw, g->pt, g->pl};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    if (v[i] > INT_MAX) return false;
  return true;
}

static cudnnMathType_t math_of(cx_precision p) {
  return p == CX_PRECISION_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

/* Heuristics results are tried twice: first only those not listed as tensor-op engines under
 * F32, then any (the descriptor's FMA_MATH is what binds at run time; the first pass only avoids
 * leaning on that). */
static bool usable(cx_precision p, int pass, cudnnStatus_t st, cudnnMathType_t m) {
  if (st != CUDNN_STATUS_SUCCESS) return false;
  return pass > 0 || p != CX_PRECISION_F32 ||
         (m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
}

static cx_status descriptors(conv_state *s, const cx_kernel_args *a) {
  const cx_conv_geom *g = &s->g;
  CX_CUDNN(cudnnCreateTensorDescriptor(&s->x));
  CX_CUDNN(cudnnCreateTensorDescriptor(&s->y));
  CX_CUDNN(cudnnCreateTensorDescriptor(&s->b));
  CX_CUDNN(cudnnCreateFilterDescriptor(&s->w));
  CX_CUDNN(cudnnCreateConvolutionDescriptor(&s->conv));
  CX_CUDNN(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n,
                                      (int)g->c_in, (int)s->hp, (int)s->wp));
  CX_CUDNN(cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)g->n,
                                      (int)g->c_out, (int)g->oh, (int)g->ow));
  CX_CUDNN(cudnnSetTensor4dDescriptor(s->b, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
                                      (int)g->c_out, 1, 1));
  CX_CUDNN(cudnnSetFilter4dDescriptor(s->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, (int)g->c_out,
                                      (int)(g->c_in / g->group), (int)g->kh, (int)g->kw));
  CX_CUDNN(cudnnSetConvolution2dDescriptor(s->conv, (int)min64(g->pt, g->pb),
                                           (int)min64(g->pl, g->pr), (int)g->sh,
                                           (int)g->sw, (int)g->dh, (int)g->dw,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CX_CUDNN(cudnnSetConvolutionGroupCount(s->conv, (int)g->group));
  CX_CUDNN(cudnnSetConvolutionMathType(s->conv, math_of(a->precision)));
  /* X' and the symmetric pads give the geometry's output size; checked all the same, since a
   * mismatch would write out of bounds */
  int d[4];
  CX_CUDNN(cudnnGetConvolution2dForwardOutputDim(s->conv, s->x, s->w, &d[0], &d[1], &d[2], &d[3]));
  if (d[0] != g->n || d[1] != g->c_out || d[2] != g->oh || d[3] != g->ow)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): cuDNN's output [%d,%d,%d,%d] differs "
                   "from the geometry's", a->node->name, a->node->op->name, d[0], d[1], d[2], d[3]);
  return CX_OK;
}

static void grow(conv_state *s, size_t bytes) {
  if (bytes > s->ws) s->ws = bytes;
}

static cx_status no_algo(const cx_kernel_args *a, const char *what) {
  return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): cuDNN offers no %s algorithm for this "
                 "geometry in this precision", a->node->name, a->node->op->name, what);
}

static cx_status pick_fwd(conv_state *s, const cx_kernel_args *a, cudnnHandle_t h) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int got = 0;
  CX_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(h, s->x, s->w, s->conv, s->y,
                                                  CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf));
  bool f32 = a->precision == CX_PRECISION_F32;
  for (int i = 0; i < 2 * got; i++) {
    cudnnConvolutionFwdAlgo_t al = perf[i % got].algo;
    size_t bytes = 0;
    if (!usable(a->precision, i / got, perf[i % got].status, perf[i % got].mathType) ||
        (f32 && (al == CUDNN_CONVOLUTION_FWD_ALGO_FFT || al == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING)))
      continue;
    if (cudnnGetConvolutionForwardWorkspaceSize(h, s->x, s->w, s->conv, s->y, al, &bytes) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    s->fwd = al;
    grow(s, bytes);
    return CX_OK;
  }
  return no_algo(a, "forward");
}

static cx_status pick_bwd_data(conv_state *s, const cx_kernel_args *a, cudnnHandle_t h) {
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int got = 0;
  CX_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, s->w, s->y, s->conv, s->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf));
  bool f32 = a->precision == CX_PRECISION_F32;
  for (int i = 0; i < 2 * got; i++) {
    cudnnConvolutionBwdDataAlgo_t al = perf[i % got].algo;
    size_t bytes = 0;
    if (!usable(a->precision, i / got, perf[i % got].status, perf[i % got].mathType) ||
        (f32 && (al == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
                 al == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING)))
      continue;
    if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, s->w, s->y, s->conv, s->x, al, &bytes) !=
        CUDNN_STATUS_SUCCESS)
      continue;
    s->bwd_data = al;
    grow(s, bytes);
    return CX_OK;
  }
  return no_algo(a, "backward-data");
}

static cx_status pick_bwd_filter(conv_state *s, const cx_kernel_args *a, cudnnHandle_t h) {
  cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int got = 0;
  CX_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, s->x, s->y, s->conv, s->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, perf));
  bool f32 = a->precision == CX_PRECISION_F32;
  for (int i = 0; i < 2 * got; i++) {
    cudnnConvolutionBwdFilterAlgo_t al = perf[i % got].algo;
    size_t bytes = 0;
    if (!usable(a->precision, i / got, perf[i % got].status, perf[i % got].mathType) ||
        (f32 && (al == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
                 al == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING)))
      continue;
    if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, s->x, s->y, s->conv, s->w, al,
                                                       &bytes) != CUDNN_STATUS_SUCCESS)
      continue;
    s->bwd_filter = al;
    grow(s, bytes);
    return CX_OK;
  }
  return no_algo(a, "backward-filter");
}

/* X and W are inputs x_in and x_in + 1 (Conv: 0, 1; ConvGrad: 1, 2). */
static cx_status build(conv_state *s, const cx_kernel_args *a, int x_in, bool grad) {
  CX_TRY(cx_conv_geom_make(a->node, &a->in[x_in].shape, &a->in[x_in + 1].shape, &s->g));
  plan_padding(s);
  if (!fits_int(s))
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): a dimension exceeds cuDNN's int range",
                   a->node->name, a->node->op->name);
  CX_TRY(descriptors(s, a));
  cudnnHandle_t h = cx_cuda_stream(a->stream)->dnn;
  if (!grad) {
    CX_TRY(pick_fwd(s, a, h));
  } else {
    cx_conv_grad_wanted(a->node, s->want);
    if (s->want[0]) CX_TRY(pick_bwd_data(s, a, h));
    if (s->want[1]) CX_TRY(pick_bwd_filter(s, a, h));
  }
  s->xp_at = (s->ws + 255) / 256 * 256;
  return CX_OK;
}

static size_t scratch_of(const conv_state *s) {
  const cx_conv_geom *g = &s->g;
  return s->padx ? s->xp_at + sizeof(float) * (size_t)(g->n * g->c_in * s->hp * s->wp) : s->ws;
}

static float *xp_of(const conv_state *s, const cx_kernel_args *a) {
  return (float *)((char *)a->scratch + s->xp_at);
}

/* X', or X itself when no padding is explicit. */
static cx_status padded_x(const conv_state *s, const cx_kernel_args *a, const cx_tensor *x,
                          const void **out) {
  const cx_conv_geom *g = &s->g;
  *out = x->data;
  if (!s->padx) return CX_OK;
  CX_CUDA(cx_cu_pad2d(cx_cuda_f32(x), xp_of(s, a), g->n * g->c_in, g->h, g->w, s->hp, s->wp,
                      s->top, s->left, cx_cuda_stream(a->stream)->s));
  *out = xp_of(s, a);
  return CX_OK;
}

static cx_status prepare_with(const cx_kernel_args *a, void **state, size_t *scratch, int x_in,
                              bool grad) {
  conv_state *s = calloc(1, sizeof *s);
  if (!s) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  cx_status st = build(s, a, x_in, grad);
  if (st != CX_OK) {
    conv_release(s);
    return st;
  }
  *state = s;
  *scratch = scratch_of(s);
  return CX_OK;
}

static cx_status conv_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare_with(a, state, scratch, 0, false);
}

static cx_status grad_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  return prepare_with(a, state, scratch, 1, true);
}

static cx_status conv_run(const cx_kernel_args *a) {
  const conv_state *s = a->state;
  cudnnHandle_t h = cx_cuda_stream(a->stream)->dnn;
  const float one = 1, zero = 0;
  const void *x;
  CX_TRY(padded_x(s, a, &a->in[0], &x));
  CX_CUDNN(cudnnConvolutionForward(h, &one, s->x, x, s->w, a->in[1].data, s->conv,
                                   s->fwd, a->scratch, s->ws, &zero, s->y, a->out[0].data));
  if (a->n_in > 2 && a->node->in[2] >= 0)
    CX_CUDNN(cudnnAddTensor(h, &one, s->b, a->in[2].data, &one, s->y, a->out[0].data));
  return CX_OK;
}

/* ConvGrad: inputs (dY, X, W), outputs (dX, dW, dB); unwanted outputs have shape [0]. The three
 * calls share the scratch one after the other on the stream. */
static cx_status grad_run(const cx_kernel_args *a) {
  const conv_state *s = a->state;
  cudnnHandle_t h = cx_cuda_stream(a->stream)->dnn;
  const float one = 1, zero = 0;
  const cx_conv_geom *g = &s->g;
  const void *dy = a->in[0].data, *w = a->in[2].data, *x;
  if (s->want[0]) {
    void *dx = s->padx ? (void *)xp_of(s, a) : a->out[0].data;
    CX_CUDNN(cudnnConvolutionBackwardData(h, &one, s->w, w, s->y, dy, s->conv, s->bwd_data,
                                          a->scratch, s->ws, &zero, s->x, dx));
    if (s->padx)
      CX_CUDA(cx_cu_crop2d(xp_of(s, a), cx_cuda_f32(&a->out[0]), g->n * g->c_in, g->h, g->w,
                           s->hp, s->wp, s->top, s->left, cx_cuda_stream(a->stream)->s));
  }
  if (s->want[1]) { /* after dX: X' reuses the buffer dX' was in */
    CX_TRY(padded_x(s, a, &a->in[1], &x));
    CX_CUDNN(cudnnConvolutionBackwardFilter(h, &one, s->x, x, s->y, dy, s->conv, s->bwd_filter,
                                            a->scratch, s->ws, &zero, s->w, a->out[1].data));
  }
  if (s->want[2])
    CX_CUDNN(cudnnConvolutionBackwardBias(h, &one, s->y, dy, &zero, s->b, a->out[2].data));
  return CX_OK;
}

/* ConvFused (inference fusion) is left out: without it core/infer_fuse.c keeps Conv + activation
 * apart on this backend. */
const cx_kernel cx_cuda_conv[] = {
    {"Conv", conv_prepare, conv_run, conv_release, 0, NULL, 0},
    {"ConvGrad", grad_prepare, grad_run, conv_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
