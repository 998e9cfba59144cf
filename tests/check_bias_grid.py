"""Checks that every Conv and Gemm of a QDQ file whose activation input and weight come from
DequantizeLinear has an f32 bias on the int32 grid an integer kernel adds it on:
b == round_half_even(b / S) * S exactly, S = s_x * s_w[c] in f32 (quantize/bias_grid.c). Such a
bias is the same model in every runtime (ONNX Runtime rounds a float bias onto that grid, TensorRT
adds it as it is). Prints how many nodes it checked; fails naming the first bias off the grid.

usage: check_bias_grid.py MODEL.onnx"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper as nh

m = onnx.load(sys.argv[1])
init = {t.name: nh.to_array(t) for t in m.graph.initializer}
producer = {o: n for n in m.graph.node for o in n.output}
checked = 0
for n in m.graph.node:
    if n.op_type not in ("Conv", "Gemm") or len(n.input) < 3 or n.input[2] not in init:
        continue
    dq = [producer.get(n.input[i]) for i in (0, 1)]
    if any(d is None or d.op_type != "DequantizeLinear" or d.input[1] not in init for d in dq):
        continue
    sx, sw = init[dq[0].input[1]], init[dq[1].input[1]]
    b = init[n.input[2]].astype(np.float32)
    s = (sx.astype(np.float32) * sw.astype(np.float32)).astype(np.float32)
    grid = (np.round(b / s).astype(np.float32) * s).astype(np.float32)
    off = np.flatnonzero(grid != b)
    if off.size:
        c = off[0]
        sys.exit(f"{sys.argv[1]}: node '{n.name}': bias[{c}] = {b[c]!r} is not on the grid of "
                 f"{s.reshape(-1)[c if s.size > 1 else 0]!r} ({off.size} of {b.size} channels)")
    checked += 1
if not checked:
    sys.exit(f"{sys.argv[1]}: no Conv or Gemm with a quantized input, weight and float bias")
print(f"{checked} biases on the int32 grid")
