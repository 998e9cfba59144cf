"""Teachers of today's kinds, exported by the PyTorch the tests install, for test_torch_teachers.

    torch_teachers.py OUT_DIR MODEL [MODEL ...]

For each MODEL writes OUT_DIR/MODEL.onnx (batch dimension symbolic), MODEL_x.npy (an input of
batch 2) and MODEL_y.npy (PyTorch's eval-mode output for it; row 0 is the batch-1 answer).
Models with a training check also write MODEL_r.npy (a random output gradient R),
MODEL_dw.npy: d sum(R * output) / d W for one parameter W (with batch statistics, as a training
step computes it) and MODEL_dw.txt: W's name. Weights are random (no download); BatchNorm statistics,
ConvNeXt's layer scales and ViT's class token and zero-initialised head are randomised so that
no block is close to the identity and no output is constant.
"""
import os
import re
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models.swin_transformer import SwinTransformer
from torchvision.models.vision_transformer import VisionTransformer


class OptionA(nn.Module):
    """The CIFAR ResNet block of He et al. with shortcut option A: the identity subsampled with
    x[:, :, ::2, ::2] and zero channels padded on (the form of the usual CIFAR teachers)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.pad = (cout - cin) // 2 if stride != 1 or cin != cout else None

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        if self.pad is None:
            s = x
        else:
            s = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad), "constant", 0)
        return F.relu(y + s)


class CifarResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64), blocks=1, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                layers.append(OptionA(cin, w, 2 if i > 0 and b == 0 else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def randomize(model, gen):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2, generator=gen)
                m.running_var.uniform_(0.5, 1.5, generator=gen)
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.uniform_(-0.2, 0.2, generator=gen)
            if hasattr(m, "layer_scale"):
                m.layer_scale.uniform_(0.2, 1.0, generator=gen)
            if hasattr(m, "class_token"):
                m.class_token.normal_(0, 0.5, generator=gen)
            # torchvision zero-initialises ViT's head: every output would be 0
            if isinstance(m, nn.Linear) and not m.weight.any():
                m.weight.normal_(0, 0.2, generator=gen)


# name: (constructor, input size, the parameter whose gradient a training step checks or None)
MODELS = {
    # conv1's gradient flows back through every option-A shortcut
    "resnet_option_a": (lambda: CifarResNet(), 32, "conv1.weight"),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(), 64, None),
    # torchvision's VisionTransformer class at a small size (vit_b_16 is the same graph, wider)
    "vit_small": (lambda: VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                            hidden_dim=32, mlp_dim=64, num_classes=10), 32,
                  "class_token"),  # through Gather (x[:, 0]), the Expand, attention, LayerNorm
    # the same at opset 13, which has no LayerNormalization: PyTorch writes ReduceMean, Sub,
    # Pow(x, 2), Sqrt, Div
    "vit_small_op13": (lambda: VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                 num_heads=2, hidden_dim=32, mlp_dim=64,
                                                 num_classes=10), 32, "class_token"),
    # torchvision's SwinTransformer class, small: 8x8 patches in 4x4 windows, so the second block
    # of stage 1 shifts its windows (the mask built with ScatterND, Mod, Transpose)
    "swin_small": (lambda: SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2],
                                           num_heads=[2, 4], window_size=[4, 4],
                                           stochastic_depth_prob=0.0, num_classes=10), 32,
                   "features.0.0.weight"),
    # the torchvision models themselves (too slow to export for the test suite, a minute or more
    # each; run `test_torch_teachers swin_t vit_b_16 efficientnet_v2_s` by hand)
    "swin_t": (lambda: torchvision.models.swin_t(), 64, None),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(), 224, None),
    "efficientnet_v2_s": (lambda: torchvision.models.efficientnet_v2_s(), 64, None),
    # timm's, by hand too, where timm is installed (it is not among the tests' packages; 0.9.16
    # works with this PyTorch: pip install --no-deps timm==0.9.16)
    "deit_tiny": (lambda: timm_model("deit_tiny_patch16_224"), 224, None),
    "deit_tiny_distilled": (lambda: timm_model("deit_tiny_distilled_patch16_224"), 224, None),
    "levit_128s": (lambda: timm_model("levit_128s"), 224, None),
}


def timm_model(name):
    import timm  # only for the timm entries
    return timm.create_model(name, pretrained=False)


def export(name, out):
    make, size, train = MODELS[name]
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = make()
    randomize(model, gen)
    x = torch.randn(2, 3, size, size, generator=gen)
    model.eval()
    with torch.no_grad():
        y = model(x)
    path = os.path.join(out, name)
    at = re.search(r"_op(\d+)$", name)  # a name ending in _opN exports at opset N
    opset = int(at.group(1)) if at else 17
    torch.onnx.export(model, x, path + ".onnx", opset_version=opset,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "N"}, "output": {0: "N"}})
    np.save(path + "_x.npy", x.numpy())
    np.save(path + "_y.npy", y.numpy())
    if train:
        model.train()
        r = torch.randn(y.shape, generator=gen)
        model.zero_grad()
        (model(x) * r).sum().backward()
        np.save(path + "_r.npy", r.numpy())
        np.save(path + "_dw.npy", model.get_parameter(train).grad.numpy())
        with open(path + "_dw.txt", "w") as f:
            f.write(train)


def main():
    os.makedirs(sys.argv[1], exist_ok=True)
    for name in sys.argv[2:]:
        export(name, sys.argv[1])


if __name__ == "__main__":
    main()
