#include <stdlib.h>
#include <string.h>

#include "../../core/op.h"
#include "cpu.h"
#include "dnnl_post_ops.h"
#include "dnnl_util.h"

/* Gemm, MatMul and MatMulT on one oneDNN matmul primitive, built at compile time. Transposed
 * operands are described by strides (no copies) and broadcast batch axes by size-1 dims, which
 * oneDNN's matmul handles itself. Gemm's alpha is an output scale; beta * C a sum post-op over Y
 * after C has been broadcast into it. The scratchpad is the program's scratch memory.
 *
 * bf16 autocast (precision BF16): A and B are rounded to bf16 copies in scratch (same layout) by
 * a reorder, and the matmul reads those and writes f32 Y, accumulating in f32.
 *
 * GemmFused (core/ops/fused.c, from the inference pass) is Gemm with its fused activation as an
 * eltwise post-op after the sum; MatMulFused is MatMul with oneDNN's bias and that post-op. */

/* A matmul operand: `user` wraps the program's f32 buffer; under BF16, `low` is its bf16 copy at
 * `offset` in scratch and `cvt` the reorder that rounds into it. */
typedef struct mm_operand {
  dnnl_memory_t user, low;
  dnnl_primitive_t cvt;
  size_t offset;
} mm_operand;

typedef struct mm_state {
  dnnl_primitive_attr_t attr;
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t prim;
  mm_operand a, b;
  dnnl_memory_t y, scratch, bias; /* bias: MatMulFused's, [1, ..., N] */
  bool sum_c; /* Gemm: Y starts as broadcast C, accumulated with scale beta */
} mm_state;

typedef struct mm_desc {
  int ndims;
  dnnl_dims_t a_dims, a_strides, b_dims, b_strides, y_dims;
  float alpha, beta;
  bool sum_c, bias;
  dnnl_data_type_t operand_type; /* of A and B inside the matmul: f32, or bf16 under autocast */
} mm_desc;

static void mm_release(void *p) {
  mm_state *st = p;
  if (!st) return;
  if (st->prim) dnnl_primitive_destroy(st->prim);
  if (st->pd) dnnl_primitive_desc_destroy(st->pd);
  if (st->attr) dnnl_primitive_attr_destroy(st->attr);
  if (st->a.cvt) dnnl_primitive_destroy(st->a.cvt);
  if (st->b.cvt) dnnl_primitive_destroy(st->b.cvt);
  dnnl_memory_t mems[] = {st->a.user, st->a.low, st->b.user, st->b.low,
                          st->y,      st->scratch, st->bias};
  for (int i = 0; i < 7; i++)
    if (mems[i]) dnnl_memory_destroy(mems[i]);
  free(st);
}

static dnnl_data_type_t mm_operand_type(cx_precision p) {
  return p == CX_PRECISION_BF16 ? dnnl_bf16 : dnnl_f32;
}

static size_t align64(size_t n) { return (n + 63) / 64 * 64; }

/* Wraps the f32 operand of dims/strides; when the matmul reads another type, adds its copy in
 * scratch (after *scratch bytes, which grows) and the reorder that fills it. */
static cx_status operand_init(const cx_node *n, mm_operand *o, int ndims, const dnnl_dim_t *dims,
                              const dnnl_dim_t *strides, dnnl_data_type_t type,
                              dnnl_memory_desc_t *inner, size_t *scratch) {
  dnnl_engine_t eng = cx_dnnl_engine();
  dnnl_memory_desc_t user;
  CX_DNNL(dnnl_memory_desc_init_by_strides(&user, ndims, dims, dnnl_f32, strides), n);
  CX_DNNL(dnnl_memory_desc_init_by_strides(inner, ndims, dims, type, strides), n);
  CX_DNNL(dnnl_memory_create(&o->user, &user, eng, DNNL_MEMORY_NONE), n);
  if (type == dnnl_f32) return CX_OK;
  CX_DNNL(dnnl_memory_create(&o->low, inner, eng, DNNL_MEMORY_NONE), n);
  o->offset = *scratch;
  *scratch += align64(dnnl_memory_desc_get_size(inner));
  dnnl_primitive_desc_t rpd;
  CX_DNNL(dnnl_reorder_primitive_desc_create(&rpd, &user, eng, inner, eng, NULL), n);
  dnnl_status_t s = dnnl_primitive_create(&o->cvt, rpd);
  dnnl_primitive_desc_destroy(rpd);
  CX_DNNL(s, n);
  return CX_OK;
}

