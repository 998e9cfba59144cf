/* The vectorised activation kernels (kernels/cpu/activation.c: AVX-512 where present, else AVX2 +
 * FMA, kernels/cpu/vec_avx2.h) element by element against the double-precision reference
 * (kernels/ref/activation.c), forward and ActivationGrad, over a dense sweep of each function's
 * range plus the edge values: signed zeros, subnormals, the exp overflow and underflow points,
 * the branch points of tanh (0.625) and erf (1), HardSwish's kinks, +-FLT_MAX, +-inf and NaN.
 *
 * Each element must satisfy |ours - ref| <= atol + rtol * |ref| (the bounds per case below, a few
 * float ulps), a NaN reference must give NaN and one beyond FLT_MAX the same infinity. Where the
 * reference's fmin / fmax turn a NaN input into a number (Clip, HardSigmoid), or its formula gives
 * inf * 0 = NaN at an infinite input (Gelu), the element is not checked. The portable
 * path's worst error is printed beside for comparison, not checked: it is libm in float, and
 * 0.5 x (1 + erf) cancels at negative x. The finite-difference checks of the same kernels are
 * tests/test_ops_activation.c. Exits 77 (a skip) on a CPU with neither AVX-512 nor AVX2 + FMA. */

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/op.h"
#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "../kernels/ref/ref.h"

typedef struct vcase {
  const char *op, *approximate; /* approximate: Gelu's form, or NULL */
  double lo, hi;                /* the dense sweep */
  double atol, rtol;            /* forward bound */
  double g_atol, g_rtol;        /* ActivationGrad bound */
} vcase;

/* atol covers results that land among the subnormals (or flush there, as sigmoid's
 * 1 / (1 + exp(-x)) does below -88.7 where exp overflows); rtol is a few ulps (2^-23 = 1.2e-7).
 * Gelu: its atol is the reference's own error (in double, 1 + erf(x / sqrt 2), 1 + tanh(u) and
 * 1 - tanh(u)^2 cancel to 0 below x = -8, where the kernel, which avoids the cancellation, gives
 * the tail); its rtol is the float rounding of exp's argument, a relative error of about x^2 ulp
 * in the tail (x = -6: 4e-6), where Gelu is under 1e-7; the derivative's atol is 2 ulp of its two
 * O(1) terms, which cancel where it crosses zero (x = -0.75). */
static const vcase cases[] = {
    {"Exp", NULL, -110, 95, 3e-45, 3e-7, 3e-45, 3e-7},
    {"Sigmoid", NULL, -110, 110, 1.2e-38, 4e-7, 1.2e-38, 4e-7},
    {"Tanh", NULL, -12, 12, 3e-45, 4e-7, 3e-45, 3e-7},
    {"Erf", NULL, -6, 6, 3e-45, 3e-7, 3e-45, 4e-7},
    {"Gelu", NULL, -20, 20, 1e-14, 5e-6, 2.4e-7, 5e-6},
    {"Gelu", "tanh", -20, 20, 1e-14, 5e-6, 2.4e-7, 5e-6},
    {"HardSwish", NULL, -8, 8, 3e-45, 3e-7, 3e-45, 3e-7},
    {"HardSigmoid", NULL, -8, 8, 3e-45, 3e-7, 3e-45, 3e-7},
    {"Relu", NULL, -8, 8, 0, 0, 0, 0},
    {"LeakyRelu", NULL, -8, 8, 3e-45, 1.2e-7, 3e-45, 1.2e-7},
    {"Clip", NULL, -8, 8, 0, 0, 0, 0},
    {"Sqrt", NULL, 0, 100, 3e-45, 1.2e-7, 3e-45, 2.4e-7},
    {"Reciprocal", NULL, -100, 100, 3e-45, 1.2e-7, 3e-45, 3e-7},
};

enum { SWEEP = 1 << 18 };

