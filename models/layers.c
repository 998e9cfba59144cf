#include "layers.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/rng.h"

cx_name cx_namef(const char *fmt, ...) {
  cx_name r;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.s, sizeof r.s, fmt, ap);
  va_end(ap);
  return r;
}

/* Each parameter draws from its own stream, keyed by the seed and its name, so that its values do
 * not depend on the order the layers were built in. */
static uint64_t name_key(uint64_t seed, const char *name) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)name; *p; p++)
    h = (h ^ *p) * 1099511628211ull;
  return cx_rng_key(seed, h, 0x6d6f64656cull);
}

typedef enum fill { FILL_ZERO, FILL_ONE, FILL_NORMAL, FILL_UNIFORM } fill;

/* N(0, std^2): Box-Muller on each Philox block gives two numbers (cos and sin), so the largest
 * models draw their tens of millions of weights in about half a second. */
static void fill_normal(float *x, int64_t count, uint64_t key, double std) {
  for (int64_t i = 0; i < count; i += 2) {
    cx_philox r = cx_philox4x32(key, 1, (uint64_t)i / 2);
    double u1 = ((double)(r.v[0] >> 8) + 1.0) / 16777217.0, u2 = (double)(r.v[1] >> 8) / 16777216.0;
    double rad = std * sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
    x[i] = (float)(rad * cos(angle));
    if (i + 1 < count) x[i + 1] = (float)(rad * sin(angle));
  }
}

/* An initializer of `kind` filled with `how` (scale: the normal's std or the uniform's bound). */
static int init_value(cx_net *n, cx_value_kind kind, const char *name, const cx_shape *s, fill how,
                      double scale) {
  int64_t count = cx_shape_numel(s);
  if (!n->init && (how == FILL_NORMAL || how == FILL_UNIFORM)) how = FILL_ZERO;
  if (how == FILL_ZERO) return cx_graph_init(n->g, kind, name, CX_F32, s, NULL);
  float *x = malloc(sizeof(float) * (size_t)(count ? count : 1));
  if (!x) return cx_graph_init(n->g, kind, name, CX_F32, s, NULL); /* the graph reports NOMEM */
  uint64_t key = name_key(n->seed, name);
  if (how == FILL_NORMAL) fill_normal(x, count, key, scale);
  for (int64_t i = 0; i < count && how != FILL_NORMAL; i++)
    x[i] = how == FILL_ONE ? 1.0f : (float)(scale * (2.0 * cx_rng_uniform(key, (uint64_t)i) - 1.0));
  int id = cx_graph_init(n->g, kind, name, CX_F32, s, x);
  free(x);
  return id;
}

static int scalar_const(cx_net *n, const char *name, float v) {
  cx_shape s = {.ndim = 0};
  return cx_graph_const_f32(n->g, name, &s, &v);
}

void cx_net_begin(cx_net *n, cx_graph *g, uint64_t seed, bool init, int64_t c, int64_t h,
                  int64_t w, cx_feat *x) {
  *n = (cx_net){.g = g, .seed = seed, .init = init, .bn_eps = 1e-5f, .bn_momentum = 0.9f,
                .relu6_lo = -1, .relu6_hi = -1, .ones = -1};
  cx_shape s = {.ndim = 4, .d = {-1, c, h, w}};
  n->input = cx_graph_input(g, "input", CX_F32, &s);
  *x = (cx_feat){n->input, c, h, w};
}

cx_feat cx_net_conv(cx_net *n, const char *name, cx_feat x, int64_t cout, int k, int stride,
                    int64_t groups, bool bias) {
  cx_shape ws = {.ndim = 4, .d = {cout, x.c / groups, k, k}};
  /* kaiming_normal_(mode="fan_out"): std = sqrt(2 / fan_out), fan_out = cout * k * k (PyTorch
   * does not divide by groups) */
  double std = sqrt(2.0 / (double)(cout * k * k));
  int in[3] = {x.v, init_value(n, CX_VALUE_PARAM, cx_namef("%s.weight", name).s, &ws, FILL_NORMAL,
                               std)};
  if (bias) {
    cx_shape bs = {.ndim = 1, .d = {cout}};
    in[2] = init_value(n, CX_VALUE_PARAM, cx_namef("%s.bias", name).s, &bs, FILL_ZERO, 0);
  }
  int node = cx_graph_node(n->g, "Conv", name, in, bias ? 3 : 2, 1);
  int64_t p = (k - 1) / 2;
  cx_node_set_ints(n->g, node, "kernel_shape", (int64_t[]){k, k}, 2);
  cx_node_set_ints(n->g, node, "strides", (int64_t[]){stride, stride}, 2);
  cx_node_set_ints(n->g, node, "pads", (int64_t[]){p, p, p, p}, 4);
  if (groups != 1) cx_node_set_int(n->g, node, "group", groups);
  cx_feat y = {cx_node_output(n->g, node, 0), cout, (x.h + 2 * p - k) / stride + 1,
               (x.w + 2 * p - k) / stride + 1};
  n->macs += y.c * y.h * y.w * (x.c / groups) * k * k;
  return y;
}