/* Logical dims [batch..., rows, cols] of an operand stored contiguously as `s` (rank >= 2),
 * padded on the left to ndims; transposed operands swap the last two dims and their strides. */
static void operand_desc(const cx_shape *s, int ndims, bool trans, dnnl_dim_t *dims,
                         dnnl_dim_t *strides) {
  int lead = ndims - s->ndim;
  dnnl_dim_t stride = 1;
  for (int i = ndims - 1; i >= 0; i--) {
    dims[i] = i >= lead ? s->d[i - lead] : 1;
    strides[i] = stride;
    stride *= dims[i];
  }
  if (trans) {
    dnnl_dim_t t = dims[ndims - 1];
    dims[ndims - 1] = dims[ndims - 2];
    dims[ndims - 2] = t;
    t = strides[ndims - 1];
    strides[ndims - 1] = strides[ndims - 2];
    strides[ndims - 2] = t;
  }
}

static cx_status mm_attr(const cx_node *n, const mm_desc *d, mm_state *st) {
  CX_DNNL(dnnl_primitive_attr_create(&st->attr), n);
  CX_DNNL(dnnl_primitive_attr_set_scratchpad_mode(st->attr, dnnl_scratchpad_mode_user), n);
  if (d->alpha != 1) CX_DNNL(dnnl_primitive_attr_set_output_scales(st->attr, 1, 0, &d->alpha), n);
  bool fused = cx_node_attr(n, "activation") != NULL; /* GemmFused, MatMulFused */
  if (!d->sum_c && !fused) return CX_OK;
  dnnl_post_ops_t po;
  CX_DNNL(dnnl_post_ops_create(&po), n);
  cx_status s = !d->sum_c || dnnl_post_ops_append_sum(po, d->beta) == dnnl_success
                    ? CX_OK
                    : cx_fail(CX_ERR_BACKEND, "node '%s': oneDNN refused the sum post-op", n->name);
  if (s == CX_OK && fused) s = cx_dnnl_append_activation(n, po);
  if (s == CX_OK && dnnl_primitive_attr_set_post_ops(st->attr, po) != dnnl_success)
    s = cx_fail(CX_ERR_BACKEND, "node '%s': oneDNN refused the post-ops", n->name);
  dnnl_post_ops_destroy(po);
  return s;
}

static cx_status mm_build(const cx_node *n, const mm_desc *d, mm_state *st, size_t *scratch) {
  dnnl_engine_t eng = cx_dnnl_engine();
  if (!eng) return cx_fail(CX_ERR_BACKEND, "no oneDNN CPU engine for node '%s'", n->name);
  dnnl_memory_desc_t a, b, y;
  CX_DNNL(dnnl_memory_desc_init_by_strides(&y, d->ndims, d->y_dims, dnnl_f32, NULL), n);
  dnnl_matmul_desc_t md;
  CX_TRY(mm_attr(n, d, st));
  /* the scratchpad's size is known only after the primitive: operand copies go behind it */
  size_t ops = 0;
  CX_TRY(operand_init(n, &st->a, d->ndims, d->a_dims, d->a_strides, d->operand_type, &a, &ops));
  CX_TRY(operand_init(n, &st->b, d->ndims, d->b_dims, d->b_strides, d->operand_type, &b, &ops));
  dnnl_memory_desc_t bias;
  if (d->bias) {
    dnnl_dims_t bd;
    for (int i = 0; i < d->ndims; i++) bd[i] = i == d->ndims - 1 ? d->y_dims[i] : 1;
    CX_DNNL(dnnl_memory_desc_init_by_strides(&bias, d->ndims, bd, dnnl_f32, NULL), n);
    CX_DNNL(dnnl_memory_create(&st->bias, &bias, eng, DNNL_MEMORY_NONE), n);
  }
  CX_DNNL(dnnl_matmul_desc_init(&md, &a, &b, d->bias ? &bias : NULL, &y), n);
  CX_DNNL(dnnl_primitive_desc_create(&st->pd, &md, st->attr, eng, NULL), n);
  CX_DNNL(dnnl_primitive_create(&st->prim, st->pd), n);
  CX_DNNL(dnnl_memory_create(&st->y, &y, eng, DNNL_MEMORY_NONE), n);
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(st->pd, dnnl_query_scratchpad_md, 0);
  size_t pad = smd ? align64(dnnl_memory_desc_get_size(smd)) : 0;
  if (pad) CX_DNNL(dnnl_memory_create(&st->scratch, smd, eng, DNNL_MEMORY_NONE), n);
  st->a.offset += pad;
  st->b.offset += pad;
  *scratch = pad + ops;
  st->sum_c = d->sum_c;
  return CX_OK;
}

