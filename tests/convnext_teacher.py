"""A small ConvNeXt-style classifier for 1x16x16 images, exported by the PyTorch the tests
install, for test_pipeline_convnext.sh.

    convnext_teacher.py OUT.onnx

ConvNeXt's block as torchvision writes it (depthwise 7x7, LayerNorm over channels in
channels-last order, Linear up, GELU, Linear down, layer scale, residual) after a 4x4 patch stem
with a channels LayerNorm; opset 17 (LayerNormalization, GELU as Erf), random weights.
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class ChannelsNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.up = nn.Linear(c, 4 * c)
        self.down = nn.Linear(4 * c, c)
        self.scale = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.down(F.gelu(self.up(y))) * self.scale
        return x + y.permute(0, 3, 1, 2)


class Net(nn.Module):
    def __init__(self, c=32, classes=10):
        super().__init__()
        self.stem = nn.Conv2d(1, c, 4, 4)
        self.stem_norm = ChannelsNorm(c)
        self.blocks = nn.Sequential(Block(c), Block(c))
        self.norm = nn.LayerNorm(c)
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.blocks(self.stem_norm(self.stem(x)))
        return self.fc(self.norm(x.mean((2, 3))))


def main():
    torch.manual_seed(0)
    model = Net().eval()
    torch.onnx.export(model, torch.randn(1, 1, 16, 16), sys.argv[1], opset_version=17,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})


if __name__ == "__main__":
    main()