static const float edges[] = {0.0f,    -0.0f,    1e-40f,   -1e-40f, FLT_MIN, -FLT_MIN, 1e-20f,
                              -1e-20f, 0.5f,     -0.5f,    0.625f,  -0.625f, 0.62499994f,
                              1.0f,    -1.0f,    0.99999994f, -0.99999994f, 3.0f, -3.0f,
                              2.5f,    -2.5f,    6.0f,     -6.0f,   10.0f,   -10.0f, 87.3f,
                              -87.3f,  88.72f,   -88.72f,  89.0f,   -89.0f,  103.9f, -103.9f,
                              104.0f,  -104.0f,  1e30f,    -1e30f,  FLT_MAX, -FLT_MAX, INFINITY,
                              -INFINITY, NAN};
enum { N_EDGE = sizeof edges / sizeof *edges };

static int64_t n_points(void) { return SWEEP + N_EDGE; }

static void fill_x(const vcase *c, float *x) {
  for (int64_t i = 0; i < SWEEP; i++) x[i] = (float)(c->lo + (c->hi - c->lo) * (double)i / SWEEP);
  memcpy(x + SWEEP, edges, sizeof edges);
}

static void set_attrs(cx_graph *g, int node, const vcase *c) {
  if (c->approximate) cx_node_set_string(g, node, "approximate", c->approximate);
  if (!strcmp(c->op, "Clip")) {
    cx_node_set_float(g, node, "min", -1.5f);
    cx_node_set_float(g, node, "max", 2.25f);
  }
  if (!strcmp(c->op, "LeakyRelu")) cx_node_set_float(g, node, "alpha", 0.1f);
}

/* Runs g's one node on the CPU with the inputs given and returns its output; the reference's
 * output of the same node goes to ref. */
static int run_node(cx_graph *g, const int *in, int n_in, float *const *host, int64_t n,
                    float *out, double *ref) {
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &o, &p) != CX_OK) {
    printf("FAIL compile: %s\n", cx_last_error());
    return 1;
  }
  for (int k = 0; k < n_in; k++)
    if (cx_program_write(p, cx_program_value_tensor(p, in[k]), host[k]) != CX_OK) return 1;
  int y = g->outputs[0];
  if (cx_program_forward(p) != CX_OK ||
      cx_program_read(p, cx_program_value_tensor(p, y), out) != CX_OK) {
    printf("FAIL run: %s\n", cx_last_error());
    cx_program_free(p);
    return 1;
  }
  cx_program_free(p);
  if (!ref) return 0;
  const cx_node *node = &g->nodes[0];
  cx_ref_tensor rin[3], rout = {{.ndim = 1, .d = {n}}, ref, CX_F32};
  for (int k = 0; k < n_in; k++) {
    rin[k] = (cx_ref_tensor){{.ndim = 1, .d = {n}}, malloc(sizeof(double) * (size_t)n), CX_F32};
    for (int64_t i = 0; i < n; i++) rin[k].data[i] = host[k][i];
  }
  cx_ref_args a = {.node = node, .in = rin, .n_in = n_in, .out = &rout, .n_out = 1};
  cx_status st = cx_ref_find(node->op->name)(&a);
  for (int k = 0; k < n_in; k++) free(rin[k].data);
  return st != CX_OK;
}

/* The worst error in units of the bound (above 1 fails) and the first failing element. */
typedef struct verdict {
  double worst;
  int64_t at, bad;
} verdict;

static verdict judge(const float *x, const float *got, const double *ref, int64_t n, double atol,
                     double rtol) {
  verdict v = {0, -1, -1};
  for (int64_t i = 0; i < n; i++) {
    double r = ref[i], gv = got[i], e;
    if (isnan(x[i]) && !isnan(r)) continue; /* the reference's fmin / fmax drop a NaN */
    if (isinf(x[i]) && isnan(r)) continue;  /* its formula's inf * 0 where the limit is 0 */
    if (isinf((float)r)) r = (float)r;      /* beyond FLT_MAX: float's answer is inf */
    if (isnan(r) || isinf(r)) e = (isnan(r) ? isnan(gv) : gv == r) ? 0 : INFINITY;
    else if (isnan(gv)) e = INFINITY;
    else e = fabs(gv - r) / (atol + rtol * fabs(r));
    if (atol == 0 && rtol == 0) e = (e == 0 || gv == r) ? 0 : INFINITY; /* exact */
    if (e > v.worst) v.worst = e, v.at = i;
    if (e > 1 && v.bad < 0) v.bad = i;
  }
  return v;
}