static cx_status mm_prepare_desc(const cx_node *n, const mm_desc *d, void **state,
                                 size_t *scratch) {
  mm_state *st = calloc(1, sizeof *st);
  if (!st) return cx_fail(CX_ERR_NOMEM, "out of memory preparing node '%s'", n->name);
  cx_status s = mm_build(n, d, st, scratch);
  if (s != CX_OK) {
    mm_release(st);
    return s;
  }
  *state = st;
  return CX_OK;
}

/* Points the operand at this run's data and rounds it into scratch if the matmul reads a copy;
 * returns the memory the matmul reads, NULL after an error. */
static dnnl_memory_t operand_bind(const mm_operand *o, const void *data, const cx_kernel_args *a,
                                  dnnl_stream_t stream) {
  if (dnnl_memory_set_data_handle(o->user, (void *)data) != dnnl_success) return NULL;
  if (!o->low) return o->user;
  dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, o->user}, {DNNL_ARG_TO, o->low}};
  if (dnnl_memory_set_data_handle(o->low, (char *)a->scratch + o->offset) != dnnl_success ||
      dnnl_primitive_execute(o->cvt, stream, 2, r) != dnnl_success)
    return NULL;
  return o->low;
}

static cx_status mm_execute(const cx_kernel_args *a, const void *pa, const void *pb, void *py) {
  const mm_state *st = a->state;
  const cx_node *n = a->node;
  dnnl_stream_t stream = cx_dnnl_stream();
  if (!stream) return cx_fail(CX_ERR_BACKEND, "no oneDNN CPU stream for node '%s'", n->name);
  dnnl_memory_t ma = operand_bind(&st->a, pa, a, stream), mb = operand_bind(&st->b, pb, a, stream);
  if (!ma || !mb)
    return cx_fail(CX_ERR_BACKEND, "binding or rounding the operands failed in node '%s'", n->name);
  CX_DNNL(dnnl_memory_set_data_handle(st->y, py), n);
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, st->y}};
  int nargs = 3;
  if (st->bias) {
    CX_DNNL(dnnl_memory_set_data_handle(st->bias, a->in[2].data), n);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, st->bias};
  }
  if (st->scratch) {
    CX_DNNL(dnnl_memory_set_data_handle(st->scratch, a->scratch), n);
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, st->scratch};
  }
  CX_DNNL(dnnl_primitive_execute(st->prim, stream, nargs, args), n);
  CX_DNNL(dnnl_stream_wait(stream), n);
  return CX_OK;
}

/* A [b..., M, K] times a B without batch dims (or only dims of 1) is one [b·M, K] × [K, N]
 * product in the same memory (A and Y row-major): oneDNN would otherwise run b products of M
 * rows, each reading all of B (a sequence-first transformer's projections, [197, 1, 768] ×
 * [768, 2304]: 197 matrix-vector products, ten times slower). */
static void fold_batch_rows(cx_shape *sa, cx_shape *sb, bool trans_a) {
  for (int i = 0; i < sb->ndim - 2; i++)
    if (sb->d[i] != 1) return;
  if (sa->ndim < 2 || trans_a) return;
  int64_t rows = 1;
  for (int i = 0; i < sa->ndim - 1; i++) rows *= sa->d[i];
  *sa = cx_shape_make(2, (int64_t[]){rows, sa->d[sa->ndim - 1]});
  *sb = cx_shape_make(2, (int64_t[]){sb->d[sb->ndim - 2], sb->d[sb->ndim - 1]});
}

