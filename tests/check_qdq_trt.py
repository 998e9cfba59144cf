#!/usr/bin/python3
"""Walks a QDQ ONNX file for TensorRT's explicit-quantization rules.

usage: check_qdq_trt.py MODEL.onnx [--ort-only]

Rules (TensorRT's "explicit quantization"; issue 14's Acceptance):
  1. Q/DQ are INT8 only: a QuantizeLinear has an int8 zero point (without one it is UINT8), a
     DequantizeLinear reads int8. --ort-only (ONNX-Runtime-only files) also allows UINT8
     activations with any zero point; weights stay INT8.
  2. Every zero point is 0.
  3. A weight's DequantizeLinear (its input an initializer) is per channel on the weighted op's
     output-channel axis: 0 for Conv and for Gemm with transB=1, 1 for Gemm with transB=0 and for
     MatMul's [K, N] B (rank-1 for a batched B); its scale has one value per channel.
  4. Biases stay FP32: no DequantizeLinear feeds input 2 of a Conv or Gemm, and an initializer
     bias is float.
  5. Every QuantizeLinear is followed by DequantizeLinear nodes only, and its output is no graph
     output.
  6. No Q/DQ on a weighted op's output (Conv, Gemm, MatMul, directly or after Relu/Clip, which
     TensorRT fuses into it) unless the next op consumes it quantized: after Reshape, Flatten,
     Transpose, Squeeze or Unsqueeze (which commute), the DequantizeLinear's readers must be ops
     that take INT8 inputs (Conv, Gemm, MatMul, Add, Concat, MaxPool, AveragePool,
     GlobalAveragePool), never a graph output.
Prints each violation as "MODEL: node 'NAME' (OP): what" and exits 1 if there is any; 0 with a
summary line when the file passes; 2 on a usage error; 3 when onnx is missing.
"""
import sys

WEIGHTED = {"Conv", "Gemm", "MatMul"}
FUSED_ACT = {"Relu", "Clip"}
COMMUTE = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze"}
INT8_READERS = {"Conv", "Gemm", "MatMul", "Add", "Concat", "MaxPool", "AveragePool",
                "GlobalAveragePool"}


class Graph:
    def __init__(self, model):
        from onnx import numpy_helper
        g = model.graph
        self.init = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        self.init_type = {t.name: t.data_type for t in g.initializer}
        self.producer, self.readers = {}, {}
        for n in g.node:
            for o in n.output:
                self.producer[o] = n
            for k, i in enumerate(n.input):
                if i:
                    self.readers.setdefault(i, []).append((n, k))
        self.outputs = {o.name for o in g.output}
        self.nodes = list(g.node)


def attr(node, name, default):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def zero_point(g, node):
    """(onnx elem type, values) of a Q/DQ node's zero point; (None, None) when absent."""
    if len(node.input) < 3 or not node.input[2]:
        return None, None
    z = node.input[2]
    if z not in g.init:
        return "computed", None
    return g.init_type[z], g.init[z]


def check_types(g, node, ort_only, weight, bad):
    import onnx
    T = onnx.TensorProto
    ztype, zero = zero_point(g, node)
    if node.op_type == "QuantizeLinear":
        qtype = T.UINT8 if ztype is None else ztype
    else:
        x = node.input[0]
        qtype = g.init_type.get(x)
        if qtype is None and x in g.producer and g.producer[x].op_type == "QuantizeLinear":
            zt, _ = zero_point(g, g.producer[x])
            qtype = T.UINT8 if zt is None else zt
    if ztype == "computed":
        bad(node, "its zero point is computed by the graph, not an initializer")
        return
    uint8_ok = ort_only and not weight
    if qtype == T.UINT8 and not uint8_ok:
        bad(node, "is UINT8; TensorRT takes INT8 Q/DQ only (UINT8 is for --ort-only files)")
    elif qtype not in (T.INT8, T.UINT8, None):
        bad(node, f"quantizes to {T.DataType.Name(qtype)}; TensorRT takes INT8 only")
    if zero is not None and (zero != 0).any() and not (uint8_ok and qtype == T.UINT8):
        bad(node, f"has a nonzero zero point ({zero.flatten()[:4].tolist()}...); TensorRT "
                  "needs every zero point 0")


def expected_axis(reader, slot, w_rank):
    """The per-channel axis a weight read at input `slot` of `reader` must use, or None."""
    if slot != 1:
        return None
    if reader.op_type == "Conv":
        return 0
    if reader.op_type == "Gemm":
        return 0 if attr(reader, "transB", 0) else 1
    if reader.op_type == "MatMul":
        return w_rank - 1
    return None


