/* MaxPool, AveragePool, GlobalAveragePool and their gradient ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "op_check.h"

typedef struct pool_attrs {
  int nsp;
  int64_t k[3], s[3], pads[6], d[3];
  bool has_s, has_pads, has_d;
  const char *auto_pad;
  int ceil_mode, count_include_pad; /* UNSET (attribute absent), OFF or ON */
} pool_attrs;

enum { UNSET, OFF, ON };

static void set_attrs(cx_graph *g, int node, const pool_attrs *a) {
  cx_node_set_ints(g, node, "kernel_shape", a->k, a->nsp);
  if (a->has_s) cx_node_set_ints(g, node, "strides", a->s, a->nsp);
  if (a->has_pads) cx_node_set_ints(g, node, "pads", a->pads, 2 * a->nsp);
  if (a->has_d) cx_node_set_ints(g, node, "dilations", a->d, a->nsp);
  if (a->auto_pad) cx_node_set_string(g, node, "auto_pad", a->auto_pad);
  if (a->ceil_mode != UNSET) cx_node_set_int(g, node, "ceil_mode", a->ceil_mode == ON);
  if (a->count_include_pad != UNSET)
    cx_node_set_int(g, node, "count_include_pad", a->count_include_pad == ON);
}

/* A PARAM whose values are a shuffled grid 0.01 apart: no two inputs of a max window are within
 * a finite-difference step of each other, so the argmax is stable under perturbation. */
static int distinct_param(cx_graph *g, const char *name, const cx_shape *s) {
  int64_t n = cx_shape_numel(s);
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 7919 + 13) % n) * 0.01f - 0.005f * (float)n;
  int id = cx_graph_param(g, name, s, v);
  free(v);
  return id;
}

static int pool_case(const char *label, const char *op, cx_shape x, pool_attrs a, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  int xin = strcmp(op, "MaxPool") == 0 ? distinct_param(g, "X", &x) : oc_param(g, "X", &x, -2, 2, seed);
  int node = cx_graph_node(g, op, "pool", &xin, 1, 1);
  a.nsp = x.ndim - 2;
  set_attrs(g, node, &a);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int f = oc_check(label, g, &(oc_opts){.grad = true, .seed = seed});
  cx_graph_free(g);
  return f;
}

static int global_case(const char *label, cx_shape x, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  int xin = oc_param(g, "X", &x, -2, 2, seed);
  cx_graph_mark_output(g, cx_graph_op(g, "GlobalAveragePool", "gap", &xin, 1));
  int f = oc_check(label, g, &(oc_opts){.grad = true, .seed = seed});
  cx_graph_free(g);
  return f;
}

/* A gradient op run forward on its own against its reference: MaxPoolGrad with many ties in X
 * (the first maximum in scan order takes the gradient), and the forms with X as input 1. */
static int grad_op_case(const char *label, const char *op, cx_shape x, cx_shape y, pool_attrs a,
                        bool with_x) {
  cx_graph *g = cx_graph_new();
  int64_t n = cx_shape_numel(&x);
  float *v = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = (float)((i * 37) % 3); /* values 0, 1, 2: ties */
  int in[2] = {oc_const(g, "dY", &y, -1, 1, 5), cx_graph_const_f32(g, "X", &x, v)};
  free(v);
  int node = cx_graph_node(g, op, "grad", in, with_x ? 2 : 1, 1);
  a.nsp = x.ndim - 2;
  if (a.k[0]) set_attrs(g, node, &a);
  if (!with_x) cx_node_set_ints(g, node, "input_shape", x.d, x.ndim);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  int f = oc_check(label, g, &(oc_opts){.seed = 9});
  cx_graph_free(g);
  return f;
}

/* The graph must fail to compile with a message containing `want`. */
static int reject_case(const char *label, cx_graph *g, const char *want) {
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), want);
  printf("%s %s: rejected: %s\n", ok ? "ok  " : "FAIL", label, s == CX_OK ? "(compiled)" : cx_last_error());
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

