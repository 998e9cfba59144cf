/* CPU kernels of QuantizeLinear, DequantizeLinear, FakeQuantize and FakeQuantizeGrad
 * (core/ops/quant.c). X is seen as [outer, channels, inner] (core/ops/quant.h); a thread takes a
 * range of elements and walks it in runs that share one channel's scale and zero point, so a
 * per-tensor scale is one run and the inner loops are plain, vectorisable loops over contiguous
 * floats. They are compiled twice (target_clones: AVX2 and the baseline) and chosen at load time;
 * both round with nearbyintf in the default mode (half to even), so they give the same bits.
 *
 * x / s is an f32 division, as ONNX Runtime's MLAS does it, not a multiplication by 1/s, which
 * would round some quotients to the other side of a tie. Scales are checked on every run
 * (cx_quant_check_scale): zero, negative or non-finite scales are refused, never divided by. */

#include <math.h>

#include "../../core/ops/quant.h"
#include "cpu.h"
#include "eltwise_engine.h"

enum { PAR_MIN = 1 << 15, SUM_BLOCKS = 64 };

#define ROW __attribute__((target_clones("avx2", "default"))) static

/* A NaN saturates to lo, as in ONNX Runtime (its max(x, lo) returns lo); conversion of a NaN to
 * an integer type would be undefined. */
#define SATURATE(q, lo, hi) (!((q) >= (lo)) ? (lo) : (q) > (hi) ? (hi) : (q))

ROW void quantize_s8(int8_t *y, const float *x, int64_t n, float s, float z, float lo, float hi) {
  for (int64_t j = 0; j < n; j++) {
    float q = nearbyintf(x[j] / s) + z;
    y[j] = (int8_t)SATURATE(q, lo, hi);
  }
}

ROW void quantize_u8(uint8_t *y, const float *x, int64_t n, float s, float z, float lo, float hi) {
  for (int64_t j = 0; j < n; j++) {
    float q = nearbyintf(x[j] / s) + z;
    y[j] = (uint8_t)SATURATE(q, lo, hi);
  }
}

ROW void dequantize_s8(float *y, const int8_t *x, int64_t n, float s, float z) {
  for (int64_t j = 0; j < n; j++) y[j] = ((float)x[j] - z) * s;
}

ROW void dequantize_u8(float *y, const uint8_t *x, int64_t n, float s, float z) {
  for (int64_t j = 0; j < n; j++) y[j] = ((float)x[j] - z) * s;
}

/* int32 (a bias quantized with scale_x·scale_w): x - z in 64 bits, then to float */
ROW void dequantize_s32(float *y, const int32_t *x, int64_t n, float s, int64_t z) {
  for (int64_t j = 0; j < n; j++) y[j] = (float)((int64_t)x[j] - z) * s;
}

/* NaN passes through (a non-finite check downstream should see it). */
ROW void fake_quantize(float *y, const float *x, int64_t n, float s, float z, float lo, float hi) {
  for (int64_t j = 0; j < n; j++) {
    float q = nearbyintf(x[j] / s) + z;
    q = q < lo ? lo : q > hi ? hi : q;
    y[j] = (q - z) * s;
  }
}

/* dX (straight-through inside the range) and Σ dY·(LSQ's dY/ds term), in double. */
ROW double fake_quantize_grad(float *dx, const float *dy, const float *x, int64_t n, float s,
                              float z, float lo, float hi) {
  double sum = 0;
  for (int64_t j = 0; j < n; j++) {
    float v = x[j] / s, r = nearbyintf(v), q = r + z;
    bool inside = q >= lo && q <= hi;
    dx[j] = inside ? dy[j] : 0;
    sum += (double)dy[j] * (double)(inside ? r - v : q < lo ? lo - z : hi - z);
  }
  return sum;
}

/* ---- parameters ---- */

