#!/usr/bin/env bash
# compress prune end to end on built-in specs and 1200 Fashion-MNIST images at 16x16:
#   - one shot, no data: channel pruning at 0.3 gives a file onnx.checker accepts and ONNX
#     Runtime runs, equal to our engine's output on it, with at most 75% of the MACs; magnitude
#     at 0.8 zeroes 80% of the prunable weights (global threshold) and no others; 2:4 leaves
#     exactly 2 non-zeros in every group of 4 input channels of every pruned layer;
#   - a fine-tune with --data keeps the masks (exact zeros after training) and writes the
#     preprocessing; prune scan on the result prints the table and writes the SVG;
#   - Taylor importance with --data: the scoring pass chooses the channels, the same ones on
#     every run and others than L1's; [train] bn_l1 (network slimming) shrinks the BatchNorm
#     scales while fine-tuning;
#   - prune scan --method channel scans channel groups; allocate = "sensitivity" chooses per-layer
#     fractions from such a scan that meet the MAC target;
#   - bad requests (sparsity out of range, a glob that matches nothing, 2:4 on a layer with one
#     input channel, nothing left to prune, Taylor without data, bn_l1 out of range, sensitivity
#     allocation for magnitude pruning or without --val) exit 1 with one line and write no file.
# usage: test_prune_cli.sh COMPRESS
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

mnv2="mobilenet_v2:width=0.5,classes=10,input=1x16x16"
r20="resnet20:classes=10,input=1x16x16"

# ---- one shot ----
run 0 channel prune "$mnv2" -o "$work/ch.onnx" --method channel --sparsity 0.3
[[ -f $work/ch.onnx ]] || fail "channel: no file"
$py - "$work/ch.onnx" "$work/channel.out" <<'EOF' || fail "channel: checker, ORT or MACs"
import re, sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
out = open(sys.argv[2]).read()
macs = [float(x) for x in re.findall(r"([0-9.]+)M MACs", out)]
assert len(macs) == 2 and macs[1] <= 0.75 * macs[0], (macs, out)
try:
    import numpy as np, onnxruntime as ort
except ImportError:
    sys.exit(0)
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.random.default_rng(1).standard_normal((2, 1, 16, 16)).astype(np.float32)
np.save(sys.argv[1] + ".x.npy", x)
np.save(sys.argv[1] + ".ort.npy", s.run(None, {s.get_inputs()[0].name: x})[0])
EOF
if [[ -f $work/ch.onnx.x.npy ]]; then
  run 0 channel-infer infer "$work/ch.onnx" -i "$work/ch.onnx.x.npy" -o "$work/ch.ours.npy"
  $py - "$work/ch.onnx.ort.npy" "$work/ch.ours.npy" <<'EOF' || fail "channel: ours != ORT"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
err = np.abs(a - b).max() / max(np.abs(a).max(), 1e-12)
assert err <= 1e-4, err
EOF
fi

# magnitude: 80% of the prunable weights (all Conv/Gemm weights but the first conv and the
# classifier) exactly zero, the others untouched
run 0 magnitude prune "$r20" -o "$work/mag.onnx" --sparsity 0.8
run 0 dense export-model "$r20" "$work/dense.onnx"
$py - "$work/dense.onnx" "$work/mag.onnx" <<'EOF' || fail "magnitude: the zeros"
import sys, onnx, numpy as np
from onnx import numpy_helper as nh
def weights(p):
    m = onnx.load(p)
    init = {t.name: nh.to_array(t) for t in m.graph.initializer}
    return [(n.name, init[n.input[1]]) for n in m.graph.node
            if n.op_type in ("Conv", "Gemm") and n.input[1] in init]
dense, mag = weights(sys.argv[1]), weights(sys.argv[2])
assert [n for n, _ in dense] == [n for n, _ in mag]
assert (dense[0][1] == mag[0][1]).all() and (dense[-1][1] == mag[-1][1]).all(), "first/last pruned"
total = sum(w.size for _, w in mag[1:-1])
zeros = sum(int((w == 0).sum()) for _, w in mag[1:-1])
assert abs(zeros - round(0.8 * total)) <= 1, (zeros, total)
kept = np.concatenate([d[m != 0] for (_, d), (_, m) in zip(dense[1:-1], mag[1:-1])])
assert (np.concatenate([m[m != 0] for _, m in mag[1:-1]]) == kept).all(), "kept weights changed"
EOF
run 0 two-four prune "$r20" -o "$work/24.onnx" --method 2:4
$py - "$work/24.onnx" <<'EOF' || fail "2:4: the pattern"
import sys, onnx, numpy as np
from onnx import numpy_helper as nh
m = onnx.load(sys.argv[1])
init = {t.name: nh.to_array(t) for t in m.graph.initializer}
convs = [init[n.input[1]] for n in m.graph.node if n.op_type == "Conv"][1:]
for w in convs:
    g = np.moveaxis(w, 1, -1).reshape(-1, 4)   # groups of 4 consecutive input channels
    assert ((g != 0).sum(axis=1) <= 2).all() and (g != 0).sum() == g.size // 2, w.shape
