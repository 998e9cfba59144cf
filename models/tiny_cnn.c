#include "tiny_cnn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/rng.h"

/* PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases alike. */
static int uniform_param(cx_graph *g, const char *name, cx_shape s, int64_t fan_in, uint64_t key) {
  int64_t n = cx_shape_numel(&s);
  float *w = malloc(sizeof(float) * (size_t)n), bound = 1.0f / sqrtf((float)fan_in);
  for (int64_t i = 0; i < n; i++) w[i] = bound * (2 * cx_rng_uniform(key, (uint64_t)i) - 1);
  int id = cx_graph_param(g, name, &s, w);
  free(w);
  return id;
}

static int filled_init(cx_graph *g, cx_value_kind kind, const char *name, int64_t c, float v) {
  cx_shape s = {.ndim = 1, .d = {c}};
  float *x = malloc(sizeof(float) * (size_t)c);
  for (int64_t i = 0; i < c; i++) x[i] = v;
  int id = cx_graph_init(g, kind, name, CX_F32, &s, x);
  free(x);
  return id;
}

static int conv(cx_graph *g, const char *name, int x, int cin, int cout, uint64_t seed) {
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s.weight", name);
  snprintf(bn, sizeof bn, "%s.bias", name);
  int w = uniform_param(g, wn, (cx_shape){4, {cout, cin, 3, 3}}, cin * 9, cx_rng_key(seed, 1, cout));
  int b = uniform_param(g, bn, (cx_shape){1, {cout}}, cin * 9, cx_rng_key(seed, 2, cout));
  int n = cx_graph_node(g, "Conv", name, (int[]){x, w, b}, 3, 1);
  cx_node_set_ints(g, n, "pads", (int64_t[]){1, 1, 1, 1}, 4);
  return cx_node_output(g, n, 0);
}

static int batch_norm(cx_graph *g, const char *name, int x, int c) {
  char n1[64], n2[64], n3[64], n4[64];
  snprintf(n1, sizeof n1, "%s.weight", name);
  snprintf(n2, sizeof n2, "%s.bias", name);
  snprintf(n3, sizeof n3, "%s.running_mean", name);
  snprintf(n4, sizeof n4, "%s.running_var", name);
  int in[5] = {x, filled_init(g, CX_VALUE_PARAM, n1, c, 1), filled_init(g, CX_VALUE_PARAM, n2, c, 0),
               filled_init(g, CX_VALUE_STATE, n3, c, 0), filled_init(g, CX_VALUE_STATE, n4, c, 1)};
  return cx_graph_op(g, "BatchNormalization", name, in, 5);
}

cx_graph *cx_tiny_cnn(int channels, int size, int classes, uint64_t seed) {
  cx_graph *g = cx_graph_new();
  cx_shape is = {4, {-1, channels, size, size}}, ls = {1, {-1}};
  int x = cx_graph_input(g, "images", CX_F32, &is);
  int labels = cx_graph_input(g, "labels", CX_S64, &ls);
  x = conv(g, "conv1", x, channels, 8, seed);
  x = batch_norm(g, "bn1", x, 8);
  x = cx_graph_op(g, "Relu", "relu1", &x, 1);
  int pool = cx_graph_node(g, "MaxPool", "pool1", &x, 1, 1);
  cx_node_set_ints(g, pool, "kernel_shape", (int64_t[]){2, 2}, 2);
  cx_node_set_ints(g, pool, "strides", (int64_t[]){2, 2}, 2);
  x = cx_node_output(g, pool, 0);
  x = conv(g, "conv2", x, 8, 16, seed + 1);
  x = cx_graph_op(g, "Relu", "relu2", &x, 1);
  x = cx_graph_op(g, "GlobalAveragePool", "gap", &x, 1);
  x = cx_graph_op(g, "Flatten", "flatten", &x, 1);
  int w = uniform_param(g, "fc.weight", (cx_shape){2, {classes, 16}}, 16, cx_rng_key(seed, 3, 0));
  int b = uniform_param(g, "fc.bias", (cx_shape){1, {classes}}, 16, cx_rng_key(seed, 4, 0));
  int fc = cx_graph_node(g, "Gemm", "logits", (int[]){x, w, b}, 3, 1);
  cx_node_set_int(g, fc, "transB", 1);
  int logits = cx_node_output(g, fc, 0);
  int loss = cx_graph_op(g, "SoftmaxCrossEntropyLoss", "loss", (int[]){logits, labels}, 2);
  cx_graph_mark_output(g, logits);
  cx_graph_mark_output(g, loss);
  return g;
}
