#!/usr/bin/python3
"""PyTorch reference for the real-data training recipe (issue 6, "Real data").

ResNet-20 as models/resnet.c builds it (He et al. 2016, CIFAR-style: a 3x3 stem of 16 channels,
three stages of 16, 32 and 64 channels with 3 basic blocks each, option-B shortcuts: a 1x1 conv
and BN where the shape changes; torchvision's initialisation), for 1x28x28 inputs and 10 classes,
trained on Fashion-MNIST with the recipe tests/test_train.c and `compress train` use:

    2 epochs, batch 128 (the last partial batch dropped), SGD momentum 0.9, lr 0.1 with a
    per-step cosine schedule to zero, weight decay 5e-4 (not on BN parameters and biases, the
    compress default; --decay-all for torch.optim.SGD's every parameter), pad-2 random crop and
    horizontal flip, normalisation mean 0.286 std 0.353, torch.set_num_threads(2).

Prints the test top-1 after each epoch, the training time and training images/s. The IDX files
are read directly (numpy + gzip) from --data (Debian's dataset-fashion-mnist by default).

    /usr/bin/python3 bench/train_torch.py                     # the full recipe
    /usr/bin/python3 bench/train_torch.py --channels-last
    /usr/bin/python3 bench/train_torch.py --max-steps 20 --eval-max 1000   # a smoke run
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.286, 0.353


def read_idx(path, magic, header):
    """An IDX file (gzipped or raw) as a uint8 array; the header gives its dimensions."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if int.from_bytes(data[:4], "big") != magic:
        raise SystemExit(f"{path}: not an IDX file of the expected kind")
    dims = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(header)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * header)
    if arr.size != int(np.prod(dims)):
        raise SystemExit(f"{path}: {arr.size} bytes of data, expected {int(np.prod(dims))}")
    return arr.reshape(dims)


def load_split(root, prefix):
    images = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"), 0x803, 3)
    labels = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"), 0x801, 1)
    if len(images) != len(labels):
        raise SystemExit(f"{root}: {len(images)} {prefix} images but {len(labels)} labels")
    return torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))


class BasicBlock(nn.Module):
    def __init__(self, cin, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:  # option B: a projection where the shape changes
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet20(nn.Module):
    def __init__(self, channels=1, classes=10, blocks=3):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, cin = [], 16
        for stage, planes in enumerate((16, 32, 64)):
            stage_blocks = []
            for b in range(blocks):
                stage_blocks.append(BasicBlock(cin, planes, 2 if stage > 0 and b == 0 else 1))
                cin = planes
            layers.append(nn.Sequential(*stage_blocks))
        self.layer1, self.layer2, self.layer3 = layers
        self.fc = nn.Linear(64, classes)
        for m in self.modules():  # torchvision's ResNet initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def augment(images, gen):
    """Pad-2 random crop and horizontal flip of uint8 [N,28,28] images, then normalisation:
    padding is with zero pixels, before normalisation, as the compress loader does."""
    n, h, w = images.shape
    padded = F.pad(images, (2, 2, 2, 2))
    dy = torch.randint(0, 5, (n,), generator=gen)
    dx = torch.randint(0, 5, (n,), generator=gen)
    flip = torch.rand(n, generator=gen) < 0.5
    rows = dy[:, None] + torch.arange(h)
    cols = torch.arange(w).expand(n, w)
    cols = dx[:, None] + torch.where(flip[:, None], w - 1 - cols, cols)
    out = padded[torch.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return normalise(out)


def normalise(images):
    return ((images.float() / 255.0 - MEAN) / STD).unsqueeze(1)


def param_groups(model, wd, decay_all):
    if decay_all:
        return [{"params": list(model.parameters()), "weight_decay": wd}]
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def evaluate(model, images, labels, fmt, batch=500):
    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(images), batch):
            x = normalise(images[i:i + batch]).contiguous(memory_format=fmt)
            logits = model(x)
            y = labels[i:i + batch]
            loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
    model.train()
    return 100.0 * correct / len(images), loss / len(images)


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x_train, y_train = load_split(args.data, "train")
    x_test, y_test = load_split(args.data, "t10k")
    if args.eval_max:
        x_test, y_test = x_test[:args.eval_max], y_test[:args.eval_max]
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = ResNet20().to(memory_format=fmt)
    opt = torch.optim.SGD(param_groups(model, args.wd, args.decay_all), lr=args.lr,
                          momentum=0.9)
    per_epoch = len(x_train) // args.batch
    total = per_epoch * args.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda t: 0.5 * (1 + math.cos(math.pi * min(t, total) / total)))
    gen = torch.Generator().manual_seed(args.seed)
    step, images, train_s, top1, loss_v = 0, 0, 0.0, float("nan"), float("nan")
    print(f"ResNet-20 on Fashion-MNIST: {args.epochs} epochs x {per_epoch} steps, batch "
          f"{args.batch}, {args.threads} threads, {'channels_last' if args.channels_last else 'NCHW'}"
          f", torch {torch.__version__}", flush=True)
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train), generator=gen)
        t0 = time.perf_counter()
        for b in range(per_epoch):
            if args.max_steps and step >= args.max_steps:
                break
            idx = order[b * args.batch:(b + 1) * args.batch]
            x = augment(x_train[idx], gen).contiguous(memory_format=fmt)
            loss = F.cross_entropy(model(x), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            images += len(idx)
            if step % args.log_every == 0:
                print(f"  step {step}/{total}  loss {loss.item():.4f}  "
                      f"lr {sched.get_last_lr()[0]:.4f}", flush=True)
        train_s += time.perf_counter() - t0
        top1, loss_v = evaluate(model, x_test, y_test, fmt)
        print(f"epoch {epoch + 1}: test top-1 {top1:.2f}%, loss {loss_v:.4f}, "
              f"{train_s:.1f} s training so far", flush=True)
        if args.max_steps and step >= args.max_steps:
            break
    ips = images / train_s if train_s > 0 else 0.0
    print(f"test top-1 {top1:.2f}% ({len(x_test)} images), training {train_s:.1f} s, "
          f"{ips:.0f} images/s")
    if args.json:
        print(json.dumps({"framework": "torch", "torch": torch.__version__, "model": "resnet20",
                          "epochs": args.epochs, "steps": step, "batch": args.batch,
                          "threads": args.threads, "channels_last": args.channels_last,
                          "top1": top1, "test_loss": loss_v, "train_seconds": train_s,
                          "images_per_s": ips}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--wd", type=float, default=5e-4)
    p.add_argument("--decay-all", action="store_true",
                   help="weight decay on BN parameters and biases too")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (smoke runs)")
    p.add_argument("--eval-max", type=int, default=0, help="evaluate on the first N test images")
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--json", action="store_true", help="also print one JSON line")
    train(p.parse_args())


if __name__ == "__main__":
    main()
