#!/usr/bin/env bash
# Inference fusions (core/infer_fuse.h) on PyTorch's own exports: torchvision resnet18 and
# mobilenet_v2 (random weights, randomised BatchNorm statistics, exported in eval mode at test
# time by tests/torch_models.py) run by compress infer, fused and with CX_FUSE=off, and by
# ONNX Runtime (tests/ort_check.py) on the same batch of two: fused and unfused agree within
# 1e-5 relative (max |a - b| / max |b|), ours and ONNX Runtime's within 1e-4. The last feature
# map (the global pooling's input) is made a second graph output and compared too: with random
# weights MobileNetV2's logits hardly depend on the input (the classifier's bias dominates), its
# features do.
# Exits 77 (ctest's skip) when the tests' Python lacks torch, onnx or onnxruntime.
# usage: test_infer_ort.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:-/opt/compress-venv/bin/python}
if ! "$py" -c "import numpy, onnx, onnxruntime, torch, torchvision" 2>/dev/null; then
  echo "skip: $py cannot import numpy, onnx, onnxruntime, torch and torchvision"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" "$here/torch_models.py" "$work" resnet18 mobilenet_v2 || exit 1
for m in resnet18 mobilenet_v2; do
  "$py" -c "
import onnx
m = onnx.load('$work/$m.onnx')
pool = next(n for n in m.graph.node if n.op_type in ('GlobalAveragePool', 'ReduceMean'))
m.graph.output.append(onnx.helper.make_tensor_value_info(pool.input[0], onnx.TensorProto.FLOAT, ['N', 'C', 'H', 'W']))
onnx.save(m, '$work/$m.onnx')" || exit 1
done
"$py" -c "import numpy as np; np.save('$work/x.npy', np.random.RandomState(1).randn(2, 3, 64, 64).astype(np.float32))"
fails=0
for m in resnet18 mobilenet_v2; do
  "$compress" infer "$work/$m.onnx" -i "$work/x.npy" -o "$work/$m.fused.npy" >/dev/null &&
    CX_FUSE=off "$compress" infer "$work/$m.onnx" -i "$work/x.npy" -o "$work/$m.off.npy" >/dev/null &&
    mkdir -p "$work/ort_$m" &&
    "$py" "$here/ort_check.py" "$work/$m.onnx" "$work/ort_$m" "$work/x.npy" >/dev/null &&
    "$py" -c "
import numpy as np, sys
rel = lambda a, b: float(np.abs(a - b).max() / np.abs(b).max())
bad = 0
for k, what in ((0, 'logits'), (1, 'features')):
    sfx = '' if k == 0 else '_1'
    fused, off = np.load('$work/$m.fused%s.npy' % sfx), np.load('$work/$m.off%s.npy' % sfx)
    ort = np.load('$work/ort_$m/output_%d.npy' % k)
    e_off, e_ort = rel(fused, off), rel(fused, ort)
    ok = e_off <= 1e-5 and e_ort <= 1e-4
    bad += not ok
    print('%s $m %s %s: fused vs CX_FUSE=off %.2e (tolerance 1e-5), vs ONNX Runtime %.2e (1e-4)'
          % ('ok  ' if ok else 'FAIL', what, fused.shape, e_off, e_ort))
sys.exit(1 if bad else 0)" || { echo "FAIL $m"; fails=$((fails + 1)); }
done
exit $((fails != 0))
