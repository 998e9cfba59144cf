#!/usr/bin/python3
"""Scores a pipeline's ONNX models with ONNX Runtime and compares with the report's top-1.

usage: onnx_top1.py OUT_DIR [MODEL_NAME ...]

Reads OUT_DIR/report.json for the models (default: every one with a top-1) and the validation
set it names; feeds each model as its own ONNX metadata_props say (compress.input_layout,
input_scale, input_mean, input_std), reading the images with h5py, so that nothing here comes
from compress's code. A model's top-1 must be within 0.05 points of the report's.
Exit status: 0 all agree, 1 a model disagrees or fails, 2 usage error, 3 onnxruntime, numpy or
h5py is missing.
"""
import json
import os
import sys

TOLERANCE = 0.05  # points of top-1


def number(text):
    """'1/255' or '0.5'."""
    if "/" in text:
        a, b = text.split("/")
        return float(a) / float(b)
    return float(text)


def preprocessing(sess, path):
    meta = sess.get_modelmeta().custom_metadata_map
    need = ["compress.input_layout", "compress.input_scale", "compress.input_mean",
            "compress.input_std"]
    missing = [k for k in need if k not in meta]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)} in metadata_props")
    if meta["compress.input_layout"] != "NCHW":
        raise ValueError(f"{path}: layout {meta['compress.input_layout']}, expected NCHW")
    mean = [float(v) for v in meta["compress.input_mean"].split(",")]
    std = [float(v) for v in meta["compress.input_std"].split(",")]
    return number(meta["compress.input_scale"]), mean, std


def top1(path, images, labels, np, ort):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    scale, mean, std = preprocessing(sess, path)
    mean = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
    std = np.asarray(std, np.float32).reshape(1, -1, 1, 1)
    name = sess.get_inputs()[0].name
    correct = 0
    for at in range(0, len(labels), 500):
        x = images[at:at + 500].astype(np.float32) * np.float32(scale)   # [n, H, W, C]
        x = (x.transpose(0, 3, 1, 2) - mean) / std                         # [n, C, H, W]
        logits = sess.run(None, {name: np.ascontiguousarray(x, np.float32)})[0]
        correct += int((logits.argmax(axis=1) == labels[at:at + 500]).sum())
    return 100.0 * correct / len(labels)


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import h5py
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnx_top1.py: {e}; run scripts/install-deps.sh", file=sys.stderr)
        return 3
    out, wanted = argv[0], argv[1:]
    report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
    val = report["validation"]
    with h5py.File(val["data"], "r") as f:
        group = f[val["part"]] if val["part"] else f
        images, labels = group["images"][()], group["labels"][()]
    models = [m for m in report["models"] if m["top1"] is not None and m["onnx"]
              and (not wanted or m["name"] in wanted)]
    if wanted and len(models) != len(wanted):
        print(f"onnx_top1.py: {out}/report.json has no scored model among {wanted}",
              file=sys.stderr)
        return 1
    bad = 0
    for m in models:
        path = os.path.join(out, m["onnx"])
        try:
            ours = top1(path, images, labels, np, ort)
        except Exception as e:  # onnxruntime raises several types
            print(f"FAIL {m['name']}: {e}")
            bad += 1
            continue
        ok = abs(ours - m["top1"]) <= TOLERANCE
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {m['name']}: ONNX Runtime {ours:.2f}%, report "
              f"{m['top1']:.2f}% ({len(labels)} images, {m['onnx']})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
