/* CUDA kernels of the element-wise family: Add, Sub, Mul, Div, Sum, Neg, and the broadcast /
 * reduce-to pair BroadcastTo and ReduceSumTo, as kernels/cpu/eltwise.c computes them (plain
 * layouts only). */

#include "../../core/ops/eltwise.h"
#include "cuda.h"
#include "eltwise_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

static cx_status binary(const cx_kernel_args *a, int op) {
  const cx_tensor *y = &a->out[0], *x0 = &a->in[0], *x1 = &a->in[1];
  CX_CUDA(cx_cu_binary(op, 1.0f, cx_cuda_f32(y), y->shape.d, y->shape.ndim, cx_cuda_f32(x0),
                       x0->shape.d, x0->shape.ndim, cx_cuda_f32(x1), x1->shape.d, x1->shape.ndim,
                       stream_of(a)));
  return CX_OK;
}

static cx_status run_add(const cx_kernel_args *a) { return binary(a, CX_CU_ADD); }
static cx_status run_sub(const cx_kernel_args *a) { return binary(a, CX_CU_SUB); }
static cx_status run_mul(const cx_kernel_args *a) { return binary(a, CX_CU_MUL); }
static cx_status run_div(const cx_kernel_args *a) { return binary(a, CX_CU_DIV); }

static cx_status run_neg(const cx_kernel_args *a) {
  const cx_shape *s = &a->out[0].shape;
  CX_CUDA(cx_cu_binary(CX_CU_COPY, -1.0f, cx_cuda_f32(&a->out[0]), s->d, s->ndim,
                       cx_cuda_f32(&a->in[0]), s->d, s->ndim, NULL, NULL, 0, stream_of(a)));
  return CX_OK;
}

/* The next present input at or after i (omitted optional inputs have no data), or n_in. */
static int next_live(const cx_kernel_args *a, int i) {
  while (i < a->n_in && !a->in[i].data) i++;
  return i;
}

/* As the CPU: the first input spread over the output, then each other one added in place, in
 * input order (same rounding as the CPU's left-to-right sum). The first two are added in one
 * pass when they both have the output's shape. */
static cx_status run_sum(const cx_kernel_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  float *y = cx_cuda_f32(&a->out[0]);
  cudaStream_t s = stream_of(a);
  int first = next_live(a, 0), k = next_live(a, first + 1);
  if (first >= a->n_in) return cx_fail(CX_ERR_ARG, "node '%s' (Sum): no inputs", a->node->name);
  const cx_shape *f = &a->in[first].shape;
  if (k < a->n_in) {
    const cx_shape *g = &a->in[k].shape;
    CX_CUDA(cx_cu_binary(CX_CU_ADD, 1.0f, y, ys->d, ys->ndim, cx_cuda_f32(&a->in[first]), f->d,
                         f->ndim, cx_cuda_f32(&a->in[k]), g->d, g->ndim, s));
    k = next_live(a, k + 1);
  } else {
    CX_CUDA(cx_cu_binary(CX_CU_COPY, 1.0f, y, ys->d, ys->ndim, cx_cuda_f32(&a->in[first]), f->d,
                         f->ndim, NULL, NULL, 0, s));
  }
  for (; k < a->n_in; k = next_live(a, k + 1)) {
    const cx_shape *g = &a->in[k].shape;
    CX_CUDA(cx_cu_binary(CX_CU_ADD, 1.0f, y, ys->d, ys->ndim, y, ys->d, ys->ndim,
                         cx_cuda_f32(&a->in[k]), g->d, g->ndim, s));
  }
  return CX_OK;
}

/* keep (rank <= full's, broadcasting to it) padded with leading 1s to full's rank */
static void pad_rank(const cx_shape *keep, int rank, int64_t *d) {
  int lead = rank - keep->ndim;
  for (int i = 0; i < rank; i++) d[i] = i < lead ? 1 : keep->d[i - lead];
}

static cx_status run_reduce_sum_to(const cx_kernel_args *a) {
  const cx_shape *xs = &a->in[0].shape;
  cx_shape keep;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->out[0].shape, xs, &keep));
  int64_t kd[CX_MAX_DIMS];
  pad_rank(&keep, xs->ndim, kd);
  CX_CUDA(cx_cu_reduce_to(cx_cuda_f32(&a->out[0]), kd, cx_cuda_f32(&a->in[0]), xs->d, xs->ndim,
                          cx_node_float(a->node, "scale", 1.0f), stream_of(a)));
  return CX_OK;
}

static cx_status run_broadcast_to(const cx_kernel_args *a) {
  const cx_shape *ys = &a->out[0].shape;
  cx_shape keep;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->in[0].shape, ys, &keep));
  CX_CUDA(cx_cu_binary(CX_CU_COPY, cx_node_float(a->node, "scale", 1.0f), cx_cuda_f32(&a->out[0]),
                       ys->d, ys->ndim, cx_cuda_f32(&a->in[0]), keep.d, keep.ndim, NULL, NULL, 0,
                       stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_eltwise[] = {
    {"Add", NULL, run_add, NULL, 0, NULL, 0},
    {"Sub", NULL, run_sub, NULL, 0, NULL, 0},
    {"Mul", NULL, run_mul, NULL, 0, NULL, 0},
    {"Div", NULL, run_div, NULL, 0, NULL, 0},
    {"Sum", NULL, run_sum, NULL, 0, NULL, 0},
    {"Neg", NULL, run_neg, NULL, 0, NULL, 0},
    {"ReduceSumTo", NULL, run_reduce_sum_to, NULL, 0, NULL, 0},
    {"BroadcastTo", NULL, run_broadcast_to, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
