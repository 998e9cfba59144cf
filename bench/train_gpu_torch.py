#!/usr/bin/python3
"""PyTorch's GPU training throughput for the models scripts/gpu-check.sh compares with
`compress bench train --device cuda`: images/s of whole steps (forward, backward, SGD with
momentum) on random data, channels_last, under torch.autocast (fp16 with a GradScaler, or bf16)
or in fp32, median of three timed windows.

usage: train_gpu_torch.py MODEL [--batch 256] [--precision fp16|bf16|fp32] [--steps 10]
                          [--warmup 5] [--json]
MODEL: resnet50, mobilenet_v2, efficientnet_b0 (torchvision's, 1000 classes, 3x224x224).
"""
import argparse
import json
import statistics
import time

import torch
import torchvision


def measure(name, batch, precision, steps, warmup):
    torch.backends.cudnn.benchmark = True
    model = getattr(torchvision.models, name)(num_classes=1000).cuda()
    model = model.to(memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device="cuda")
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(warmup):
        step()
    rates = []
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rates.append(batch * steps / (time.perf_counter() - t0))
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ips = measure(a.model, a.batch, a.precision, a.steps, a.warmup)
    if a.json:
        print(json.dumps({"model": a.model, "batch": a.batch, "precision": a.precision,
                          "torch": torch.__version__, "images_per_s": round(ips, 1)}))
    else:
        print(f"{a.model}: PyTorch {torch.__version__} training, batch {a.batch}, channels_last, "
              f"{a.precision}: {ips:.1f} images/s")


if __name__ == "__main__":
    main()
