"""Models with the ops the importer writes as others (Einsum's attention forms, Tile) and masks
computed from activations (comparisons, Not, Cast, Where), for test_onnx_rewrite.

    rewrite_models.py OUT_DIR

Each model takes `input` with a symbolic batch. Operands that are initializers become
parameters when imported, so the test also checks their gradients. Writes NAME.onnx,
NAME_x.npy (batch 2) and NAME_b{1,2}_{k}.npy (ONNX Runtime's output k at batch 1 and 2), and
names.txt listing the models with their output counts; refused.onnx holds an equation the
importer must refuse.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def f32(name, shape, seed):
    v = np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)
    return numpy_helper.from_array(v, name)


def save(out, name, nodes, inits, in_shape, outputs, opset=17):
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                           for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)  # the outputs' shapes
    onnx.checker.check_model(m)
    path = os.path.join(out, name)
    onnx.save(m, path + ".onnx")
    fixed = [2 if isinstance(d, str) else d for d in in_shape]
    x = np.random.default_rng(1).standard_normal(fixed).astype(np.float32)
    np.save(path + "_x.npy", x)
    sess = ort.InferenceSession(path + ".onnx", providers=["CPUExecutionProvider"])
    for b in (1, 2):
        for k, y in enumerate(sess.run(None, {"input": x[:b]})):
            np.save(f"{path}_b{b}_{k}.npy", y)
    return f"{name} {len(outputs)}"


def einsum(eq, a, b, out):
    return helper.make_node("Einsum", [a, b], [out], equation=eq)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    names = [
        # attention as exporters write it: scores q k^T, then scores v, on activations; and the
        # other forms on parameters (a transposed left operand, an output (j, i), "...")
        save(out, "einsum", [
            einsum("bhid,bhjd->bhij", "input", "input", "scores"),
            einsum("bhij,bhjd->bhid", "scores", "input", "context"),
            einsum("bhid,bhjd->bhij", "q", "k", "qk"),
            einsum("b h i j, b h j d -> b h i d", "p", "v", "pv"),
            einsum("...ij,...jk->...ik", "a", "b", "ellipsis"),
            einsum("bji,bjk->bik", "ta", "tb", "transposed_a"),
            einsum("bij,bkj->bki", "sa", "sb", "swapped_out"),
        ], [f32("q", [1, 2, 3, 4], 2), f32("k", [1, 2, 5, 4], 3), f32("p", [1, 2, 3, 5], 4),
            f32("v", [1, 2, 5, 4], 5), f32("a", [2, 3, 4], 6), f32("b", [2, 4, 5], 7),
            f32("ta", [2, 4, 3], 8), f32("tb", [2, 4, 5], 9), f32("sa", [2, 3, 4], 10),
            f32("sb", [2, 5, 4], 11)], ["N", 2, 3, 4],
            ["scores", "context", "qk", "pv", "ellipsis", "transposed_a", "swapped_out"]),
        # Tile of an activation (the batch axis not repeated) and of a parameter
        save(out, "tile", [
            helper.make_node("Tile", ["input", "r1"], ["tiled"]),
            helper.make_node("Tile", ["t", "r2"], ["tiled_param"]),
        ], [numpy_helper.from_array(np.array([1, 2, 3], np.int64), "r1"),
            numpy_helper.from_array(np.array([2, 1, 3], np.int64), "r2"), f32("t", [2, 3, 1], 12)],
            ["N", 3, 4], ["tiled", "tiled_param"]),
        # masks computed from activations: comparisons, Not, Cast to int64, bool and float, Where
        save(out, "masks", [
            helper.make_node("Less", ["input", "c"], ["lt"]),
            helper.make_node("Not", ["lt"], ["ge"]),
            helper.make_node("Where", ["ge", "input", "zero"], ["relu_like"]),
            helper.make_node("Cast", ["input"], ["ints"], to=TensorProto.INT64),
            helper.make_node("Equal", ["ints", "one"], ["is_one"]),
            helper.make_node("Cast", ["is_one"], ["is_one_f"], to=TensorProto.FLOAT),
            helper.make_node("Greater", ["input", "c"], ["gt"]),
            helper.make_node("LessOrEqual", ["input", "zero"], ["le"]),
            helper.make_node("GreaterOrEqual", ["ints", "one"], ["gei"]),
            helper.make_node("Cast", ["gt"], ["gt_f"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["le"], ["le_f"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["gei"], ["gei_f"], to=TensorProto.FLOAT),
            helper.make_node("Sum", ["gt_f", "le_f", "gei_f", "is_one_f"], ["counts"]),
            helper.make_node("Cast", ["input"], ["nonzero"], to=TensorProto.BOOL),
            helper.make_node("Cast", ["nonzero"], ["nonzero_f"], to=TensorProto.FLOAT),
        ], [f32("c", [4], 13), numpy_helper.from_array(np.array(0, np.float32), "zero"),
            numpy_helper.from_array(np.array([1], np.int64), "one")], ["N", 3, 4],
            ["relu_like", "counts", "nonzero_f"]),
    ]
    save(out, "refused", [einsum("bii,bij->bj", "input", "input", "y")], [], ["N", 3, 3], ["y"])
    with open(os.path.join(out, "names.txt"), "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
