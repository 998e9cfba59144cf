#!/usr/bin/env bash
# The INT8 runtime on files ONNX Runtime's quantize_static made (QDQ, INT8 weights per channel,
# INT8 activations per tensor, zero point 0, int32 bias), from the built-in resnet20 and
# mobilenet_v2 (width 0.5) at 1x16x16 with their initial weights:
#   - test_int8 FILE: the fused nodes' int8 outputs on the float simulation's inputs equal the
#     simulation's (CX_INT8=off) for >= 99.9% of elements, never more than 1 LSB apart; end to end
#     (differences propagate) the predictions agree;
#   - compress infer uses the INT8 runtime (CX_INT8=off gives the simulation), and its
#     predictions agree with the simulation's and with ONNX Runtime's reference (unoptimised)
#     run of the same file.
# usage: test_int8_ort.sh COMPRESS TEST_INT8
set -u
compress=$(realpath "$1")
test_int8=$(realpath "$2")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=1
fails=0
source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

for spec in "resnet20:classes=10,input=1x16x16" "mobilenet_v2:width=0.5,classes=10,input=1x16x16"; do
  name=${spec%%:*}
  run 0 "export-$name" export-model "$spec" "$work/$name.onnx" --fold-bn
  $py "$here/ort_quantize_qdq.py" "$work/$name.onnx" "$work/$name.int8.onnx" --random 64 1 16 16 \
    2>"$work/$name.quantize.err" || fail "$name: quantize_static failed"
  "$test_int8" "$work/$name.int8.onnx" | sed 's/^/    /'
  [[ ${PIPESTATUS[0]} == 0 ]] || fail "$name: test_int8 on ONNX Runtime's QDQ file"
  $py -c "import numpy as np; np.save('$work/x.npy', np.random.default_rng(3).standard_normal((32, 1, 16, 16)).astype(np.float32))"
  run 0 "infer-$name-int8" infer "$work/$name.int8.onnx" -i "$work/x.npy" -o "$work/int8.npy"
  CX_INT8=off run 0 "infer-$name-sim" infer "$work/$name.int8.onnx" -i "$work/x.npy" -o "$work/sim.npy"
  $py - "$work" "$name" <<'PY' || fail "$name: compress infer's INT8 predictions"
import sys
import numpy as np
import onnxruntime as ort
work, name = sys.argv[1], sys.argv[2]
x, a, b = (np.load(f"{work}/{f}.npy") for f in ("x", "int8", "sim"))
o = ort.SessionOptions()
o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
c = ort.InferenceSession(f"{work}/{name}.int8.onnx", o).run(None, {"input": x})[0]
agree_sim = (a.argmax(1) == b.argmax(1)).mean()
agree_ort = (a.argmax(1) == c.argmax(1)).mean()
print(f"    {name}: INT8 against the simulation: predictions agree {agree_sim:.3f}, "
      f"max |logit difference| {abs(a - b).max():.3g}; against ONNX Runtime's reference run: "
      f"{agree_ort:.3f}, {abs(a - c).max():.3g}; the simulation against it {abs(b - c).max():.3g}")
assert agree_sim == 1 and agree_ort == 1
PY
done
exit $((fails != 0))
