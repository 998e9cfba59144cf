#!/usr/bin/env bash
# compress train and eval end to end, on a small slice of Fashion-MNIST (Debian's
# dataset-fashion-mnist) shrunk to 14x14 with the data tools, ResNet-20, 2 epochs of 24 steps:
#   - a run writes model.onnx, metrics.jsonl (parsed), tensorboard/, checkpoints/, config.toml;
#   - compress eval on model.onnx gives the trainer's validation numbers exactly, and compress
#     infer runs it (checked against ONNX Runtime when it is installed);
#   - stopped at step 13, resumed to 24 (an epoch's end), resumed to the end: every logged loss,
#     accuracy and validation figure equals the uninterrupted run's bit for bit; the same after a
#     Ctrl-C (SIGINT) at any step;
#   - a changed config is refused on resume, naming both hashes; a fresh run will not overwrite
#     a folder with checkpoints;
#   - bad configs (unknown key, wrong type, missing data file, class count, input shape) exit 1
#     with one line that starts with file:line:col;
#   - eval of a model without preprocessing metadata says which flags to give.
# Relative paths in the config are relative to its folder: the commands run from elsewhere.
#
# usage: test_train_cli.sh COMPRESS
set -u
compress=$(realpath "$1")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd /
export OMP_NUM_THREADS=1 # the config says threads = 1; eval and infer follow it
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

# config_error NAME SED_EXPR POSITION TEXT: the config edited by SED_EXPR fails with one line
# "compress train: bad.toml:POSITION: ...TEXT..."
config_error() {
  sed "$2" "$work/train.toml" >"$work/bad.toml"
  run 1 "$1" train "$work/bad.toml" --out "$work/run_bad"
  one_line_error "$1" "compress train: $work/bad.toml:$3: "
  expect_in "$1" err "$4"
}

$py -c 'import numpy, h5py' 2>/dev/null || {
  echo "FAIL: $py lacks numpy or h5py (scripts/install-deps.sh installs them)"
  exit 1
}

fmnist_slice 14

cat >"$work/train.toml" <<'EOF'
# ResNet-20 on 1200 Fashion-MNIST images at 14x14: 24 steps an epoch
[model]
spec = "resnet20:classes=10,input=1x14x14"

[data]
train = "train.h5"
val = "test.h5"
batch = 50
workers = 1
crop = "pad"
pad = 1
flip = true
mean = [0.286]
std = [0.353]

[train]
epochs = 2
optimizer = "sgd"
lr = 0.1
momentum = 0.9
weight_decay = 5e-4
schedule = "cosine"
warmup_steps = 5
seed = 3
log_every = 3
checkpoint_every = 10

[run]
out_dir = "run_a"
threads = 1
EOF

# ---- an uninterrupted run ----
run 0 train-a train "$work/train.toml" --json
a=$work/run_a
for f in model.onnx metrics.jsonl config.toml checkpoints/step-00000048.h5 \
  checkpoints/step-00000040.h5; do
  [[ -f $a/$f ]] || fail "train-a: $a/$f is missing"
done
[[ ! -e $a/checkpoints/step-00000030.h5 ]] || fail "train-a: more than 2 checkpoints kept"
ls "$a"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || fail "train-a: no tensorboard file"

# metrics.jsonl: strict JSON, the logged steps and keys, and the validation lines
$py - "$a/metrics.jsonl" "$work/train-a.out" <<'EOF' || fail "train-a: metrics.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
res = json.load(open(sys.argv[2]))
train = [l for l in lines if "loss" in l]
val = [l for l in lines if "val_top1" in l]
steps = [l["step"] for l in train]
want = sorted(set(list(range(3, 49, 3)) + [24, 48]))
assert steps == want, f"logged steps {steps}, expected {want}"
for l in train:
    for k in ("loss", "lr", "grad_norm", "accuracy", "images_per_s", "data_wait", "epoch", "time"):
        assert k in l, f"step {l['step']}: no {k}"
assert [(l["epoch"], l["step"]) for l in val] == [(0, 24), (1, 48)], val
assert val[-1]["val_top1"] == res["val"]["top1"] and val[-1]["val_loss"] == res["val"]["loss"]
assert res["steps"] == 48 and not res["stopped"] and res["model"].endswith("model.onnx")
assert train[-1]["loss"] < train[0]["loss"], "the loss did not go down"
print(f"metrics: {len(train)} logged steps, loss {train[0]['loss']:.3f} -> "
      f"{train[-1]['loss']:.3f}, val top-1 {res['val']['top1']:.1f}%")
EOF

