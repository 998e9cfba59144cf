/* Gather and GatherND on activations, GatherGrad and GatherNDGrad: forward against the
 * reference, the gradient against finite differences (repeated and negative indices add up;
 * GatherND with batch_dims 1 and 2), the gradient ops on their own, and an index out of range
 * refused with the node's name. */

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

/* Gather (axis >= -8) or GatherND (axis INT64_MIN) of x by constant indices */
static int gather_case(const char *label, cx_shape x, int64_t axis, cx_shape ind,
                       const int64_t *v) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &x, -1, 1, 30), cx_graph_init(g, CX_VALUE_CONST, "indices", CX_S64,
                                                              &ind, v)};
  bool nd = axis == INT64_MIN;
  int n = cx_graph_node(g, nd ? "GatherND" : "Gather", "gather", in, 2, 1);
  if (!nd) cx_node_set_int(g, n, "axis", axis);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  char l[160];
  snprintf(l, sizeof l, "%s [train]", label);
  int f = oc_check(l, g, &(oc_opts){.grad = true, .seed = 31});
  snprintf(l, sizeof l, "%s [infer]", label);
  f += oc_check(l, g, &(oc_opts){.seed = 31});
  cx_graph_free(g);
  return f;
}

/* GatherND with batch_dims: each sample's tuples index its own slice of x */
static int gather_nd_batch_case(const char *label, cx_shape x, cx_shape ind, const int64_t *v,
                                int64_t batch_dims) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &x, -1, 1, 91), cx_graph_init(g, CX_VALUE_CONST, "indices",
                                                              CX_S64, &ind, v)};
  int n = cx_graph_node(g, "GatherND", "gather", in, 2, 1);
  cx_node_set_int(g, n, "batch_dims", batch_dims);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  int f = oc_check(label, g, &(oc_opts){.grad = true, .seed = 92});
  cx_graph_free(g);
  return f;
}

static int gather_grad_case(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_const(g, "dy", &S(2, 3, 4), -1, 1, 40),
               cx_graph_init(g, CX_VALUE_CONST, "indices", CX_S64, &S(3),
                             (int64_t[]){4, -1, 0})};
  int n = cx_graph_node(g, "GatherGrad", "gg", in, 2, 1);
  cx_node_set_int(g, n, "axis", 1);
  cx_node_set_ints(g, n, "shape", (int64_t[]){2, 5, 4}, 3);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  int f = oc_check("GatherGrad [2,3,4] into [2,5,4] axis 1, indices 4,-1,0", g,
                   &(oc_opts){.seed = 41});
  cx_graph_free(g);
  return f;
}

static int gather_nd_grad_case(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_const(g, "dy", &S(3, 4), -1, 1, 42),
               cx_graph_init(g, CX_VALUE_CONST, "indices", CX_S64, &S(3, 2),
                             (int64_t[]){1, 2, -2, 0, 1, 2})};
  int n = cx_graph_node(g, "GatherNDGrad", "gg", in, 2, 1);
  cx_node_set_ints(g, n, "shape", (int64_t[]){3, 3, 4}, 3);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  int f = oc_check("GatherNDGrad [3,4] into [3,3,4], tuples (1,2) (-2,0) (1,2)", g,
                   &(oc_opts){.seed = 43});
  cx_graph_free(g);
  return f;
}

static int out_of_range_case(void) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &S(2, 5), -1, 1, 50),
               cx_graph_init(g, CX_VALUE_CONST, "indices", CX_S64, &S(1), (int64_t[]){5})};
  int n = cx_graph_node(g, "Gather", "gather", in, 2, 1);
  cx_node_set_int(g, n, "axis", 1);
  cx_graph_mark_output(g, cx_node_output(g, n, 0));
  cx_program *p = NULL;
  cx_compile_opts o = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &o, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), "'gather'") && strstr(cx_last_error(), "5");
  printf("%s Gather index 5 of an axis of 5 refused: %s\n", ok ? "ok  " : "FAIL",
         s != CX_OK ? cx_last_error() : "(compiled)");
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

int main(void) {
  int f = 0;
  f += gather_case("Gather [2,5,4] axis 1 scalar index 0 (ViT's x[:, 0])", S(2, 5, 4), 1,
                   (cx_shape){0}, (int64_t[]){0});
  f += gather_case("Gather [6,3] axis 0 indices [2,2] with repeats and -1", S(6, 3), 0, S(2, 2),
                   (int64_t[]){1, -1, 1, 3});
  f += gather_case("Gather [2,3,7] axis -1 indices [4]", S(2, 3, 7), -1, S(4),
                   (int64_t[]){6, 0, 2, 2});
  f += gather_case("GatherND [4,3,5] indices [2,2] (k 2)", S(4, 3, 5), INT64_MIN, S(2, 2),
                   (int64_t[]){3, 1, 0, -1});
  f += gather_case("GatherND [4,3,5] indices [3,1] with a repeat and -1", S(4, 3, 5), INT64_MIN,
                   S(3, 1), (int64_t[]){2, -1, 2});
  f += gather_case("GatherND [2,3] indices [2,2,2] (k = rank: elements)", S(2, 3), INT64_MIN,
                   S(2, 2, 2), (int64_t[]){0, 0, 1, 2, 1, 2, 0, 1});
  f += gather_nd_batch_case("GatherND batch_dims 1: [2,4,3] indices [2,3,1] with -1", S(2, 4, 3),
                            S(2, 3, 1), (int64_t[]){0, 3, -1, 2, 2, 1}, 1);
  f += gather_nd_batch_case("GatherND batch_dims 2: [2,3,4,5] indices [2,3,2,2]", S(2, 3, 4, 5),
                            S(2, 3, 2, 2),
                            (int64_t[]){0, 1, 3, 4, 2, 2, 1, 0, 0, 0, 3, 4, 1, 1, 2, 3, 0, 4,
                                        3, 3, 2, 0, 1, 1}, 2);
  f += gather_grad_case() + gather_nd_grad_case() + out_of_range_case();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
