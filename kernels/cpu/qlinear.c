#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/ops/conv.h"
#include "cpu.h"
#include "dnnl_exec.h"
#include "eltwise_engine.h"
#include "vec_avx2.h"

/* The INT8 runtime's kernels (ops in core/ops/qlinear.c): one oneDNN int8 convolution or matmul
 * each, INT32 accumulation, the op's scales as oneDNN's output scales (per output channel: mask
 * on dimension 1), the bias f32 in accumulator units as oneDNN adds it before scaling, the fused
 * Relu / Clip as an eltwise post-op, rounding half to even and saturation by oneDNN's conversion
 * to the int8 destination.
 *
 * X is read as uint8 when the compile pass knows it is >= 0 (its bytes are the same uint8 values,
 * and uint8 sources up to 128 are the range in which oneDNN's vpmaddubsw kernels, x86 without
 * VNNI, are exact), and as int8 when the node says x_signed = 1. oneDNN runs int8 sources exactly
 * only with VNNI (vpdpbusd on X + 128, less 128 times the weights' sums); without it, it halves
 * the weights to keep vpmaddubsw from saturating, so such a node is supported only where oneDNN
 * dispatches to AVX-512 VNNI or better (core/quant_fuse.h). Activations go to the primitive as
 * nhwc (oneDNN's int8 convolutions have no plain NCHW jit kernel); plain tensors are reordered
 * through scratch. */

typedef struct qlin_state {
  cx_dnnl_exec e;
} qlin_state;

static void qlin_release(void *p) {
  qlin_state *s = p;
  if (!s) return;
  cx_dnnl_exec_release(&s->e);
  free(s);
}

static bool has_bias(const cx_kernel_args *a) { return a->n_in > 2 && a->node->in[2] >= 0; }

static dnnl_data_type_t dt_of(cx_dtype t) { return t == CX_S8 ? dnnl_s8 : dnnl_f32; }

/* The source's type as oneDNN reads it: u8 for a source known to be >= 0, else s8. */
static dnnl_data_type_t src_dt(const cx_node *n) {
  return cx_node_int(n, "x_signed", 0) ? dnnl_s8 : dnnl_u8;
}

/* Signed sources are exact only on oneDNN's VNNI kernels (above); DNNL_MAX_CPU_ISA may hold
 * oneDNN below what the CPU has, so ask oneDNN, not the CPU. */
static bool qlin_supports(const cx_node *n) {
  if (!cx_node_int(n, "x_signed", 0)) return true;
  unsigned isa = (unsigned)dnnl_get_effective_cpu_isa(), vnni = dnnl_cpu_isa_avx512_core_vnni;
  return (isa & vnni) == vnni;
}

/* Output scales and the activation post-op from the node's attributes. */
static cx_status make_attr(const cx_node *n, dnnl_primitive_attr_t *attr) {
  const float *sc;
  int ns = cx_node_floats(n, "scales", &sc);
  float lo = cx_node_float(n, "act_min", -INFINITY), hi = cx_node_float(n, "act_max", INFINITY);
  dnnl_post_ops_t po = NULL;
  CX_DNNL(dnnl_primitive_attr_create(attr), n);
  dnnl_status_t s = dnnl_primitive_attr_set_output_scales(*attr, ns, ns > 1 ? 1 << 1 : 0, sc);
  if (s == dnnl_success && (lo > -INFINITY || hi < INFINITY)) {
    bool relu = lo == 0 && hi == INFINITY;
    s = dnnl_post_ops_create(&po);
    if (s == dnnl_success)
      s = dnnl_post_ops_append_eltwise(po, 1.0f, relu ? dnnl_eltwise_relu : dnnl_eltwise_clip,
                                       relu ? 0.0f : fmaxf(lo, -FLT_MAX), fminf(hi, FLT_MAX));
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(*attr, po);
    if (po) dnnl_post_ops_destroy(po);
  }
  if (s != dnnl_success) {
    dnnl_primitive_attr_destroy(*attr);
    return cx_fail(CX_ERR_BACKEND, "node '%s': oneDNN refused its output scales or post-op "
                   "(status %d)", n->name, (int)s);
  }
  return CX_OK;
}

