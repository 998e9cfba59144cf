#!/usr/bin/python3
"""Times PyTorch on the convolution layers that bench_conv measured and prints the joint table.

Reads bench_conv's tab-separated lines from the files named (stdin when none; with several files,
each layer's best is kept), times forward + backward (dX, dW) of the same layer in PyTorch with the
same batch and thread count, in NCHW and channels_last, and compares compress against the faster
layout. --repeat n times PyTorch n times and keeps the best.

    build/bench/bench_conv | /usr/bin/python3 bench/conv_torch.py
"""
import sys
import time

# Debian's torch is built against Debian's numpy; a newer numpy installed by pip under /usr/local
# would shadow it and make torch print import errors, so Debian's packages go first.
sys.path.sort(key=lambda p: p.startswith("/usr/local/"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def best_step(x, w, dy, stride, pad, group, seconds):
    """Best time of one forward + backward step, after a warm-up step."""
    best, start, i = float("inf"), time.perf_counter(), 0
    while i < 4 or time.perf_counter() - start < seconds:
        x.grad = None
        w.grad = None
        t0 = time.perf_counter()
        y = F.conv2d(x, w, None, stride, pad, 1, group)
        y.backward(dy)
        t = time.perf_counter() - t0
        if i > 0:
            best = min(best, t)
        i += 1
    return best


def torch_gflops(batch, c, h, wd, m, k, stride, group, seconds):
    pad = k // 2
    oh = (h + 2 * pad - k) // stride + 1
    ow = (wd + 2 * pad - k) // stride + 1
    flops = 3 * 2 * batch * m * oh * ow * (c // group) * k * k
    result = {}
    for layout in ("nchw", "channels_last"):
        fmt = torch.contiguous_format if layout == "nchw" else torch.channels_last
        x = torch.rand(batch, c, h, wd).sub_(0.5).to(memory_format=fmt).requires_grad_()
        w = torch.rand(m, c // group, k, k).sub_(0.5).to(memory_format=fmt).requires_grad_()
        dy = torch.rand(batch, m, oh, ow).sub_(0.5).to(memory_format=fmt)
        result[layout] = flops / best_step(x, w, dy, stride, pad, group, seconds) * 1e-9
    return result


def read_rows(paths):
    """Layer lines of bench_conv, the best compress figures over all files kept."""
    rows = {}
    for src in [open(p) for p in paths] or [sys.stdin]:
        for line in src:
            if not line.strip() or line.startswith("#"):
                continue
            r = line.rstrip("\n").split("\t")
            best = rows.setdefault(r[0], r)
            for k in (10, 11):
                if r[k] != "-" and float(r[k]) > float(best[k]):
                    best[k] = r[k]
    return list(rows.values())


def main():
    args = sys.argv[1:]
    repeat = 1
    if args[:1] == ["--repeat"]:
        repeat, args = int(args[1]), args[2:]
    rows = read_rows(args)
    if not rows:
        sys.exit("conv_torch.py: no bench_conv lines on input")
    threads = int(rows[0][9])
    torch.set_num_threads(threads)
    print(f"forward + backward (dX, dW), batch {rows[0][1]}, {threads} threads, "
          f"torch {torch.__version__}; GFLOP/s (higher is better)")
    head = f"{'layer':28} {'compress':>9} {'torch':>9} {'layout':>13} {'ratio':>6}   {'oneDNN dw':>9}"
    print(head)
    print("-" * len(head))
    ratios = []
    for r in rows:
        name = r[0]
        batch, c, h, wd, m, k, stride, group = map(int, r[1:9])
        ours = float(r[10])
        t = {}
        for _ in range(repeat):
            for layout, g in torch_gflops(batch, c, h, wd, m, k, stride, group, 0.4).items():
                t[layout] = max(g, t.get(layout, 0.0))
        layout = max(t, key=t.get)
        ratio = ours / t[layout]
        ratios.append(ratio)
        dnnl = r[11] if r[11] != "-" else ""
        print(f"{name:28} {ours:9.1f} {t[layout]:9.1f} {layout:>13} {ratio:6.2f}   {dnnl:>9}",
              flush=True)
    geo = 1.0
    for x in ratios:
        geo *= x
    print(f"geometric mean of ratio (compress / best torch): {geo ** (1 / len(ratios)):.2f}")
    print("oneDNN dw: compress with depthwise convolutions sent to oneDNN instead "
          "(CX_CONV_DEPTHWISE=dnnl)")


if __name__ == "__main__":
    main()