typedef struct qpar {
  cx_quant_geom g;
  const float *scale;
  const cx_tensor *zero; /* NULL: zero point 0 */
  float lo, hi;
} qpar;

static float scale_of(const qpar *p, int64_t c) { return p->g.channels > 1 ? p->scale[c] : p->scale[0]; }

static float zero_f32(const qpar *p, int64_t c) {
  if (!p->zero) return 0;
  return (float)cx_dtype_load(p->zero->dtype, p->zero->data, p->g.channels > 1 ? (size_t)c : 0);
}

/* Geometry and scales of X (input x) with its scale (input x + 1) and zero point (x + 2). */
static cx_status params(const cx_kernel_args *a, int x, bool check, qpar *p) {
  const cx_tensor *xt = &a->in[x], *st = &a->in[x + 1];
  CX_TRY(cx_quant_geometry(a->node, &xt->shape, &st->shape, cx_tensor_nhwc(xt), &p->g));
  p->scale = cx_f32(st);
  p->zero = x + 2 < a->n_in && a->in[x + 2].data ? &a->in[x + 2] : NULL;
  if (check)
    for (int64_t c = 0; c < cx_tensor_numel(st); c++)
      CX_TRY(cx_quant_check_scale(a->node, c, p->scale[c]));
  return CX_OK;
}

static void attr_range(const cx_kernel_args *a, qpar *p) {
  p->lo = (float)cx_node_int(a->node, "qmin", 0);
  p->hi = (float)cx_node_int(a->node, "qmax", 0);
}

/* The first run of [i, end) inside one channel: returns its end, *c its channel. */
static int64_t run_end(const cx_quant_geom *g, int64_t i, int64_t end, int64_t *c) {
  int64_t row = i / g->inner, stop = (row + 1) * g->inner;
  *c = row % g->channels;
  return stop < end ? stop : end;
}

/* ---- kernels ---- */

static cx_status run_quantize(const cx_kernel_args *a) {
  qpar p;
  int64_t lo, hi;
  CX_TRY(params(a, 0, true, &p));
  cx_dtype q = a->out[0].dtype;
  if (!cx_quant_dtype_range(q, &lo, &hi) || q == CX_S32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (QuantizeLinear): output is %s; expected "
                   "int8 or uint8", a->node->name, cx_dtype_name(q));
  p.lo = (float)lo, p.hi = (float)hi;
  const float *x = cx_f32(&a->in[0]);
  int64_t n = cx_tensor_numel(&a->in[0]);
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1, c;
    cx_cpu_thread_range(n, &i0, &i1);
    for (int64_t i = i0, e; i < i1; i = e) {
      e = run_end(&p.g, i, i1, &c);
      float s = scale_of(&p, c), z = zero_f32(&p, c);
      if (q == CX_S8) quantize_s8((int8_t *)a->out[0].data + i, x + i, e - i, s, z, p.lo, p.hi);
      else quantize_u8((uint8_t *)a->out[0].data + i, x + i, e - i, s, z, p.lo, p.hi);
    }
  }
  return CX_OK;
}

static cx_status run_dequantize(const cx_kernel_args *a) {
  qpar p;
  CX_TRY(params(a, 0, false, &p));
  cx_dtype q = a->in[0].dtype;
  if (q != CX_S8 && q != CX_U8 && q != CX_S32)
    return cx_fail(CX_ERR_UNSUPPORTED, "node '%s' (DequantizeLinear): input is %s; expected "
                   "int8, uint8 or int32", a->node->name, cx_dtype_name(q));
  float *y = cx_f32(&a->out[0]);
  const void *x = a->in[0].data;
  int64_t n = cx_tensor_numel(&a->in[0]);
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1, c;
    cx_cpu_thread_range(n, &i0, &i1);
    for (int64_t i = i0, e; i < i1; i = e) {
      e = run_end(&p.g, i, i1, &c);
      float s = scale_of(&p, c);
      if (q == CX_S8) dequantize_s8(y + i, (const int8_t *)x + i, e - i, s, zero_f32(&p, c));
      else if (q == CX_U8) dequantize_u8(y + i, (const uint8_t *)x + i, e - i, s, zero_f32(&p, c));
      else {
        int64_t z = p.zero ? (int64_t)cx_dtype_load(CX_S32, p.zero->data,
                                                     p.g.channels > 1 ? (size_t)c : 0) : 0;
        dequantize_s32(y + i, (const int32_t *)x + i, e - i, s, z);
      }
    }
  }
  return CX_OK;
}

