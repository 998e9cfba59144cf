#ifndef CX_MODELS_LAYERS_H
#define CX_MODELS_LAYERS_H

/* Building blocks shared by the built-in architectures (internal to models/). Each helper adds the
 * nodes of one torchvision module with its parameters named as that module's state_dict keys, keeps
 * track of the per-image shape of what it produced (so that the zoo can count multiply-accumulates
 * and reject inputs that are too small without compiling) and initialises like torchvision. */

#include <stdbool.h>
#include <stdint.h>

#include "../core/graph.h"

/* A feature map: its value id and per-image shape. After the classifier's flatten, h = w = 1 and
 * the value is 2-D [N, c]. */
typedef struct cx_feat {
  int v;
  int64_t c, h, w;
} cx_feat;

typedef enum cx_nl {
  CX_NL_NONE,
  CX_NL_RELU,
  CX_NL_RELU6,    /* Clip(0, 6) */
  CX_NL_HSWISH,
  CX_NL_HSIGMOID, /* torch's hardsigmoid: relu6(x + 3) / 6 */
  CX_NL_SIGMOID,
  CX_NL_SILU,     /* x * sigmoid(x): no SiLU op in the table, so two nodes */
} cx_nl;

/* How a Linear layer's weight is drawn; the bias follows the same torchvision module. */
typedef enum cx_linear_init {
  CX_LINEAR_TORCH_DEFAULT, /* nn.Linear's own: weight and bias U(-1/sqrt(in), 1/sqrt(in)) */
  CX_LINEAR_NORMAL_001,    /* MobileNetV2/V3: weight N(0, 0.01), bias 0 */
  CX_LINEAR_UNIFORM_OUT,   /* EfficientNet: weight U(-1/sqrt(out), 1/sqrt(out)), bias 0 */
} cx_linear_init;

typedef struct cx_net {
  cx_graph *g;
  uint64_t seed;
  bool init;          /* false: conv and linear weights stay zero (skeletons, counting) */
  float bn_eps;       /* BatchNormalization epsilon */
  float bn_momentum;  /* ONNX momentum = 1 - PyTorch momentum */
  int64_t macs;       /* Conv and Gemm multiply-accumulates for one image, so far */
  int input;          /* the graph input "input" */
  int relu6_lo, relu6_hi, ones; /* shared constants, made on first use; -1 before */
} cx_net;

/* A formatted name, returned by value so that calls can nest: cx_namef("layer%d", i).s */
typedef struct cx_name {
  char s[96];
} cx_name;
cx_name cx_namef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Starts a graph with the input "input" [-1, c, h, w]. */
void cx_net_begin(cx_net *n, cx_graph *g, uint64_t seed, bool init, int64_t c, int64_t h,
                  int64_t w, cx_feat *x);

/* nn.Conv2d(x.c, cout, k, stride, padding=(k-1)/2, groups, bias): weights "<name>.weight"
 * (kaiming normal, fan_out) and "<name>.bias" (zeros). */
cx_feat cx_net_conv(cx_net *n, const char *name, cx_feat x, int64_t cout, int k, int stride,
                    int64_t groups, bool bias);
/* nn.BatchNorm2d: weight 1, bias 0 (PARAMs), running_mean 0, running_var 1 (STATE). */
cx_feat cx_net_bn(cx_net *n, const char *name, cx_feat x);
cx_feat cx_net_act(cx_net *n, const char *name, cx_feat x, cx_nl nl);
/* torchvision's Conv2dNormActivation: "<prefix>.0" conv (no bias), "<prefix>.1" BN,
 * "<prefix>.2" activation (none with CX_NL_NONE). */
cx_feat cx_net_conv_bn_act(cx_net *n, const char *prefix, cx_feat x, int64_t cout, int k,
                           int stride, int64_t groups, cx_nl nl);
/* torchvision's SqueezeExcitation: x * scale_nl(fc2(nl(fc1(avgpool(x))))), fc1/fc2 1x1 convs. */
cx_feat cx_net_se(cx_net *n, const char *prefix, cx_feat x, int64_t squeeze, cx_nl nl,
                  cx_nl scale_nl);
cx_feat cx_net_add(cx_net *n, const char *name, cx_feat a, cx_feat b);
cx_feat cx_net_maxpool(cx_net *n, const char *name, cx_feat x, int k, int stride);
/* torchvision's StochasticDepth(p, "row"): in training each image's branch is dropped with
 * probability p and the survivors scaled by 1/(1-p); an identity at inference. Built as
 * x * Dropout(ones[N,1,1,1], p). Nothing is added when p == 0. */
cx_feat cx_net_drop_path(cx_net *n, const char *name, cx_feat x, double p);
/* AdaptiveAvgPool2d(1) and flatten: [N, c]. */
cx_feat cx_net_pool_flatten(cx_net *n, const char *name, cx_feat x);
cx_feat cx_net_dropout(cx_net *n, const char *name, cx_feat x, double p);
/* nn.Linear as Gemm(transB=1); out_name names the output value (NULL: the node's name). */
cx_feat cx_net_linear(cx_net *n, const char *name, const char *out_name, cx_feat x, int64_t out,
                      cx_linear_init init);

/* torchvision's _make_divisible: v rounded to the nearest multiple of divisor, at least
 * min_value (divisor when 0), and never below 90% of v. */
int64_t cx_make_divisible(double v, int64_t divisor, int64_t min_value);

/* The parsed spec an architecture is built from (models/zoo.c fills every field). */
typedef struct cx_model_cfg {
  int variant;            /* which member of the family: depth, b-number, small/large */
  int64_t classes;
  double width;           /* channel multiplier */
  bool small_input;       /* MobileNetV2: stride-1 stem */
  double dropout;         /* classifier dropout */
  double stochastic_depth;
} cx_model_cfg;

/* Each family adds its layers after the input and ends with the output "logits". */
bool cx_resnet_depth_valid(int depth); /* 20, 32, 44, 56, 110 (CIFAR); 18, 34, 50, 101 */
void cx_build_resnet(cx_net *n, const cx_model_cfg *cfg, cx_feat x);
void cx_build_mobilenet_v2(cx_net *n, const cx_model_cfg *cfg, cx_feat x);
void cx_build_mobilenet_v3(cx_net *n, const cx_model_cfg *cfg, cx_feat x);
void cx_build_efficientnet(cx_net *n, const cx_model_cfg *cfg, cx_feat x);

#endif
