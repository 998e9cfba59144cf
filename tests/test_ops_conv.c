/* Conv and ConvGrad: forward against the double reference, gradients against finite differences
 * (through oc_check), and every element of ConvGrad's outputs against the reference ConvGrad.
 * Depthwise 3x3 cases go through the hand-written path; they are run again with
 * CX_CONV_DEPTHWISE=c (the portable fallback) and =dnnl (oneDNN). The Winograd cases run with the
 * algorithm the timing cache measures faster, then with CX_CONV_WINOGRAD=on, off, data and
 * weights (each algorithm wherever it fits, and ConvGrad's dX and dW apart), the cropped-kernel
 * cases again with CX_CONV_NO_CROP=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/program.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/eltwise_engine.h"
#include "op_check.h"

typedef struct conv_case {
  const char *label;
  int64_t n, c, h, w, m, kh, kw, group;
  int64_t strides[2], pads[4], dil[2]; /* all zero: attribute absent */
  const char *auto_pad;                /* NULL: absent */
  bool bias, kernel_shape;
  bool x_const, w_const;               /* operands that get no gradient */
} conv_case;

static bool any(const int64_t *v, int n) {
  for (int i = 0; i < n; i++)
    if (v[i]) return true;
  return false;
}

static void set_attrs(cx_graph *g, int node, const conv_case *c) {
  if (c->group != 1) cx_node_set_int(g, node, "group", c->group);
  if (any(c->strides, 2)) cx_node_set_ints(g, node, "strides", c->strides, 2);
  if (any(c->pads, 4)) cx_node_set_ints(g, node, "pads", c->pads, 4);
  if (any(c->dil, 2)) cx_node_set_ints(g, node, "dilations", c->dil, 2);
  if (c->auto_pad) cx_node_set_string(g, node, "auto_pad", c->auto_pad);
  if (c->kernel_shape) cx_node_set_ints(g, node, "kernel_shape", (int64_t[]){c->kh, c->kw}, 2);
}

static int operand(cx_graph *g, const char *name, const cx_shape *s, bool constant, uint64_t seed) {
  return constant ? oc_const(g, name, s, -1, 1, seed) : oc_param(g, name, s, -1, 1, seed);
}

/* Conv forward and the gradients of X, W and B. Returns the output shape in *y. */
static int check_conv(const conv_case *c, const char *tag, cx_shape *y) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(c->n, c->c, c->h, c->w), ws = S(c->m, c->c / c->group, c->kh, c->kw), bs = S(c->m);
  int in[3] = {operand(g, "x", &xs, c->x_const, 1), operand(g, "w", &ws, c->w_const, 2),
               c->bias ? oc_param(g, "b", &bs, -1, 1, 3) : -1};
  int node = cx_graph_node(g, "Conv", "conv", in, c->bias ? 3 : 2, 1);
  set_attrs(g, node, c);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  char label[200];
  snprintf(label, sizeof label, "Conv %s%s", c->label, tag);
  int fails = oc_check(label, g, &(oc_opts){.grad = true, .seed = 11});
  cx_program *p;
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  if (cx_program_compile(g, &co, &p) == CX_OK) {
    *y = cx_program_tensor(p, "conv")->shape;
    cx_program_free(p);
  }
  cx_graph_free(g);
  return fails;
}

/* ConvGrad on its own: all of dX, dW and dB element by element against the reference. */
static int check_conv_grad(const conv_case *c, const char *tag, const cx_shape *ys) {
  cx_graph *g = cx_graph_new();
  cx_shape xs = S(c->n, c->c, c->h, c->w), ws = S(c->m, c->c / c->group, c->kh, c->kw);
  int in[3] = {oc_const(g, "dy", ys, -1, 1, 4), oc_const(g, "x", &xs, -1, 1, 5),
               oc_const(g, "w", &ws, -1, 1, 6)};
  int node = cx_graph_node(g, "ConvGrad", "conv_grad", in, 3, 3);
  set_attrs(g, node, c);
  cx_node_set_ints(g, node, "outputs", (int64_t[]){!c->x_const, !c->w_const, c->bias}, 3);
  for (int k = 0; k < 3; k++) cx_graph_mark_output(g, cx_node_output(g, node, k));
  char label[200];
  snprintf(label, sizeof label, "ConvGrad %s%s", c->label, tag);
  int fails = oc_check(label, g, &(oc_opts){.seed = 12});
  cx_graph_free(g);
  return fails;
}

