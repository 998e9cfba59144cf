#!/usr/bin/python3
"""ONNX Runtime as the peer of compress's QuantizeLinear / DequantizeLinear (tests/test_quant_ort.sh).

usage:
  quant_ort.py make-dwnet OUT.onnx
      a small float CNN with a depthwise convolution and a residual Add (make_dwnet)
  quant_ort.py quantize FLOAT.onnx QDQ.onnx X.npy --activations int8|uint8 [--seed S]
                       [--reduce-range]
      quantize_static (QDQ, per-channel int8 weights, activations as given, 8 random calibration
      batches; 7-bit weights with --reduce-range) and a random input batch X.npy
  quant_ort.py compare QDQ.onnx X.npy OURS.npy --max-lsb K [--float-only]
      ONNX Runtime's output against ours, in units of the output's quantization scale (the scale
      of the DequantizeLinear that produces the graph output): at most K of them anywhere, and the
      same argmax wherever ONNX Runtime's top-1 margin is more than 2K units (closer than that,
      a K-unit difference may legitimately swap the top two); with --float-only, only against
      ONNX Runtime without graph optimizations (float Q/DQ), the optimized run printed only
  quant_ort.py roundtrip QDQ.onnx BACK.onnx X.npy
      BACK.onnx (QDQ.onnx imported and exported by compress) passes onnx.checker (full_check),
      has the same op counts and the same integer initializers, and ONNX Runtime gives identical
      outputs for both files, with and without its graph optimizations

Exit status: 0 success, 1 a check failed, 2 usage error, 77 onnx / onnxruntime / numpy missing.
"""
import collections
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
except ImportError as e:
    print(f"quant_ort.py: {e}; scripts/install-deps.sh installs onnx and onnxruntime", file=sys.stderr)
    sys.exit(77)


def input_shape(model, batch):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return [batch] + [d.dim_value for d in dims[1:]]


def session(path, optimize=True):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def run(path, x, optimize=True):
    s = session(path, optimize)
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def quantize(src, dst, x_path, activations, seed, reduce_range):
    model = onnx.load(src)
    name = model.graph.input[0].name
    rng = np.random.default_rng(seed)
    batches = [{name: rng.standard_normal(input_shape(model, 4)).astype(np.float32)}
               for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    act = QuantType.QInt8 if activations == "int8" else QuantType.QUInt8
    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    weight_type=QuantType.QInt8, activation_type=act, reduce_range=reduce_range)
    np.save(x_path, rng.standard_normal(input_shape(model, 32)).astype(np.float32))
    ops = collections.Counter(n.op_type for n in onnx.load(dst).graph.node)
    print(f"quantize_static ({activations} activations{', reduce_range' if reduce_range else ''}): "
          f"{dict(ops)}")
    return 0


