/* QuantizeLinear, DequantizeLinear, FakeQuantize and FakeQuantizeGrad on the GPU
 * (kernels/cpu/quant.c's semantics; plain layouts). The host side reads the node: the geometry
 * of X against its scale, the integer types, FakeQuantize's qmin/qmax and grad_scale. */
#include "../../core/op.h"
#include "../../core/ops/quant.h"
#include "cuda.h"
#include "quant_launch.h"

static cudaStream_t stream_of(const cx_kernel_args *a) { return cx_cuda_stream(a->stream)->s; }

/* The launch header's kind of t, or -1. */
static int kind_of(cx_dtype t) {
  return t == CX_S8    ? CX_CU_Q_S8
         : t == CX_U8  ? CX_CU_Q_U8
         : t == CX_S32 ? CX_CU_Q_S32
         : t == CX_F32 ? CX_CU_Q_F32
                       : -1;
}

typedef struct qargs {
  cx_cu_qgeom g;
  const float *scale;
  const void *zero;
  int zk;
} qargs;

/* X is input x, its scale x + 1, its zero point (optional) x + 2. */
static cx_status qargs_of(const cx_kernel_args *a, int x, qargs *q) {
  cx_quant_geom g;
  CX_TRY(cx_quant_geometry(a->node, &a->in[x].shape, &a->in[x + 1].shape, false, &g));
  q->g = (cx_cu_qgeom){g.outer, g.channels, g.inner};
  q->scale = cx_cuda_f32(&a->in[x + 1]);
  bool has_zero = x + 2 < a->n_in && a->in[x + 2].data;
  q->zero = has_zero ? a->in[x + 2].data : NULL;
  q->zk = has_zero ? kind_of(a->in[x + 2].dtype) : CX_CU_Q_S8;
  if (has_zero && q->zk < 0)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (%s): zero point is %s", a->node->name,
                   a->node->op->name, cx_dtype_name(a->in[x + 2].dtype));
  return CX_OK;
}

static cx_status run_quantize(const cx_kernel_args *a) {
  qargs q;
  CX_TRY(qargs_of(a, 0, &q));
  int64_t lo, hi;
  cx_dtype t = a->out[0].dtype;
  if (!cx_quant_dtype_range(t, &lo, &hi) || t == CX_S32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): output is %s; expected "
                   "int8 or uint8", a->node->name, cx_dtype_name(t));
  CX_CUDA(cx_cu_quantize(a->out[0].data, kind_of(t), cx_cuda_f32(&a->in[0]), q.g, q.scale, q.zero,
                         q.zk, (float)lo, (float)hi, stream_of(a)));
  return CX_OK;
}

static cx_status run_dequantize(const cx_kernel_args *a) {
  qargs q;
  CX_TRY(qargs_of(a, 0, &q));
  int xk = kind_of(a->in[0].dtype);
  if (xk < 0 || xk == CX_CU_Q_F32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (DequantizeLinear): input is %s; expected "
                   "int8, uint8 or int32", a->node->name, cx_dtype_name(a->in[0].dtype));
  CX_CUDA(cx_cu_dequantize(cx_cuda_f32(&a->out[0]), a->in[0].data, xk, q.g, q.scale, q.zero,
                           q.zk, stream_of(a)));
  return CX_OK;
}

static float qmin_of(const cx_node *n) { return (float)cx_node_int(n, "qmin", 0); }
static float qmax_of(const cx_node *n) { return (float)cx_node_int(n, "qmax", 0); }

static cx_status run_fake_quantize(const cx_kernel_args *a) {
  qargs q;
  CX_TRY(qargs_of(a, 0, &q));
  CX_CUDA(cx_cu_fake_quantize(cx_cuda_f32(&a->out[0]), cx_cuda_f32(&a->in[0]), q.g, q.scale,
                              q.zero, q.zk, qmin_of(a->node), qmax_of(a->node), stream_of(a)));
  return CX_OK;
}

/* FakeQuantizeGrad(dY, X, scale[, zero_point]) → dX[, dScale] */
static cx_status run_fake_quantize_grad(const cx_kernel_args *a) {
  qargs q;
  CX_TRY(qargs_of(a, 1, &q));
  float *ds = a->n_out > 1 && a->out[1].data ? cx_cuda_f32(&a->out[1]) : NULL;
  CX_CUDA(cx_cu_fake_quantize_grad(cx_cuda_f32(&a->out[0]), ds, cx_cuda_f32(&a->in[0]),
                                   cx_cuda_f32(&a->in[1]), q.g, q.scale, q.zero, q.zk,
                                   qmin_of(a->node), qmax_of(a->node),
                                   cx_node_float(a->node, "grad_scale", 1), stream_of(a)));
  return CX_OK;
}

const cx_kernel cx_cuda_quant[] = {
    {.op = "QuantizeLinear", .run = run_quantize},
    {.op = "DequantizeLinear", .run = run_dequantize},
    {.op = "FakeQuantize", .run = run_fake_quantize},
    {.op = "FakeQuantizeGrad", .run = run_fake_quantize_grad},
    {.op = NULL},
};
