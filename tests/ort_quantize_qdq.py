"""Quantizes an FP32 ONNX model with ONNX Runtime's quantize_static into a QDQ file as our
exporter writes them: INT8 weights per output channel, INT8 activations per tensor with zero
point 0 (symmetric), FP32 bias. Calibration: a .npy batch (N, C, H, W), or random normal data.

usage: ort_quantize_qdq.py IN.onnx OUT.onnx [CALIB.npy | --random N C H W]"""
import sys

import numpy as np
import onnx
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)


class Reader(CalibrationDataReader):
    def __init__(self, name, data, batch=16):
        self.items = iter([{name: data[i:i + batch]} for i in range(0, len(data), batch)])

    def get_next(self):
        return next(self.items, None)


def quantize(src, dst, data):
    name = onnx.load(src).graph.input[0].name
    quantize_static(src, dst, Reader(name, data), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})


def main():
    src, dst = sys.argv[1], sys.argv[2]
    if sys.argv[3] == "--random":
        shape = [int(v) for v in sys.argv[4:8]]
        data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    else:
        data = np.load(sys.argv[3]).astype(np.float32)
    quantize(src, dst, data)


if __name__ == "__main__":
    main()