def make_dwnet(dst, seed):
    """A small float CNN with what the built-in specs' random weights make degenerate after
    quantization (a random-init MobileNet's logits are ~1e-9): a stem, a depthwise 3x3 (group =
    channels), a pointwise 1x1, a residual Add, global pooling and a Gemm, He-initialised."""
    from onnx import helper
    rng = np.random.default_rng(seed)

    def weight(name, shape, fan_in):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32), name)

    def bias(name, n):
        return numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), name)

    inits = [weight("stem.w", [8, 1, 3, 3], 9), bias("stem.b", 8),
             weight("dw.w", [8, 1, 3, 3], 9), bias("dw.b", 8),
             weight("pw.w", [8, 8, 1, 1], 8), bias("pw.b", 8),
             weight("fc.w", [10, 8], 8), bias("fc.b", 10)]
    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [
        helper.make_node("Conv", ["input", "stem.w", "stem.b"], ["stem"], strides=[2, 2], **conv),
        helper.make_node("Relu", ["stem"], ["stem.relu"]),
        helper.make_node("Conv", ["stem.relu", "dw.w", "dw.b"], ["dw"], group=8, **conv),
        helper.make_node("Relu", ["dw"], ["dw.relu"]),
        helper.make_node("Conv", ["dw.relu", "pw.w", "pw.b"], ["pw"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["pw", "stem.relu"], ["res"]),
        helper.make_node("Relu", ["res"], ["res.relu"]),
        helper.make_node("GlobalAveragePool", ["res.relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "dwnet", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, dst)
    return 0


def output_scale(path):
    g = onnx.load(path).graph
    inits = {i.name: i for i in g.initializer}
    out = g.output[0].name
    for n in g.node:
        if out in n.output and n.op_type == "DequantizeLinear" and n.input[1] in inits:
            return float(numpy_helper.to_array(inits[n.input[1]]).reshape(-1)[0])
    return None


def compare(path, x_path, ours_path, max_lsb, float_only):
    x, ours = np.load(x_path), np.load(ours_path)
    scale = output_scale(path)
    if scale is None:
        print(f"quant_ort.py: {path}: the output is not made by a DequantizeLinear with a scalar "
              f"scale", file=sys.stderr)
        return 1
    fails = 0
    for optimize in (True, False):
        ref = run(path, x, optimize)
        lsb = np.abs(ref.astype(np.float64) - ours) / scale
        top2 = np.sort(ref, axis=1)[:, -2:]
        decided = (top2[:, 1] - top2[:, 0]) / scale > 2 * max_lsb
        agree = ref.argmax(1) == ours.argmax(1)
        what = "QLinearConv (optimized)" if optimize else "float Q/DQ (no optimizations)"
        print(f"ONNX Runtime {what} vs compress: max {lsb.max():.3f} LSB (scale {scale:.6g}), "
              f"{(lsb > 0.5).mean() * 100:.2f}% of outputs differ, argmax agrees on "
              f"{agree.sum()}/{len(agree)} ({decided.sum()} with a margin over {2 * max_lsb} LSB, "
              f"all of which must agree)")
        if optimize and float_only:
            print("  (for information: full-range int8 weights saturate ONNX Runtime's u8s8 "
                  "kernels on x86 without VNNI; its docs prescribe reduce_range there)")
        elif lsb.max() > max_lsb or not agree[decided].all():
            print(f"FAIL: more than {max_lsb} LSB, or a decided argmax differs", file=sys.stderr)
            fails += 1
    return 1 if fails else 0


def int_inits(model):
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
            if i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32)}


def roundtrip(path, back_path, x_path):
    a, b = onnx.load(path), onnx.load(back_path)
    try:
        onnx.checker.check_model(back_path, full_check=True)
    except Exception as e:  # the checker raises several exception types
        print(f"FAIL: {back_path}: the ONNX checker rejects it: {e}", file=sys.stderr)
        return 1
    fails = 0
    ops_a = collections.Counter(n.op_type for n in a.graph.node)
    ops_b = collections.Counter(n.op_type for n in b.graph.node)
    if ops_a != ops_b:
        print(f"FAIL: op counts differ: {dict(ops_a)} vs {dict(ops_b)}", file=sys.stderr)
        fails += 1
    ia, ib = int_inits(a), int_inits(b)
    same = set(ia) == set(ib) and all(ia[k].dtype == ib[k].dtype and np.array_equal(ia[k], ib[k])
                                      for k in ia)
    if not same:
        print(f"FAIL: the integer initializers differ ({len(ia)} vs {len(ib)})", file=sys.stderr)
        fails += 1
    x = np.load(x_path)
    for optimize in (True, False):
        d = np.abs(run(path, x, optimize) - run(back_path, x, optimize)).max()
        print(f"ONNX Runtime ({'optimized' if optimize else 'no optimizations'}): original vs "
              f"re-exported: max difference {d}")
        fails += d != 0
    print(f"re-exported file: checker ok, {sum(ops_b.values())} nodes, {len(ib)} integer "
          f"initializers identical" if not fails else "FAIL: round trip")
    return 1 if fails else 0


def main(argv):
    try:
        if argv[0] == "quantize":
            act = argv[argv.index("--activations") + 1]
            seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0
            return quantize(argv[1], argv[2], argv[3], act, seed, "--reduce-range" in argv)
        if argv[0] == "make-dwnet":
            return make_dwnet(argv[1], 0)
        if argv[0] == "compare":
            return compare(argv[1], argv[2], argv[3], float(argv[argv.index("--max-lsb") + 1]),
                           "--float-only" in argv)
        if argv[0] == "roundtrip":
            return roundtrip(argv[1], argv[2], argv[3])
    except (IndexError, ValueError):
        pass
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
