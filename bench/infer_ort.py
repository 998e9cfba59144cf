"""FP32 inference speed against ONNX Runtime, on the same ONNX files, batch sizes and threads.

Exports torchvision classifiers (random weights, randomised BatchNorm statistics, eval mode,
1000 classes, 3x224x224, batch dynamic; PyTorch's exporter folds BatchNorm into the convolutions
in eval mode) with the tests' exporter (tests/torch_models.py), then for each model and
batch size runs ROUNDS rounds, each timing in turn:
  ours        compress profile FILE --batch B   (forward ms a batch, mean of STEPS)
  before      the same with CX_FUSE=off CX_CONV_NHWC=nhwc: no inference fusions, and
              channels-last convolutions kept NHWC as training programs keep them (what
              inference ran before both); with --against BUILD/compress, that other build's
              program instead (fused as ours), to measure a change build against build
  ORT         InferenceSession.run, all graph optimizations, mean of STEPS after a warm-up
and prints each one's median over the rounds (the runs alternate, so drifting load on a shared
machine hits all alike), the spread, and the ratio ORT ms / ours ms (above 1: we are faster).
Both sides run on the same cores (taskset for compress, sched_setaffinity for ONNX Runtime, cores
0..THREADS-1) with sleeping waiters (OMP_WAIT_POLICY=passive; ONNX Runtime's allow_spinning 0),
as bench/int8_speed.py does: on a shared machine a spinning thread that loses its core stalls
every barrier. --spin keeps each runtime's default waits instead (ours a short spin,
cli/omp_env.c; ONNX Runtime spinning), for a quiet machine.

usage: infer_ort.py [--compress build/compress] [--against OTHER/compress] [--threads 1]
                    [--batches 1,32] [--rounds 3] [--steps 5] [--warmup 2] [--size 224] [--spin]
                    [--no-before]
                    [MODEL ...]
MODEL: resnet18 resnet50 mobilenet_v2 mobilenet_v3_large efficientnet_b0 convnext_tiny vit_b_16
(default: all; vit_b_16 takes 224x224 only)"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
          "convnext_tiny", "vit_b_16"]


def export(names, tmp, size):
    """The torchvision models, through the tests' exporter (tests/torch_models.py)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                          "torch_models.py")
    subprocess.run([sys.executable, script, "--size", str(size), "--classes", "1000", tmp] + names,
                   check=True, capture_output=True)


def cores(threads):
    return ",".join(str(c) for c in range(threads))


def ours(args, path, batch, fused, binary=None):
    env = dict(os.environ) if args.spin else dict(os.environ, OMP_WAIT_POLICY="passive")
    if not fused:
        env.update(CX_FUSE="off", CX_CONV_NHWC="nhwc")
    cmd = ["taskset", "-c", cores(args.threads), binary or args.compress, "profile", path, "--batch",
           str(batch), "--threads", str(args.threads), "--steps", str(args.steps), "--warmup",
           str(args.warmup),
           "--json"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["forward_ms"]


def session(path, threads, spin):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def ort_ms(sess, x, steps, warmup):
    feed = {sess.get_inputs()[0].name: x}
    for _ in range(warmup):
        sess.run(None, feed)
    t = time.perf_counter()
    for _ in range(steps):
        sess.run(None, feed)
    return (time.perf_counter() - t) / steps * 1e3


def fmt(v):
    return f"{statistics.median(v):9.2f}  [{min(v):.1f}-{max(v):.1f}]"


def bench(args, name, path):
    sess = session(path, args.threads, args.spin)
    rows = []
    for batch in args.batches:
        x = np.random.default_rng(0).standard_normal((batch, 3, args.size, args.size),
                                                     dtype=np.float32)
        runs = {"ours": [], "before": [], "ORT": []}
        for _ in range(args.rounds):
            runs["ours"].append(ours(args, path, batch, True))
            if not args.no_before:
                runs["before"].append(ours(args, path, batch, True, args.against) if args.against
                                      else ours(args, path, batch, False))
            runs["ORT"].append(ort_ms(sess, x, args.steps, args.warmup))
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        before = "" if args.no_before else (f"before {fmt(runs['before'])}  ",
                                            f"  (before {med['ORT'] / med['before']:.2f})")
        print(f"{name:20s} batch {batch:3d}: ours {fmt(runs['ours'])}  {before and before[0]}"
              f"ORT {fmt(runs['ORT'])}  ms;  ORT/ours {med['ORT'] / med['ours']:.2f}"
              f"{before and before[1]}", flush=True)
        rows.append(med["ORT"] / med["ours"])
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compress", default="build/compress")
    p.add_argument("--against", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--no-before", action="store_true", help="time ours and ORT only")
    p.add_argument("--spin", action="store_true", help="each runtime's default waits (quiet "
                   "machine)")
    p.add_argument("models", nargs="*", default=MODELS)
    args = p.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    args.compress = os.path.abspath(args.compress)
    if args.against:
        args.against = os.path.abspath(args.against)
    os.sched_setaffinity(0, set(range(args.threads)))
    print(f"{args.threads} thread(s) on cores {cores(args.threads)}, {args.size}x{args.size}, "
          f"{'spinning' if args.spin else 'sleeping'} waits, median [min-max] of {args.rounds} alternating rounds of {args.steps} steps")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            try:
                export([name], tmp, args.size)
            except subprocess.CalledProcessError as e:  # not in this torchvision, or no export
                print(f"{name}: not exported ({e.stderr.decode().strip().splitlines()[-1:]})")
                continue
            ratios += bench(args, name, os.path.join(tmp, name + ".onnx"))
    if ratios:
        print(f"median ORT/ours over {len(ratios)} model-batch pairs: "
              f"{statistics.median(ratios):.2f}, lowest {min(ratios):.2f}")


if __name__ == "__main__":
    main()
