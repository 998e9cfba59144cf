"""Inference speed of several ONNX files, in our runtime and in ONNX Runtime, alternating: the
pipeline's before/after question (is the pruned student faster than the student? the INT8 file
than the FP32 one?) answered on a shared machine, where the report's row-by-row timings drift.

Each of ROUNDS rounds times every file in turn, ours (`compress profile FILE --json`, forward ms
a batch, mean of STEPS after 2 warm-up steps) then ONNX Runtime (InferenceSession.run, mean of
STEPS after a warm-up), with the same batch and thread count and waiting threads asleep on both
sides (bench/int8_speed.py says why), or with --spin each runtime's own default (ours: a short
spin, cli/omp_env.c; ONNX Runtime: spinning), for a quiet machine: a sleeping thread takes tens
of microseconds to wake at every op, which on a small model at batch 32 is a third of the time
and hides what a smaller model saves. Prints each file's median over the rounds and its speed-up
over the first file, in each runtime.

usage: onnx_speed.py [--compress build/compress] [--batch 32] [--threads 2] [--rounds 7]
                     [--steps 20] [--spin] BASE.onnx OTHER.onnx ..."""
import argparse
import statistics

import numpy as np

from int8_speed import ort_ms, ours, session


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compress", default="build/compress")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--spin", action="store_true")
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    sessions = [session(f, args.threads, args.spin) for f in args.files]
    shape = [args.batch] + list(sessions[0].get_inputs()[0].shape[1:])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    runs = {(f, k): [] for f in args.files for k in ("ours", "ORT")}
    for _ in range(args.rounds):
        for f, s in zip(args.files, sessions):
            runs[(f, "ours")].append(ours(args, f))
            runs[(f, "ORT")].append(ort_ms(s, x, args.steps))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"batch {args.batch}, {args.threads} threads, {'spinning' if args.spin else 'passive'} "
          f"waits, median of {args.rounds} rounds of "
          f"{args.steps} steps (ms a batch; speed-up over {args.files[0]})")
    width = max(len(f) for f in args.files)
    for k in ("ours", "ORT"):
        for f in args.files:
            v = runs[(f, k)]
            print(f"  {k:4s} {f:{width}s} {med[(f, k)]:8.2f} ms  "
                  f"{med[(args.files[0], k)] / med[(f, k)]:5.2f}x   "
                  f"[{', '.join(f'{t:.1f}' for t in v)}]")


if __name__ == "__main__":
    main()