cx_feat cx_net_bn(cx_net *n, const char *name, cx_feat x) {
  cx_shape s = {.ndim = 1, .d = {x.c}};
  int in[5] = {x.v,
               init_value(n, CX_VALUE_PARAM, cx_namef("%s.weight", name).s, &s, FILL_ONE, 0),
               init_value(n, CX_VALUE_PARAM, cx_namef("%s.bias", name).s, &s, FILL_ZERO, 0),
               init_value(n, CX_VALUE_STATE, cx_namef("%s.running_mean", name).s, &s, FILL_ZERO, 0),
               init_value(n, CX_VALUE_STATE, cx_namef("%s.running_var", name).s, &s, FILL_ONE, 0)};
  int node = cx_graph_node(n->g, "BatchNormalization", name, in, 5, 1);
  cx_node_set_float(n->g, node, "epsilon", n->bn_eps);
  cx_node_set_float(n->g, node, "momentum", n->bn_momentum);
  x.v = cx_node_output(n->g, node, 0);
  return x;
}

static int relu6(cx_net *n, const char *name, int x) {
  if (n->relu6_lo < 0) {
    n->relu6_lo = scalar_const(n, "relu6.min", 0.0f);
    n->relu6_hi = scalar_const(n, "relu6.max", 6.0f);
  }
  return cx_graph_op(n->g, "Clip", name, (int[]){x, n->relu6_lo, n->relu6_hi}, 3);
}

cx_feat cx_net_act(cx_net *n, const char *name, cx_feat x, cx_nl nl) {
  switch (nl) {
  case CX_NL_NONE: return x;
  case CX_NL_RELU: x.v = cx_graph_op(n->g, "Relu", name, &x.v, 1); break;
  case CX_NL_RELU6: x.v = relu6(n, name, x.v); break;
  case CX_NL_HSWISH: x.v = cx_graph_op(n->g, "HardSwish", name, &x.v, 1); break;
  case CX_NL_SIGMOID: x.v = cx_graph_op(n->g, "Sigmoid", name, &x.v, 1); break;
  case CX_NL_HSIGMOID: {
    int node = cx_graph_node(n->g, "HardSigmoid", name, &x.v, 1, 1);
    cx_node_set_float(n->g, node, "alpha", 1.0f / 6.0f);
    cx_node_set_float(n->g, node, "beta", 0.5f);
    x.v = cx_node_output(n->g, node, 0);
    break;
  }
  case CX_NL_SILU: {
    int s = cx_graph_op(n->g, "Sigmoid", cx_namef("%s.sigmoid", name).s, &x.v, 1);
    x.v = cx_graph_op(n->g, "Mul", name, (int[]){x.v, s}, 2);
    break;
  }
  }
  return x;
}

cx_feat cx_net_conv_bn_act(cx_net *n, const char *prefix, cx_feat x, int64_t cout, int k,
                           int stride, int64_t groups, cx_nl nl) {
  x = cx_net_conv(n, cx_namef("%s.0", prefix).s, x, cout, k, stride, groups, false);
  x = cx_net_bn(n, cx_namef("%s.1", prefix).s, x);
  return cx_net_act(n, cx_namef("%s.2", prefix).s, x, nl);
}

cx_feat cx_net_se(cx_net *n, const char *prefix, cx_feat x, int64_t squeeze, cx_nl nl,
                  cx_nl scale_nl) {
  cx_feat s = x;
  s.v = cx_graph_op(n->g, "GlobalAveragePool", cx_namef("%s.avgpool", prefix).s, &x.v, 1);
  s.h = s.w = 1;
  s = cx_net_conv(n, cx_namef("%s.fc1", prefix).s, s, squeeze, 1, 1, 1, true);
  s = cx_net_act(n, cx_namef("%s.activation", prefix).s, s, nl);
  s = cx_net_conv(n, cx_namef("%s.fc2", prefix).s, s, x.c, 1, 1, 1, true);
  s = cx_net_act(n, cx_namef("%s.scale_activation", prefix).s, s, scale_nl);
  x.v = cx_graph_op(n->g, "Mul", cx_namef("%s.scale", prefix).s, (int[]){s.v, x.v}, 2);
  return x;
}

cx_feat cx_net_add(cx_net *n, const char *name, cx_feat a, cx_feat b) {
  a.v = cx_graph_op(n->g, "Add", name, (int[]){a.v, b.v}, 2);
  return a;
}