/* MatMul / MatMulT: numpy promotion of 1-D operands, then batch dims padded to one rank. */
static cx_status matmul_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  const cx_node *n = a->node;
  cx_shape s[2] = {a->in[0].shape, a->in[1].shape};
  if (s[0].ndim == 1) s[0] = cx_shape_make(2, (int64_t[]){1, s[0].d[0]});
  if (s[1].ndim == 1) s[1] = cx_shape_make(2, (int64_t[]){s[1].d[0], 1});
  bool trans_a = cx_node_int(n, "transA", 0) != 0;
  fold_batch_rows(&s[0], &s[1], trans_a);
  mm_desc d = {.alpha = 1, .operand_type = mm_operand_type(a->precision),
               .bias = a->n_in > 2 && n->in[2] >= 0}; /* MatMulFused's */
  d.ndims = s[0].ndim > s[1].ndim ? s[0].ndim : s[1].ndim;
  operand_desc(&s[0], d.ndims, trans_a, d.a_dims, d.a_strides);
  operand_desc(&s[1], d.ndims, cx_node_int(n, "transB", 0) != 0, d.b_dims, d.b_strides);
  for (int i = 0; i < d.ndims - 2; i++)
    d.y_dims[i] = d.a_dims[i] > d.b_dims[i] ? d.a_dims[i] : d.b_dims[i];
  d.y_dims[d.ndims - 2] = d.a_dims[d.ndims - 2];
  d.y_dims[d.ndims - 1] = d.b_dims[d.ndims - 1];
  return mm_prepare_desc(n, &d, state, scratch);
}

static cx_status matmul_run(const cx_kernel_args *a) {
  return mm_execute(a, a->in[0].data, a->in[1].data, a->out[0].data);
}

static bool gemm_has_c(const cx_kernel_args *a) { return a->n_in > 2 && a->in[2].data != NULL; }

static cx_status gemm_prepare(const cx_kernel_args *a, void **state, size_t *scratch) {
  const cx_node *n = a->node;
  bool has_c = a->n_in > 2 && a->node->in[2] >= 0;
  mm_desc d = {.ndims = 2, .alpha = cx_node_float(n, "alpha", 1), .beta = cx_node_float(n, "beta", 1),
               .operand_type = mm_operand_type(a->precision)};
  d.sum_c = has_c && d.beta != 0;
  operand_desc(&a->in[0].shape, 2, cx_node_int(n, "transA", 0) != 0, d.a_dims, d.a_strides);
  operand_desc(&a->in[1].shape, 2, cx_node_int(n, "transB", 0) != 0, d.b_dims, d.b_strides);
  d.y_dims[0] = d.a_dims[0];
  d.y_dims[1] = d.b_dims[1];
  return mm_prepare_desc(n, &d, state, scratch);
}

/* Y = C broadcast to [M, N] (C has rank 0, 1 or 2, each dim 1 or full) */
static void broadcast_c(const cx_tensor *c, const cx_tensor *y) {
  const cx_shape *cs = &c->shape;
  int64_t m = y->shape.d[0], nn = y->shape.d[1];
  int64_t c0 = cs->ndim == 2 ? cs->d[0] : 1, c1 = cs->ndim >= 1 ? cs->d[cs->ndim - 1] : 1;
  const float *src = cx_f32(c);
  float *dst = cx_f32(y);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < m; i++) {
    const float *row = src + (c0 == 1 ? 0 : i * c1);
    if (c1 == 1)
      for (int64_t j = 0; j < nn; j++) dst[i * nn + j] = row[0];
    else
      memcpy(dst + i * nn, row, sizeof(float) * (size_t)nn);
  }
}

static cx_status gemm_run(const cx_kernel_args *a) {
  const mm_state *st = a->state;
  if (st->sum_c) {
    if (!gemm_has_c(a))
      return cx_fail(CX_ERR_ARG, "node '%s' (Gemm): input C has no data", a->node->name);
    broadcast_c(&a->in[2], &a->out[0]);
  }
  return mm_execute(a, a->in[0].data, a->in[1].data, a->out[0].data);
}

const cx_kernel cx_cpu_linear[] = {
    {"Gemm", gemm_prepare, gemm_run, mm_release, 0, NULL, 0},
    {"GemmFused", gemm_prepare, gemm_run, mm_release, 0, NULL, 0},
    {"MatMul", matmul_prepare, matmul_run, mm_release, 0, NULL, 0},
    {"MatMulT", matmul_prepare, matmul_run, mm_release, 0, NULL, 0},
    {"MatMulFused", matmul_prepare, matmul_run, mm_release, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
