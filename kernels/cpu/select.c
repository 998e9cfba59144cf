/* Pow, PowGrad and Where on the CPU with numpy broadcasting. Each operand gets strides over the
 * output's dimensions (0 where it broadcasts); the innermost dimension runs as a plain loop, and
 * a scalar exponent of 2 or 0.5 (squares and square roots of decomposed LayerNorms) is a multiply
 * or sqrtf rather than powf. Rows run in parallel. */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

enum { MAX_OPERANDS = 3, PAR_MIN = 1 << 14 };

typedef struct bcast {
  int rank;
  int64_t d[CX_MAX_DIMS];
  int64_t st[MAX_OPERANDS][CX_MAX_DIMS]; /* element strides per operand over the output's axes */
} bcast;

static bcast bcast_make(const cx_tensor *y, const cx_tensor *const *ops, int n) {
  bcast b = {.rank = y->shape.ndim};
  for (int d = 0; d < b.rank; d++) b.d[d] = y->shape.d[d];
  for (int k = 0; k < n; k++) {
    const cx_shape *s = &ops[k]->shape;
    int64_t stride = 1;
    for (int d = b.rank - 1; d >= 0; d--) {
      int sd = d - (b.rank - s->ndim);
      bool real = sd >= 0 && s->d[sd] != 1;
      b.st[k][d] = real ? stride : 0;
      if (sd >= 0) stride *= s->d[sd];
    }
  }
  return b;
}

/* Offsets of each operand at the start of output row r (the innermost axis is the row). */
static void row_offsets(const bcast *b, int n, int64_t r, int64_t *off) {
  for (int k = 0; k < n; k++) off[k] = 0;
  for (int d = b->rank - 2; d >= 0; d--) {
    int64_t i = r % b->d[d];
    r /= b->d[d];
    for (int k = 0; k < n; k++) off[k] += i * b->st[k][d];
  }
}

static float pow1(float x, float e) {
  if (e == 2) return x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == 1) return x;
  return powf(x, e);
}

static int64_t inner_of(const bcast *b) { return b->rank ? b->d[b->rank - 1] : 1; }

static cx_status run_pow(const cx_kernel_args *a) {
  const cx_tensor *ops[2] = {&a->in[0], &a->in[1]};
  bcast b = bcast_make(&a->out[0], ops, 2);
  const float *x = cx_f32(&a->in[0]), *e = cx_f32(&a->in[1]);
  float *y = cx_f32(&a->out[0]);
  int64_t inner = inner_of(&b), rows = inner ? cx_tensor_numel(&a->out[0]) / inner : 0;
  int64_t sx = b.rank ? b.st[0][b.rank - 1] : 0, se = b.rank ? b.st[1][b.rank - 1] : 0;
#pragma omp parallel for if (rows * inner > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off[2];
    row_offsets(&b, 2, r, off);
    const float *xr = x + off[0], *er = e + off[1];
    float *yr = y + r * inner;
    for (int64_t i = 0; i < inner; i++) yr[i] = pow1(xr[i * sx], er[i * se]);
  }
  return CX_OK;
}

/* PowGrad(dY, X, E) = dY * E * X^(E - 1), at the output's shape */
static cx_status run_pow_grad(const cx_kernel_args *a) {
  const cx_tensor *ops[3] = {&a->in[0], &a->in[1], &a->in[2]};
  bcast b = bcast_make(&a->out[0], ops, 3);
  const float *dy = cx_f32(&a->in[0]), *x = cx_f32(&a->in[1]), *e = cx_f32(&a->in[2]);
  float *dx = cx_f32(&a->out[0]);
  int64_t inner = inner_of(&b), rows = inner ? cx_tensor_numel(&a->out[0]) / inner : 0;
  int64_t s[3];
  for (int k = 0; k < 3; k++) s[k] = b.rank ? b.st[k][b.rank - 1] : 0;
#pragma omp parallel for if (rows * inner > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off[3];
    row_offsets(&b, 3, r, off);
    for (int64_t i = 0; i < inner; i++) {
      float xv = x[off[1] + i * s[1]], ev = e[off[2] + i * s[2]];
      float d = ev == 2 ? 2 * xv : ev * pow1(xv, ev - 1);
      dx[r * inner + i] = dy[off[0] + i * s[0]] * d;
    }
  }
  return CX_OK;
}

static cx_status run_where(const cx_kernel_args *a) {
  const cx_tensor *ops[3] = {&a->in[0], &a->in[1], &a->in[2]};
  bcast b = bcast_make(&a->out[0], ops, 3);
  const uint8_t *c = a->in[0].data;
  const float *x = cx_f32(&a->in[1]), *yv = cx_f32(&a->in[2]);
  float *out = cx_f32(&a->out[0]);
  int64_t inner = inner_of(&b), rows = inner ? cx_tensor_numel(&a->out[0]) / inner : 0;
  int64_t s[3];
  for (int k = 0; k < 3; k++) s[k] = b.rank ? b.st[k][b.rank - 1] : 0;
#pragma omp parallel for if (rows * inner > PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t off[3];
    row_offsets(&b, 3, r, off);
    for (int64_t i = 0; i < inner; i++)
      out[r * inner + i] = c[off[0] + i * s[0]] ? x[off[1] + i * s[1]] : yv[off[2] + i * s[2]];
  }
  return CX_OK;
}

const cx_kernel cx_cpu_select[] = {
    {"Pow", NULL, run_pow, NULL, 0, NULL, 0},
    {"PowGrad", NULL, run_pow_grad, NULL, 0, NULL, 0},
    {"Where", NULL, run_where, NULL, 0, NULL, 0},
    {NULL, NULL, NULL, NULL, 0, NULL, 0},
};
