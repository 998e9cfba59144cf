/* Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh, Exp, Log, Sqrt, Erf, Gelu (both
 * approximations), Reciprocal and ActivationGrad:
 * forward against the reference, gradients (through ActivationGrad) against finite differences,
 * with inputs spread over each function's interesting regions; every case once with AVX-512 (where
 * present) and once portable. */

#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "op_check.h"

static const oc_opts grad_opts = {.grad = true, .seed = 5};

typedef struct act_case {
  const char *op;
  float lo, hi; /* input range */
  float alpha, beta; /* 0: the default */
  const char *approximate; /* Gelu's; NULL: the default ("none") */
} act_case;

/* Ranges cover each kink and saturation: HardSigmoid's at +-2.5, HardSwish's at +-3. The seeds
 * keep sampled points more than the finite-difference step away from the kinks. */
static const act_case cases[] = {
    {"Relu", -3, 3, 0, 0, NULL},        {"LeakyRelu", -3, 3, 0, 0, NULL},   {"LeakyRelu", -3, 3, 0.2f, 0, NULL},
    {"Sigmoid", -8, 8, 0, 0, NULL},     {"HardSigmoid", -4, 4, 0, 0, NULL}, {"HardSigmoid", -4, 4, 0.3f, 0.4f, NULL},
    {"HardSwish", -5, 5, 0, 0, NULL},   {"Tanh", -4, 4, 0, 0, NULL},        {"Tanh", -0.6f, 0.6f, 0, 0, NULL},
    {"Exp", -4, 4, 0, 0, NULL},         {"Log", 0.2f, 5, 0, 0, NULL},       {"Sqrt", 0.2f, 5, 0, 0, NULL},
    {"Erf", -3, 3, 0, 0, NULL},         {"Gelu", -5, 5, 0, 0, NULL},        {"Gelu", -5, 5, 0, 0, "none"},
    {"Gelu", -5, 5, 0, 0, "tanh"},     {"Reciprocal", 0.3f, 4, 0, 0, NULL},
};

static int activation(const act_case *c, cx_shape s) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &s, c->lo, c->hi, 21);
  int node = cx_graph_node(g, c->op, "y", &x, 1, 1);
  if (c->alpha != 0) cx_node_set_float(g, node, "alpha", c->alpha);
  if (c->beta != 0) cx_node_set_float(g, node, "beta", c->beta);
  if (c->approximate) cx_node_set_string(g, node, "approximate", c->approximate);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "%s%s%s%s %s on [%g,%g)", c->op,
           c->alpha != 0 ? " (alpha set)" : "", c->approximate ? " approximate=" : "",
           c->approximate ? c->approximate : "", cx_shape_str(&s, sh), (double)c->lo,
           (double)c->hi);
  /* Gelu's two forms differ by under 1e-4 relative: a tighter bound tells them apart */
  oc_opts o = grad_opts;
  if (c->approximate) o.fwd_tol = 1e-5;
  int fails = oc_check(label, g, &o);
  cx_graph_free(g);
  return fails;
}

/* Clip with bounds as inputs (-1: omitted), or with opset-6 attributes */
static int clip(const float *lo, const float *hi, bool as_attrs, cx_shape s) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_param(g, "x", &s, -3, 3, 22), -1, -1}, n_in = 1;
  if (!as_attrs && lo) in[1] = cx_graph_const_f32(g, "min", &(cx_shape){0}, lo), n_in = 2;
  if (!as_attrs && hi) in[2] = cx_graph_const_f32(g, "max", &(cx_shape){0}, hi), n_in = 3;
  int node = cx_graph_node(g, "Clip", "y", in, n_in, 1);
  if (as_attrs && lo) cx_node_set_float(g, node, "min", *lo);
  if (as_attrs && hi) cx_node_set_float(g, node, "max", *hi);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[256], sh[CX_SHAPE_STR];
  snprintf(label, sizeof label, "Clip%s min %s max %s %s", as_attrs ? " (attributes)" : "",
           lo ? "set" : "none", hi ? "set" : "none", cx_shape_str(&s, sh));
  int fails = oc_check(label, g, &grad_opts);
  cx_graph_free(g);
  return fails;
}

