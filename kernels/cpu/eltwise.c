/* CPU kernels of the element-wise family: Add, Sub, Mul, Div, Sum, Neg, and the broadcast /
 * reduce-to pair BroadcastTo and ReduceSumTo. The loops live in eltwise_engine.c and
 * reduce_engine.c. */

#include <string.h>

#include "../../core/ops/eltwise.h"
#include "bf16_vec.h"
#include "cpu.h"
#include "eltwise_engine.h"
#include "stage.h"

enum { SUM_CHUNK = 4096, PAR_MIN = 1 << 15, SUM_DIRECT_MAX = 16 };

/* The shapes the broadcasting engine sees. A channels-last output is the row-major [N,H,W,C]
 * problem: its operands (same shape and channels-last, or of moot layout: core/layout.c) permute
 * the same way, aligned right to 4-D, without moving a byte. */
typedef struct bin_shapes {
  cx_shape y, a, b;
} bin_shapes;

static cx_shape nhwc_order(const cx_shape *s) {
  int64_t d[4] = {1, 1, 1, 1};
  for (int i = 0; i < s->ndim && s->ndim <= 4; i++) d[4 - s->ndim + i] = s->d[i];
  return cx_shape_make(4, (int64_t[]){d[0], d[2], d[3], d[1]});
}

/* ReduceSumTo and BroadcastTo: the full tensor and the keepdims shape, permuted alike when the full
 * one is channels-last (the keepdims one then has a moot layout: core/layout.c). */
static void reduce_shapes(const cx_tensor *full, cx_shape *fs, cx_shape *keep) {
  *fs = full->shape;
  if (!cx_tensor_nhwc(full)) return;
  *fs = nhwc_order(fs);
  *keep = nhwc_order(keep);
}

static bin_shapes shapes_of(const cx_kernel_args *a, const cx_shape *as, const cx_shape *bs) {
  bin_shapes r = {a->out[0].shape, *as, bs ? *bs : a->out[0].shape};
  if (!cx_tensor_nhwc(&a->out[0])) return r;
  r.y = nhwc_order(&r.y);
  r.a = nhwc_order(&r.a);
  r.b = nhwc_order(&r.b);
  return r;
}

/* y = a op b over n elements of one shape (bf16 operands staged, kernels/cpu/stage.h) */
static void binary_rows(const void *ctx, float *y, const float *const *x, int64_t n) {
  cx_bin_op op = *(const cx_bin_op *)ctx;
  const float *a = x[0], *b = x[1];
  switch (op) {
  case CX_BIN_ADD: cx_cpu_row_add(y, a, b, n); break;
  case CX_BIN_SUB: _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] = a[i] - b[i]; break;
  case CX_BIN_MUL: _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i]; break;
  default: _Pragma("omp simd") for (int64_t i = 0; i < n; i++) y[i] = a[i] / b[i]; break;
  }
}

/* ---- bf16 in place (bf16_vec.h), where every argument is bf16 (one shape: CX_ACT_BF16_FLAT) */

#if defined(__x86_64__) || defined(__i386__)
#define BINARY_BF16(EXPR)                                                                         \
  for (int64_t i = 0; i < n; i += 16) {                                                           \
    __mmask16 m = cx_bf16_lanes(n - i);                                                           \
    __m512 u = cx_bf16_load(a + i, m), v = cx_bf16_load(b + i, m);                                \
    cx_bf16_store(y + i, EXPR, m);                                                                \
  }

CX_BF16_TARGET static void binary_bf16(cx_bin_op op, uint16_t *y, const uint16_t *a,
                                       const uint16_t *b, int64_t n) {
  switch (op) {
  case CX_BIN_ADD: BINARY_BF16(_mm512_add_ps(u, v)); break;
  case CX_BIN_SUB: BINARY_BF16(_mm512_sub_ps(u, v)); break;
  case CX_BIN_MUL: BINARY_BF16(_mm512_mul_ps(u, v)); break;
  default: BINARY_BF16(_mm512_div_ps(u, v)); break;
  }
}

