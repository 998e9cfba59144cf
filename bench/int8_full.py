"""The INT8 stage of a pipeline run against ONNX Runtime's own quantization, on real data: the
figures of the quantization issue's acceptance, from a pipeline's output folder.

Reads OUT_DIR/report.json for the validation set; FP32 is the quantize stage's input
(student_pruned.onnx, else student.onnx), INT8 is student_int8.onnx. Then:
  - the peer: ONNX Runtime's quantize_static on the FP32 file (QDQ, per-channel, INT8 weights
    and activations, symmetric as ours) calibrated on the same images the pipeline calibrates on:
    the first BATCHES x CALIB_BATCH training images in file order, fed as the file's metadata says;
  - top-1 on the validation set in ONNX Runtime: FP32, ours INT8, the peer; ours INT8 also in our
    runtime (compress infer), and how many predictions our runtime and ONNX Runtime share;
  - file sizes;
  - speed at --batch (32) with --threads (2), ROUNDS rounds alternating: ONNX Runtime on the
    FP32 file, ours and the peer (waiting threads sleep: allow_spinning 0), and our runtime on
    FP32 and INT8 (compress profile, OMP_WAIT_POLICY=passive), as bench/int8_speed.py times
    them; medians and ratios. --spin: each runtime's default waits instead (quiet machines).

usage: int8_full.py OUT_DIR --train TRAIN.h5 [--compress build/compress] [--batches 32]
                    [--calib-batch 128] [--threads 2] [--batch 32] [--rounds 5] [--steps 20]
                    [--spin]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from onnx_top1 import preprocessing  # noqa: E402
from int8_speed import ort_ms, ours, session  # noqa: E402  (bench/, this script's folder)


def feed(path, images):
    """images [n, H, W, C] as stored, into the file's NCHW input as its metadata says."""
    scale, mean, std = preprocessing(session(path, 1), path)
    mean = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(std, np.float32).reshape(1, -1, 1, 1)
    x = images.astype(np.float32) * np.float32(scale)
    return np.ascontiguousarray((x.transpose(0, 3, 1, 2) - mean) / std, np.float32)


def ort_logits(path, x, threads, optimized=True):
    """optimized=False: ONNX Runtime's graph optimizations off, so Q/DQ run as the ONNX ops
    define them (float), not as its fused integer kernels."""
    s = session(path, threads)
    if not optimized:
        o = ort.SessionOptions()
        o.intra_op_num_threads = threads
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i:i + 500]})[0] for i in range(0, len(x), 500)])


def our_logits(args, path, x, tmp):
    outs = []
    for i in range(0, len(x), 1000):
        xin, xout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
        np.save(xin, x[i:i + 1000])
        subprocess.run([args.compress, "infer", path, "-i", xin, "-o", xout], check=True,
                       capture_output=True, env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
        outs.append(np.load(xout))
    return np.concatenate(outs)


class Reader(CalibrationDataReader):
    def __init__(self, name, data, batch):
        self.items = iter([{name: data[i:i + batch]} for i in range(0, len(data), batch)])

    def get_next(self):
        return next(self.items, None)


def peer(fp32, out, calib, batch):
    name = session(fp32, 1).get_inputs()[0].name
    quantize_static(fp32, out, Reader(name, calib, batch), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--train", required=True)
    p.add_argument("--compress", default="build/compress")
    p.add_argument("--batches", type=int, default=32)
    p.add_argument("--calib-batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--spin", action="store_true", help="each runtime's default waits "
                   "(onnx_speed.py says why): for a quiet machine")
    args = p.parse_args()
    report = json.load(open(os.path.join(args.out, "report.json"), encoding="utf-8"))
    val = report["validation"]
    with h5py.File(val["data"], "r") as f:
        g = f[val["part"]] if val["part"] else f
        images, labels = g["images"][()], g["labels"][()]
    with h5py.File(args.train, "r") as f:
        calib_images = f["images"][:args.batches * args.calib_batch]
    fp32 = next(os.path.join(args.out, n) for n in ["student_pruned.onnx", "student.onnx"]
                if os.path.exists(os.path.join(args.out, n)))
    int8 = os.path.join(args.out, "student_int8.onnx")
    x = feed(fp32, images)
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ort_quantize_static.onnx")
        peer(fp32, ref, feed(fp32, calib_images), args.calib_batch)
        logits = {k: ort_logits(v, x, args.threads) for k, v in
                  [("FP32", fp32), ("ours INT8", int8), ("ORT quantize_static", ref)]}
        ours_rt = our_logits(args, int8, x, tmp)
        sizes = {k: os.path.getsize(v) for k, v in
                 [("FP32", fp32), ("ours INT8", int8), ("ORT quantize_static", ref)]}
        print(f"{args.out}: FP32 {os.path.basename(fp32)}, INT8 student_int8.onnx; "
              f"{len(labels)} validation images; peer calibrated on {len(calib_images)} "
              f"training images")
        print("\ntop-1 in ONNX Runtime (file size)")
        for k, v in logits.items():
            acc = 100.0 * float((v.argmax(1) == labels).mean())
            print(f"  {k:20s} {acc:6.2f}%   ({sizes[k] / 1024:.0f} KiB, "
                  f"{sizes[k] / sizes['FP32']:.0%} of FP32)")
        plain = ort_logits(int8, x, args.threads, optimized=False)
        agree = float((ours_rt.argmax(1) == logits["ours INT8"].argmax(1)).mean())
        agree_plain = float((ours_rt.argmax(1) == plain.argmax(1)).mean())
        acc_rt = 100.0 * float((ours_rt.argmax(1) == labels).mean())
        print(f"  ours INT8 in our INT8 runtime: {acc_rt:.2f}%; predictions shared with ONNX "
              f"Runtime: {100 * agree:.2f}% (with its graph optimizations off, the ONNX ops "
              f"as defined: {100 * agree_plain:.2f}%)")
        xs = x[:args.batch]
        sessions = {k: session(v, args.threads, args.spin) for k, v in
                    [("ORT FP32", fp32), ("ORT ours INT8", int8), ("ORT quantize_static", ref)]}
        runs = {k: [] for k in ["ORT FP32", "ORT ours INT8", "ORT quantize_static",
                                "our runtime FP32", "our runtime INT8"]}
        for _ in range(args.rounds):
            for k, sess in sessions.items():
                runs[k].append(ort_ms(sess, xs, args.steps))
            runs["our runtime FP32"].append(ours(args, fp32))
            runs["our runtime INT8"].append(ours(args, int8))
        med = {k: statistics.median(v) for k, v in runs.items()}
        print(f"\nms a batch of {args.batch}, {args.threads} threads, median of "
              f"{args.rounds} rounds (all rounds in brackets)")
        for k, v in runs.items():
            print(f"  {k:22s} {med[k]:8.2f}   [{', '.join(f'{t:.2f}' for t in v)}]")
        print(f"  ORT: ours INT8 {med['ORT FP32'] / med['ORT ours INT8']:.2f}x FP32, "
              f"{med['ORT quantize_static'] / med['ORT ours INT8']:.2f}x quantize_static's; "
              f"our runtime: INT8 {med['our runtime FP32'] / med['our runtime INT8']:.2f}x FP32")


if __name__ == "__main__":
    main()
