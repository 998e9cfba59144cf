/* CUDA kernels of the shape family (kernels/cpu/shape.c's semantics, any dtype by element size):
 * copies on the stream for Flatten / Reshape / Identity, 2-D strided copies for Concat / Split /
 * SplitGrad, one gather kernel for Transpose and Expand (and Slice: kernels/cuda/slice.c). */

#include "../../core/op.h"
#include "../../core/ops/shape.h"
#include "cuda.h"
#include "shape_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static size_t elem_size(const cx_tensor *t) { return cx_dtype_size(t->dtype); }

/* ---- Flatten, Reshape, Identity: the bytes as they are (nothing when the planner gave the
 * output the input's buffer) ---- */

static cx_status run_copy(const cx_kernel_args *a) {
  size_t bytes = cx_tensor_nbytes(&a->out[0]);
  if (a->out[0].data != a->in[0].data && bytes)
    CX_CUDA(cudaMemcpyAsync(a->out[0].data, a->in[0].data, bytes, cudaMemcpyDeviceToDevice,
                            stream_of(a)));
  return CX_OK;
}

/* ---- Transpose, Expand, ExpandBatch ---- */

static cx_status run_transpose(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  int64_t st[CX_MAX_DIMS];
  cx_transpose_view(a->node, &x->shape, st);
  const cx_shape *ys = &a->out[0].shape;
  CX_CUDA(cx_cu_gather(a->out[0].data, x->data, elem_size(x), ys->ndim, ys->d, st, 0,
                       stream_of(a)));
  return CX_OK;
}

/* X broadcast to Y's shape, numpy style (Y's shape came from the shape input at compile time) */
static cx_status run_expand(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  int64_t st[CX_MAX_DIMS];
  cx_expand_view(&x->shape, &y->shape, st);
  CX_CUDA(cx_cu_gather(y->data, x->data, elem_size(x), y->shape.ndim, y->shape.d, st, 0,
                       stream_of(a)));
  return CX_OK;
}

/* ---- Concat, Split, SplitGrad ---- */

/* Copies a part (extent n along axis, at offset `at`) between the whole and one piece, as rows of
 * a 2-D copy; a NULL piece is zeros in the whole (SplitGrad's missing gradients). */
static cx_status move_part(char *whole, char *piece, const cx_shape *ws, int axis, int64_t at,
                           int64_t n, size_t es, bool to_whole, cudaStream_t s) {
  cx_part_rows p = cx_part_rows_of(ws, axis, at, n, es);
  char *w = whole + p.offset;
  size_t rows = (size_t)p.rows;
  if (!p.chunk || !rows) return CX_OK;
  if (!piece) {
    CX_CUDA(cudaMemset2DAsync(w, p.pitch, 0, p.chunk, rows, s));
  } else if (rows == 1) { /* one row: no pitch, so no limit on its size */
    CX_CUDA(cudaMemcpyAsync(to_whole ? w : piece, to_whole ? piece : w, p.chunk,
                            cudaMemcpyDeviceToDevice, s));
  } else if (to_whole) {
    CX_CUDA(cudaMemcpy2DAsync(w, p.pitch, piece, p.chunk, p.chunk, rows,
                              cudaMemcpyDeviceToDevice, s));
  } else {
    CX_CUDA(cudaMemcpy2DAsync(piece, p.chunk, w, p.pitch, p.chunk, rows,
                              cudaMemcpyDeviceToDevice, s));
  }
  return CX_OK;
}

static int node_axis(const cx_kernel_args *a, int rank) {
  int64_t axis = cx_node_int(a->node, "axis", 0); /* range checked in infer */
  return (int)(axis < 0 ? axis + rank : axis);
}

/* Concat, and SplitGrad where a missing piece (no gradient) is zeros of its split size. */
static cx_status run_concat(const cx_kernel_args *a) {
  const cx_tensor *y = &a->out[0];
  int axis = node_axis(a, y->shape.ndim);
  const int64_t *sizes = NULL;
  int n_sizes = cx_node_ints(a->node, "split", &sizes);
  int64_t at = 0;
  for (int k = 0; k < a->n_in; k++) {
    if (!a->in[k].data && k >= n_sizes)
      return cx_fail(CX_ERR_ARG, "node '%s' (%s): input %d is missing and has no split size",
                     a->node->name, a->node->op->name, k);
    int64_t n = a->in[k].data ? a->in[k].shape.d[axis] : sizes[k];
    CX_TRY(move_part(y->data, a->in[k].data, &y->shape, axis, at, n, elem_size(y), true,
                     stream_of(a)));
    at += n;
  }
  return CX_OK;
}

static cx_status run_split(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0];
  int axis = node_axis(a, x->shape.ndim);
  int64_t at = 0;
  for (int k = 0; k < a->n_out; k++) {
    int64_t n = a->out[k].shape.d[axis];
    if (a->out[k].data)
      CX_TRY(move_part(x->data, a->out[k].data, &x->shape, axis, at, n, elem_size(x), false,
                       stream_of(a)));
    at += n;
  }
  return CX_OK;
}

const cx_kernel cx_cuda_shape[] = {
    {"Flatten", NULL, run_copy, NULL, 0, NULL, 0},
    {"Reshape", NULL, run_copy, NULL, 0, NULL, 0},
    {"Identity", NULL, run_copy, NULL, 0, NULL, 0},
    {"Transpose", NULL, run_transpose, NULL, 0, NULL, 0},
    {"Concat", NULL, run_concat, NULL, 0, NULL, 0},
    {"SplitGrad", NULL, run_concat, NULL, 0, NULL, 0},
    {"Split", NULL, run_split, NULL, 0, NULL, 0},
    {"Expand", NULL, run_expand, NULL, 0, NULL, 0},
    {"ExpandBatch", NULL, run_expand, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