/* y = x[0] + x[1] + ... in that order, as sum_staged adds */
CX_BF16_TARGET static void sum_bf16(uint16_t *y, const uint16_t *const *x, int n_x, int64_t i0,
                                    int64_t i1) {
  for (int64_t i = i0; i < i1; i += 16) {
    __mmask16 m = cx_bf16_lanes(i1 - i);
    __m512 acc = cx_bf16_load(x[0] + i, m);
    for (int k = 1; k < n_x; k++) acc = _mm512_add_ps(acc, cx_bf16_load(x[k] + i, m));
    cx_bf16_store(y + i, acc, m);
  }
}
#else /* never called: cx_cpu_bf16_direct() is false */
static void binary_bf16(cx_bin_op op, uint16_t *y, const uint16_t *a, const uint16_t *b,
                        int64_t n) {
  (void)op, (void)y, (void)a, (void)b, (void)n;
}
static void sum_bf16(uint16_t *y, const uint16_t *const *x, int n_x, int64_t i0, int64_t i1) {
  (void)y, (void)x, (void)n_x, (void)i0, (void)i1;
}
#endif

static void binary_direct(const cx_kernel_args *a, cx_bin_op op) {
  int64_t n = cx_tensor_numel(&a->out[0]);
#pragma omp parallel if (n > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    if (i0 < i1)
      binary_bf16(op, (uint16_t *)a->out[0].data + i0, (const uint16_t *)a->in[0].data + i0,
                  (const uint16_t *)a->in[1].data + i0, i1 - i0);
  }
}

static cx_status binary(const cx_kernel_args *a, cx_bin_op op) {
  if (cx_stage_any_bf16(a->in, a->n_in, a->out, 1)) { /* one shape (CX_ACT_BF16_FLAT) */
    const cx_tensor *x[2] = {&a->in[0], &a->in[1]};
    if (cx_stage_all_bf16(a->in, 2, a->out, 1)) binary_direct(a, op);
    else cx_stage_map(binary_rows, &op, &a->out[0], x, 2, cx_tensor_numel(&a->out[0]) > PAR_MIN);
    return CX_OK;
  }
  bin_shapes s = shapes_of(a, &a->in[0].shape, &a->in[1].shape);
  cx_cpu_binary(op, 1.0f, cx_f32(&a->out[0]), &s.y, cx_f32(&a->in[0]), &s.a, cx_f32(&a->in[1]),
                &s.b);
  return CX_OK;
}

static cx_status run_add(const cx_kernel_args *a) { return binary(a, CX_BIN_ADD); }
static cx_status run_sub(const cx_kernel_args *a) { return binary(a, CX_BIN_SUB); }
static cx_status run_mul(const cx_kernel_args *a) { return binary(a, CX_BIN_MUL); }
static cx_status run_div(const cx_kernel_args *a) { return binary(a, CX_BIN_DIV); }

static cx_status run_neg(const cx_kernel_args *a) {
  const cx_shape *s = &a->out[0].shape;
  cx_cpu_binary(CX_BIN_COPY, -1.0f, cx_f32(&a->out[0]), s, cx_f32(&a->in[0]), s, NULL, NULL);
  return CX_OK;
}

/* The next present input at or after i (omitted optional inputs have no data), or n_in. */
static int next_live(const cx_kernel_args *a, int i) {
  while (i < a->n_in && !a->in[i].data) i++;
  return i;
}

/* Equal shapes (the autodiff adding gradients of several consumers): one pass over the output in
 * cache-sized chunks, adding every input into the chunk while it is hot. */
static void sum_same_shape(const cx_kernel_args *a) {
  float *y = cx_f32(&a->out[0]);
  int64_t n = cx_tensor_numel(&a->out[0]), chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
  int first = next_live(a, 0), second = next_live(a, first + 1);
#pragma omp parallel for schedule(static) if (n * a->n_in > PAR_MIN)
  for (int64_t c = 0; c < chunks; c++) {
    int64_t off = c * SUM_CHUNK, len = n - off < SUM_CHUNK ? n - off : SUM_CHUNK;
    const float *x0 = cx_f32(&a->in[first]) + off;
    if (second >= a->n_in) memcpy(y + off, x0, sizeof(float) * (size_t)len);
    else cx_cpu_row_add(y + off, x0, cx_f32(&a->in[second]) + off, len);
    for (int k = next_live(a, second + 1); k < a->n_in; k = next_live(a, k + 1))
      cx_cpu_row_add(y + off, y + off, cx_f32(&a->in[k]) + off, len);
  }
}

