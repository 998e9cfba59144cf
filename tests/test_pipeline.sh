#!/usr/bin/env bash
# compress pipeline end to end, on 1200 Fashion-MNIST images at 16x16 (as test_train_cli.sh
# makes them): a ResNet-20 teacher and a MobileNetV2-0.5 student trained from scratch, one short
# epoch each.
#   - a run writes teacher.onnx and student_scratch.onnx (with the preprocessing metadata),
#     checkpoints/<stage>/, one metrics.jsonl with every line's names prefixed by its stage,
#     tensorboard/ and the stage manifest;
#   - `compress FILE.toml` is the same command; a re-run skips the complete stages; --only and
#     --from run the stages they name; a changed setting reruns its stage and the later ones;
#   - bad files (unknown key with a suggestion, missing data file, class count of the teacher
#     against the data, a future stage, [distill] where distillation is not built in) exit 1
#     with one line naming file:line:col.
#
# usage: test_pipeline.sh COMPRESS
set -u
compress=$(realpath "$1")
py=/usr/bin/python3
fm=/usr/share/datasets/fashion-mnist
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd /
export OMP_NUM_THREADS=1
fails=0

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# run EXPECTED_STATUS NAME ARGS...: runs compress, keeping stdout and stderr in $work/NAME.*
run() {
  local want=$1 name=$2
  shift 2
  "$compress" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local got=$?
  if [[ $got != "$want" ]]; then
    fail "$name: compress $* exited $got, expected $want"
    sed 's/^/    /' "$work/$name.err" | tail -20
  else
    echo "ok   $name (exit $got)"
  fi
}

# expect_in NAME STREAM TEXT: the output holds TEXT
expect_in() {
  grep -qF -- "$3" "$work/$1.$2" || {
    fail "$1: '$3' is not in its std$2:"
    sed 's/^/    /' "$work/$1.$2"
  }
}

# config_error NAME SED_EXPR POSITION TEXT: the file edited by SED_EXPR fails with one line
# "compress pipeline: bad.toml:POSITION: ...TEXT..."
config_error() {
  sed "$2" "$work/pipe.toml" >"$work/bad.toml"
  run 1 "$1" pipeline "$work/bad.toml" --out "$work/run_bad"
  local lines
  lines=$(wc -l <"$work/$1.err")
  [[ $lines == 1 ]] || fail "$1: $lines lines on stderr, expected 1"
  expect_in "$1" err "compress pipeline: $work/bad.toml:$3: "
  expect_in "$1" err "$4"
}

[[ -f $fm/train-images-idx3-ubyte.gz ]] || {
  echo "FAIL: $fm is missing (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 1
}

# ---- data: 1200 training and 500 test images at 16x16 ----
names="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
run 0 import-train data import idx $fm/train-images-idx3-ubyte.gz $fm/train-labels-idx1-ubyte.gz \
  -o "$work/train60k.h5" --val-fraction 0.02 --seed 1 --class-names "$names"
run 0 import-test data import idx $fm/t10k-images-idx3-ubyte.gz $fm/t10k-labels-idx1-ubyte.gz \
  -o "$work/test10k.h5" --val-fraction 0.05 --seed 1 --class-names "$names"
run 0 shrink-train data augment "$work/train60k.h5" --part val --size 16x16 --crop none \
  -o "$work/train.h5"
run 0 shrink-test data augment "$work/test10k.h5" --part val --size 16x16 --crop none \
  -o "$work/test.h5"
rm -f "$work/train60k.h5" "$work/test10k.h5"

cat >"$work/pipe.toml" <<'EOF'
# a tiny pipeline: 24 steps of teacher, 24 of student
[run]
out_dir = "run"
seed = 3
threads = 1

[data]
train = "train.h5"
val = "test.h5"
batch = 50
crop = "pad"
pad = 1
flip = true
mean = [0.286]
std = [0.353]

[teacher]
spec = "resnet20:classes=10,input=1x16x16"

[teacher.train]
epochs = 1
lr = 0.1
momentum = 0.9
log_every = 4
checkpoint_every = 10

[student]
spec = "mobilenet_v2:width=0.5,classes=10,input=1x16x16"

[student.train]
epochs = 1
lr = 0.05
momentum = 0.9
log_every = 4

[export]
opset = 13
EOF

# ---- a full run ----
r=$work/run
run 0 first pipeline "$work/pipe.toml"
for f in teacher.onnx student_scratch.onnx metrics.jsonl stages/teacher.done \
  stages/scratch.done checkpoints/teacher/step-00000024.h5 checkpoints/scratch/step-00000024.h5; do
  [[ -f $r/$f ]] || fail "first: $r/$f is missing"
done
ls "$r"/tensorboard/events.out.tfevents.* >/dev/null 2>&1 || fail "first: no tensorboard file"
expect_in first out "teacher: 24 steps"
expect_in first out "scratch: 24 steps"
$py - "$r/metrics.jsonl" <<'EOF' || fail "first: metrics.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
stages = {k.split("/")[0] for l in lines for k in l if "/" in k}
assert stages == {"teacher", "scratch"}, stages
assert any("teacher/val_top1" in l for l in lines) and any("scratch/loss" in l for l in lines)
EOF
# the preprocessing in the metadata, read back by compress eval
run 0 eval-student eval "$r/student_scratch.onnx" --data "$work/test.h5"
expect_in eval-student out "top-1"

