"""Models whose shape arithmetic the importer folds, for test_onnx_fold.

    fold_models.py OUT_DIR

Each model computes a constant table T from initializers with the ops under test and returns
input + T (T cast to float and broadcast), so that a wrong fold changes the output. Writes
NAME.onnx, NAME_x.npy and NAME_y.npy (ONNX Runtime's output: a runtime nobody here wrote) for
each, and names.txt listing them.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def i64(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def f32(name, v):
    return numpy_helper.from_array(np.array(v, dtype=np.float32), name)


def model(name, nodes, inits, table, shape, out):
    """input [*shape] + Cast(table) -> output"""
    nodes = nodes + [helper.make_node("Cast", [table], ["tf"], to=TensorProto.FLOAT),
                     helper.make_node("Add", ["input", "tf"], ["output"])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                      shape)],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    path = os.path.join(out, name)
    onnx.save(m, path + ".onnx")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = ort.InferenceSession(path + ".onnx", providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    np.save(path + "_x.npy", x)
    np.save(path + "_y.npy", y)
    return name


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    t = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    names = [
        # a 3-D Slice over two axes with steps, one of them reversed
        model("slice_nd", [helper.make_node("Slice", ["t", "s", "e", "a", "st"], ["r"])],
              [i64("t", t), i64("s", [-1, 0]), i64("e", [-100, 4]), i64("a", [1, 2]),
               i64("st", [-2, 3])], "r", [2, 2, 2], out),
        # F.pad's pads: reshape to [k, 2], reverse rows, transpose, flatten
        model("pads_table", [helper.make_node("Slice", ["p", "s", "e", "a", "st"], ["rev"]),
                             helper.make_node("Transpose", ["rev"], ["tr"], perm=[1, 0]),
                             helper.make_node("Reshape", ["tr", "flat"], ["r"])],
              [i64("p", [[0, 1], [2, 3], [4, 5]]), i64("s", [-1]), i64("e", [-100]),
               i64("a", [0]), i64("st", [-1]), i64("flat", [-1])], "r", [6], out),
        # Mod with the divisor's sign (fmod 0) and the dividend's (fmod 1)
        model("mod", [helper.make_node("Mod", ["m", "d"], ["m0"]),
                      helper.make_node("Mod", ["mf", "df"], ["m1"], fmod=1),
                      helper.make_node("Cast", ["m0"], ["m0f"], to=TensorProto.FLOAT),
                      helper.make_node("Add", ["m0f", "m1"], ["r"])],
              [i64("m", [7, -7, 7, -7, 5, 0]), i64("d", [3, 3, -3, -3, 5, 2]),
               f32("mf", [7.5, -7.5, 7.5, -7.5, 1, 2]), f32("df", [2, 2, -2, -2, 3, 3])], "r",
              [6], out),
        model("pow", [helper.make_node("Pow", ["b", "p"], ["r"])],
              [f32("b", [[1.5, 2, 3]]), f32("p", [[2], [0.5]])], "r", [2, 3], out),
        # Where over a Not, and an Expand of a computed table
        model("not_where_expand", [helper.make_node("Equal", ["a", "b"], ["eq"]),
                                   helper.make_node("Not", ["eq"], ["ne"]),
                                   helper.make_node("Where", ["ne", "v", "w"], ["wh"]),
                                   helper.make_node("Expand", ["wh", "sh"], ["r"])],
              [i64("a", [1, 2, 3]), i64("b", [1, 0, 3]), f32("v", [10, 20, 30]),
               f32("w", [-1]), i64("sh", [2, 1, 3])], "r", [2, 2, 3], out),
        # ScatterND into a zero mask, the form of Swin's shifted-window mask
        model("scatter_nd", [helper.make_node("ScatterND", ["z", "i", "u"], ["s1"]),
                             helper.make_node("ScatterND", ["s1", "i2", "u2"], ["r"])],
              [f32("z", np.zeros((3, 4))), i64("i", [[0], [2]]),
               f32("u", [[1, 2, 3, 4], [5, 6, 7, 8]]), i64("i2", [[1, 3], [-1, 0]]),
               f32("u2", [9, -9])], "r", [3, 4], out),
    ]
    with open(os.path.join(out, "names.txt"), "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