/* Builds the primitive of op descriptor desc with the node's attributes, and its arguments. */
static cx_status build(qlin_state *s, const cx_kernel_args *a, const_dnnl_op_desc_t desc,
                       const dnnl_memory_desc_t *u_src, const dnnl_memory_desc_t *u_wei,
                       const dnnl_memory_desc_t *bias, const dnnl_memory_desc_t *u_dst) {
  dnnl_primitive_attr_t attr;
  dnnl_primitive_desc_t pd;
  CX_TRY(make_attr(a->node, &attr));
  cx_status st = cx_dnnl_exec_create(&s->e, a->node, desc, attr, NULL, &pd);
  dnnl_primitive_attr_destroy(attr);
  CX_TRY(st);
  st = cx_dnnl_exec_arg(&s->e, a->node, pd, DNNL_ARG_SRC, u_src, false, 0);
  if (st == CX_OK) st = cx_dnnl_exec_arg(&s->e, a->node, pd, DNNL_ARG_WEIGHTS, u_wei, false, 1);
  if (st == CX_OK && cx_node_int(a->node, "frozen_weights", 0)) /* reordered at the first run only */
    st = cx_dnnl_exec_freeze(&s->e, a->node, DNNL_ARG_WEIGHTS);
  if (st == CX_OK && has_bias(a))
    st = cx_dnnl_exec_arg(&s->e, a->node, pd, DNNL_ARG_BIAS, bias, false, 2);
  if (st == CX_OK) st = cx_dnnl_exec_arg(&s->e, a->node, pd, DNNL_ARG_DST, u_dst, true, 0);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

static cx_status start(const cx_kernel_args *a, void **state, qlin_state **s) {
  *s = calloc(1, sizeof **s);
  if (!*s) return cx_fail(CX_ERR_NOMEM, "node '%s': out of memory", a->node->name);
  *state = *s;
  return CX_OK;
}

/* ---- QLinearConvFused -------------------------------------------------------------------------- */

static dnnl_format_tag_t act_tag(const cx_tensor *t) {
  return cx_tensor_nhwc(t) ? dnnl_nhwc : dnnl_nchw;
}

static cx_status qconv_desc(const cx_kernel_args *a, const cx_conv_geom *g, dnnl_memory_desc_t md[7],
                            dnnl_convolution_desc_t *cd) {
  const cx_node *n = a->node;
  dnnl_dims_t xd = {g->n, g->c_in, g->h, g->w}, yd = {g->n, g->c_out, g->oh, g->ow};
  dnnl_data_type_t ydt = dt_of(a->out[0].dtype);
  int64_t gr = g->group;
  /* md: user src, prim src, user wei, prim wei, bias, user dst, prim dst */
  CX_DNNL(dnnl_memory_desc_init_by_tag(&md[0], 4, xd, src_dt(n), act_tag(&a->in[0])), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&md[1], 4, xd, src_dt(n), dnnl_nhwc), n);
  if (gr == 1) {
    dnnl_dims_t wd = {g->c_out, g->c_in, g->kh, g->kw};
    CX_DNNL(dnnl_memory_desc_init_by_tag(&md[2], 4, wd, dnnl_s8, dnnl_oihw), n);
    CX_DNNL(dnnl_memory_desc_init_by_tag(&md[3], 4, wd, dnnl_s8, dnnl_format_tag_any), n);
  } else {
    dnnl_dims_t wd = {gr, g->c_out / gr, g->c_in / gr, g->kh, g->kw};
    CX_DNNL(dnnl_memory_desc_init_by_tag(&md[2], 5, wd, dnnl_s8, dnnl_goihw), n);
    CX_DNNL(dnnl_memory_desc_init_by_tag(&md[3], 5, wd, dnnl_s8, dnnl_format_tag_any), n);
  }
  CX_DNNL(dnnl_memory_desc_init_by_tag(&md[4], 1, (dnnl_dims_t){g->c_out}, dnnl_f32, dnnl_x), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&md[5], 4, yd, ydt, act_tag(&a->out[0])), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&md[6], 4, yd, ydt, dnnl_nhwc), n);
  CX_DNNL(dnnl_dilated_convolution_forward_desc_init(
              cd, dnnl_forward_inference, dnnl_convolution_direct, &md[1], &md[3],
              has_bias(a) ? &md[4] : NULL, &md[6], (dnnl_dims_t){g->sh, g->sw},
              (dnnl_dims_t){g->dh - 1, g->dw - 1}, (dnnl_dims_t){g->pt, g->pl},
              (dnnl_dims_t){g->pb, g->pr}),
          n);
  return CX_OK;
}

static cx_status qconv_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  cx_conv_geom g;
  dnnl_memory_desc_t md[7];
  dnnl_convolution_desc_t cd;
  qlin_state *s;
  CX_TRY(cx_conv_geom_make(a->node, &a->in[0].shape, &a->in[1].shape, &g));
  CX_TRY(qconv_desc(a, &g, md, &cd));
  CX_TRY(start(a, state, &s));
  CX_TRY(build(s, a, &cd, &md[0], &md[2], &md[4], &md[5]));
  *scratch = s->e.scratch;
  return CX_OK;
}

/* ---- QLinearGemmFused: Y[M, N] = X[M, K] · W[N, K]ᵀ --------------------------------------------- */