# ---- re-runs ----
run 0 again "$work/pipe.toml"
expect_in again out "teacher: complete"
expect_in again out "scratch: complete"
run 0 only pipeline "$work/pipe.toml" --only scratch
grep -q "^teacher" "$work/only.out" && fail "only: the teacher stage ran"
expect_in only out "scratch: 24 steps"
run 0 from pipeline "$work/pipe.toml" --from teacher
expect_in from out "teacher: 24 steps"
expect_in from out "scratch: 24 steps"
sed 's/^lr = 0.05/lr = 0.04/' "$work/pipe.toml" >"$work/pipe2.toml"
run 0 changed pipeline "$work/pipe2.toml" --out "$r"
expect_in changed out "teacher: complete"
expect_in changed out "scratch: 24 steps"
# an interrupted stage continues from its last checkpoint, to the same numbers
run 1 stopped pipeline "$work/pipe.toml" --out "$work/run_s" --stop-after 13
expect_in stopped err "interrupted at step 13"
[[ -f $work/run_s/checkpoints/teacher/step-00000013.h5 ]] || fail "stopped: no checkpoint at 13"
run 0 resumed pipeline "$work/pipe.toml" --out "$work/run_s"
expect_in resumed out "teacher: resuming from $work/run_s/checkpoints/teacher/step-00000013.h5"
$py - "$r/metrics.jsonl" "$work/run_s/metrics.jsonl" <<'EOF' || fail "resumed: metrics differ"
import json, sys
def first(p, key):
    return [l[key] for l in map(json.loads, open(p)) if key in l][0]
for key in ("teacher/val_top1", "scratch/val_top1"):
    a, b = first(sys.argv[1], key), first(sys.argv[2], key)
    assert a == b, (key, a, b)
EOF

# a teacher given as ONNX is checked and exported again with the metadata
sed -e 's|^spec = "resnet20.*|onnx = "run/teacher.onnx"|' -e '/^\[teacher.train\]/,/^$/d' \
  "$work/pipe.toml" >"$work/pipe_onnx.toml"
run 0 onnx-teacher pipeline "$work/pipe_onnx.toml" --out "$work/run_o" --only teacher
expect_in onnx-teacher out "teacher: exporting"
[[ -f $work/run_o/teacher.onnx ]] || fail "onnx-teacher: no teacher.onnx"

# [distill]: runs where distill/ is built in (the student distilled from the teacher above);
# refused before anything trains, naming the table, where it is not
cp "$work/pipe.toml" "$work/pipe_kd.toml"
printf '\n[distill]\ntemperature = 4.0\nalpha = 0.9\nepochs = 1\nlr = 0.05\nmomentum = 0.9\n' \
  >>"$work/pipe_kd.toml"
"$compress" pipeline "$work/pipe_kd.toml" --out "$r" >"$work/kd.out" 2>"$work/kd.err"
kd=$?
if [[ $kd == 0 ]]; then
  echo "ok   kd (distillation built in)"
  expect_in kd out "teacher: complete"
  expect_in kd out "distill: 24 steps"
  [[ -f $r/student.onnx ]] || fail "kd: no student.onnx"
else
  [[ $kd == 1 ]] || fail "kd: exit $kd"
  expect_in kd err "compress pipeline: $work/pipe_kd.toml:39:1: 'distill': knowledge distillation is not available"
  [[ ! -e $r/student.onnx ]] || fail "kd: a student.onnx without distillation"
  echo "ok   kd (not built in: refused)"
fi

run 2 bad-stage-arg pipeline "$work/pipe.toml" --only teacher --from scratch
run 1 no-such-stage pipeline "$work/pipe.toml" --only distill
expect_in no-such-stage err "no stage 'distill'"

# ---- bad files ----
config_error unknown-key 's/^epochs = 1/epoch = 1/' "21:1" "did you mean 'epochs'"
config_error missing-data 's/^train = "train.h5"/train = "nope.h5"/' "8:1" "nope.h5"
config_error classes 's/resnet20:classes=10/resnet20:classes=5/' "18:8" \
  "the model has 5 classes (its logits), but"
config_error precision 's/^threads = 1/precision = "int8"/' "5:13" 'one of "fp32", "bf16", "fp16"'
config_error precision-fp16 's/^threads = 1/precision = "fp16"/' "5:13" 'fp16 needs a CUDA device'
printf '\n[prune]\nsparsity = 0.5\n' >>"$work/pipe.toml"
config_error prune 's/^#.*//' "39:1" "not implemented yet"
if ! "$compress" pipeline --help | grep -q "distill"; then fail "help: no distill stage"; fi

[[ $fails == 0 ]] && echo "all pipeline checks passed"
exit $((fails > 0))
