"""INT8 inference speed: our INT8 runtime against our FP32 program on the same model, and ONNX
Runtime on the same files, at one batch size and thread count.

For each built-in SPEC: `compress export-model SPEC --fold-bn` writes the FP32 file, ONNX Runtime's
quantize_static (tests/ort_quantize_qdq.py: INT8 weights per channel, INT8 activations per tensor,
zero point 0, random-normal calibration) the QDQ file. Then ROUNDS rounds, each timing in turn:
  ours FP32       compress profile FP32.onnx            (forward ms a step, mean of STEPS)
  ours INT8       compress profile QDQ.onnx             (the INT8 runtime: core/quant_fuse.c)
  ours QDQ float  CX_INT8=off compress profile QDQ.onnx (the float simulation, for reference)
  ORT FP32 / INT8 InferenceSession.run, mean of STEPS after a warm-up
and prints each configuration's median over the rounds (runs alternate, so drifting load on a
shared machine hits all alike) and the ratios. Waiting threads sleep on both sides
(OMP_WAIT_POLICY=passive for compress, allow_spinning 0 for ONNX Runtime): on a machine shared
with other jobs, spinning OpenMP threads that lose their core stall every barrier (measured here:
resnet20 FP32 242 ms a batch spinning, 70 ms passive).

usage: int8_speed.py [--compress build/compress] [--batch 32] [--threads 2] [--rounds 5]
                     [--steps 10] [--spin] [SPEC ...]"""
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from ort_quantize_qdq import quantize  # noqa: E402

SPECS = ["resnet20:classes=10,input=1x28x28", "mobilenet_v2:width=0.5,classes=10,input=1x28x28"]


def ours(args, path, int8=True):
    # --spin: our default, a short spin (cli/omp_env.c)
    env = dict(os.environ) if args.spin else dict(os.environ, OMP_WAIT_POLICY="passive")
    if not int8:
        env["CX_INT8"] = "off"
    out = subprocess.run([args.compress, "profile", path, "--batch", str(args.batch), "--threads",
                          str(args.threads), "--steps", str(args.steps), "--warmup", "2",
                          "--json"], env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["forward_ms"]


def session(path, threads, spin=False):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])


def ort_ms(sess, x, steps):
    feed = {sess.get_inputs()[0].name: x}
    sess.run(None, feed)
    t = time.perf_counter()
    for _ in range(steps):
        sess.run(None, feed)
    return (time.perf_counter() - t) / steps * 1e3


def bench(args, spec, tmp):
    fp32 = os.path.join(tmp, "fp32.onnx")
    int8 = os.path.join(tmp, "int8.onnx")
    subprocess.run([args.compress, "export-model", spec, fp32, "--fold-bn"], check=True,
                   capture_output=True)
    shape = list(session(fp32, 1).get_inputs()[0].shape[1:])  # after the symbolic batch
    rng = np.random.default_rng(0)
    quantize(fp32, int8, rng.standard_normal([64] + shape).astype(np.float32))
    x = rng.standard_normal([args.batch] + shape).astype(np.float32)
    s_fp32, s_int8 = session(fp32, args.threads, args.spin), session(int8, args.threads, args.spin)
    runs = {k: [] for k in ["ours FP32", "ours INT8", "ours QDQ float", "ORT FP32", "ORT INT8"]}
    for _ in range(args.rounds):
        runs["ours FP32"].append(ours(args, fp32))
        runs["ours INT8"].append(ours(args, int8))
        runs["ours QDQ float"].append(ours(args, int8, int8=False))
        runs["ORT FP32"].append(ort_ms(s_fp32, x, args.steps))
        runs["ORT INT8"].append(ort_ms(s_int8, x, args.steps))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"\n{spec}, batch {args.batch}, {args.threads} threads, median of {args.rounds} rounds "
          f"of {args.steps} steps (ms a batch; all rounds in brackets)")
    for k, v in runs.items():
        print(f"  {k:15s} {med[k]:9.2f}   [{', '.join(f'{t:.1f}' for t in v)}]")
    print(f"  ours INT8 / ours FP32 speed-up: {med['ours FP32'] / med['ours INT8']:.2f}x   "
          f"ORT INT8 / ORT FP32: {med['ORT FP32'] / med['ORT INT8']:.2f}x   "
          f"ours INT8 / ORT INT8: {med['ORT INT8'] / med['ours INT8']:.2f}x")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compress", default="build/compress")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--spin", action="store_true", help="each runtime's default waits "
                   "(bench/onnx_speed.py says why): for a quiet machine")
    p.add_argument("specs", nargs="*", default=SPECS)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for spec in args.specs:
            bench(args, spec, tmp)


if __name__ == "__main__":
    main()
