/* CUDA kernels of Slice, SliceGrad, Pad and PadGrad, as kernels/cpu/shape.c computes them (plain
 * layouts only). Their starts / ends / axes / steps / pads are inputs that live on the device
 * here, so prepare resolves them from the program's constants (cx_kernel_const_input) through
 * core's plans (core/ops/shape.h), which clamp and default exactly as the CPU kernels do; a
 * node whose operands are computed at run time is refused there. Pad's fill value is read on the
 * device (it may be computed).
 *
 *   Slice (X, starts, ends [, axes, steps]) -> Y       one strided gather, any dtype
 *   SliceGrad (dY, starts, ends [, axes, steps]) -> dX  dX zeroed, dY scattered where Slice read
 *   Pad (X [, pads, value, axes]) -> Y                  constant, reflect, edge
 *   PadGrad (dY [, pads, -, axes]) -> dX                each dX sums the dY elements that read it */

#include <stdlib.h>

#include "../../core/op.h"
#include "../../core/ops/shape.h"
#include "cuda.h"
#include "shape_launch.h"
#include "slice_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static void plan_release(void *p) { free(p); }

/* The host copies of the node's list inputs 1..n-1 that `what` names (NULL: not needed here), as
 * core's plan makers take them; an omitted input stays NULL, a computed one is refused. */
static cx_status const_lists(const cx_kernel_args *a, int n, const char *const *what,
                             const void **data, cx_shape *shapes) {
  static const int64_t none = 0; /* stands for an empty constant, whose values are never read */
  for (int k = 0; k < n; k++) {
    data[k] = NULL;
    shapes[k] = (cx_shape){0};
  }
  for (int k = 1; k < a->n_in && k < n; k++) {
    if (a->node->in[k] < 0 || !what[k]) continue;
    const void *v = cx_kernel_const_input(a, k);
    shapes[k] = a->in[k].shape;
    if (!v && cx_shape_numel(&a->in[k].shape) == 0 && a->graph &&
        a->graph->values[a->node->in[k]].kind == CX_VALUE_CONST)
      v = &none;
    if (!v)
      return cx_fail(CX_ERR_UNSUPPORTED, "%s: the CUDA backend needs constant %s (node '%s')",
                     a->node->op->name, what[k], a->node->name);
    data[k] = v;
  }
  return CX_OK;
}

/* ---- Slice, SliceGrad ---- */

/* x: the sliced shape (X, or dX for SliceGrad) */
static cx_status slice_prepare(const cx_kernel_args *a, const cx_shape *x, void **state,
                               size_t *scratch) {
  static const char *const what[5] = {NULL, "starts", "ends", "axes", "steps"};
  const void *data[5];
  cx_shape shapes[5];
  CX_TRY(const_lists(a, 5, what, data, shapes));
  cx_slice_plan *p = malloc(sizeof *p);
  if (!p) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  cx_status s = cx_slice_plan_make(a->node, x, data, shapes, p);
  if (s != CX_OK) {
    free(p);
    return s;
  }
  *state = p;
  *scratch = 0;
  return CX_OK;
}

static cx_status prepare_slice(const cx_kernel_args *a, void **state, size_t *scratch) {
  return slice_prepare(a, &a->in[0].shape, state, scratch);
}
static cx_status prepare_slice_grad(const cx_kernel_args *a, void **state, size_t *scratch) {
  return slice_prepare(a, &a->out[0].shape, state, scratch);
}

static cx_status run_slice(const cx_kernel_args *a) {
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  int64_t st[CX_MAX_DIMS], base;
  cx_slice_view(&x->shape, a->state, st, &base);
  CX_CUDA(cx_cu_gather(y->data, x->data, cx_dtype_size(x->dtype), y->shape.ndim, y->shape.d, st,
                       base, stream_of(a)));
  return CX_OK;
}

/* dX is zero except where the slice read, where it is dY (each X element is read at most once). */
static cx_status run_slice_grad(const cx_kernel_args *a) {
  const cx_tensor *dy = &a->in[0], *dx = &a->out[0];
  int64_t st[CX_MAX_DIMS], base;
  cx_slice_view(&dx->shape, a->state, st, &base);
  size_t bytes = cx_tensor_nbytes(dx);
  if (bytes) CX_CUDA(cudaMemsetAsync(dx->data, 0, bytes, stream_of(a)));
  CX_CUDA(cx_cu_scatter(dx->data, dy->data, cx_dtype_size(dx->dtype), dy->shape.ndim, dy->shape.d,
                        st, base, stream_of(a)));
  return CX_OK;
}

/* ---- Pad, PadGrad ---- */

static cx_status pad_prepare(const cx_kernel_args *a, const cx_shape *x, void **state,
                             size_t *scratch) {
  /* input 2 (the fill value) is read on the device at run time */
  static const char *const what[4] = {NULL, "pads", NULL, "axes"};
  const void *data[4];
  cx_shape shapes[4];
  CX_TRY(const_lists(a, 4, what, data, shapes));
  cx_pad_plan *p = malloc(sizeof *p);
  if (!p) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  cx_status s = cx_pad_plan_make(a->node, x, data, shapes, p);
  if (s != CX_OK) {
    free(p);
    return s;
  }
  *state = p;
  *scratch = 0;
  return CX_OK;
}

static cx_status prepare_pad(const cx_kernel_args *a, void **state, size_t *scratch) {
  return pad_prepare(a, &a->in[0].shape, state, scratch);
}
static cx_status prepare_pad_grad(const cx_kernel_args *a, void **state, size_t *scratch) {
  return pad_prepare(a, &a->out[0].shape, state, scratch);
}

static int cu_mode(cx_pad_mode m) {
  return m == CX_PAD_REFLECT ? CX_CU_PAD_REFLECT
         : m == CX_PAD_EDGE  ? CX_CU_PAD_EDGE
                             : CX_CU_PAD_CONSTANT;
}

static cx_status run_pad(const cx_kernel_args *a) {
  const cx_pad_plan *p = a->state;
  const cx_tensor *x = &a->in[0], *y = &a->out[0];
  /* as the CPU: input 2 when given, else the attribute (opset < 11), else 0 */
  const float *fill_dev = a->n_in > 2 && a->in[2].data ? cx_cuda_f32(&a->in[2]) : NULL;
  float fill = a->n_in == 1 ? cx_node_float(a->node, "value", 0.0f) : 0.0f;
  CX_CUDA(cx_cu_pad(cx_cuda_f32(y), cx_cuda_f32(x), y->shape.ndim, x->shape.d, p->before,
                    y->shape.d, cu_mode(p->mode), fill_dev, fill, stream_of(a)));
  return CX_OK;
}

static cx_status run_pad_grad(const cx_kernel_args *a) {
  const cx_pad_plan *p = a->state;
  const cx_tensor *dy = &a->in[0], *dx = &a->out[0];
  CX_CUDA(cx_cu_pad_grad(cx_cuda_f32(dx), cx_cuda_f32(dy), dx->shape.ndim, dx->shape.d, p->before,
                         dy->shape.d, cu_mode(p->mode), stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_slice[] = {
    {"Slice", prepare_slice, run_slice, plan_release, 0, NULL, 0},
    {"SliceGrad", prepare_slice_grad, run_slice_grad, plan_release, 0, NULL, 0},
    {"Pad", prepare_pad, run_pad, plan_release, 0, NULL, 0},
    {"PadGrad", prepare_pad_grad, run_pad_grad, plan_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
