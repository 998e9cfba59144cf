/* MobileNetV2 as torchvision builds it (Sandler et al. 2018, table 2): a 3x3 stem, seventeen
 * inverted residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1 projection; ReLU6), a 1x1 conv
 * to 1280 channels and dropout + linear. Channels are multiplied by the width and rounded to
 * multiples of 8 (_make_divisible); the last conv never shrinks below 1280. small_input makes the
 * stem stride 1 for 28-32 pixel inputs. Names: features.I..., classifier.1. */

#include "layers.h"

/* expansion t, output channels c, repeats n, first stride s */
static const int setting[7][4] = {
    {1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
    {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
};

static cx_feat inverted_residual(cx_net *n, int index, cx_feat x, int64_t out, int stride, int t) {
  int64_t hidden = x.c * t;
  int layer = 0;
  cx_feat y = x;
  if (t != 1)
    y = cx_net_conv_bn_act(n, cx_namef("features.%d.conv.%d", index, layer++).s, y, hidden, 1, 1,
                           1, CX_NL_RELU6);
  y = cx_net_conv_bn_act(n, cx_namef("features.%d.conv.%d", index, layer++).s, y, hidden, 3,
                         stride, hidden, CX_NL_RELU6);
  y = cx_net_conv(n, cx_namef("features.%d.conv.%d", index, layer).s, y, out, 1, 1, 1, false);
  y = cx_net_bn(n, cx_namef("features.%d.conv.%d", index, layer + 1).s, y);
  if (stride == 1 && x.c == out) y = cx_net_add(n, cx_namef("features.%d.add", index).s, x, y);
  return y;
}

void cx_build_mobilenet_v2(cx_net *n, const cx_model_cfg *cfg, cx_feat x) {
  int64_t stem = cx_make_divisible(32 * cfg->width, 8, 0);
  int64_t last = cx_make_divisible(1280 * (cfg->width > 1 ? cfg->width : 1.0), 8, 0);
  int index = 0;
  x = cx_net_conv_bn_act(n, cx_namef("features.%d", index++).s, x, stem, 3,
                         cfg->small_input ? 1 : 2, 1, CX_NL_RELU6);
  for (int s = 0; s < 7; s++) {
    int64_t out = cx_make_divisible(setting[s][1] * cfg->width, 8, 0);
    for (int i = 0; i < setting[s][2]; i++)
      x = inverted_residual(n, index++, x, out, i == 0 ? setting[s][3] : 1, setting[s][0]);
  }
  x = cx_net_conv_bn_act(n, cx_namef("features.%d", index).s, x, last, 1, 1, 1, CX_NL_RELU6);
  x = cx_net_pool_flatten(n, "avgpool", x);
  x = cx_net_dropout(n, "classifier.0", x, cfg->dropout);
  x = cx_net_linear(n, "classifier.1", "logits", x, cfg->classes, CX_LINEAR_NORMAL_001);
  cx_graph_mark_output(n->g, x.v);
}
