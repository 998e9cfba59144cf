/* Pooling on plain NCHW (NCW, NCDHW) f32 tensors with our own kernels (pool_kernels.cu) rather
 * than cuDNN's: cuDNN pools with symmetric padding only and has no ceil_mode, while the geometry
 * here (core/ops/pool.c: ceil_mode, asymmetric pads, auto_pad, dilations, count_include_pad) is
 * taken as it is, so windows sit exactly where the CPU kernels and the reference put them.
 *
 *   MaxPool (X) -> Y, MaxPoolGrad (dY, X) -> dX, AveragePool (X) -> Y,
 *   AveragePoolGrad (dY [, X]) -> dX (the geometry from dX's shape), GlobalAveragePool (X) -> Y,
 *   GlobalAveragePoolGrad (dY [, X]) -> dX. */
#include <stdlib.h>

#include "../../core/op.h"
#include "../../core/ops/pool.h"
#include "cuda.h"
#include "pool_launch.h"

static void pool_release(void *p) { free(p); }

/* x: the shape pooled (X, or dX for AveragePoolGrad). 1-D and 2-D pooling become 3-D with unit
 * leading axes. */
static cx_status geom_prepare(const cx_kernel_args *a, const cx_shape *x, void **state,
                              size_t *scratch) {
  cx_pool_geom pg;
  CX_TRY(cx_pool_geometry(a->node, x, &pg));
  cx_cu_pool_geom *g = calloc(1, sizeof *g);
  if (!g) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  cx_pool_geom_3d(&pg, g->in, g->out, g->k, g->s, g->d, g->pb, g->pe);
  g->planes = x->d[0] * x->d[1];
  g->include_pad = cx_node_int(a->node, "count_include_pad", 0) != 0;
  *state = g;
  *scratch = 0;
  return CX_OK;
}

static cx_status prepare_x0(const cx_kernel_args *a, void **state, size_t *scratch) {
  return geom_prepare(a, &a->in[0].shape, state, scratch);
}
static cx_status prepare_x1(const cx_kernel_args *a, void **state, size_t *scratch) {
  return geom_prepare(a, &a->in[1].shape, state, scratch);
}
static cx_status prepare_dx(const cx_kernel_args *a, void **state, size_t *scratch) {
  return geom_prepare(a, &a->out[0].shape, state, scratch);
}

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static cx_status max_pool_run(const cx_kernel_args *a) {
  CX_CUDA(cx_cu_max_pool(a->state, cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), stream_of(a)));
  return CX_OK;
}

static cx_status max_pool_grad_run(const cx_kernel_args *a) {
  CX_CUDA(cx_cu_max_pool_grad(a->state, cx_cuda_f32(&a->in[1]), cx_cuda_f32(&a->in[0]),
                              cx_cuda_f32(&a->out[0]), stream_of(a)));
  return CX_OK;
}

static cx_status avg_pool_run(const cx_kernel_args *a) {
  CX_CUDA(cx_cu_avg_pool(a->state, cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), stream_of(a)));
  return CX_OK;
}

static cx_status avg_pool_grad_run(const cx_kernel_args *a) {
  CX_CUDA(cx_cu_avg_pool_grad(a->state, cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]),
                              stream_of(a)));
  return CX_OK;
}

/* planes = N * C, size = the product of the spatial axes of x */
static void planes_of(const cx_shape *x, int64_t *planes, int64_t *size) {
  *planes = x->d[0] * x->d[1];
  *size = 1;
  for (int i = 2; i < x->ndim; i++) *size *= x->d[i];
}

static cx_status global_avg_pool_run(const cx_kernel_args *a) {
  int64_t planes, size;
  planes_of(&a->in[0].shape, &planes, &size);
  CX_CUDA(cx_cu_global_avg_pool(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), planes, size,
                                stream_of(a)));
  return CX_OK;
}

static cx_status global_avg_pool_grad_run(const cx_kernel_args *a) {
  int64_t planes, size;
  planes_of(&a->out[0].shape, &planes, &size);
  CX_CUDA(cx_cu_global_avg_pool_grad(cx_cuda_f32(&a->in[0]), cx_cuda_f32(&a->out[0]), planes,
                                     size, stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_pool[] = {
    {"MaxPool", prepare_x0, max_pool_run, pool_release, 0, NULL, 0},
    {"MaxPoolGrad", prepare_x1, max_pool_grad_run, pool_release, 0, NULL, 0},
    {"AveragePool", prepare_x0, avg_pool_run, pool_release, 0, NULL, 0},
    {"AveragePoolGrad", prepare_dx, avg_pool_grad_run, pool_release, 0, NULL, 0},
    {"GlobalAveragePool", NULL, global_avg_pool_run, NULL, 0, NULL, 0},
    {"GlobalAveragePoolGrad", NULL, global_avg_pool_grad_run, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
