#!/usr/bin/env bash
# Nothing written before the checks pass, and nothing a kill or a full disk leaves that a rerun
# does not accept (docs/training.md, "What a kill leaves"), on 300 Fashion-MNIST images at 14x14
# (ResNet-20, 15 steps of 20, a checkpoint every 5):
#   - the bad-input reproducers (tests/fixtures/bad_input: onecycle pct_start over 3 steps, too
#     few images for one step, mean = [nan], a pipeline without a batch) and a refused --resume
#     (a truncated newest checkpoint) fail with one line, and the output folder is absent, or
#     unchanged file for file;
#   - compress train killed with SIGKILL during a step, while writing its config, a checkpoint
#     or the model (CX_TEST_KILL_AT, core/file_replace.c), then resumed (or rerun where no
#     checkpoint was written): model.onnx equals an uninterrupted run's byte for byte, and so
#     do the logged losses (each step logged once); no temporary file is left;
#   - compress pipeline killed during a step, a checkpoint, the export, the stage manifest and
#     the report, then rerun: teacher.onnx equals an uninterrupted run's byte for byte;
#   - a full disk (RLIMIT_FSIZE, SIGXFSZ ignored so that write fails with EFBIG) during a
#     checkpoint: an error naming the file, exit 1, the previous checkpoint resumes to the same
#     model; during convert and data import: an error naming the file, no output.
#
# usage: test_no_partial.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
fm=/usr/share/datasets/fashion-mnist
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd "$work"
export OMP_NUM_THREADS=1
fails=0

source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

[[ -f $fm/t10k-images-idx3-ubyte.gz ]] || {
  echo "FAIL: $fm is missing (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 1
}
$py -c 'import h5py' 2>/dev/null || {
  echo "FAIL: $py lacks h5py (scripts/install-deps.sh installs it)"
  exit 1
}

# ---- data: small.h5 (48 images and a val part of 48, 28x28), tiny.h5 (300 at 14x14) ----
run 0 import data import idx $fm/t10k-images-idx3-ubyte.gz $fm/t10k-labels-idx1-ubyte.gz \
  -o t10k.h5 --val-fraction 0.03 --seed 1
run 0 shrink data augment t10k.h5 --part val --size 14x14 --crop none -o tiny.h5
$py - <<'EOF' || fail "small.h5 not made"
import h5py
src = h5py.File("t10k.h5", "r")
with h5py.File("small.h5", "w") as f:
    for part in ("", "val/"):
        f[part + "images"] = src[part + "images"][:48]
        f[part + "labels"] = src[part + "labels"][:48]
    for k, v in src.attrs.items():
        f.attrs[k] = v
    for k, v in src["val"].attrs.items():
        f["val"].attrs[k] = v
EOF

# snapshot DIR: every file under DIR with its checksum ("absent" when DIR is not there)
snapshot() {
  if [[ -e $1 ]]; then (cd "$1" && find . | sort | while read -r f; do
    [[ -f $f ]] && md5sum "$f" || echo "dir $f"; done)
  else echo absent; fi
}

# refused NAME OUT COMPRESS-ARGS...: exits 1 with one line, and OUT is as it was
refused() {
  local name=$1 out=$2
  shift 2
  local before
  before=$(snapshot "$out")
  run 1 "$name" "$@" --out "$out"
  [[ $(wc -l <"$work/$name.err") == 1 ]] || fail "$name: more than one line on stderr"
  [[ $(snapshot "$out") == "$before" ]] || fail "$name: $out changed: $(snapshot "$out")"
}