static int reject_cases(void) {
  int f = 0;
  cx_graph *g = cx_graph_new();
  int x = oc_param(g, "X", &S(1, 2, 5, 5), -1, 1, 1);
  int node = cx_graph_node(g, "MaxPool", "mp", &x, 1, 2);
  set_attrs(g, node, &(pool_attrs){.nsp = 2, .k = {2, 2}});
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  f += reject_case("MaxPool with Indices output", g, "Indices");
  g = cx_graph_new();
  x = oc_param(g, "X", &S(1, 2, 5, 5), -1, 1, 1);
  node = cx_graph_node(g, "MaxPool", "mp", &x, 1, 1);
  set_attrs(g, node, &(pool_attrs){.nsp = 2, .k = {2, 2}, .has_pads = true, .pads = {2, 0, 0, 0}});
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  f += reject_case("MaxPool with a window of padding only", g, "entirely in the padding");
  g = cx_graph_new();
  x = oc_param(g, "X", &S(1, 2, 5, 5), -1, 1, 1);
  node = cx_graph_node(g, "AveragePool", "ap", &x, 1, 1);
  set_attrs(g, node, &(pool_attrs){.nsp = 2, .k = {2, 2}, .has_d = true, .d = {2, 2}});
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  f += reject_case("AveragePool with dilations", g, "dilations");
  return f;
}

#define A(...) ((pool_attrs){__VA_ARGS__})