static int check_case(const conv_case *c, const char *tag) {
  cx_shape y = {0};
  int fails = check_conv(c, tag, &y);
  if (y.ndim == 4) fails += check_conv_grad(c, tag, &y);
  return fails;
}

/* pads are [top, left, bottom, right] */
#define GEO(N, C, H, W, M, KH, KW, G) \
  .n = N, .c = C, .h = H, .w = W, .m = M, .kh = KH, .kw = KW, .group = G

static const conv_case cases[] = {
    {"1x1", GEO(2, 8, 5, 5, 6, 1, 1, 1)},
    {"3x3 pad 1 bias batch 3", GEO(3, 4, 7, 7, 5, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true},
    {"3x3 batch 1 no pad", GEO(1, 3, 7, 7, 4, 3, 3, 1)},
    {"5x5 stride 2 asymmetric pads 9x5", GEO(1, 3, 9, 5, 4, 5, 5, 1), .strides = {2, 2}, .pads = {2, 1, 0, 2}, .bias = true},
    {"3x3 stride 2 9x5", GEO(3, 3, 9, 5, 4, 3, 3, 1), .strides = {2, 2}, .pads = {1, 1, 1, 1}},
    {"3x3 stride (1,2) pads (0,2,1,0)", GEO(1, 2, 7, 9, 3, 3, 3, 1), .strides = {1, 2}, .pads = {0, 2, 1, 0}, .bias = true},
    {"auto_pad NOTSET", GEO(1, 2, 6, 5, 3, 3, 3, 1), .pads = {1, 0, 1, 0}, .auto_pad = "NOTSET"},
    {"auto_pad SAME_UPPER stride 2 8x7", GEO(2, 3, 8, 7, 4, 3, 3, 1), .strides = {2, 2}, .auto_pad = "SAME_UPPER", .bias = true},
    {"auto_pad SAME_LOWER stride 2 8x7", GEO(2, 3, 8, 7, 4, 3, 3, 1), .strides = {2, 2}, .auto_pad = "SAME_LOWER", .bias = true},
    {"auto_pad SAME_UPPER 2x2 kernel", GEO(1, 3, 5, 6, 2, 2, 2, 1), .auto_pad = "SAME_UPPER"},
    {"auto_pad SAME_LOWER 4x4 kernel", GEO(1, 3, 5, 6, 2, 4, 4, 1), .auto_pad = "SAME_LOWER"},
    {"auto_pad VALID stride 2 7x7", GEO(2, 3, 7, 7, 4, 3, 3, 1), .strides = {2, 2}, .auto_pad = "VALID", .bias = true},
    {"dilation 2", GEO(1, 3, 9, 9, 4, 3, 3, 1), .pads = {2, 2, 2, 2}, .dil = {2, 2}},
    {"dilation (2,1) stride 2", GEO(2, 2, 9, 8, 3, 3, 3, 1), .strides = {2, 2}, .pads = {1, 0, 2, 1}, .dil = {2, 1}, .bias = true},
    {"groups 2", GEO(2, 4, 7, 7, 6, 3, 3, 2), .pads = {1, 1, 1, 1}, .bias = true},
    {"groups 2 1x1 kernel_shape", GEO(1, 6, 5, 4, 4, 1, 1, 2), .kernel_shape = true},
    {"kernel_shape given", GEO(1, 2, 5, 5, 3, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true, .kernel_shape = true},
    {"X constant (no dX)", GEO(2, 3, 6, 6, 4, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true, .x_const = true},
    {"W constant (dB only)", GEO(2, 3, 6, 6, 4, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true, .w_const = true},
    {"depthwise multiplier 2", GEO(2, 3, 7, 7, 6, 3, 3, 3), .pads = {1, 1, 1, 1}, .bias = true},
    {"depthwise 5x5", GEO(1, 4, 9, 9, 4, 5, 5, 4), .pads = {2, 2, 2, 2}, .bias = true},
    {0},
};

/* 3x3 stride 1 with 16 channels or more: Winograd in training on AVX-512 (kernels/cpu/conv.c) */
static const conv_case wino_cases[] = {
    {"3x3 16 -> 16 pad 1", GEO(2, 16, 6, 7, 16, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true},
    {"3x3 32 -> 16 no pad 9x6", GEO(3, 32, 9, 6, 16, 3, 3, 1)},
    {"3x3 16 -> 48 pads (0,1,2,1): oneDNN declines Winograd, direct", GEO(1, 16, 5, 5, 48, 3, 3, 1), .pads = {0, 1, 2, 1}, .bias = true},
    {0},
};

/* Depthwise 3x3, stride 1 or 2: the hand-written path. Widths cross its 16- and 32-column blocks;
 * 16 channels or more on small planes take its 16-channel tiles. */
static const conv_case dw_cases[] = {
    {"depthwise stride 1 7x7 batch 3", GEO(3, 4, 7, 7, 4, 3, 3, 4), .pads = {1, 1, 1, 1}, .bias = true},
    {"depthwise stride 2 9x5", GEO(2, 3, 9, 5, 3, 3, 3, 3), .strides = {2, 2}, .pads = {1, 1, 1, 1}},
    {"depthwise stride 2 batch 1 7x35", GEO(1, 2, 7, 35, 2, 3, 3, 2), .strides = {2, 2}, .pads = {1, 1, 1, 1}, .bias = true},
    {"depthwise stride 1 17x19 no pad", GEO(1, 3, 17, 19, 3, 3, 3, 3), .bias = true},
    {"depthwise stride 2 SAME_UPPER 8x8", GEO(2, 3, 8, 8, 3, 3, 3, 3), .strides = {2, 2}, .auto_pad = "SAME_UPPER", .bias = true},
    {"depthwise stride 2 SAME_LOWER 8x8", GEO(1, 3, 8, 8, 3, 3, 3, 3), .strides = {2, 2}, .auto_pad = "SAME_LOWER"},
    {"depthwise stride (1,2) pads (0,2,1,0)", GEO(2, 2, 6, 9, 2, 3, 3, 2), .strides = {1, 2}, .pads = {0, 2, 1, 0}, .bias = true},
    {"depthwise stride (2,1) pads (2,0,0,1)", GEO(1, 3, 9, 6, 3, 3, 3, 3), .strides = {2, 1}, .pads = {2, 0, 0, 1}},
    {"depthwise 20 channels 5x5 (channel tiles)", GEO(2, 20, 5, 5, 20, 3, 3, 20), .pads = {1, 1, 1, 1}, .bias = true},
    {"depthwise 17 channels stride 2 8x7 SAME_LOWER", GEO(1, 17, 8, 7, 17, 3, 3, 17), .strides = {2, 2}, .auto_pad = "SAME_LOWER"},
    {"depthwise 16 channels stride (2,1) pads (0,1,2,1)", GEO(2, 16, 6, 4, 16, 3, 3, 16), .strides = {2, 1}, .pads = {0, 1, 2, 1}, .bias = true},
    {"depthwise 1x1 image pads 1", GEO(2, 2, 1, 1, 2, 3, 3, 2), .pads = {1, 1, 1, 1}, .bias = true},
    {"depthwise X constant", GEO(2, 2, 6, 6, 2, 3, 3, 2), .strides = {2, 2}, .pads = {1, 1, 1, 1}, .bias = true, .x_const = true},
    {"depthwise W constant", GEO(2, 2, 6, 6, 2, 3, 3, 2), .pads = {1, 1, 1, 1}, .bias = true, .w_const = true},
    {0},
};

/* Kernels larger than the padded map can use: only the taps that meet the input are computed
 * (kernels/cpu/conv.c, crop_of); run again with CX_CONV_NO_CROP=1. */
static const conv_case crop_cases[] = {
    {"depthwise 5x5 on 1x1 pads 2 (1 tap)", GEO(3, 20, 1, 1, 20, 5, 5, 20), .pads = {2, 2, 2, 2}, .bias = true},
    {"depthwise 5x5 on 2x2 pads 2 (3x3 taps)", GEO(2, 18, 2, 2, 18, 5, 5, 18), .pads = {2, 2, 2, 2}},
    {"depthwise 5x5 stride 2 on 3x1 pads 2", GEO(2, 4, 3, 1, 4, 5, 5, 4), .strides = {2, 2}, .pads = {2, 2, 2, 2}, .bias = true},
    {"3x3 on 1x1 pads 1 (1 tap)", GEO(2, 16, 1, 1, 24, 3, 3, 1), .pads = {1, 1, 1, 1}, .bias = true},
    {"3x3 on 1x3 pads (1,0,1,2)", GEO(2, 5, 1, 3, 6, 3, 3, 1), .pads = {1, 0, 1, 2}},
    {"groups 2 5x5 on 2x1 pads 2", GEO(1, 4, 2, 1, 6, 5, 5, 2), .pads = {2, 2, 2, 2}, .bias = true},
    {0},
};

/* A graph that must not compile; its message must contain `want`. */
static int check_rejected(const char *label, cx_shape xs, cx_shape ws, int64_t group,
                          const char *auto_pad, const char *want) {
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "x", &xs, -1, 1, 1), oc_param(g, "w", &ws, -1, 1, 2)};
  int node = cx_graph_node(g, "Conv", "conv", in, 2, 1);
  cx_node_set_int(g, node, "group", group);
  if (auto_pad) {
    cx_node_set_string(g, node, "auto_pad", auto_pad);
    cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  }
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  cx_program *p = NULL;
  cx_compile_opts co = {.batch = 1, .backend = cx_backend_cpu()};
  cx_status s = cx_program_compile(g, &co, &p);
  bool ok = s != CX_OK && strstr(cx_last_error(), want) && strstr(cx_last_error(), "conv");
  printf("%s Conv rejects %s: %s\n", ok ? "ok  " : "FAIL", label,
         s != CX_OK ? cx_last_error() : "compiled");
  cx_program_free(p);
  cx_graph_free(g);
  return !ok;
}

/* A ConvGrad's dX and dW take their algorithms apart (kernels/cpu/conv.c, conv_tuned): forced
 * with CX_CONV_WINOGRAD=off, data, weights and on, dX must be the direct algorithm's or
 * Winograd's as the setting says, and dW likewise, bit for bit (the two round differently). */
static int check_split_algorithms(void) {
  static const char *force[4] = {"off", "data", "weights", "on"};
  cx_graph *g = cx_graph_new();
  int in[2] = {oc_param(g, "X", &S(2, 16, 12, 12), -1, 1, 31),
               oc_param(g, "W", &S(24, 16, 3, 3), -1, 1, 32)};
  int node = cx_graph_node(g, "Conv", "conv", in, 2, 1);
  cx_node_set_ints(g, node, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  cx_graph_mark_output(g, cx_node_output(g, node, 0));
  float *grads[4][2] = {{NULL}};
  int64_t count[2] = {0, 0};
  int fails = 0;
  for (int f = 0; f < 4; f++) {
    setenv("CX_CONV_WINOGRAD", force[f], 1);
    cx_program *p = NULL;
    cx_compile_opts co = {.batch = 1, .training = true, .backend = cx_backend_cpu()};
    bool ok = cx_program_compile(g, &co, &p) == CX_OK;
    if (ok) {
      cx_tensor *dy = cx_program_tensor(p, "conv@grad");
      for (int64_t i = 0; i < cx_tensor_numel(dy); i++) cx_f32(dy)[i] = (float)(i % 7) - 3.0f;
      ok = cx_program_forward(p) == CX_OK && cx_program_backward(p) == CX_OK;
    }
    for (int k = 0; ok && k < 2; k++) {
      const cx_tensor *t = cx_program_tensor(p, k ? "W@grad" : "X@grad");
      count[k] = cx_tensor_numel(t);
      grads[f][k] = malloc(sizeof(float) * (size_t)count[k]);
      memcpy(grads[f][k], t->data, sizeof(float) * (size_t)count[k]);
    }
    if (!ok) printf("FAIL split algorithms [%s]: %s\n", force[f], cx_last_error()), fails++;
    cx_program_free(p);
  }
  unsetenv("CX_CONV_WINOGRAD");
  cx_graph_free(g);
  for (int k = 0; !fails && k < 2; k++) {
    size_t bytes = sizeof(float) * (size_t)count[k];
    /* dX follows "data" (bit 0 of the index), dW follows "weights" (bit 1) */
    int bit = k ? 2 : 1;
    bool differ = memcmp(grads[0][k], grads[3][k], bytes) != 0;
    for (int f = 0; f < 4; f++) {
      bool same = memcmp(grads[f][k], grads[f & bit ? 3 : 0][k], bytes) == 0;
      printf("%s split algorithms [%s]: %s is %s's%s\n", same && differ ? "ok  " : "FAIL",
             force[f], k ? "dW" : "dX", f & bit ? "Winograd" : "the direct algorithm",
             differ ? "" : " (Winograd and direct computed alike: not told apart)");
      fails += !(same && differ);
    }
  }
  for (int f = 0; f < 4; f++) free(grads[f][0]), free(grads[f][1]);
  return fails;
}

static int check_all(const conv_case *list, const char *tag) {
  int fails = 0;
  for (const conv_case *c = list; c->label; c++) fails += check_case(c, tag);
  return fails;
}

int main(void) {
  unsetenv("CX_CONV_WINOGRAD"); /* ctest fixes the algorithms (tests/CMakeLists.txt) */
  int fails = check_all(cases, "");
  fails += check_all(dw_cases, "");
  setenv("CX_CONV_DEPTHWISE", "c", 1);
  fails += check_all(dw_cases, " [portable C]");
  setenv("CX_CONV_DEPTHWISE", "dnnl", 1);
  fails += check_all(dw_cases, " [oneDNN]");
  unsetenv("CX_CONV_DEPTHWISE");
  fails += check_all(crop_cases, "");
  setenv("CX_CONV_NO_CROP", "1", 1);
  fails += check_all(crop_cases, " [whole kernel]");
  unsetenv("CX_CONV_NO_CROP");
  fails += check_all(wino_cases, "");
  setenv("CX_CONV_WINOGRAD", "on", 1);
  fails += check_all(wino_cases, " [Winograd]");
  setenv("CX_CONV_WINOGRAD", "off", 1);
  fails += check_all(wino_cases, " [direct]");
  setenv("CX_CONV_WINOGRAD", "data", 1);
  fails += check_all(wino_cases, " [Winograd dX]");
  setenv("CX_CONV_WINOGRAD", "weights", 1);
  fails += check_all(wino_cases, " [Winograd dW]");
  unsetenv("CX_CONV_WINOGRAD");
  if (cx_cpu_avx512()) fails += check_split_algorithms(); /* oneDNN's Winograd needs AVX-512 */
  fails += check_rejected("a 1-D convolution", S(1, 2, 8), S(3, 2, 3), 1, NULL, "only 2-D");
  fails += check_rejected("a 3-D convolution", S(1, 2, 4, 4, 4), S(3, 2, 3, 3, 3), 1, NULL,
                          "only 2-D");
  fails += check_rejected("channels that do not fit group", S(1, 4, 5, 5), S(3, 1, 3, 3), 2,
                          NULL, "group");
  fails += check_rejected("a kernel larger than the image", S(1, 2, 2, 2), S(3, 2, 3, 3), 1,
                          NULL, "does not fit");
  fails += check_rejected("pads with auto_pad", S(1, 2, 5, 5), S(3, 2, 3, 3), 1, "SAME_UPPER",
                          "auto_pad");
  printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
  return fails != 0;
}
