/* CUDA kernels of ReduceSum, ReduceMean, ReduceMax and ReduceMaxGrad, as kernels/cpu/reduce.c
 * computes them (plain layouts only). prepare resolves the kept shape (x's shape with the reduced
 * axes 1, core's cx_reduce_shapes: axes, keepdims, noop_with_empty_axes) once: the axes come from
 * the constant input 1 (read from the program's constants, cx_kernel_const_input; a computed one
 * is refused) or the attribute (ReduceMaxGrad, whose input 1 is X).
 *
 *   ReduceSum / ReduceMean (X [, axes]) -> Y   the element-wise family's reduce-to, scaled
 *   ReduceMax (X [, axes]) -> Y                 NaN wins, as the CPU
 *   ReduceMaxGrad (dY, X, Y) -> dX              dY shared equally among each group's maxima */

#include <stdlib.h>

#include "../../core/op.h"
#include "../../core/ops/eltwise.h"
#include "cuda.h"
#include "eltwise_launch.h"
#include "reduce_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static void keep_release(void *p) { free(p); }

/* The kept shape of x, from the constant input 1 when from_input and the node has one, else the
 * axes attribute (kernels/cpu/reduce.c's reduce_keep). */
static cx_status keep_prepare(const cx_kernel_args *a, const cx_shape *xs, bool from_input,
                              void **state, cx_shape **keep_out) {
  const int64_t *axes = NULL;
  int64_t na = 0;
  if (from_input && a->n_in > 1 && a->node->in[1] >= 0) {
    na = cx_shape_numel(&a->in[1].shape);
    axes = cx_kernel_const_input(a, 1);
    if (!axes && na > 0)
      return cx_fail(CX_ERR_UNSUPPORTED, "%s: the CUDA backend needs constant axes (node '%s')",
                     a->node->op->name, a->node->name);
  } else {
    na = cx_node_ints(a->node, "axes", &axes);
  }
  cx_shape *keep = malloc(sizeof *keep);
  if (!keep) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  cx_status s = cx_reduce_keep_shape(a->node, xs, axes, na, keep);
  if (s != CX_OK) {
    free(keep);
    return s;
  }
  *state = keep;
  if (keep_out) *keep_out = keep;
  return CX_OK;
}

static cx_status prepare_reduce(const cx_kernel_args *a, void **state, size_t *scratch) {
  *scratch = 0;
  return keep_prepare(a, &a->in[0].shape, true, state, NULL);
}

/* ReduceMaxGrad(dY, X, Y): axes from the attribute; scratch holds each group's count of maxima */
static cx_status prepare_reduce_max_grad(const cx_kernel_args *a, void **state, size_t *scratch) {
  cx_shape *keep = NULL;
  CX_TRY(keep_prepare(a, &a->in[1].shape, false, state, &keep));
  *scratch = sizeof(float) * (size_t)(cx_shape_numel(keep) + 1);
  return CX_OK;
}

static cx_status run_reduce(const cx_kernel_args *a, bool mean) {
  const cx_shape *keep = a->state, *xs = &a->in[0].shape;
  int64_t kept = cx_shape_numel(keep), count = kept ? cx_shape_numel(xs) / kept : 0;
  float scale = mean && count > 0 ? 1.0f / (float)count : 1.0f;
  CX_CUDA(cx_cu_reduce_to(cx_cuda_f32(&a->out[0]), keep->d, cx_cuda_f32(&a->in[0]), xs->d,
                          xs->ndim, scale, stream_of(a)));
  return CX_OK;
}

static cx_status run_reduce_sum(const cx_kernel_args *a) { return run_reduce(a, false); }
static cx_status run_reduce_mean(const cx_kernel_args *a) { return run_reduce(a, true); }

static cx_status run_reduce_max(const cx_kernel_args *a) {
  const cx_shape *keep = a->state, *xs = &a->in[0].shape;
  CX_CUDA(cx_cu_reduce_max(cx_cuda_f32(&a->out[0]), keep->d, cx_cuda_f32(&a->in[0]), xs->d,
                           xs->ndim, stream_of(a)));
  return CX_OK;
}

static cx_status run_reduce_max_grad(const cx_kernel_args *a) {
  const cx_shape *keep = a->state, *xs = &a->in[1].shape;
  CX_CUDA(cx_cu_reduce_max_grad(cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]),
                                cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->in[2]), keep->d, xs->d,
                                xs->ndim, a->scratch, stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_reduce[] = {
    {"ReduceSum", prepare_reduce, run_reduce_sum, keep_release, 0, NULL, 0},
    {"ReduceMean", prepare_reduce, run_reduce_mean, keep_release, 0, NULL, 0},
    {"ReduceMax", prepare_reduce, run_reduce_max, keep_release, 0, NULL, 0},
    {"ReduceMaxGrad", prepare_reduce_max_grad, run_reduce_max_grad, keep_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