static int report(const char *what, const vcase *c, const float *x, const float *got,
                  const float *portable, const double *ref, int64_t n, double atol, double rtol) {
  verdict v = judge(x, got, ref, n, atol, rtol), vp = judge(x, portable, ref, n, atol, rtol);
  bool bad = v.bad >= 0;
  printf("%s %s %s%s%s on [%g, %g] + %d edges: worst %.2f of the bound (atol %.1e, rtol %.1e; "
         "portable %.2f)",
         bad ? "FAIL" : "ok  ", c->op, what, c->approximate ? " approximate=" : "",
         c->approximate ? c->approximate : "", c->lo, c->hi, N_EDGE, v.worst, atol, rtol,
         vp.worst);
  if (bad)
    printf(": x = %.9g gives %.9g, reference %.9g", (double)x[v.bad], (double)got[v.bad],
           ref[v.bad]);
  if (bad)
    printf("; worst at x = %.9g: %.9g, reference %.9g", (double)x[v.at], (double)got[v.at],
           ref[v.at]);
  printf("\n");
  return bad;
}

/* y = op(x) on the vector path and the portable one */
static int forward(const vcase *c, const float *x, float *y, double *ref) {
  int64_t n = n_points();
  cx_graph *g = cx_graph_new();
  int in = cx_graph_input(g, "x", CX_F32, &(cx_shape){.ndim = 1, .d = {n}});
  int node = cx_graph_node(g, c->op, "y", &in, 1, 1);
  set_attrs(g, node, c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  float *portable = malloc(sizeof(float) * (size_t)n), *host[1] = {(float *)x};
  int fails = run_node(g, &in, 1, host, n, y, ref);
  cx_cpu_force_portable(true);
  fails += run_node(g, &in, 1, host, n, portable, NULL);
  cx_cpu_force_portable(false);
  if (!fails) fails = report("forward", c, x, y, portable, ref, n, c->atol, c->rtol);
  free(portable);
  cx_graph_free(g);
  return fails;
}

/* ActivationGrad(dY, X, Y) with Y the forward output and dY spread over [-2, 2] */
static int backward(const vcase *c, const float *x, const float *y) {
  int64_t n = n_points();
  cx_shape s = {.ndim = 1, .d = {n}};
  float *dy = malloc(sizeof(float) * (size_t)n), *dx = malloc(sizeof(float) * (size_t)n),
        *portable = malloc(sizeof(float) * (size_t)n);
  double *ref = malloc(sizeof(double) * (size_t)n);
  for (int64_t i = 0; i < n; i++) dy[i] = (float)(2.0 * sin(0.37 * (double)i));
  cx_graph *g = cx_graph_new();
  int in[3] = {cx_graph_input(g, "dy", CX_F32, &s), cx_graph_input(g, "x", CX_F32, &s),
               cx_graph_input(g, "yv", CX_F32, &s)};
  int node = cx_graph_node(g, "ActivationGrad", "dx", in, 3, 1);
  cx_node_set_string(g, node, "op", c->op);
  set_attrs(g, node, c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  float *host[3] = {dy, (float *)x, (float *)y};
  int fails = run_node(g, in, 3, host, n, dx, ref);
  cx_cpu_force_portable(true);
  fails += run_node(g, in, 3, host, n, portable, NULL);
  cx_cpu_force_portable(false);
  if (!fails) fails = report("ActivationGrad", c, x, dx, portable, ref, n, c->g_atol, c->g_rtol);
  free(dy), free(dx), free(portable), free(ref);
  cx_graph_free(g);
  return fails;
}

int main(void) {
  if (!cx_cpu_avx512() && !cx_cpu_avx2()) {
    printf("skip: neither AVX-512 nor AVX2 + FMA on this CPU\n");
    return 77;
  }
  printf("vector path: %s\n", cx_cpu_avx512() ? "AVX-512" : "AVX2 + FMA");
  int64_t n = n_points();
  float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
  double *ref = malloc(sizeof(double) * (size_t)n);
  int fails = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    fill_x(&cases[i], x);
    fails += forward(&cases[i], x, y, ref);
    fails += backward(&cases[i], x, y);
  }
  free(x), free(y), free(ref);
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