EOF

# ---- bad requests: one line, exit 1, no file ----
bad() {
  local name=$1
  shift
  run 1 "$name" prune "$@" -o "$work/$name.onnx"
  [[ $(wc -l <"$work/$name.err") == 1 ]] || fail "$name: not one line on stderr"
  [[ ! -e $work/$name.onnx ]] || fail "$name: wrote its output"
  ls "$work" | grep -q "^$name.onnx" && fail "$name: left a temporary file"
}
bad sparsity "$r20" --sparsity 1.5
expect_in sparsity err "sparsity"
expect_in sparsity err "out of range"
bad glob "$r20" --include 'layer9.*'
expect_in glob err "layer9.*"
bad nm-channels "$r20" --method 2:4 --include conv1
expect_in nm-channels err "conv1"
bad nothing "$r20" --exclude '*'
expect_in nothing err "prune"
bad taylor "$r20" --method channel --importance taylor
expect_in taylor err "taylor"
expect_in taylor err "--data"
bad taylor-batches "$r20" --method channel --taylor-batches 4
expect_in taylor-batches err "importance = \"taylor\""
bad taylor-gradual "$r20" --method channel --importance taylor --end 8 --every 4
expect_in taylor-gradual err "gradual channel schedule"
bad method "$r20" --method 4:2
expect_in method err "4:2"
bad recal-magnitude "$r20" --recalibrate-bn 4
expect_in recal-magnitude err "one-shot channel"
bad recal-nodata "$r20" --method channel --recalibrate-bn 4
expect_in recal-nodata err "--data"
expect_in channel out "BatchNorm statistics as before the cut"
run 1 no-model prune "$work/nope.onnx" -o "$work/nope_out.onnx"
[[ ! -e $work/nope_out.onnx ]] || fail "no-model: wrote its output"

# ---- fine-tune and scan ----
fmnist_slice 16

run 0 tune prune "$r20" -o "$work/tuned.onnx" --sparsity 0.6 --start 4 --end 16 --every 4 \
  --data "$work/train.h5" --val "$work/test.h5" --epochs 1 --batch 50 --lr 0.05 \
  --train momentum=0.9 --quiet
expect_in tune out "validation top-1"
$py "$here/check_zeros.py" "$work/tuned.onnx" 0.6 || fail "tune: the zeros"
$py -c 'import onnx, sys; m = onnx.load(sys.argv[1]); assert any(p.key == "compress.input_mean" for p in m.metadata_props)' \
  "$work/tuned.onnx" || fail "tune: the preprocessing metadata"
# Gradual channel pruning: masked to 50% of the MACs over steps 0..16 of the fine-tune, then the
# graph rewritten: smaller tensors, onnx.checker, ONNX Runtime equal to our engine on it.
run 0 gradual prune "$r20" -o "$work/gradual.onnx" --method channel --sparsity 0.5 --start 0 \
  --end 16 --every 4 --data "$work/train.h5" --val "$work/test.h5" --epochs 1 --batch 50 \
  --lr 0.05 --train momentum=0.9
expect_in gradual out "prune: step 16: "
expect_in gradual out "groups pruned"
$py - "$work/gradual.onnx" "$work/gradual.out" <<'EOF' || fail "gradual: checker, MACs or ORT"
import re, sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
macs = [float(x) for x in re.findall(r"([0-9.]+)M MACs", open(sys.argv[2]).read())]
assert len(macs) == 2 and macs[1] <= 0.5 * macs[0] + 0.01, macs
import numpy as np, onnxruntime as ort
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
x = np.random.default_rng(1).standard_normal((2, 1, 16, 16)).astype(np.float32)
np.save(sys.argv[1] + ".x.npy", x)
np.save(sys.argv[1] + ".ort.npy", s.run(None, {s.get_inputs()[0].name: x})[0])
EOF
run 0 gradual-infer infer "$work/gradual.onnx" -i "$work/gradual.onnx.x.npy" \
  -o "$work/gradual.ours.npy"
$py - "$work/gradual.onnx.ort.npy" "$work/gradual.ours.npy" <<'EOF' || fail "gradual: ours != ORT"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert np.abs(a - b).max() <= 1e-4 * max(np.abs(a).max(), 1e-12), np.abs(a - b).max()
EOF
# Taylor: channels chosen by |w dL/dw| over 4 batches; twice the same, not L1's choice. The L1
# run fine-tunes with bn_l1 = 1: its BatchNorm scales (1 at the start) fall far below Taylor's.
tune=(--method channel --sparsity 0.3 --data "$work/train.h5" --epochs 1 --batch 100 --lr 0.05
  --quiet)
