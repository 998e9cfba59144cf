/* LayerNormalization (and through it LayerNormTrain, LayerNormGrad): forward against the
 * double reference, gradients of X, Scale and B against finite differences, over several axes,
 * with and without B, threaded sizes; the Mean and InvStdDev outputs; LayerNormGrad on its own
 * against its reference; shapes that do not fit refused with the node's name. */

#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

/* X of shape x normalised from `axis` (which the Scale shape s must describe), B when bias. */
static cx_graph *ln_graph(const cx_shape *x, const cx_shape *s, int64_t axis, bool bias,
                          float eps, int n_out, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_param(g, "x", x, -2, 3, seed), oc_param(g, "scale", s, 0.5f, 1.5f, seed + 1),
               bias ? oc_param(g, "b", s, -0.5f, 0.5f, seed + 2) : -1};
  int n = cx_graph_node(g, "LayerNormalization", "ln", in, bias ? 3 : 2, n_out);
  if (axis != -1) cx_node_set_int(g, n, "axis", axis);
  if (eps > 0) cx_node_set_float(g, n, "epsilon", eps);
  for (int k = 0; k < n_out; k++) cx_graph_mark_output(g, cx_node_output(g, n, k));
  return g;
}

static int ln_case(const char *label, cx_shape x, cx_shape s, int64_t axis, bool bias, float eps,
                   uint64_t seed) {
  cx_graph *g = ln_graph(&x, &s, axis, bias, eps, 1, seed);
  char l[160];
  snprintf(l, sizeof l, "%s [train]", label);
  int f = oc_check(l, g, &(oc_opts){.grad = true, .seed = seed, .max_fd = 64});
  snprintf(l, sizeof l, "%s [infer]", label);
  f += oc_check(l, g, &(oc_opts){.seed = seed});
  cx_graph_free(g);
  return f;
}

/* All three outputs of an inference node: Mean and InvStdDev as [rows..., 1, ...]. */
static int stats_case(void) {
  cx_graph *g = ln_graph(&S(2, 3, 4, 5), &S(4, 5), 2, true, 0, 3, 40);
  int f = oc_check("LayerNormalization [2,3,4,5] axis 2 with Mean and InvStdDev", g,
                   &(oc_opts){.seed = 40});
  cx_graph_free(g);
  return f;
}

/* LayerNormGrad from constant operands against its reference. */
static int grad_op_case(void) {
  cx_graph *g = cx_graph_new();
  int in[5] = {oc_const(g, "dy", &S(6, 9), -1, 1, 50), oc_const(g, "x", &S(6, 9), -2, 2, 51),
               oc_const(g, "scale", &S(9), 0.5f, 1.5f, 52),
               oc_const(g, "mean", &S(6, 1), -0.2f, 0.2f, 53),
               oc_const(g, "invstd", &S(6, 1), 0.5f, 2, 54)};
  int n = cx_graph_node(g, "LayerNormGrad", "lng", in, 5, 3);
  for (int k = 0; k < 3; k++) cx_graph_mark_output(g, cx_node_output(g, n, k));
  int f = oc_check("LayerNormGrad [6,9] on its own", g, &(oc_opts){.seed = 55});
  cx_graph_free(g);
  return f;
}

/* A Scale that is not X's normalised dimensions is refused, naming the node. */
static int bad_scale_case(void) {
  cx_graph *g = ln_graph(&S(2, 5, 7), &S(5), -1, true, 0, 1, 60);
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 2, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &o, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), "'ln'") && strstr(cx_last_error(), "Scale");
  printf("%s LayerNormalization with Scale [5] for X [2,5,7] axis -1 refused: %s\n",
         ok ? "ok  " : "FAIL", s != CX_OK ? cx_last_error() : "(compiled)");
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = 0;
  f += ln_case("LayerNormalization [2,5,7] axis -1", S(2, 5, 7), S(7), -1, true, 0, 10);
  f += ln_case("LayerNormalization [2,3,4,5] axis 2 eps 1e-3", S(2, 3, 4, 5), S(4, 5), 2, true,
               1e-3f, 12);
  f += ln_case("LayerNormalization [3,8] no B", S(3, 8), S(8), -1, false, 0, 14);
  f += ln_case("LayerNormalization [3,4] axis 0 (one row)", S(3, 4), S(3, 4), 0, true, 0, 16);
  f += ln_case("LayerNormalization [2,4,4,1,6] axis -1 Scale [1,6]", S(2, 4, 4, 1, 6), S(1, 6), -1,
               true, 0, 18);
  f += ln_case("LayerNormalization [4,64,96] axis -1 (threaded)", S(4, 64, 96), S(96), -1, true, 0,
               20);
  f += stats_case() + grad_op_case() + bad_scale_case();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
