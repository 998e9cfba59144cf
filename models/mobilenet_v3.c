/* MobileNetV3 small and large as torchvision builds them (Howard et al. 2019, tables 1 and 2):
 * a 3x3 hardswish stem, inverted residual blocks with optional squeeze-excitation (squeeze to
 * _make_divisible(expanded / 4), ReLU, hardsigmoid), a 1x1 conv to six times the last block's
 * channels, then linear - hardswish - dropout - linear. BatchNorm uses eps 1e-3 and PyTorch
 * momentum 0.01. Names: features.I.block.J..., classifier.{0,3}. */

#include "layers.h"

typedef struct bneck {
  int in, kernel, expanded, out;
  bool se, hswish;
  int stride;
} bneck;

static const bneck large[] = {
    {16, 3, 16, 16, false, false, 1},    {16, 3, 64, 24, false, false, 2},
    {24, 3, 72, 24, false, false, 1},    {24, 5, 72, 40, true, false, 2},
    {40, 5, 120, 40, true, false, 1},    {40, 5, 120, 40, true, false, 1},
    {40, 3, 240, 80, false, true, 2},    {80, 3, 200, 80, false, true, 1},
    {80, 3, 184, 80, false, true, 1},    {80, 3, 184, 80, false, true, 1},
    {80, 3, 480, 112, true, true, 1},    {112, 3, 672, 112, true, true, 1},
    {112, 5, 672, 160, true, true, 2},   {160, 5, 960, 160, true, true, 1},
    {160, 5, 960, 160, true, true, 1},
};

static const bneck small[] = {
    {16, 3, 16, 16, true, false, 2},  {16, 3, 72, 24, false, false, 2},
    {24, 3, 88, 24, false, false, 1}, {24, 5, 96, 40, true, true, 2},
    {40, 5, 240, 40, true, true, 1},  {40, 5, 240, 40, true, true, 1},
    {40, 5, 120, 48, true, true, 1},  {48, 5, 144, 48, true, true, 1},
    {48, 5, 288, 96, true, true, 2},  {96, 5, 576, 96, true, true, 1},
    {96, 5, 576, 96, true, true, 1},
};

static int64_t adjust(int channels, double width) {
  return cx_make_divisible(channels * width, 8, 0);
}

static cx_feat block(cx_net *n, int index, cx_feat x, const bneck *b, double width) {
  int64_t in = adjust(b->in, width), exp = adjust(b->expanded, width), out = adjust(b->out, width);
  cx_nl nl = b->hswish ? CX_NL_HSWISH : CX_NL_RELU;
  int layer = 0;
  cx_feat y = x;
  if (exp != in)
    y = cx_net_conv_bn_act(n, cx_namef("features.%d.block.%d", index, layer++).s, y, exp, 1, 1, 1,
                           nl);
  y = cx_net_conv_bn_act(n, cx_namef("features.%d.block.%d", index, layer++).s, y, exp, b->kernel,
                         b->stride, exp, nl);
  if (b->se)
    y = cx_net_se(n, cx_namef("features.%d.block.%d", index, layer++).s, y,
                  cx_make_divisible((double)(exp / 4), 8, 0), CX_NL_RELU, CX_NL_HSIGMOID);
  y = cx_net_conv_bn_act(n, cx_namef("features.%d.block.%d", index, layer).s, y, out, 1, 1, 1,
                         CX_NL_NONE);
  if (b->stride == 1 && in == out) y = cx_net_add(n, cx_namef("features.%d.add", index).s, y, x);
  return y;
}

/* variant: 0 small, 1 large */
void cx_build_mobilenet_v3(cx_net *n, const cx_model_cfg *cfg, cx_feat x) {
  const bneck *set = cfg->variant ? large : small;
  int count = cfg->variant ? (int)(sizeof large / sizeof *large)
                           : (int)(sizeof small / sizeof *small);
  int64_t last_channel = adjust(cfg->variant ? 1280 : 1024, cfg->width);
  n->bn_eps = 1e-3f;
  n->bn_momentum = 0.99f;
  int index = 0;
  x = cx_net_conv_bn_act(n, cx_namef("features.%d", index++).s, x, adjust(set[0].in, cfg->width),
                         3, 2, 1, CX_NL_HSWISH);
  for (int i = 0; i < count; i++) x = block(n, index++, x, &set[i], cfg->width);
  x = cx_net_conv_bn_act(n, cx_namef("features.%d", index).s, x, 6 * x.c, 1, 1, 1, CX_NL_HSWISH);
  x = cx_net_pool_flatten(n, "avgpool", x);
  x = cx_net_linear(n, "classifier.0", NULL, x, last_channel, CX_LINEAR_NORMAL_001);
  x = cx_net_act(n, "classifier.1", x, CX_NL_HSWISH);
  x = cx_net_dropout(n, "classifier.2", x, cfg->dropout);
  x = cx_net_linear(n, "classifier.3", "logits", x, cfg->classes, CX_LINEAR_NORMAL_001);
  cx_graph_mark_output(n->g, x.v);
}
