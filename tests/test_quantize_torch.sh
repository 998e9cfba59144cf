#!/usr/bin/env bash
# compress quantize on PyTorch-exported torchvision models (issue 14's generality check):
# resnet18, mobilenet_v2 and efficientnet_b0 with random weights and randomised BatchNorm
# (tests/torch_models.py, 64x64), calibrated on 256 synthetic images. Each INT8 file must pass
# onnx.checker, TensorRT's rules (check_qdq_trt.py), run in ONNX Runtime with its integer
# kernels (ort_check.py), and stay close to the FP32 model there: the INT8 logits' SQNR against
# the FP32 file's, in ONNX Runtime, at least 10 dB (random weights make an uncalibrated or
# misplaced scale fall far below that).
# usage: test_quantize_torch.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=2
fails=0
source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

models="resnet18 mobilenet_v2 efficientnet_b0"
# shellcheck disable=SC2086
$py "$here/torch_models.py" "$work" $models >/dev/null || {
  echo "FAIL: tests/torch_models.py could not export the models"; exit 1; }

# 256 synthetic 64x64 RGB images (smooth noise, so that activations have structure) as a data set,
# and one batch of them as the comparison input (normalised as the loader does: /255)
$py - "$work" <<'EOF' || { echo "FAIL: the synthetic images"; exit 1; }
import sys, numpy as np
w = sys.argv[1]
rng = np.random.default_rng(0)
low = rng.random((256, 8, 8, 3))
img = np.kron(low, np.ones((1, 8, 8, 1))) * 0.7 + rng.random((256, 64, 64, 3)) * 0.3
img = (img * 255).astype(np.uint8)
np.save(f"{w}/images.npy", img)
np.save(f"{w}/labels.npy", rng.integers(0, 10, 256).astype(np.int64))
np.save(f"{w}/x.npy", (img[:16].astype(np.float32) / 255).transpose(0, 3, 1, 2).copy())
EOF
run 0 import data import npy "$work/images.npy" "$work/labels.npy" -o "$work/calib.h5"

for m in $models; do
  run 0 "$m" quantize "$work/$m.onnx" -o "$work/$m.int8.onnx" --data "$work/calib.h5" \
    --calibration-batches 8
  [[ -f $work/$m.int8.onnx ]] || continue
  expect_in "$m" out "SQNR"
  $py "$here/check_qdq_trt.py" "$work/$m.int8.onnx" >"$work/$m.trt" ||
    { fail "$m: TensorRT's rules"; cat "$work/$m.trt"; }
  mkdir -p "$work/$m.fp32" "$work/$m.q"
  $py "$here/ort_check.py" "$work/$m.onnx" "$work/$m.fp32" "$work/x.npy" >/dev/null ||
    fail "$m: ONNX Runtime on the FP32 file"
  $py "$here/ort_check.py" "$work/$m.int8.onnx" "$work/$m.q" "$work/x.npy" >"$work/$m.ort" ||
    { fail "$m: onnx.checker or ONNX Runtime on the INT8 file"; cat "$work/$m.ort"; }
  $py - "$work/$m" "$m" <<'EOF' || fail "$m: the INT8 logits are far from the FP32 ones"
import sys, numpy as np
d, name = sys.argv[1], sys.argv[2]
f = np.load(f"{d}.fp32/output_0.npy").astype(np.float64)
q = np.load(f"{d}.q/output_0.npy").astype(np.float64)
sqnr = 10 * np.log10((f ** 2).sum() / max(((f - q) ** 2).sum(), 1e-30))
print(f"{name}: INT8 logits in ONNX Runtime, SQNR {sqnr:.1f} dB against FP32")
sys.exit(0 if np.isfinite(q).all() and sqnr >= 10 else 1)
EOF
done

if ((fails)); then echo "$fails check(s) failed"; exit 1; fi
echo "all checks passed"
