#!/usr/bin/env bash
# compress pipeline with a ConvNeXt-style teacher given as ONNX (tests/convnext_teacher.py:
# exported by PyTorch at opset 17, LayerNormalization and GELU), on 1200 Fashion-MNIST images at
# 16x16: the teacher stage fine-tunes it (two short epochs: LayerNorm and GELU train), distill
# trains a MobileNetV2-0.5 from it, and the export at opset 13 writes the teacher's
# LayerNormalization as its definition. ONNX Runtime scores every ONNX file to the report's
# top-1 (onnx_top1.py), and the teacher must have learned (top-1 above 30%, chance is 10%).
#
# usage: test_pipeline_convnext.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=1
fails=0

source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

if ! "$py" -c 'import torch, onnx, onnxruntime, h5py' 2>/dev/null; then
  echo "skip: $py lacks torch, onnx, onnxruntime or h5py"
  exit 77
fi
fmnist_slice 16
"$py" -W ignore "$here/convnext_teacher.py" "$work/convnext.onnx" ||
  { echo "FAIL: exporting the teacher with PyTorch failed"; exit 1; }

cat >"$work/pipe.toml" <<'TOML'
[run]
out_dir = "run"
seed = 3
threads = 1

[data]
train = "train.h5"
val = "test.h5"
batch = 50
mean = [0.286]
std = [0.353]

[teacher]
onnx = "convnext.onnx"

[teacher.train]
epochs = 2
lr = 0.002
optimizer = "adamw"
log_every = 8

[student]
spec = "mobilenet_v2:width=0.5,classes=10,input=1x16x16"

[distill]
temperature = 4
alpha = 0.7
epochs = 1
lr = 0.05
momentum = 0.9
log_every = 8

[export]
opset = 13
TOML

r=$work/run
run 0 pipeline pipeline "$work/pipe.toml"
expect_in pipeline out "teacher: 48 steps"
expect_in pipeline out "distill: 24 steps"
for f in teacher.onnx student.onnx report.json; do
  [[ -f $r/$f ]] || fail "pipeline: $r/$f is missing"
done
"$py" - "$r" <<'PY' || fail "the teacher's export or its accuracy"
import json, sys
import onnx
run = sys.argv[1]
m = onnx.load(f"{run}/teacher.onnx")
ops = {n.op_type for n in m.graph.node}
assert m.opset_import[0].version == 13, m.opset_import
assert "LayerNormalization" not in ops and "ReduceMean" in ops and "Erf" in ops, sorted(ops)
rows = {r["name"]: r for r in json.load(open(f"{run}/report.json"))["models"]}
assert rows["teacher"]["top1"] > 30, rows["teacher"]  # percent
print("ok   teacher.onnx at opset 13 without LayerNormalization; teacher top-1",
      rows["teacher"]["top1"])
PY
"$py" "$here/onnx_top1.py" "$r" || fail "ONNX Runtime's top-1 differs from the report's"

[[ $fails == 0 ]] && echo "all ConvNeXt-teacher pipeline checks passed"
exit $((fails > 0))