static cx_status qgemm_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  const cx_node *n = a->node;
  int64_t m = a->in[0].shape.d[0], k = a->in[0].shape.d[1], nn = a->in[1].shape.d[0];
  dnnl_memory_desc_t src, wei, u_wei, bias, dst;
  dnnl_matmul_desc_t md;
  qlin_state *s;
  CX_DNNL(dnnl_memory_desc_init_by_tag(&src, 2, (dnnl_dims_t){m, k}, src_dt(n), dnnl_ab), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&u_wei, 2, (dnnl_dims_t){k, nn}, dnnl_s8, dnnl_ba), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&wei, 2, (dnnl_dims_t){k, nn}, dnnl_s8,
                                       dnnl_format_tag_any), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&bias, 2, (dnnl_dims_t){1, nn}, dnnl_f32, dnnl_ab), n);
  CX_DNNL(dnnl_memory_desc_init_by_tag(&dst, 2, (dnnl_dims_t){m, nn}, dt_of(a->out[0].dtype),
                                       dnnl_ab), n);
  CX_DNNL(dnnl_matmul_desc_init(&md, &src, &wei, has_bias(a) ? &bias : NULL, &dst), n);
  CX_TRY(start(a, state, &s));
  CX_TRY(build(s, a, &md, &src, &u_wei, &bias, &dst));
  *scratch = s->e.scratch;
  return CX_OK;
}

static cx_status qlin_run(const cx_kernel_args *a) {
  qlin_state *s = a->state;
  return cx_dnnl_exec_run(&s->e, a);
}

/* ---- QLinearAddFused --------------------------------------------------------------------------- */

/* The f32 operations of DequantizeLinear (q·s), Add, Relu / Clip and QuantizeLinear (a division,
 * rounded half to even, as kernels/cpu/quant.c does it), in one pass over int8 memory. A, B and Y
 * share one layout (CX_LAYOUT_ELTWISE with equal shapes), so the flat loop serves both. The
 * products and the sum stay separate roundings as in those ops' kernels (the build targets
 * plain x86-64, so nothing contracts them into an FMA, and the AVX2 loop multiplies and adds
 * apart). Saturating before rounding gives the same integers, the bounds being integers. */
typedef struct qadd_par {
  float sa, sb, sy, lo, hi;
} qadd_par;

static void qadd_scalar(const signed char *x, const signed char *y, signed char *out, int64_t n,
                        const qadd_par *p) {
  for (int64_t i = 0; i < n; i++) {
    float v = (float)x[i] * p->sa + (float)y[i] * p->sb;
    v = v < p->lo ? p->lo : v > p->hi ? p->hi : v;
    float t = v / p->sy;
    t = t < -128.0f ? -128.0f : t > 127.0f ? 127.0f : t;
    out[i] = (signed char)(int)nearbyintf(t);
  }
}

/* 8 int8 values of q as f32, times s. */
CX_AVX2_INLINE __m256 qadd_load(const signed char *q, __m256 s) {
  __m128i b = _mm_loadl_epi64((const __m128i *)q);
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
}

/* 8 outputs as int32, rounded half to even (the current mode) like nearbyintf. NaN cannot
 * arise: int8 inputs and finite scales (checked by shape inference). */
CX_AVX2_INLINE __m256i qadd_eight(const signed char *x, const signed char *y, const qadd_par *p) {
  __m256 v = _mm256_add_ps(qadd_load(x, _mm256_set1_ps(p->sa)), qadd_load(y, _mm256_set1_ps(p->sb)));
  v = _mm256_min_ps(_mm256_set1_ps(p->hi), _mm256_max_ps(_mm256_set1_ps(p->lo), v));
  __m256 t = _mm256_div_ps(v, _mm256_set1_ps(p->sy));
  t = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-128.0f), t));
  return _mm256_cvtps_epi32(t);
}

/* 16 elements a step: two groups of 8 packed to int16 then int8 (packs works per 128-bit lane,
 * hence the permute to restore the order). */
CX_AVX2 static int64_t qadd_avx2(const signed char *x, const signed char *y, signed char *out,
                                 int64_t n, const qadd_par *p) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = qadd_eight(x + i, y + i, p), b = qadd_eight(x + i + 8, y + i + 8, p);
    __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
    __m128i q = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storeu_si128((__m128i *)(out + i), q);
  }
  return i;
}

static cx_status qadd_run(const cx_kernel_args *a) {
  const cx_node *n = a->node;
  const qadd_par p = {cx_node_float(n, "a_scale", 1), cx_node_float(n, "b_scale", 1),
                      cx_node_float(n, "y_scale", 1), cx_node_float(n, "act_min", -INFINITY),
                      cx_node_float(n, "act_max", INFINITY)};
  const signed char *x = a->in[0].data, *y = a->in[1].data;
  signed char *out = a->out[0].data;
  int64_t count = cx_shape_numel(&a->out[0].shape);
  bool avx2 = cx_cpu_avx2();
#pragma omp parallel if (count > 32768)
  {
    int64_t i0, i1, done = 0;
    cx_cpu_thread_range(count, &i0, &i1);
    if (avx2) done = qadd_avx2(x + i0, y + i0, out + i0, i1 - i0, &p);
    qadd_scalar(x + i0 + done, y + i0 + done, out + i0 + done, i1 - i0 - done, &p);
  }
  return CX_OK;
}

const cx_kernel cx_cpu_qlinear[] = {
    {"QLinearAddFused", NULL, qadd_run, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"QLinearConvFused", qconv_prepare, qlin_run, qlin_release, CX_LAYOUT_ANY, qlin_supports, 0},
    {"QLinearGemmFused", qgemm_prepare, qlin_run, qlin_release, 0, qlin_supports, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
