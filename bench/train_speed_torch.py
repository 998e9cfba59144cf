#!/usr/bin/python3
"""PyTorch's training throughput for the models bench/run_train.sh compares: images/s of whole
steps (forward, backward, SGD with momentum) on random data, NCHW and channels_last.

usage: train_speed_torch.py MODEL [--batch 128] [--threads 2] [--steps 20] [--warmup 3]
                            [--bf16] [--json]
MODEL, each as models/ builds it (bench/run_train.sh gives the matching compress spec):
  resnet20, mobilenet_v2_0.5        the Fashion-MNIST pair at 1x28x28 (MobileNetV2 width 0.5 with
                                    a stride-1 stem, as models/mobilenet_v2.c's small_input)
  resnet20_32, resnet56_32          CIFAR ResNets at 3x32x32
  mobilenet_v2, mobilenet_v2_0.5_32 MobileNetV2 width 1.0 / 0.5 at 3x32x32, stride-1 stem
  mobilenet_v3_small, efficientnet_b0   torchvision's, 10 classes, at 3x32x32
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_torch import ResNet20  # noqa: E402  (the same ResNet-20 as the accuracy reference)


def build(name):
    if name in ("resnet20", "resnet20_32", "resnet56_32"):
        cifar = name != "resnet20"
        return (ResNet20(channels=3 if cifar else 1, blocks=9 if name == "resnet56_32" else 3),
                (3, 32, 32) if cifar else (1, 28, 28))
    if name == "mobilenet_v3_small":
        return torchvision.models.mobilenet_v3_small(num_classes=10), (3, 32, 32)
    if name == "efficientnet_b0":
        return torchvision.models.efficientnet_b0(num_classes=10), (3, 32, 32)
    width = 0.5 if name.startswith("mobilenet_v2_0.5") else 1.0
    shape = (1, 28, 28) if name == "mobilenet_v2_0.5" else (3, 32, 32)
    m = torchvision.models.mobilenet_v2(num_classes=10, width_mult=width)
    stem = m.features[0][0]
    m.features[0][0] = torch.nn.Conv2d(shape[0], stem.out_channels, 3, 1, 1, bias=False)
    return m, shape


def measure(model, shape, batch, steps, warmup, channels_last, bf16):
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *shape).to(memory_format=fmt)
    y = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = 0.0
    for k in range(warmup + steps):
        if k == warmup:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return batch * steps / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    result = {}
    for layout in ("nchw", "channels_last"):
        model, shape = build(a.model)
        try:
            result[layout] = measure(model, shape, a.batch, a.steps, a.warmup,
                                     layout == "channels_last", a.bf16)
        except RuntimeError as e:  # PyTorch 1.13 has no bf16 backward for some ops (ReLU6)
            result[layout] = None
            result[layout + "_error"] = str(e).splitlines()[0]
    measured = [v for k, v in result.items() if k in ("nchw", "channels_last") and v]
    result["best"] = max(measured) if measured else None  # None: neither layout trains here
    if a.json:
        print(json.dumps(result))
    else:
        print(" ".join(f"{k} {v:.1f} img/s" if isinstance(v, float) else f"{k}: {v}"
                       for k, v in result.items()))


if __name__ == "__main__":
    main()
