/* Gemm, MatMul and MatMulT on cuBLAS (cublasGemmEx / cublasGemmStridedBatchedEx), f32 tensors.
 *
 * cuBLAS is column-major: a row-major [r, c] buffer is its c x r matrix, the transpose. So
 * Y = op(A) op(B) (row-major) is computed as Y^T = op(B)^T op(A)^T: B is passed first, A second,
 * each with its own transpose flag, and m / n swap (cuBLAS m = N, n = M). The leading dimension
 * of every operand is then just its stored row length.
 *
 * MatMul batch axes (numpy broadcasting) become element strides per output batch axis, 0 where an
 * operand broadcasts; adjacent axes that step evenly are merged, the innermost goes to one strided
 * batched call (stride 0 is how cuBLAS broadcasts) and any others are looped on the host.
 *
 * Precision: F32 CUBLAS_COMPUTE_32F (no TF32), F16 CUBLAS_COMPUTE_32F_FAST_16F, BF16
 * CUBLAS_COMPUTE_32F_FAST_16BF: tensor cores on operands rounded down, f32 accumulation and
 * f32 tensors throughout.
 *
 * GemmFused and MatMulFused (inference fusions) are left out: without them core/infer_fuse.c
 * keeps the activation a node of its own on this backend. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "cuda.h"
#include "linear_launch.h"

typedef struct mm_state {
  int64_t m, n, k;       /* Y = op(A) [m, k] x op(B) [k, n], row-major */
  bool ta, tb;
  int64_t lda, ldb;      /* stored row lengths of A and B */
  int nb;                /* merged batch axes */
  int64_t bd[CX_MAX_DIMS], sa[CX_MAX_DIMS], sb[CX_MAX_DIMS], sy[CX_MAX_DIMS];
  float alpha;
  bool fill_c;           /* Gemm: Y starts as beta * C broadcast */
  float beta;
  int64_t ci, cj;        /* C's element strides over Y's rows and columns */
  cublasComputeType_t compute;
} mm_state;

static void mm_release(void *p) { free(p); }

static cublasComputeType_t compute_of(cx_precision p) {
  return p == CX_PRECISION_F16    ? CUBLAS_COMPUTE_32F_FAST_16F
         : p == CX_PRECISION_BF16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                  : CUBLAS_COMPUTE_32F;
}

/* The stored shape s left-padded with 1s to nd axes. */
static void pad_dims(const cx_shape *s, int nd, int64_t *d) {
  for (int i = 0; i < nd; i++) d[i] = i < nd - s->ndim ? 1 : s->d[i - (nd - s->ndim)];
}

/* Element strides of a contiguous [d...] over its batch axes (all but the last two), 0 along an
 * axis where it has 1 and Y more. */
static void batch_strides(const int64_t *d, const int64_t *yd, int nd, int64_t *st) {
  int64_t step = d[nd - 2] * d[nd - 1];
  for (int i = nd - 3; i >= 0; i--) {
    st[i] = d[i] == 1 && yd[i] != 1 ? 0 : step;
    step *= d[i];
  }
}

/* Drops Y's unit batch axes and merges neighbours whose strides compose, for all three tensors. */
static void merge_batch(mm_state *s, int nd, const int64_t *yd, const int64_t *sa,
                        const int64_t *sb, const int64_t *sy) {
  s->nb = 0;
  for (int i = 0; i < nd - 2; i++) {
    if (yd[i] == 1) continue;
    int j = s->nb - 1;
    if (j >= 0 && s->sa[j] == sa[i] * yd[i] && s->sb[j] == sb[i] * yd[i] &&
        s->sy[j] == sy[i] * yd[i]) {
      s->bd[j] *= yd[i];
      s->sa[j] = sa[i], s->sb[j] = sb[i], s->sy[j] = sy[i];
      continue;
    }
    s->bd[s->nb] = yd[i], s->sa[s->nb] = sa[i], s->sb[s->nb] = sb[i], s->sy[s->nb] = sy[i];
    s->nb++;
  }
}