# ---- bad input leaves nothing behind ----
cp "$here"/fixtures/bad_input/*.toml .
refused onecycle p1 train partial_onecycle_train.toml
expect_in onecycle err "pct_start 0.3"
refused batch p2 train partial_batch_train.toml
expect_in batch err "small.h5: too few images for one step of 4097"
refused nan p3 train partial_nan_train.toml
expect_in nan err "partial_nan_train.toml:13:9: 'data.mean[0]': must be a finite number"
refused nobatch p4 pipeline partial_nobatch_pipeline.toml
expect_in nobatch err "the teacher stage: small.h5: too few images for one step of 128"

cat >kill.toml <<'EOF'
# ResNet-20 on 300 Fashion-MNIST images at 14x14: 15 steps of 20, a checkpoint every 5
[model]
spec = "resnet20:classes=10,input=1x14x14"

[data]
train = "tiny.h5"
batch = 20
workers = 1
crop = "pad"
pad = 1
flip = true
mean = [0.286]
std = [0.353]

[train]
epochs = 1
optimizer = "sgd"
lr = 0.1
momentum = 0.9
schedule = "cosine"
seed = 3
log_every = 1
checkpoint_every = 5

[run]
threads = 1
EOF

# a refused --resume: a truncated newest checkpoint, a folder without checkpoints
run 0 stopped train kill.toml --out r --stop-after 5
head -c 100000 r/checkpoints/step-00000005.h5 >r/checkpoints/step-00000009.h5
refused truncated r train kill.toml --resume
expect_in truncated err "step-00000009.h5: the checkpoint has 100000 bytes"
refused no-run r_none train kill.toml --resume
expect_in no-run err "no such folder"

# ---- kills ----
run 0 train-a train kill.toml --out a
[[ -f a/model.onnx ]] || fail "train-a: no model.onnx"

# losses NAME DIR: the logged training lines of DIR equal run a's (each step once), bit for bit
losses() {
  $py - a/metrics.jsonl "$2/metrics.jsonl" <<'EOF' || fail "$1: metrics.jsonl differs from run a's"
import json, sys
def rows(p):
    return [(l["step"], l["loss"], l["lr"], l["grad_norm"], l["accuracy"])
            for l in map(json.loads, open(p)) if "loss" in l]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
assert a == b, f"{len(a)} lines against {len(b)}: {[x[0] for x in b]}"
EOF
}

# finish NAME DIR: what a user does after a kill: --resume when a checkpoint was written, else
# the same command again; then the model is run a's, byte for byte
finish() {
  local name=$1 dir=$2 resume=()
  ls "$dir"/checkpoints/step-*.h5 >/dev/null 2>&1 && resume=(--resume)
  run 0 "$name-again" train kill.toml --out "$dir" "${resume[@]}"
  cmp -s a/model.onnx "$dir/model.onnx" || fail "$name: model.onnx differs from run a's"
  losses "$name" "$dir"
  [[ -z $(find "$dir" -name '*.tmp.*') ]] || fail "$name: left $(find "$dir" -name '*.tmp.*')"
}

# kill_at NAME SUFFIX WANT: killed while writing the file ending in SUFFIX; WANT: a glob of the
# temporary file that must be there, its real name not
kill_at() {
  local name=$1
  CX_TEST_KILL_AT=$2 "$compress" train kill.toml --out "$name" >"$name.out" 2>&1
  local rc=$?
  [[ $rc == 137 ]] || fail "$name: exit $rc, expected 137 (SIGKILL at $2)"
  compgen -G "$name/$2.tmp.*" >/dev/null || fail "$name: no temporary file of $2"
  [[ ! -e $name/$2 ]] || fail "$name: $2 is there, half written"
  finish "$name" "$name"
}
kill_at kill-config config.toml
kill_at kill-ckpt checkpoints/step-00000010.h5
kill_at kill-export model.onnx
# the checkpoint killed mid-write was never taken: the resume started from step 5
grep -q "resuming from kill-ckpt/checkpoints/step-00000005.h5" kill-ckpt-again.out ||
  fail "kill-ckpt: did not resume from step 5"

# during a step: killed once 7 steps are logged (the checkpoint of step 5 written)
"$compress" train kill.toml --out kill-step >kill-step.out 2>&1 &
pid=$!
until [[ $(cat kill-step/metrics.jsonl 2>/dev/null | wc -l) -ge 7 ]] || ! kill -0 $pid 2>/dev/null
do sleep 0.02; done
kill -KILL $pid 2>/dev/null
wait $pid
[[ $? == 137 ]] || fail "kill-step: the run ended before it was killed"
finish kill-step kill-step

# ---- a pipeline killed ----
sed -n '/^\[data\]/,/^std/p' kill.toml | sed 's/^workers.*//' >data.toml
cat >pipe.toml <<EOF
[run]
seed = 3
threads = 1

$(cat data.toml)
val = "tiny.h5"

[teacher]
spec = "resnet20:classes=10,input=1x14x14"