def check_weight(g, dq, bad):
    w = g.init[dq.input[0]]
    axis = attr(dq, "axis", 1)
    if axis < 0:
        axis += w.ndim
    scale = g.init.get(dq.input[1])
    for reader, slot in g.readers.get(dq.output[0], []):
        if reader.op_type in ("Conv", "Gemm") and slot == 2:
            continue  # rule 4 reports it
        want = expected_axis(reader, slot, w.ndim)
        if want is None:
            continue
        if scale is None or scale.ndim != 1:
            bad(dq, f"weight of '{reader.name}' ({reader.op_type}) is quantized per tensor; "
                    f"expected per channel on axis {want}")
        elif axis != want or scale.shape[0] != w.shape[want]:
            bad(dq, f"weight of '{reader.name}' ({reader.op_type}) is quantized on axis {axis} "
                    f"with {scale.shape[0]} scales; expected axis {want} with {w.shape[want]}")


def check_bias(g, node, bad):
    if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3 or not node.input[2]:
        return
    import onnx
    b = node.input[2]
    p = g.producer.get(b)
    if p is not None and p.op_type == "DequantizeLinear":
        bad(node, f"its bias '{b}' comes from DequantizeLinear '{p.name}'; TensorRT needs an "
                  "FP32 bias")
    elif b in g.init_type and g.init_type[b] != onnx.TensorProto.FLOAT:
        bad(node, f"its bias '{b}' is {onnx.TensorProto.DataType.Name(g.init_type[b])}; "
                  "expected FP32")


def weighted_source(g, tensor):
    """The weighted op whose output `tensor` is, directly or after Relu/Clip; else None."""
    p = g.producer.get(tensor)
    while p is not None and p.op_type in FUSED_ACT:
        p = g.producer.get(p.input[0])
    return p if p is not None and p.op_type in WEIGHTED else None


def final_readers(g, tensor):
    """The readers of `tensor` after ops that commute with quantization; 'output' for a graph
    output."""
    out, todo = [], [tensor]
    while todo:
        t = todo.pop()
        if t in g.outputs:
            out.append("output")
        for r, _ in g.readers.get(t, []):
            if r.op_type in COMMUTE:
                todo.append(r.output[0])
            else:
                out.append(r)
    return out


def check_quantize(g, q, bad):
    readers = g.readers.get(q.output[0], [])
    if q.output[0] in g.outputs:
        bad(q, "its output is a graph output; a QuantizeLinear must be followed by a "
               "DequantizeLinear")
    if not readers or any(r.op_type != "DequantizeLinear" for r, _ in readers):
        bad(q, "is not followed by DequantizeLinear only (readers: "
               f"{', '.join(r.op_type for r, _ in readers) or 'none'})")
        return
    src = weighted_source(g, q.input[0])
    if src is None:
        return
    for dq, _ in readers:
        for r in final_readers(g, dq.output[0]):
            if r == "output":
                bad(q, f"quantizes the output of '{src.name}' ({src.op_type}), which leaves the "
                       "graph; nothing consumes it quantized")
            elif r.op_type not in INT8_READERS:
                bad(q, f"quantizes the output of '{src.name}' ({src.op_type}) for '{r.name}' "
                       f"({r.op_type}), which does not consume INT8")


def check(path, ort_only):
    import onnx
    g = Graph(onnx.load(path))
    problems = []

    def bad(node, what):
        problems.append(f"{path}: node '{node.name}' ({node.op_type}) {what}")

    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0, "weights": 0}
    for n in g.nodes:
        if n.op_type in ("QuantizeLinear", "DequantizeLinear"):
            counts[n.op_type] += 1
            weight = n.op_type == "DequantizeLinear" and n.input[0] in g.init
            counts["weights"] += weight
            check_types(g, n, ort_only, weight, bad)
            if weight:
                check_weight(g, n, bad)
            if n.op_type == "QuantizeLinear":
                check_quantize(g, n, bad)
        check_bias(g, n, bad)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"{path}: passes TensorRT's QDQ rules ({counts['QuantizeLinear']} QuantizeLinear, "
          f"{counts['DequantizeLinear']} DequantizeLinear, {counts['weights']} of them on "
          f"weights{'; ORT-only mode' if ort_only else ''})")
    return 0


def main(argv):
    args = [a for a in argv if a != "--ort-only"]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        print(f"check_qdq_trt.py: {e}; run scripts/install-deps.sh", file=sys.stderr)
        return 3
    return check(args[0], "--ort-only" in argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
