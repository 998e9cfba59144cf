#!/usr/bin/python3
"""Checks an ONNX model with the ONNX checker and runs it with ONNX Runtime.

usage: ort_check.py [--no-optimize] MODEL.onnx OUT_DIR IN_0.npy [IN_1.npy ...]

The inputs are given in the order of the graph's inputs. Runs
onnx.checker.check_model(MODEL, full_check=True), then ONNX Runtime's CPUExecutionProvider, and
writes output k to OUT_DIR/output_k.npy. --no-optimize turns ONNX Runtime's graph optimizations
off (ORT_DISABLE_ALL): a QDQ model then runs as its float QuantizeLinear/DequantizeLinear
definition rather than as fused integer kernels. Prints one line per output. Exit status: 0 success,
1 the model failed the checker or ONNX Runtime, 2 usage error, 3 onnx or onnxruntime is missing.
"""
import os
import sys


def main(argv):
    optimize = "--no-optimize" not in argv[:1]
    if not optimize:
        argv = argv[1:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    model, out_dir, inputs = argv[0], argv[1], argv[2:]
    try:
        import numpy as np
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        print(f"ort_check.py: {e}; run scripts/install-deps.sh (it installs onnx and onnxruntime "
              f"for {sys.executable})", file=sys.stderr)
        return 3
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # the checker raises several exception types
        print(f"ort_check.py: {model}: the ONNX checker rejects it: {e}", file=sys.stderr)
        return 1
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        if len(names) != len(inputs):
            print(f"ort_check.py: {model} has {len(names)} inputs ({', '.join(names)}), "
                  f"{len(inputs)} files given", file=sys.stderr)
            return 1
        feeds = {n: np.load(p) for n, p in zip(names, inputs)}
        outs = sess.run(None, feeds)
    except Exception as e:
        print(f"ort_check.py: {model}: ONNX Runtime fails: {e}", file=sys.stderr)
        return 1
    for k, (meta, y) in enumerate(zip(sess.get_outputs(), outs)):
        path = os.path.join(out_dir, f"output_{k}.npy")
        np.save(path, np.asarray(y, order="C"))  # keeps 0-d arrays 0-d
        print(f"{meta.name}: {y.dtype} {list(y.shape)} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
