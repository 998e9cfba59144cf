/* Pow, Where (and through them PowGrad, Where's own use as its gradient): forward against the
 * double reference, gradients against finite differences, with broadcasting on either side;
 * PowGrad on its own; no gradient for an exponent that is trained, refused with the node's name. */

#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

static int check(const char *label, cx_graph *g) {
  char l[160];
  snprintf(l, sizeof l, "%s [train]", label);
  int f = oc_check(l, g, &(oc_opts){.grad = true, .seed = 61, .max_fd = 64});
  snprintf(l, sizeof l, "%s [infer]", label);
  f += oc_check(l, g, &(oc_opts){.seed = 61});
  cx_graph_free(g);
  return f;
}

/* Pow(X, E) with a constant exponent of shape es filled with e (or from lo..hi when e == 0) */
static int pow_case(const char *label, cx_shape xs, cx_shape es, float e, float lo, float hi) {
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "x", &xs, 0.3f, 2, 62), ex;
  if (e != 0) {
    float v[64];
    for (int64_t i = 0; i < cx_shape_numel(&es); i++) v[i] = e;
    ex = cx_graph_const_f32(g, "e", &es, v);
  } else {
    ex = oc_const(g, "e", &es, lo, hi, 63);
  }
  int n = cx_graph_node(g, "Pow", "pow", (int[]){x, ex}, 2, 1);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  return check(label, g);
}

static int where_case(const char *label, cx_shape cs, cx_shape xs, cx_shape ys) {
  cx_graph *g = cx_graph_new();
  uint8_t c[256];
  for (int64_t i = 0; i < cx_shape_numel(&cs); i++) c[i] = (uint8_t)((i * 7 + 3) % 3 != 0);
  int in[3] = {cx_graph_init(g, CX_VALUE_CONST, "c", CX_BOOL, &cs, c),
               oc_param(g, "x", &xs, -1, 1, 64), oc_param(g, "y", &ys, -1, 1, 65)};
  int n = cx_graph_node(g, "Where", "where", in, 3, 1);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  return check(label, g);
}

static int pow_grad_case(void) {
  cx_graph *g = cx_graph_new();
  int in[3] = {oc_const(g, "dy", &S(3, 5), -1, 1, 66), oc_const(g, "x", &S(3, 5), 0.2f, 2, 67),
               oc_const(g, "e", &S(5), -1.5f, 3, 68)};
  int n = cx_graph_node(g, "PowGrad", "pg", in, 3, 1);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  int f = oc_check("PowGrad [3,5] with exponents [5]", g, &(oc_opts){.seed = 69});
  cx_graph_free(g);
  return f;
}

static int trained_exponent_case(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(2, 3), 0.5f, 2, 70), oc_param(g, "e", &S(3), 1, 2, 71)};
  int n = cx_graph_node(g, "Pow", "pow", in, 2, 1);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &o, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), "'pow'") && strstr(cx_last_error(), "exponent");
  printf("%s Pow with a trained exponent refused: %s\n", ok ? "ok  " : "FAIL",
         s != CX_OK ? cx_last_error() : "(compiled)");
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = 0;
  f += pow_case("Pow [2,3,8] by scalar 2 (decomposed LayerNorm)", S(2, 3, 8), (cx_shape){0}, 2, 0, 0);
  f += pow_case("Pow [2,3,8] by scalar 0.5", S(2, 3, 8), (cx_shape){0}, 0.5f, 0, 0);
  f += pow_case("Pow [4,6] by [6] exponents in [-1.5,3)", S(4, 6), S(6), 0, -1.5f, 3);
  f += pow_case("Pow [3,1] by [2,1,5] (both broadcast)", S(3, 1), S(2, 1, 5), 0, 0.5f, 2.5f);
  f += pow_case("Pow [4,64,96] by scalar 3 (threaded)", S(4, 64, 96), (cx_shape){0}, 3, 0, 0);
  f += where_case("Where [2,1,4] over X [3,4], Y [2,3,1]", S(2, 1, 4), S(3, 4), S(2, 3, 1));
  f += where_case("Where [5,6] over X [5,6], Y scalar", S(5, 6), S(5, 6), (cx_shape){0});
  f += where_case("Where [1,8] (a mask) over X [4,3,8], Y [8]", S(1, 8), S(4, 3, 8), S(8));
  f += pow_grad_case() + trained_exponent_case();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