# ---- eval gives the trainer's numbers; infer runs the model ----
run 0 eval-a eval "$a/model.onnx" --data "$work/test.h5" --batch 50 --json
$py - "$work/eval-a.out" "$work/train-a.out" <<'EOF' || fail "eval-a: differs from the trainer"
import json, sys
e, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert e["preprocess"]["source"] == "metadata", e
assert e["images"] == 500, e
# the trainer evaluates its training graph's weights unfused; eval runs the inference program,
# BatchNorm folded into the convolutions (core/infer_fuse.h): the same to rounding
assert e["top1"] == t["val"]["top1"], (e, t)
assert abs(e["loss"] - t["val"]["loss"]) <= 1e-6 * abs(t["val"]["loss"]), (e, t)
print(f"eval: top-1 {e['top1']:.1f}% as the trainer reported")
EOF
run 0 inspect-a inspect "$a/model.onnx"
expect_in inspect-a out "compress.input_mean = 0.286"
expect_in inspect-a out '"Ankle boot"]'

$py - "$work/test.h5" "$work/x.npy" <<'EOF' || fail "infer: input"
import h5py, numpy as np, sys
with h5py.File(sys.argv[1]) as f:
    x = f["images"][:20].astype(np.float32).transpose(0, 3, 1, 2)
np.save(sys.argv[2], ((x / 255 - np.float32(0.286)) / np.float32(0.353)).astype(np.float32))
EOF
run 0 infer-a infer "$a/model.onnx" -i "$work/x.npy" -o "$work/y.npy"
$py - "$a/model.onnx" "$work/x.npy" "$work/y.npy" <<'EOF' || fail "infer: differs from ONNX Runtime"
import numpy as np, sys
y = np.load(sys.argv[3])
assert y.shape == (20, 10) and np.isfinite(y).all(), y.shape
try:
    import onnxruntime as ort
except ImportError:
    print("infer: onnxruntime not installed, not compared"); sys.exit(0)
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
r = s.run(None, {"input": np.load(sys.argv[2])})[0]
d = np.abs(r - y).max()
assert d < 1e-4 * max(1, np.abs(r).max()), d
print(f"infer: matches ONNX Runtime (max difference {d:.2g})")
EOF

# ---- [model] onnx: a model whose input has another name trains and keeps that name ----
run 0 export-spec export-model "resnet20:classes=10,input=1x14x14" "$work/spec.onnx"
if $py - "$work/spec.onnx" "$work/pixels.onnx" <<'EOF'; then
import onnx, sys
m = onnx.load(sys.argv[1])
old = m.graph.input[0].name
m.graph.input[0].name = "pixels"
for n in m.graph.node:
    n.input[:] = ["pixels" if i == old else i for i in n.input]
onnx.save(m, sys.argv[2])
EOF
  sed 's/^spec = .*/onnx = "pixels.onnx"/; s/^epochs = 2/epochs = 1/; s/"run_a"/"run_onnx"/' \
    "$work/train.toml" >"$work/train_onnx.toml"
  run 0 train-onnx train "$work/train_onnx.toml" --json
  run 0 inspect-onnx inspect "$work/run_onnx/model.onnx"
  expect_in inspect-onnx out "pixels"
  run 0 eval-onnx eval "$work/run_onnx/model.onnx" --data "$work/test.h5" --batch 50 --json
  $py -c 'import json, sys; e, t = (json.load(open(p)) for p in sys.argv[1:])
assert e["top1"] == t["val"]["top1"], (e, t)' "$work/eval-onnx.out" "$work/train-onnx.out" ||
    fail "eval-onnx: differs from the trainer"
else
  echo "note [model] onnx: python3 has no onnx module, not checked"
fi

# ---- resume: stop at 13, resume to 24 (the end of epoch 0, before its evaluation), finish ----
compare() { # compare NAME RUN_DIR: every logged figure equals run_a's, bit for bit
  $py - "$a/metrics.jsonl" "$2/metrics.jsonl" <<'EOF' || fail "$1: the losses differ from run_a"
import json, sys
def figures(path):
    d = {}
    for l in open(path):  # a step logged twice (after a resume): the later line counts
        o = json.loads(l)
        for k in ("loss", "accuracy", "lr", "grad_norm", "val_top1", "val_top5", "val_loss"):
            if k in o: d[(o["step"], k)] = o[k]
    return d
a, b = figures(sys.argv[1]), figures(sys.argv[2])
bad = [(k, a[k], b.get(k)) for k in sorted(a) if a[k] != b.get(k)]
assert not bad and len(a) == len(b), bad[:5]
print(f"resume: {len(a)} logged figures equal bit for bit")
EOF
}
sed 's/^out_dir = "run_a"/out_dir = "run_b"/' "$work/train.toml" >"$work/train_b.toml"
run 0 train-b1 train "$work/train_b.toml" --stop-after 13 --json
expect_in train-b1 out '"stopped":true'
expect_in train-b1 out '"model":null'
[[ ! -e $work/run_b/model.onnx ]] || fail "train-b1: a stopped run wrote model.onnx"
run 0 train-b2 train "$work/train_b.toml" --resume --stop-after 24 --json
expect_in train-b2 out '"resumed_from":13'
run 0 train-b3 train "$work/train_b.toml" --resume --json
expect_in train-b3 out '"resumed_from":24'
compare resume "$work/run_b"