run 0 taylor-a prune "$r20" -o "$work/ta.onnx" --importance taylor --taylor-batches 4 "${tune[@]}"
expect_in taylor-a out "Taylor scores from 4 batches"
expect_in taylor-a out "BatchNorm statistics of 21 layers recalibrated on 32 batches"
run 0 taylor-b prune "$r20" -o "$work/tb.onnx" --importance taylor --taylor-batches 4 "${tune[@]}"
run 0 slim prune "$r20" -o "$work/slim.onnx" --train bn_l1=1 --recalibrate-bn 0 "${tune[@]}"
grep -q "BatchNorm statistics" "$work/slim.out" && fail "slim: recalibrated with --recalibrate-bn 0"
$py - "$work/ta.onnx" "$work/tb.onnx" "$work/slim.onnx" "$work/taylor-a.out" <<'EOF' ||
import re, sys, onnx, numpy as np
from onnx import numpy_helper as nh
def load(p):
    m = onnx.load(p)
    onnx.checker.check_model(m, full_check=True)
    init = {t.name: nh.to_array(t) for t in m.graph.initializer}
    shapes = [init[n.input[1]].shape for n in m.graph.node if n.op_type == "Conv"]
    gamma = np.mean([np.abs(init[n.input[1]]).mean() for n in m.graph.node
                     if n.op_type == "BatchNormalization"])
    return shapes, gamma
(a, ga), (b, _), (s, gs) = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
assert a == b, "Taylor chose other channels on a second run"
assert a != s, "Taylor chose the channels L1 chose"
assert gs < 0.3 and ga > 0.7, ("bn_l1 did not shrink gamma", gs, ga)
macs = [float(x) for x in re.findall(r"([0-9.]+)M MACs", open(sys.argv[4]).read())]
assert len(macs) == 2 and macs[1] <= 0.75 * macs[0], macs
EOF
  fail "taylor: the choice, the determinism or bn_l1"
bad bn-l1 "$r20" --data "$work/train.h5" --epochs 1 --train bn_l1=2
expect_in bn-l1 err "bn_l1"

run 0 scan prune scan "$work/tuned.onnx" --data "$work/test.h5" --include 'layer3.2.conv2'
expect_in scan out "layer3.2.conv2"
expect_in scan out "90%"
run 0 scan-json prune scan "$work/tuned.onnx" --data "$work/test.h5" --include 'layer3.2.*' \
  --json --svg "$work/scan.svg"
$py - "$work/scan-json.out" <<'EOF' || fail "scan: the JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert [l["name"] for l in d["layers"]] == ["layer3.2.conv1", "layer3.2.conv2"], d
assert all(len(l["top1"]) == 9 for l in d["layers"]) and 0 < d["top1"] <= 100
EOF
$py -c 'import sys, xml.dom.minidom as m; m.parse(sys.argv[1])' "$work/scan.svg" ||
  fail "scan: the SVG"
run 0 scan-channel prune scan "$work/tuned.onnx" --data "$work/test.h5" --method channel \
  --include 'layer3.2.*'
expect_in scan-channel out "layer3.2.conv1"

# allocate = "sensitivity": layer3's channel groups scanned on --val, per-layer fractions for the
# MAC target; they differ between the layers
run 0 allocate prune "$work/tuned.onnx" -o "$work/alloc.onnx" --method channel --sparsity 0.15 \
  --allocate sensitivity --include 'layer3.*' --data "$work/train.h5" --val "$work/test.h5" \
  --epochs 1 --batch 100 --lr 0.01 --quiet
$py - "$work/alloc.onnx" "$work/allocate.out" <<'EOF' || fail "allocate: the target or the fractions"
import re, sys, onnx
onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)
out = open(sys.argv[2]).read()
fractions = dict(re.findall(r"prune: (\S+): (\d+)% of its channels \(sensitivity\)", out))
assert len(fractions) >= 3 and len(set(fractions.values())) >= 2, fractions
macs = [float(x) for x in re.findall(r"([0-9.]+)M MACs", out)]
assert len(macs) == 2 and macs[1] <= 0.85 * macs[0], macs
EOF
bad allocate-magnitude "$r20" --allocate sensitivity
expect_in allocate-magnitude err '"channel"'
bad allocate-noval "$r20" --method channel --allocate sensitivity --data "$work/train.h5" \
  --epochs 1
expect_in allocate-noval err "--val"

[[ $fails == 0 ]] && echo "all prune checks passed"
exit $((fails > 0))
