#ifndef CX_OP_CHECK_H
#define CX_OP_CHECK_H

/* The op harness: a test builds a small graph with the builder API (differentiable operands as
 * PARAMs, the rest as CONSTs), marks its outputs, and oc_check
 *   1. compiles it on the CPU backend (a training program when opts->grad is set, where each
 *      graph output gets a fed gradient "<output>@grad" filled with random numbers R),
 *   2. runs forward and compares every output with the double-precision reference interpreter
 *      (kernels/ref) over the same compiled graph: max|ours - ref| / max(max|ref|, 1e-3),
 *   3. runs backward and compares every parameter gradient with central finite differences of
 *      L = sum(R * outputs), computed with the reference interpreter in double.
 * It prints one line per check and returns the number of failures, naming the op, shapes and
 * error. Tests return non-zero when any check fails. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/backend.h"

typedef struct oc_opts {
  bool grad;         /* check gradients too (training program) */
  double fwd_tol;    /* default 1e-4 */
  double grad_tol;   /* default 1e-3 */
  int max_fd;        /* finite-difference samples per parameter; default 48 (all if smaller) */
  double fd_step;    /* default 1e-4 */
  uint64_t seed;     /* for R, and for the program's random ops */
  cx_batch_rows rows; /* the random ops' sample rows (stride 0: the default {0, 1}) */
} oc_opts;

int oc_check(const char *label, cx_graph *g, const oc_opts *opts);

/* The backend under test: the CPU, or the one CX_TEST_BACKEND names ("cuda"); where that one
 * cannot run (no GPU, not built) the test exits 77, ctest's skip. For tests that call kernels
 * through the backend themselves (core/op_call.h) rather than through oc_check. */
const cx_backend *oc_backend(void);

/* A PARAM named `name` filled with uniform numbers in [lo, hi), from `seed`. Returns its id. */
int oc_param(cx_graph *g, const char *name, const cx_shape *shape, float lo, float hi,
             uint64_t seed);
/* A CONST f32 filled the same way. */
int oc_const(cx_graph *g, const char *name, const cx_shape *shape, float lo, float hi,
             uint64_t seed);
/* Shorthand for shapes: S(2, 3, 4) is a cx_shape lvalue, so &S(2, 3, 4) is a const cx_shape *.
 * A scalar shape is (cx_shape){0}. */
#define S(...)                                                                                     \
  ((cx_shape){.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), .d = {__VA_ARGS__}})

#endif