static cx_status check_ints(const cx_node *n, const mm_state *s) {
  int64_t v[] = {s->m, s->n, s->k, s->lda, s->ldb, s->nb ? s->bd[s->nb - 1] : 1};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++)
    if (v[i] > INT_MAX)
      return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): a dimension exceeds cuBLAS's int range",
                     n->name, n->op->name);
  return CX_OK;
}

/* MatMul / MatMulT: 1-D operands promoted as numpy does ([K] -> [1, K] for A, [K, 1] for B; the
 * output's memory is the same), batch axes broadcast. */
static cx_status matmul_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  const cx_node *n = a->node;
  cx_shape s0 = a->in[0].shape, s1 = a->in[1].shape;
  if (s0.ndim == 1) s0 = cx_shape_make(2, (int64_t[]){1, s0.d[0]});
  if (s1.ndim == 1) s1 = cx_shape_make(2, (int64_t[]){s1.d[0], 1});
  mm_state *s = calloc(1, sizeof *s);
  if (!s) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", n->name);
  s->ta = cx_node_int(n, "transA", 0) != 0;
  s->tb = cx_node_int(n, "transB", 0) != 0;
  s->alpha = 1;
  s->compute = compute_of(a->precision);
  /* B without batch axes and A not transposed: A's batch axes are just more rows of one product
   * (and Y's rows follow in the same order) */
  bool b_flat = true;
  for (int i = 0; i < s1.ndim - 2; i++) b_flat = b_flat && s1.d[i] == 1;
  if (b_flat && !s->ta) {
    int64_t rows = 1;
    for (int i = 0; i < s0.ndim - 1; i++) rows *= s0.d[i];
    s0 = cx_shape_make(2, (int64_t[]){rows, s0.d[s0.ndim - 1]});
    s1 = cx_shape_make(2, (int64_t[]){s1.d[s1.ndim - 2], s1.d[s1.ndim - 1]});
  }
  int nd = s0.ndim > s1.ndim ? s0.ndim : s1.ndim;
  int64_t ad[CX_MAX_DIMS] = {0}, bd[CX_MAX_DIMS] = {0}, yd[CX_MAX_DIMS] = {0};
  int64_t sa[CX_MAX_DIMS] = {0}, sb[CX_MAX_DIMS] = {0}, sy[CX_MAX_DIMS] = {0};
  pad_dims(&s0, nd, ad);
  pad_dims(&s1, nd, bd);
  for (int i = 0; i < nd - 2; i++) yd[i] = ad[i] > bd[i] ? ad[i] : bd[i];
  s->m = s->ta ? ad[nd - 1] : ad[nd - 2];
  s->k = s->ta ? ad[nd - 2] : ad[nd - 1];
  s->n = s->tb ? bd[nd - 2] : bd[nd - 1];
  yd[nd - 2] = s->m, yd[nd - 1] = s->n;
  s->lda = ad[nd - 1], s->ldb = bd[nd - 1];
  batch_strides(ad, yd, nd, sa);
  batch_strides(bd, yd, nd, sb);
  batch_strides(yd, yd, nd, sy);
  merge_batch(s, nd, yd, sa, sb, sy);
  cx_status st = check_ints(n, s);
  if (st != CX_OK) {
    free(s);
    return st;
  }
  *state = s;
  *scratch = 0;
  return CX_OK;
}

/* Gemm: 2-D A and B, optional C of rank 0-2 broadcasting to [M, N]; beta * C only when C is
 * given and beta != 0, as on the CPU. */
static cx_status gemm_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  const cx_node *n = a->node;
  const cx_shape *s0 = &a->in[0].shape, *s1 = &a->in[1].shape;
  mm_state *s = calloc(1, sizeof *s);
  if (!s) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", n->name);
  s->ta = cx_node_int(n, "transA", 0) != 0;
  s->tb = cx_node_int(n, "transB", 0) != 0;
  s->alpha = cx_node_float(n, "alpha", 1);
  s->beta = cx_node_float(n, "beta", 1);
  s->compute = compute_of(a->precision);
  s->m = s0->d[s->ta], s->k = s0->d[!s->ta], s->n = s1->d[!s->tb];
  s->lda = s0->d[1], s->ldb = s1->d[1];
  bool has_c = a->n_in > 2 && n->in[2] >= 0;
  s->fill_c = has_c && s->beta != 0;
  if (s->fill_c) {
    const cx_shape *c = &a->in[2].shape;
    int64_t c0 = c->ndim == 2 ? c->d[0] : 1, c1 = c->ndim >= 1 ? c->d[c->ndim - 1] : 1;
    s->ci = c0 == 1 ? 0 : c1;
    s->cj = c1 == 1 ? 0 : 1;
  }
  cx_status st = check_ints(n, s);
  if (st != CX_OK) {
    free(s);
    return st;
  }
  *state = s;
  *scratch = 0;
  return CX_OK;
}

