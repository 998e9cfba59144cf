#!/usr/bin/python3
"""Prints what ONNX Runtime makes of a model: the op types of its optimized graph.

usage: ort_fused.py MODEL.onnx [--expect OP=N ...]

Opens MODEL with every graph optimization on (ORT_ENABLE_ALL, CPUExecutionProvider, one thread),
saves the optimized graph (SessionOptions.optimized_model_filepath) next to MODEL as
MODEL.opt.onnx and prints one line: its op types with counts, and which nodes became QLinearConv,
QLinearAdd, QGemm and the other integer ops. --expect OP=N fails (exit 1) unless the optimized
graph has at least N nodes of type OP. Exit 3 when onnx or onnxruntime is missing.
"""
import collections
import sys


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    model, expect, k = argv[0], [], 1
    while k < len(argv):
        if argv[k] != "--expect" or k + 1 >= len(argv) or "=" not in argv[k + 1]:
            print(__doc__, file=sys.stderr)
            return 2
        op, n = argv[k + 1].split("=", 1)
        expect.append((op, int(n)))
        k += 2
    try:
        import onnx
        import onnxruntime as ort
    except ImportError as e:
        print(f"ort_fused.py: {e}; run scripts/install-deps.sh", file=sys.stderr)
        return 3
    out = model[:-5] + ".opt.onnx" if model.endswith(".onnx") else model + ".opt.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = out
    so.intra_op_num_threads = 1
    so.log_severity_level = 3  # the note that an NCHWc-optimized file is machine-specific
    ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    nodes = onnx.load(out).graph.node
    counts = collections.Counter(n.op_type for n in nodes)
    ints = [f"{n.name} → {n.op_type}" for n in nodes
            if n.op_type.startswith("QLinear") or n.op_type in ("QGemm", "MatMulInteger",
                                                                 "ConvInteger")]
    print(f"{model}: ONNX Runtime's optimized graph: "
          f"{', '.join(f'{op} {c}' for op, c in sorted(counts.items()))}; integer nodes: "
          f"{'; '.join(ints) or 'none'}")
    missing = [f"{op} (at least {n}, found {counts[op]})" for op, n in expect if counts[op] < n]
    if missing:
        print(f"ort_fused.py: {model}: expected {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
