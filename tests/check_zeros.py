"""Checks that an ONNX file's prunable weights (every Conv and Gemm weight initializer but the
first conv and the classifier, compress prune's default selection) hold round(FRACTION * count)
exact zeros, give or take one.

usage: check_zeros.py MODEL.onnx FRACTION"""
import sys

import onnx
from onnx import numpy_helper as nh

m = onnx.load(sys.argv[1])
init = {t.name: nh.to_array(t) for t in m.graph.initializer}
ws = [init[n.input[1]] for n in m.graph.node if n.op_type in ("Conv", "Gemm")][1:-1]
zeros, total = sum(int((w == 0).sum()) for w in ws), sum(w.size for w in ws)
assert abs(zeros - round(float(sys.argv[2]) * total)) <= 1, (zeros, total)