int main(void) {
  int f = 0;
  /* MaxPool */
  f += pool_case("maxpool 3x3 s2 p1 (ResNet stem) [2,3,9,9]", "MaxPool", S(2, 3, 9, 9),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1}), 1);
  f += pool_case("maxpool 2x2 s2 [1,2,7,7]", "MaxPool", S(1, 2, 7, 7),
                 A(.k = {2, 2}, .has_s = true, .s = {2, 2}), 2);
  f += pool_case("maxpool 2x2 s2 ceil [1,2,7,7]", "MaxPool", S(1, 2, 7, 7),
                 A(.k = {2, 2}, .has_s = true, .s = {2, 2}, .ceil_mode = ON), 3);
  f += pool_case("maxpool 3x3 s2 p1 ceil [1,3,8,10]", "MaxPool", S(1, 3, 8, 10),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .ceil_mode = ON), 4);
  f += pool_case("maxpool 3x2 s(2,1) pads(0,1,1,0) [2,2,6,5]", "MaxPool", S(2, 2, 6, 5),
                 A(.k = {3, 2}, .has_s = true, .s = {2, 1}, .has_pads = true, .pads = {0, 1, 1, 0}), 5);
  f += pool_case("maxpool 3x3 s2 SAME_UPPER [1,2,6,7]", "MaxPool", S(1, 2, 6, 7),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .auto_pad = "SAME_UPPER"), 6);
  f += pool_case("maxpool 2x2 s1 SAME_LOWER [1,2,5,4]", "MaxPool", S(1, 2, 5, 4),
                 A(.k = {2, 2}, .auto_pad = "SAME_LOWER"), 7);
  f += pool_case("maxpool 3x3 s2 VALID [1,1,7,8]", "MaxPool", S(1, 1, 7, 8),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .auto_pad = "VALID"), 8);
  f += pool_case("maxpool 2x2 dilation 2 p1 [1,2,7,7]", "MaxPool", S(1, 2, 7, 7),
                 A(.k = {2, 2}, .has_d = true, .d = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1}), 9);
  f += pool_case("maxpool 2x2 dilation 3 pads 3 (pad >= kernel) [1,1,6,6]", "MaxPool",
                 S(1, 1, 6, 6), A(.k = {2, 2}, .has_d = true, .d = {3, 3}, .has_pads = true,
                                  .pads = {3, 3, 3, 3}), 12);
  f += pool_case("maxpool 1-D k3 s2 p1 ceil [2,3,10]", "MaxPool", S(2, 3, 10),
                 A(.k = {3}, .has_s = true, .s = {2}, .has_pads = true, .pads = {1, 1}, .ceil_mode = ON), 10);
  f += pool_case("maxpool 3-D 2x2x2 s2 [1,2,4,5,3]", "MaxPool", S(1, 2, 4, 5, 3),
                 A(.k = {2, 2, 2}, .has_s = true, .s = {2, 2, 2}, .ceil_mode = ON), 11);
  /* AveragePool */
  f += pool_case("avgpool 3x3 s2 p1 exclude pad [2,3,9,9]", "AveragePool", S(2, 3, 9, 9),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .count_include_pad = OFF), 21);
  f += pool_case("avgpool 3x3 s2 p1 include pad [2,3,9,9]", "AveragePool", S(2, 3, 9, 9),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .count_include_pad = ON), 22);
  f += pool_case("avgpool 2x2 s2 [1,2,7,7]", "AveragePool", S(1, 2, 7, 7),
                 A(.k = {2, 2}, .has_s = true, .s = {2, 2}), 23);
  f += pool_case("avgpool 2x2 s2 ceil exclude pad [1,2,7,7]", "AveragePool", S(1, 2, 7, 7),
                 A(.k = {2, 2}, .has_s = true, .s = {2, 2}, .ceil_mode = ON), 24);
  f += pool_case("avgpool 3x3 s2 p1 ceil include pad [1,3,8,10]", "AveragePool", S(1, 3, 8, 10),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .ceil_mode = ON, .count_include_pad = ON), 25);
  f += pool_case("avgpool 3x3 s2 p1 ceil exclude pad [1,3,8,10]", "AveragePool", S(1, 3, 8, 10),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .ceil_mode = ON, .count_include_pad = OFF), 26);
  f += pool_case("avgpool 3x2 pads(1,0,0,1) include pad [2,2,5,6]", "AveragePool", S(2, 2, 5, 6),
                 A(.k = {3, 2}, .has_pads = true, .pads = {1, 0, 0, 1}, .count_include_pad = ON), 27);
  f += pool_case("avgpool 3x3 s2 SAME_UPPER include pad [1,2,6,7]", "AveragePool", S(1, 2, 6, 7),
                 A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .auto_pad = "SAME_UPPER",
                   .count_include_pad = ON), 28);
  f += pool_case("avgpool 1-D k2 ceil [3,2,9]", "AveragePool", S(3, 2, 9),
                 A(.k = {2}, .has_s = true, .s = {2}, .ceil_mode = ON), 29);
  f += pool_case("avgpool 3-D 3x3x3 p1 [1,2,4,4,4]", "AveragePool", S(1, 2, 4, 4, 4),
                 A(.k = {3, 3, 3}, .has_pads = true, .pads = {1, 1, 1, 1, 1, 1}), 30);
  /* ceil_mode where the last window would start in the right padding and is dropped: 5 -> 3 */
  f += pool_case("maxpool 2x2 s2 p1 ceil drops last [1,2,5,5]", "MaxPool", S(1, 2, 5, 5),
                 A(.k = {2, 2}, .has_s = true, .s = {2, 2}, .has_pads = true, .pads = {1, 1, 1, 1},
                   .ceil_mode = ON), 31);
  f += pool_case("avgpool 2x2 s2 p1 ceil drops last include pad [1,2,5,5]", "AveragePool",
                 S(1, 2, 5, 5), A(.k = {2, 2}, .has_s = true, .s = {2, 2}, .has_pads = true,
                                  .pads = {1, 1, 1, 1}, .ceil_mode = ON, .count_include_pad = ON), 32);
  /* GlobalAveragePool */
  f += global_case("globalavgpool [2,3,5,7]", S(2, 3, 5, 7), 40);
  f += global_case("globalavgpool batch 1 [1,5,1,1]", S(1, 5, 1, 1), 41);
  f += global_case("globalavgpool 1-D [2,3,6]", S(2, 3, 6), 42);
  f += global_case("globalavgpool 3-D [1,2,3,4,5]", S(1, 2, 3, 4, 5), 43);
  f += global_case("globalavgpool [2,4,17,19]", S(2, 4, 17, 19), 44);
  /* gradient ops on their own: ties, and the forms that take X */
  f += grad_op_case("MaxPoolGrad with ties 3x3 s1 p1 [2,2,5,6]", "MaxPoolGrad", S(2, 2, 5, 6),
                    S(2, 2, 5, 6), A(.k = {3, 3}, .has_pads = true, .pads = {1, 1, 1, 1}), true);
  f += grad_op_case("MaxPoolGrad with ties 2x2 s2 ceil [1,3,5,5]", "MaxPoolGrad", S(1, 3, 5, 5),
                    S(1, 3, 3, 3), A(.k = {2, 2}, .has_s = true, .s = {2, 2}, .ceil_mode = ON), true);
  f += grad_op_case("AveragePoolGrad with X [1,2,5,5]", "AveragePoolGrad", S(1, 2, 5, 5),
                    S(1, 2, 3, 3), A(.k = {3, 3}, .has_s = true, .s = {2, 2}, .has_pads = true,
                                     .pads = {1, 1, 1, 1}), true);
  f += grad_op_case("GlobalAveragePoolGrad with X [2,3,4,5]", "GlobalAveragePoolGrad",
                    S(2, 3, 4, 5), S(2, 3, 1, 1), A(.k = {0}), true);
  f += grad_op_case("GlobalAveragePoolGrad with input_shape [2,3,4,5]", "GlobalAveragePoolGrad",
                    S(2, 3, 4, 5), S(2, 3, 1, 1), A(.k = {0}), false);
  f += reject_cases();
  printf("%s: %d failure(s)\n", f ? "FAIL" : "PASS", f);
  return f != 0;
}