# ---- Ctrl-C writes a checkpoint; resuming from it gives the same numbers ----
sed 's/^out_dir = "run_a"/out_dir = "run_c"/' "$work/train.toml" >"$work/train_c.toml"
"$compress" train "$work/train_c.toml" >"$work/train-c1.out" 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -s $work/run_c/metrics.jsonl ]] && break
  sleep 0.05
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
if [[ $rc == 130 ]]; then
  echo "ok   interrupt (exit 130)"
  grep -qF "continue with --resume" "$work/train-c1.out" || fail "interrupt: no hint to resume"
  run 0 train-c2 train "$work/train_c.toml" --resume
  compare interrupt "$work/run_c"
elif [[ $rc == 0 ]]; then
  echo "note interrupt: the run ended before the signal came"
else
  fail "interrupt: exit $rc, expected 130"
  sed 's/^/    /' "$work/train-c1.out" | tail -5
fi

# ---- refusals ----
sed 's/^lr = 0.1/lr = 0.2/' "$work/train_b.toml" >"$work/train_lr.toml"
run 1 resume-changed train "$work/train_lr.toml" --resume
expect_in resume-changed err "config hash"
expect_in resume-changed err "$(sed -n 's/.*"config_hash":"\([^"]*\)".*/\1/p' "$work/train-b3.out")"
run 1 overwrite train "$work/train.toml"
expect_in overwrite err "pass --resume"
run 1 resume-none train "$work/train.toml" --out "$work/run_none" --resume
[[ ! -e $work/run_none ]] || fail "resume-none: created the folder"

# ---- bad configs: one line, file:line:col ----
config_error device-cuda 's/^threads = 1/device = "cuda"/' "30:10" 'use "cpu" or "auto"'
run 1 device-flag train "$work/train.toml" --out "$work/run_dev" --device cuda
expect_in device-flag err "--device: device \"cuda\""
[[ ! -e $work/run_dev ]] || fail "device-flag: created the folder"
config_error unknown-key 's/^epochs = 2/epoch = 2/' "17:1" \
  "unknown key 'epoch' in [train]; did you mean 'epochs'?"
config_error wrong-type 's/^lr = 0.1/lr = "fast"/' "19:6" \
  "'train.lr': must be a float, found string"
config_error missing-data 's/^train = "train.h5"/train = "nope.h5"/' "6:1" "nope.h5: cannot open"
config_error classes 's/classes=10/classes=5/' "3:8" "the model has 5 classes (its logits), but"
config_error input-shape 's/input=1x14x14/input=1x28x28/' "3:8" "holds images of 1x14x14"
config_error optimizer-key 's/^momentum = 0.9/beta1 = 0.9/' "20:9" "applies to optimizer"
config_error bad-choice 's/^crop = "pad"/crop = "random"/' "10:8" 'one of "none", "pad", "resized"'
config_error channels 's/^mean = \[0.286\]/mean = [0.4, 0.4, 0.4]/' "13:8" \
  "3 value(s), but the images"
run 2 usage train
run 2 usage-option train "$work/train.toml" --bogus

# ---- eval without metadata, and with flags ----
run 1 eval-bare eval "resnet20:classes=10,input=1x14x14" --data "$work/test.h5"
expect_in eval-bare err "--mean"
expect_in eval-bare err "--std"
run 0 eval-flags eval "$a/model.onnx" --data "$work/test.h5" --batch 50 --mean 72.93 --std 90.015 \
  --scale 1 --json
expect_in eval-flags out '"source":"flags"'
run 1 eval-channels eval "$a/model.onnx" --data "$work/test.h5" --mean 0.5,0.5,0.5 --std 1,1,1
expect_in eval-channels err "takes 1 channels"

echo "$fails failure(s)"
[[ $fails == 0 ]]