cx_feat cx_net_maxpool(cx_net *n, const char *name, cx_feat x, int k, int stride) {
  int64_t p = (k - 1) / 2;
  int node = cx_graph_node(n->g, "MaxPool", name, &x.v, 1, 1);
  cx_node_set_ints(n->g, node, "kernel_shape", (int64_t[]){k, k}, 2);
  cx_node_set_ints(n->g, node, "strides", (int64_t[]){stride, stride}, 2);
  cx_node_set_ints(n->g, node, "pads", (int64_t[]){p, p, p, p}, 4);
  x.v = cx_node_output(n->g, node, 0);
  x.h = (x.h + 2 * p - k) / stride + 1;
  x.w = (x.w + 2 * p - k) / stride + 1;
  return x;
}

/* ones [N,1,1,1], made once from the input (a corner pixel times 0, plus 1) because shapes with the
 * batch dimension cannot be written as constants; no gradient flows into it. */
static int batch_ones(cx_net *n) {
  if (n->ones >= 0) return n->ones;
  int64_t zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1}, axes[3] = {1, 2, 3};
  int in[4] = {n->input, cx_graph_const_s64(n->g, "batch_ones.starts", 3, zeros),
               cx_graph_const_s64(n->g, "batch_ones.ends", 3, ones),
               cx_graph_const_s64(n->g, "batch_ones.axes", 3, axes)};
  int corner = cx_graph_op(n->g, "Slice", "batch_ones.slice", in, 4);
  int zero = cx_graph_op(n->g, "Mul", "batch_ones.zero",
                         (int[]){corner, scalar_const(n, "batch_ones.0", 0.0f)}, 2);
  n->ones = cx_graph_op(n->g, "Add", "batch_ones",
                        (int[]){zero, scalar_const(n, "batch_ones.1", 1.0f)}, 2);
  return n->ones;
}

cx_feat cx_net_drop_path(cx_net *n, const char *name, cx_feat x, double p) {
  if (p <= 0) return x;
  int ratio = scalar_const(n, cx_namef("%s.p", name).s, (float)p);
  int keep = cx_graph_op(n->g, "Dropout", name, (int[]){batch_ones(n), ratio}, 2);
  x.v = cx_graph_op(n->g, "Mul", cx_namef("%s.mul", name).s, (int[]){x.v, keep}, 2);
  return x;
}

cx_feat cx_net_pool_flatten(cx_net *n, const char *name, cx_feat x) {
  x.v = cx_graph_op(n->g, "GlobalAveragePool", name, &x.v, 1);
  x.v = cx_graph_op(n->g, "Flatten", "flatten", &x.v, 1);
  x.h = x.w = 1;
  return x;
}

cx_feat cx_net_dropout(cx_net *n, const char *name, cx_feat x, double p) {
  if (p <= 0) return x;
  int ratio = scalar_const(n, cx_namef("%s.p", name).s, (float)p);
  x.v = cx_graph_op(n->g, "Dropout", name, (int[]){x.v, ratio}, 2);
  return x;
}

cx_feat cx_net_linear(cx_net *n, const char *name, const char *out_name, cx_feat x, int64_t out,
                      cx_linear_init init) {
  cx_shape ws = {.ndim = 2, .d = {out, x.c}}, bs = {.ndim = 1, .d = {out}};
  double in_bound = 1.0 / sqrt((double)x.c);
  int w, b;
  if (init == CX_LINEAR_TORCH_DEFAULT) {
    w = init_value(n, CX_VALUE_PARAM, cx_namef("%s.weight", name).s, &ws, FILL_UNIFORM, in_bound);
    b = init_value(n, CX_VALUE_PARAM, cx_namef("%s.bias", name).s, &bs, FILL_UNIFORM, in_bound);
  } else {
    bool normal = init == CX_LINEAR_NORMAL_001;
    w = init_value(n, CX_VALUE_PARAM, cx_namef("%s.weight", name).s, &ws,
                   normal ? FILL_NORMAL : FILL_UNIFORM, normal ? 0.01 : 1.0 / sqrt((double)out));
    b = init_value(n, CX_VALUE_PARAM, cx_namef("%s.bias", name).s, &bs, FILL_ZERO, 0);
  }
  const char *names[1] = {out_name};
  int node = cx_graph_node_named(n->g, "Gemm", name, (int[]){x.v, w, b}, 3, names, 1);
  cx_node_set_int(n->g, node, "transB", 1);
  n->macs += x.c * out;
  return (cx_feat){cx_node_output(n->g, node, 0), out, 1, 1};
}

int64_t cx_make_divisible(double v, int64_t divisor, int64_t min_value) {
  if (min_value <= 0) min_value = divisor;
  int64_t r = (int64_t)(v + (double)divisor / 2) / divisor * divisor;
  if (r < min_value) r = min_value;
  if ((double)r < 0.9 * v) r += divisor;
  return r;
}