static cx_status run_fake_quantize(const cx_kernel_args *a) {
  qpar p;
  CX_TRY(params(a, 0, true, &p));
  attr_range(a, &p);
  const float *x = cx_f32(&a->in[0]);
  float *y = cx_f32(&a->out[0]);
  int64_t n = cx_tensor_numel(&a->in[0]);
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1, c;
    cx_cpu_thread_range(n, &i0, &i1);
    for (int64_t i = i0, e; i < i1; i = e) {
      e = run_end(&p.g, i, i1, &c);
      fake_quantize(y + i, x + i, e - i, scale_of(&p, c), zero_f32(&p, c), p.lo, p.hi);
    }
  }
  return CX_OK;
}

/* FakeQuantizeGrad(dY, X, scale[, zero_point]) → dX[, dScale]. dScale's sums have a fixed order
 * whatever the thread count: per channel, one thread walks the channel's rows in order; a
 * per-tensor scale sums SUM_BLOCKS fixed blocks in parallel, then the blocks in order. */
static cx_status run_fake_quantize_grad(const cx_kernel_args *a) {
  qpar p;
  CX_TRY(params(a, 1, true, &p));
  attr_range(a, &p);
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]);
  float *dx = cx_f32(&a->out[0]);
  float *ds = a->n_out > 1 && a->out[1].data ? cx_f32(&a->out[1]) : NULL;
  double gs = cx_node_float(a->node, "grad_scale", 1);
  const cx_quant_geom *g = &p.g;
  int64_t n = cx_tensor_numel(&a->in[1]);
  if (g->channels == 1) {
    double part[SUM_BLOCKS];
    float s = p.scale[0], z = zero_f32(&p, 0);
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int b = 0; b < SUM_BLOCKS; b++) {
      int64_t i0 = n * b / SUM_BLOCKS, i1 = n * (b + 1) / SUM_BLOCKS;
      part[b] = fake_quantize_grad(dx + i0, dy + i0, x + i0, i1 - i0, s, z, p.lo, p.hi);
    }
    double sum = 0;
    for (int b = 0; b < SUM_BLOCKS; b++) sum += part[b];
    if (ds) ds[0] = (float)(gs * sum);
    return CX_OK;
  }
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (int64_t c = 0; c < g->channels; c++) {
    float s = p.scale[c], z = zero_f32(&p, c);
    double sum = 0;
    for (int64_t o = 0; o < g->outer; o++) {
      int64_t i = (o * g->channels + c) * g->inner;
      sum += fake_quantize_grad(dx + i, dy + i, x + i, g->inner, s, z, p.lo, p.hi);
    }
    if (ds) ds[c] = (float)(gs * sum);
  }
  return CX_OK;
}

/* All four take channels-last like element-wise ops (both sides of Q/DQ: the layout pass moves
 * int8 activations too, so a DequantizeLinear between an INT8 convolution and a float op costs no
 * reorder); a per-axis scale is a [C] vector (a moot layout), and the geometry follows the stored
 * order (cx_quant_geometry with nhwc). */
const cx_kernel cx_cpu_quant[] = {
    {"QuantizeLinear", NULL, run_quantize, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"DequantizeLinear", NULL, run_dequantize, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"FakeQuantize", NULL, run_fake_quantize, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"FakeQuantizeGrad", NULL, run_fake_quantize_grad, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
