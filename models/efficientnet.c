/* EfficientNet B0-B3 as torchvision builds them (Tan and Le 2019, table 1): a 3x3 SiLU stem, seven
 * stages of MBConv blocks (1x1 expansion, kxk depthwise, squeeze-excitation with SiLU and sigmoid
 * squeezing to a quarter of the block's input channels, linear 1x1 projection), a 1x1 conv to four
 * times the last stage's channels, dropout and linear. Bn scales width and depth: channels by
 * _make_divisible(c * width, 8), repeats by ceil(n * depth). Residual branches carry stochastic
 * depth whose probability grows linearly with the block index. torchvision keeps nn.BatchNorm2d's
 * defaults here (eps 1e-5, momentum 0.1; only EfficientNetV2 uses eps 1e-3). Names:
 * features.S.B.block.J..., classifier.1. */

#include <math.h>

#include "layers.h"

/* expand ratio, kernel, stride, input channels, output channels, repeats */
static const int stages[7][6] = {
    {1, 3, 1, 32, 16, 1},  {6, 3, 2, 16, 24, 2},  {6, 5, 2, 24, 40, 2},   {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3}, {6, 5, 2, 112, 192, 4}, {6, 3, 1, 192, 320, 1},
};

/* width, depth multipliers of b0..b3 (torchvision's efficientnet_bN) */
static const double scaling[4][2] = {{1.0, 1.0}, {1.0, 1.1}, {1.1, 1.2}, {1.2, 1.4}};

static int64_t adjust(double channels, double mult) {
  return cx_make_divisible(channels * mult, 8, 0);
}
static int repeats(int n, double depth) { return (int)ceil(n * depth); }

typedef struct mbconv {
  int expand, kernel, stride;
  int64_t out;
  double drop;
} mbconv;

static cx_feat mb_block(cx_net *n, const char *b, cx_feat x, const mbconv *m) {
  int64_t exp = adjust((double)x.c, m->expand);
  int layer = 0;
  cx_feat y = x;
  if (exp != x.c)
    y = cx_net_conv_bn_act(n, cx_namef("%s.block.%d", b, layer++).s, y, exp, 1, 1, 1, CX_NL_SILU);
  y = cx_net_conv_bn_act(n, cx_namef("%s.block.%d", b, layer++).s, y, exp, m->kernel, m->stride,
                         exp, CX_NL_SILU);
  int64_t squeeze = x.c / 4 > 1 ? x.c / 4 : 1;
  y = cx_net_se(n, cx_namef("%s.block.%d", b, layer++).s, y, squeeze, CX_NL_SILU, CX_NL_SIGMOID);
  y = cx_net_conv_bn_act(n, cx_namef("%s.block.%d", b, layer).s, y, m->out, 1, 1, 1, CX_NL_NONE);
  if (m->stride != 1 || x.c != m->out) return y;
  y = cx_net_drop_path(n, cx_namef("%s.stochastic_depth", b).s, y, m->drop);
  return cx_net_add(n, cx_namef("%s.add", b).s, y, x);
}

/* variant: N of bN */
void cx_build_efficientnet(cx_net *n, const cx_model_cfg *cfg, cx_feat x) {
  double width = scaling[cfg->variant][0] * cfg->width, depth = scaling[cfg->variant][1];
  int total = 0, id = 0;
  for (int s = 0; s < 7; s++) total += repeats(stages[s][5], depth);
  x = cx_net_conv_bn_act(n, "features.0", x, adjust(stages[0][3], width), 3, 2, 1, CX_NL_SILU);
  for (int s = 0; s < 7; s++) {
    for (int i = 0; i < repeats(stages[s][5], depth); i++, id++) {
      mbconv m = {stages[s][0], stages[s][1], i ? 1 : stages[s][2], adjust(stages[s][4], width),
                  cfg->stochastic_depth * id / total};
      x = mb_block(n, cx_namef("features.%d.%d", s + 1, i).s, x, &m);
    }
  }
  x = cx_net_conv_bn_act(n, "features.8", x, 4 * x.c, 1, 1, 1, CX_NL_SILU);
  x = cx_net_pool_flatten(n, "avgpool", x);
  x = cx_net_dropout(n, "classifier.0", x, cfg->dropout);
  x = cx_net_linear(n, "classifier.1", "logits", x, cfg->classes, CX_LINEAR_UNIFORM_OUT);
  cx_graph_mark_output(n->g, x.v);
}
