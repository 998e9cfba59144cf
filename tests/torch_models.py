#!/usr/bin/python3
"""Writes PyTorch-exported ONNX models for the tests (channel pruning: tests/test_prune_channel.c;
quantization: tests/test_quantize_torch.sh).

usage: torch_models.py OUT_DIR NAME [NAME ...]

NAME is a torchvision model (resnet18, resnet50, mobilenet_v2, mobilenet_v3_small,
efficientnet_b0) with random weights and randomised BatchNorm statistics, or "concat_group": a
small graph with a Concat of two branches and a grouped convolution. Each is exported in eval
mode at 1x3x64x64 (batch dynamic) to OUT_DIR/NAME.onnx. Exit status 3: torch is missing.
"""
import os
import sys


def concat_group(torch):
    nn = torch.nn

    class ConcatGroup(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.a = nn.Sequential(nn.Conv2d(16, 12, 1), nn.BatchNorm2d(12), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(16, 20, 3, padding=1), nn.BatchNorm2d(20), nn.ReLU())
            # grouped: 32 -> 32 in 4 groups of 8, then depthwise with multiplier 2
            self.g = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=4), nn.BatchNorm2d(32),
                                   nn.ReLU())
            self.dw = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2, padding=1, groups=32),
                                    nn.BatchNorm2d(64), nn.ReLU6())
            self.pw = nn.Sequential(nn.Conv2d(64, 24, 1), nn.BatchNorm2d(24), nn.ReLU())
            self.fc = nn.Linear(24 * 8 * 8, 10)

        def forward(self, x):
            x = nn.functional.max_pool2d(self.stem(x), 2)
            x = torch.cat([self.a(x), self.b(x)], 1)
            x = self.g(x) + x
            x = nn.functional.max_pool2d(self.pw(self.dw(x)), 2)
            return self.fc(torch.flatten(x, 1))

    return ConcatGroup()


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"torch_models.py: {e} (Debian: python3-torch, python3-torchvision)",
              file=sys.stderr)
        return 3
    torch.manual_seed(0)
    out = argv[0]
    for name in argv[1:]:
        model = concat_group(torch) if name == "concat_group" else \
            getattr(torchvision.models, name)(num_classes=10)
        # random BN statistics and affine parameters, so that folded BNs are not identities
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
        model.eval()
        x = torch.randn(1, 3, 64, 64)
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(model, x, path, opset_version=13, input_names=["input"],
                          output_names=["logits"],
                          dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