[teacher.train]
epochs = 1
optimizer = "sgd"
lr = 0.1
momentum = 0.9
schedule = "cosine"
log_every = 1
checkpoint_every = 5
EOF
run 0 pipe-a pipeline pipe.toml --out pa
[[ -f pa/teacher.onnx ]] || fail "pipe-a: no teacher.onnx"

# pipe_kill NAME SUFFIX: killed while writing SUFFIX, then run again
pipe_kill() {
  CX_TEST_KILL_AT=$2 "$compress" pipeline pipe.toml --out "$1" >"$1.out" 2>&1
  local rc=$?
  [[ $rc == 137 ]] || fail "$1: exit $rc, expected 137 (SIGKILL at $2)"
  run 0 "$1-again" pipeline pipe.toml --out "$1"
  cmp -s pa/teacher.onnx "$1/teacher.onnx" || fail "$1: teacher.onnx differs from run pa's"
  [[ -z $(find "$1" -name '*.tmp.*') ]] || fail "$1: left $(find "$1" -name '*.tmp.*')"
}
pipe_kill pipe-started stages/teacher.started
pipe_kill pipe-ckpt checkpoints/teacher/step-00000010.h5
expect_in pipe-ckpt-again out "resuming from pipe-ckpt/checkpoints/teacher/step-00000005.h5"
pipe_kill pipe-export teacher.onnx
pipe_kill pipe-done stages/teacher.done
pipe_kill pipe-report report.json
expect_in pipe-report-again out "teacher: complete"

"$compress" pipeline pipe.toml --out pipe-step >pipe-step.out 2>&1 &
pid=$!
until [[ $(cat pipe-step/metrics.jsonl 2>/dev/null | wc -l) -ge 7 ]] || ! kill -0 $pid 2>/dev/null
do sleep 0.02; done
kill -KILL $pid 2>/dev/null
wait $pid
[[ $? == 137 ]] || fail "pipe-step: the pipeline ended before it was killed"
run 0 pipe-step-again pipeline pipe.toml --out pipe-step
cmp -s pa/teacher.onnx pipe-step/teacher.onnx || fail "pipe-step: teacher.onnx differs"

# ---- a full disk ----
# limited KB COMMAND...: runs compress with files limited to KB kilobytes; EFBIG, not SIGXFSZ
limited() {
  local kb=$1 name=$2
  shift 2
  (trap '' XFSZ; ulimit -f "$kb"; exec "$compress" "$@") >"$name.out" 2>"$name.err"
  echo $? >"$name.rc"
}
cp -r r full && rm full/checkpoints/step-00000009.h5 # stopped at step 5
limited 1024 full-ckpt train kill.toml --out full --resume # a checkpoint is 2.7 MB
[[ $(cat full-ckpt.rc) == 1 ]] || fail "full-ckpt: exit $(cat full-ckpt.rc), expected 1"
expect_in full-ckpt err "full/checkpoints/step-00000010.h5: cannot write the temporary file"
expect_in full-ckpt err "File too large"
[[ -z $(find full -name '*.tmp.*' -o -name 'step-00000010.h5') ]] || fail "full-ckpt: left files"
run 0 full-again train kill.toml --out full --resume
grep -q "resuming from full/checkpoints/step-00000005.h5" full-again.out ||
  fail "full-again: did not resume from step 5"
cmp -s a/model.onnx full/model.onnx || fail "full-again: model.onnx differs from run a's"

limited 512 full-convert convert a/model.onnx conv.onnx # the model is 1.1 MB
[[ $(cat full-convert.rc) == 1 ]] || fail "full-convert: exit $(cat full-convert.rc), expected 1"
one_line_error full-convert "conv.onnx"
expect_in full-convert err "File too large"
[[ -z $(compgen -G 'conv.onnx*') ]] || fail "full-convert: left $(compgen -G 'conv.onnx*')"
limited 100 full-data data import idx $fm/t10k-images-idx3-ubyte.gz \
  $fm/t10k-labels-idx1-ubyte.gz -o big.h5
[[ $(cat full-data.rc) == 1 ]] || fail "full-data: exit $(cat full-data.rc), expected 1"
one_line_error full-data "compress data import: big.h5: "
expect_in full-data err "File too large"
[[ -z $(compgen -G 'big.h5*') ]] || fail "full-data: left $(compgen -G 'big.h5*')"

if ((fails)); then
  echo "$fails failure(s)"
  exit 1
fi
echo "all passed"