/* One product, or one strided batched call over the innermost merged batch axis. */
static cx_status gemm_call(const mm_state *s, cublasHandle_t h, const float *A, const float *B,
                           float *Y, float beta) {
  cublasOperation_t opb = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  int m = (int)s->n, n = (int)s->m, k = (int)s->k;
  if (s->nb == 0) {
    CX_CUBLAS(cublasGemmEx(h, opb, opa, m, n, k, &s->alpha, B, CUDA_R_32F, (int)s->ldb, A,
                           CUDA_R_32F, (int)s->lda, &beta, Y, CUDA_R_32F, m, s->compute,
                           CUBLAS_GEMM_DEFAULT));
    return CX_OK;
  }
  int j = s->nb - 1;
  CX_CUBLAS(cublasGemmStridedBatchedEx(h, opb, opa, m, n, k, &s->alpha, B, CUDA_R_32F,
                                       (int)s->ldb, s->sb[j], A, CUDA_R_32F, (int)s->lda, s->sa[j],
                                       &beta, Y, CUDA_R_32F, m, s->sy[j], (int)s->bd[j],
                                       s->compute, CUBLAS_GEMM_DEFAULT));
  return CX_OK;
}

static cx_status mm_run(const cx_kernel_args *a) {
  const mm_state *s = a->state;
  cx_stream *st = cx_cuda_stream(a->stream);
  const float *A = cx_cuda_f32(&a->in[0]), *B = cx_cuda_f32(&a->in[1]);
  float *Y = cx_cuda_f32(&a->out[0]);
  /* an empty Y (m, n or a batch axis 0): nothing to write, and a 0 batch axis would never end
   * the odometer below */
  if (s->m == 0 || s->n == 0 || cx_tensor_nbytes(&a->out[0]) == 0) return CX_OK;
  float beta = 0;
  if (s->fill_c) {
    CX_CUDA(cx_cu_gemm_fill_c(Y, cx_cuda_f32(&a->in[2]), s->m, s->n, s->ci, s->cj, s->beta, st->s));
    beta = 1;
  }
  if (s->k == 0) { /* an empty sum: cuBLAS would reject the leading dimensions */
    if (!s->fill_c) CX_CUDA(cudaMemsetAsync(Y, 0, cx_tensor_nbytes(&a->out[0]), st->s));
    return CX_OK;
  }
  /* the handle is shared with other kernels: say what this call needs */
  CX_CUBLAS(cublasSetPointerMode(st->blas, CUBLAS_POINTER_MODE_HOST));
  CX_CUBLAS(cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH));
  if (s->nb <= 1) return gemm_call(s, st->blas, A, B, Y, beta);
  /* outer batch axes (those that did not merge into the innermost): an odometer over them */
  int64_t idx[CX_MAX_DIMS] = {0};
  for (;;) {
    int64_t oa = 0, ob = 0, oy = 0;
    for (int i = 0; i < s->nb - 1; i++) oa += idx[i] * s->sa[i], ob += idx[i] * s->sb[i],
                                        oy += idx[i] * s->sy[i];
    CX_TRY(gemm_call(s, st->blas, A + oa, B + ob, Y + oy, beta));
    int i = s->nb - 2;
    while (i >= 0 && ++idx[i] == s->bd[i]) idx[i--] = 0;
    if (i < 0) return CX_OK;
  }
}

const cx_kernel cx_cuda_linear[] = {
    {"Gemm", gemm_prepare, mm_run, mm_release, 0, NULL, 0},
    {"MatMul", matmul_prepare, mm_run, mm_release, 0, NULL, 0},
    {"MatMulT", matmul_prepare, mm_run, mm_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
