#include "ref.h"

/* Gemm, MatMul and MatMulT references: triple loops over logical indices; transposes and
 * broadcast batch axes are resolved by index arithmetic on the stored operands. */

/* Element (r, c) of op(X) for a row-major stored matrix of `cols` columns. */
static double mat_at(const double *x, int64_t cols, bool trans, int64_t r, int64_t c) {
  return trans ? x[c * cols + r] : x[r * cols + c];
}

static cx_status ref_gemm(const cx_ref_args *a) {
  const cx_node *n = a->node;
  bool ta = cx_node_int(n, "transA", 0) != 0, tb = cx_node_int(n, "transB", 0) != 0;
  double alpha = cx_node_float(n, "alpha", 1), beta = cx_node_float(n, "beta", 1);
  const cx_shape *as = &a->in[0].shape, *bs = &a->in[1].shape;
  int64_t m = a->out[0].shape.d[0], nn = a->out[0].shape.d[1], k = as->d[ta ? 0 : 1];
  const cx_ref_tensor *c = a->n_in > 2 && a->in[2].data ? &a->in[2] : NULL;
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < nn; j++) {
      double s = 0;
      for (int64_t p = 0; p < k; p++)
        s += mat_at(a->in[0].data, as->d[1], ta, i, p) * mat_at(a->in[1].data, bs->d[1], tb, p, j);
      double cv = 0;
      if (c) {
        const cx_shape *cs = &c->shape;
        int64_t c0 = cs->ndim == 2 ? cs->d[0] : 1, c1 = cs->ndim >= 1 ? cs->d[cs->ndim - 1] : 1;
        cv = c->data[(c0 == 1 ? 0 : i) * c1 + (c1 == 1 ? 0 : j)];
      }
      a->out[0].data[i * nn + j] = alpha * s + beta * cv;
    }
  return CX_OK;
}

/* A batched operand: stored matrices of rows x cols, batch shape `b` aligned right against the
 * output's batch shape. */
typedef struct operand {
  const double *data;
  cx_shape batch;
  int64_t rows, cols;
  bool trans;
} operand;

static operand operand_of(const cx_ref_tensor *t, bool is_b, bool trans) {
  operand o = {.data = t->data, .trans = trans};
  const cx_shape *s = &t->shape;
  if (s->ndim == 1) { /* numpy: [K] is [1, K] as A and [K, 1] as B */
    o.rows = is_b ? s->d[0] : 1;
    o.cols = is_b ? 1 : s->d[0];
    return o;
  }
  o.rows = s->d[s->ndim - 2];
  o.cols = s->d[s->ndim - 1];
  o.batch = cx_shape_make(s->ndim - 2, s->d);
  return o;
}

/* The matrix of operand o for output batch index idx (of rank nb), broadcasting size-1 axes. */
static const double *operand_matrix(const operand *o, const int64_t *idx, int nb) {
  int64_t off = 0;
  for (int i = 0; i < o->batch.ndim; i++) {
    int64_t d = o->batch.d[i], j = idx[nb - o->batch.ndim + i];
    off = off * d + (d == 1 ? 0 : j);
  }
  return o->data + off * o->rows * o->cols;
}

static cx_status ref_matmul(const cx_ref_args *a) {
  const cx_node *n = a->node;
  operand A = operand_of(&a->in[0], false, cx_node_int(n, "transA", 0) != 0);
  operand B = operand_of(&a->in[1], true, cx_node_int(n, "transB", 0) != 0);
  int64_t m = A.trans ? A.cols : A.rows, k = A.trans ? A.rows : A.cols;
  int64_t nn = B.trans ? B.rows : B.cols;
  int nb = A.batch.ndim > B.batch.ndim ? A.batch.ndim : B.batch.ndim;
  int64_t batches = 1, idx[CX_MAX_DIMS];
  for (int i = 0; i < nb; i++) batches *= a->out[0].shape.d[i];
  for (int64_t bi = 0; bi < batches; bi++) {
    for (int64_t r = bi, i = nb - 1; i >= 0; i--) { /* unravel bi over the output batch */
      idx[i] = r % a->out[0].shape.d[i];
      r /= a->out[0].shape.d[i];
    }
    const double *pa = operand_matrix(&A, idx, nb), *pb = operand_matrix(&B, idx, nb);
    double *py = a->out[0].data + bi * m * nn;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < nn; j++) {
        double s = 0;
        for (int64_t p = 0; p < k; p++)
          s += mat_at(pa, A.cols, A.trans, i, p) * mat_at(pb, B.cols, B.trans, p, j);
        py[i * nn + j] = s;
      }
  }
  return CX_OK;
}

const cx_ref_entry cx_ref_linear[] = {
    {"Gemm", ref_gemm},
    {"MatMul", ref_matmul},
    {"MatMulT", ref_matmul},
    {NULL, NULL},
};