/* sum_same_shape with bf16 operands: each chunk of the output gathers its inputs in f32 */
static void sum_staged(const cx_kernel_args *a) {
  int64_t n = cx_tensor_numel(&a->out[0]);
  int first = next_live(a, 0);
#pragma omp parallel if (n * a->n_in > PAR_MIN)
  {
    _Alignas(64) float in[CX_STAGE], acc[CX_STAGE];
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    for (int64_t i = i0; i < i1; i += CX_STAGE) {
      int64_t len = i1 - i < CX_STAGE ? i1 - i : CX_STAGE;
      float *y = cx_stage_out(&a->out[0], i, acc);
      memcpy(y, cx_stage_in(&a->in[first], i, len, in), sizeof(float) * (size_t)len);
      for (int k = next_live(a, first + 1); k < a->n_in; k = next_live(a, k + 1))
        cx_cpu_row_add(y, y, cx_stage_in(&a->in[k], i, len, in), len);
      cx_stage_commit(&a->out[0], i, len, y);
    }
  }
}

/* sum_staged's sums, on bf16 inputs and output in place */
static void sum_direct(const cx_kernel_args *a) {
  const uint16_t *x[SUM_DIRECT_MAX];
  int n_x = 0;
  for (int k = next_live(a, 0); k < a->n_in && n_x < SUM_DIRECT_MAX; k = next_live(a, k + 1))
    x[n_x++] = (const uint16_t *)a->in[k].data;
  int64_t n = cx_tensor_numel(&a->out[0]);
#pragma omp parallel if (n * a->n_in > PAR_MIN)
  {
    int64_t i0, i1;
    cx_cpu_thread_range(n, &i0, &i1);
    if (i0 < i1) sum_bf16((uint16_t *)a->out[0].data, x, n_x, i0, i1);
  }
}

static cx_status run_sum(const cx_kernel_args *a) {
  if (cx_stage_any_bf16(a->in, a->n_in, a->out, 1)) { /* one shape (CX_ACT_BF16_FLAT) */
    bool direct = cx_stage_all_bf16(a->in, a->n_in, a->out, 1) && next_live(a, 0) < a->n_in &&
                  a->n_in <= SUM_DIRECT_MAX;
    if (direct) sum_direct(a);
    else sum_staged(a);
    return CX_OK;
  }
  bool same = true;
  for (int i = next_live(a, 0); i < a->n_in; i = next_live(a, i + 1))
    same = same && cx_shape_equal(&a->in[i].shape, &a->out[0].shape);
  if (same) {
    sum_same_shape(a);
    return CX_OK;
  }
  /* broadcasting: spread the first input over the output, then add the rest in place */
  float *y = cx_f32(&a->out[0]);
  int first = next_live(a, 0);
  bin_shapes s = shapes_of(a, &a->in[first].shape, NULL);
  cx_cpu_binary(CX_BIN_COPY, 1.0f, y, &s.y, cx_f32(&a->in[first]), &s.a, NULL, NULL);
  for (int k = next_live(a, first + 1); k < a->n_in; k = next_live(a, k + 1)) {
    s = shapes_of(a, &a->in[k].shape, NULL);
    cx_cpu_binary(CX_BIN_ADD, 1.0f, y, &s.y, y, &s.y, cx_f32(&a->in[k]), &s.a);
  }
  return CX_OK;
}

static cx_status run_reduce_sum_to(const cx_kernel_args *a) {
  cx_shape keep;
  cx_shape full;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->out[0].shape, &a->in[0].shape, &keep));
  reduce_shapes(&a->in[0], &full, &keep);
  cx_cpu_reduce_to(cx_f32(&a->out[0]), &keep, cx_f32(&a->in[0]), &full,
                   cx_node_float(a->node, "scale", 1.0f));
  return CX_OK;
}

static cx_status run_broadcast_to(const cx_kernel_args *a) {
  cx_shape keep;
  cx_shape full;
  CX_TRY(cx_reduce_to_keep_shape(a->node, &a->in[0].shape, &a->out[0].shape, &keep));
  reduce_shapes(&a->out[0], &full, &keep);
  cx_cpu_binary(CX_BIN_COPY, cx_node_float(a->node, "scale", 1.0f), cx_f32(&a->out[0]), &full,
                cx_f32(&a->in[0]), &keep, NULL, NULL);
  return CX_OK;
}

const cx_kernel cx_cpu_eltwise[] = {
    {"Add", NULL, run_add, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Sub", NULL, run_sub, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Mul", NULL, run_mul, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Div", NULL, run_div, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Sum", NULL, run_sum, NULL, CX_LAYOUT_ELTWISE, NULL, CX_ACT_BF16_FLAT},
    {"Neg", NULL, run_neg, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"ReduceSumTo", NULL, run_reduce_sum_to, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {"BroadcastTo", NULL, run_broadcast_to, NULL, CX_LAYOUT_ELTWISE, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