static int clips(void) {
  float lo = -1.05f, hi = 1.55f;
  int f = 0;
  f += clip(&lo, &hi, false, S(3, 7, 11));
  f += clip(&lo, NULL, false, S(3, 7, 11));
  f += clip(NULL, &hi, false, S(3, 7, 11));
  f += clip(NULL, NULL, false, S(3, 7, 11));
  f += clip(&lo, &hi, true, S(1, 13));
  float zero = 0, six = 6;
  f += clip(&zero, &six, false, S(3, 37, 301)); /* ReLU6, threaded */
  return f;
}

/* ActivationGrad on its own, from constant dY, X and Y, against its reference. */
static int act_grad(const char *op, bool x_in, bool y_in, bool bounds) {
  cx_graph *g = cx_graph_new();
  cx_shape s = S(5, 37);
  float lo = -0.5f, hi = 0.7f;
  int in[5] = {oc_const(g, "dy", &s, -1, 1, 30), x_in ? oc_const(g, "x", &s, -4, 4, 31) : -1,
               y_in ? oc_const(g, "yv", &s, 0.1f, 2, 32) : -1, -1, -1};
  if (bounds) {
    in[3] = cx_graph_const_f32(g, "min", &(cx_shape){0}, &lo);
    in[4] = cx_graph_const_f32(g, "max", &(cx_shape){0}, &hi);
  }
  int node = cx_graph_node(g, "ActivationGrad", "dx", in, bounds ? 5 : 3, 1);
  cx_node_set_string(g, node, "op", op);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[128];
  snprintf(label, sizeof label, "ActivationGrad of %s", op);
  int fails = oc_check(label, g, &(oc_opts){.seed = 6});
  cx_graph_free(g);
  return fails;
}

static int act_grads(void) {
  return act_grad("Relu", false, true, false) + act_grad("LeakyRelu", true, false, false) +
         act_grad("Clip", true, false, true) + act_grad("Clip", true, false, false) +
         act_grad("Sigmoid", false, true, false) + act_grad("HardSigmoid", true, false, false) +
         act_grad("HardSwish", true, false, false) + act_grad("Tanh", false, true, false) +
         act_grad("Exp", false, true, false) + act_grad("Log", true, false, false) +
         act_grad("Sqrt", false, true, false) + act_grad("Erf", true, false, false) +
         act_grad("Gelu", true, false, false) +
         act_grad("Reciprocal", false, true, false);
}

/* Gelu's approximate must be "none" or "tanh": anything else is refused, naming the node. */
static int gelu_bad_approximation(void) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &S(2, 3), -1, 1, 23);
  int node = cx_graph_node(g, "Gelu", "y", &x, 1, 1);
  cx_node_set_string(g, node, "approximate", "fast");
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status st = cx_program_compile(g, &o, &p);
  bool ok = st != CX_OK && strstr(cx_last_error(), "'y'") && strstr(cx_last_error(), "fast");
  printf("%s Gelu approximate \"fast\" refused: %s\n", ok ? "ok  " : "FAIL",
         st != CX_OK ? cx_last_error() : "(compiled)");
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

static int all_cases(void) {
  int f = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    f += activation(&cases[i], S(3, 7, 11));
    f += activation(&cases[i], S(1, 5));
    f += activation(&cases[i], S(3, 37, 301));
  }
  return f + clips() + act_grads() + gelu_bad_approximation();
}

int main(void) {
  int fails = all_cases();
  cx_cpu_force_portable(true);
  printf("-- portable paths --\n");
  fails += all_cases();
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
  return fails != 0;
}
