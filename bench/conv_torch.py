#!/usr/bin/python3
"""Convolution speed, compress against PyTorch, layer by layer.

Runs bench_conv on one layer at a time and, right after it, PyTorch on the same layer (forward +
backward with dX and dW, same batch and thread count, NCHW and channels_last), so that both see the
same machine; --repeat n does that n times and keeps each side's best. Prints one table comparing
compress with PyTorch's faster layout. When the bench_conv arguments include --cpu-time, PyTorch is
timed by CPU time too.

    /usr/bin/python3 bench/conv_torch.py [--repeat n] build/bench/bench_conv [bench_conv args...]
"""
import subprocess
import sys
import time

# Debian's torch is built against Debian's numpy; a newer numpy installed by pip under /usr/local
# would shadow it and make torch print import errors, so Debian's packages go first.
sys.path.sort(key=lambda p: p.startswith("/usr/local/"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SECONDS = 0.4
clock = time.perf_counter


def best_step(x, w, dy, stride, pad, group):
    """Best time of one forward + backward step, after a warm-up step."""
    best, start, i = float("inf"), clock(), 0
    while i < 4 or clock() - start < SECONDS:
        x.grad = None
        w.grad = None
        t0 = clock()
        y = F.conv2d(x, w, None, stride, pad, 1, group)
        y.backward(dy)
        t = clock() - t0
        if i > 0:
            best = min(best, t)
        i += 1
    return best


def torch_gflops(batch, c, h, wd, m, k, stride, group):
    """GFLOP/s of forward + dX + dW by layout."""
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
        result[layout] = flops / best_step(x, w, dy, stride, pad, group) * 1e-9
    return result


def bench_conv(cmd, *extra):
    """bench_conv's layer lines (tab-separated fields)."""
    out = subprocess.run(cmd + list(extra), check=True, capture_output=True, text=True).stdout
    return [ln.split("\t") for ln in out.splitlines() if ln and not ln.startswith("#")]


def best(a, b):
    return b if a == "-" or (b != "-" and float(b) > float(a)) else a


def main():
    global clock
    args = sys.argv[1:]
    repeat = 1
    if args[:1] == ["--repeat"]:
        repeat, args = int(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    if "--cpu-time" in args:
        clock = time.process_time
    layers = bench_conv(args, "--list")
    threads = int(layers[0][9])
    torch.set_num_threads(threads)
    print(f"forward + backward (dX, dW), batch {layers[0][1]}, {threads} threads, "
          f"torch {torch.__version__}, best of {repeat}, "
          f"{'CPU time' if clock is time.process_time else 'wall clock'}; GFLOP/s (higher is better)")
    head = f"{'layer':28} {'compress':>9} {'torch':>9} {'layout':>13} {'ratio':>6}   {'oneDNN dw':>9}"
    print(head)
    print("-" * len(head))
    ratios = []
    for i, r in enumerate(layers):
        batch, c, h, wd, m, k, stride, group = map(int, r[1:9])
        ours, dnnl, t = "-", "-", {}
        for _ in range(repeat):
            line = bench_conv(args, "--layer", str(i))[0]
            ours, dnnl = best(ours, line[10]), best(dnnl, line[11])
            for layout, g in torch_gflops(batch, c, h, wd, m, k, stride, group).items():
                t[layout] = max(g, t.get(layout, 0.0))
        layout = max(t, key=t.get)
        ratio = float(ours) / t[layout]
        ratios.append(ratio)
        print(f"{r[0]:28} {float(ours):9.1f} {t[layout]:9.1f} {layout:>13} {ratio:6.2f}   "
              f"{'' if dnnl == '-' else float(dnnl):>9}", flush=True)
    geo = 1.0
    for x in ratios:
        geo *= x
    print(f"geometric mean of ratio (compress / best torch): {geo ** (1 / len(ratios)):.2f}")
    print("oneDNN dw: compress with depthwise convolutions sent to oneDNN instead "
          "(CX_CONV_DEPTHWISE=dnnl)")


if __name__ == "__main__":
    main()
