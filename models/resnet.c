/* ResNet as torchvision builds it (v1.5: the stride of a bottleneck is on its 3x3 conv), and the
 * CIFAR ResNets of He et al. 2016 (section 4.2: a 3x3 stem of 16 channels, three stages of 16, 32
 * and 64 channels with n basic blocks each, depth 6n+2) with option-B shortcuts: a 1x1 conv and BN
 * where the shape changes, the identity elsewhere. Both use torchvision's ResNet names (conv1, bn1,
 * layerK.B.convJ, layerK.B.downsample.{0,1}, fc) and initialisation (kaiming normal fan_out for
 * convs, BN ones/zeros, nn.Linear's default for fc). */

#include "layers.h"

typedef struct resnet_shape {
  int stages, blocks[4];
  bool bottleneck, cifar;
} resnet_shape;

static bool resnet_shape_of(int depth, resnet_shape *s) {
  switch (depth) {
  case 18: *s = (resnet_shape){4, {2, 2, 2, 2}, false, false}; return true;
  case 34: *s = (resnet_shape){4, {3, 4, 6, 3}, false, false}; return true;
  case 50: *s = (resnet_shape){4, {3, 4, 6, 3}, true, false}; return true;
  case 101: *s = (resnet_shape){4, {3, 4, 23, 3}, true, false}; return true;
  case 20: case 32: case 44: case 56: case 110: {
    int k = (depth - 2) / 6;
    *s = (resnet_shape){3, {k, k, k}, false, true};
    return true;
  }
  default: return false;
  }
}

static cx_feat downsample(cx_net *n, const char *b, cx_feat x, int64_t cout, int stride) {
  x = cx_net_conv(n, cx_namef("%s.downsample.0", b).s, x, cout, 1, stride, 1, false);
  return cx_net_bn(n, cx_namef("%s.downsample.1", b).s, x);
}

static cx_feat basic_block(cx_net *n, const char *b, cx_feat x, int64_t planes, int stride) {
  cx_feat y = cx_net_conv(n, cx_namef("%s.conv1", b).s, x, planes, 3, stride, 1, false);
  y = cx_net_bn(n, cx_namef("%s.bn1", b).s, y);
  y = cx_net_act(n, cx_namef("%s.relu1", b).s, y, CX_NL_RELU);
  y = cx_net_conv(n, cx_namef("%s.conv2", b).s, y, planes, 3, 1, 1, false);
  y = cx_net_bn(n, cx_namef("%s.bn2", b).s, y);
  if (stride != 1 || x.c != planes) x = downsample(n, b, x, planes, stride);
  y = cx_net_add(n, cx_namef("%s.add", b).s, y, x);
  return cx_net_act(n, cx_namef("%s.relu2", b).s, y, CX_NL_RELU);
}

static cx_feat bottleneck(cx_net *n, const char *b, cx_feat x, int64_t planes, int stride) {
  cx_feat y = cx_net_conv(n, cx_namef("%s.conv1", b).s, x, planes, 1, 1, 1, false);
  y = cx_net_bn(n, cx_namef("%s.bn1", b).s, y);
  y = cx_net_act(n, cx_namef("%s.relu1", b).s, y, CX_NL_RELU);
  y = cx_net_conv(n, cx_namef("%s.conv2", b).s, y, planes, 3, stride, 1, false);
  y = cx_net_bn(n, cx_namef("%s.bn2", b).s, y);
  y = cx_net_act(n, cx_namef("%s.relu2", b).s, y, CX_NL_RELU);
  y = cx_net_conv(n, cx_namef("%s.conv3", b).s, y, planes * 4, 1, 1, 1, false);
  y = cx_net_bn(n, cx_namef("%s.bn3", b).s, y);
  if (stride != 1 || x.c != planes * 4) x = downsample(n, b, x, planes * 4, stride);
  y = cx_net_add(n, cx_namef("%s.add", b).s, y, x);
  return cx_net_act(n, cx_namef("%s.relu3", b).s, y, CX_NL_RELU);
}

bool cx_resnet_depth_valid(int depth) {
  resnet_shape s;
  return resnet_shape_of(depth, &s);
}

void cx_build_resnet(cx_net *n, const cx_model_cfg *cfg, cx_feat x) {
  resnet_shape s;
  if (!resnet_shape_of(cfg->variant, &s)) return; /* the zoo checked the depth */
  int64_t planes = s.cifar ? 16 : 64;
  x = cx_net_conv(n, "conv1", x, planes, s.cifar ? 3 : 7, s.cifar ? 1 : 2, 1, false);
  x = cx_net_bn(n, "bn1", x);
  x = cx_net_act(n, "relu", x, CX_NL_RELU);
  if (!s.cifar) x = cx_net_maxpool(n, "maxpool", x, 3, 2);
  for (int st = 0; st < s.stages; st++, planes *= 2) {
    for (int b = 0; b < s.blocks[st]; b++) {
      int stride = st > 0 && b == 0 ? 2 : 1;
      cx_name name = cx_namef("layer%d.%d", st + 1, b);
      x = s.bottleneck ? bottleneck(n, name.s, x, planes, stride)
                       : basic_block(n, name.s, x, planes, stride);
    }
  }
  x = cx_net_pool_flatten(n, "avgpool", x);
  x = cx_net_linear(n, "fc", "logits", x, cfg->classes, CX_LINEAR_TORCH_DEFAULT);
  cx_graph_mark_output(n->g, x.v);
}
