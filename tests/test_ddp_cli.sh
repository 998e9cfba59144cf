#!/usr/bin/env bash
# compress train under mpirun (docs/distributed.md), on 1200 Fashion-MNIST images at 14x14,
# ResNet-20, global batch 96 (12 steps an epoch):
#   - a run on 1 rank stopped at step 4 resumes on 2 ranks to the end: rank 0 alone writes
#     (one metrics line per logged step, the model, the checkpoints), the JSON says 2 ranks and
#     the share of step time spent waiting for communication;
#   - sync_bn = true: on 1 process (no launcher, so no MPI) the losses are those without it bit
#     for bit; on 2 ranks the JSON counts the statistics' reductions; a misspelt key is refused;
#   - compress pipeline on 2 ranks (that model as the teacher, distilled into a ResNet-20):
#     the stages' files and the report (its stage table: 2 ranks, the communication wait),
#     rank 0 alone printing;
#   - kill -9 of rank 1 mid-epoch ends the job, non-zero, with mpirun's message, within 30 s;
#   - a data file missing on one rank only (an MPMD launch with two configs): both ranks exit
#     non-zero with that rank's message, and no output folder is made;
#   - ranks that build different models (two configs) stop before the first step, saying so;
#   - a command other than train and pipeline refuses to run on 2 ranks.
# Skipped (77) without mpirun.
#
# usage: test_ddp_cli.sh COMPRESS MPIEXEC
set -u
compress=$(realpath "$1")
mpiexec=${2:-mpiexec}
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
command -v "$mpiexec" >/dev/null || { echo "skipped: no $mpiexec"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd /
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=("$mpiexec" --oversubscribe)
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

# mpi_run EXPECTED_STATUS NAME MPIEXEC_ARGS...: as run, through mpirun
mpi_run() {
  local want=$1 name=$2
  shift 2
  "${mpi[@]}" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local got=$?
  if [[ $got != "$want" ]]; then
    fail "$name: mpirun $* exited $got, expected $want"
    tail -20 "$work/$name.err" | sed 's/^/    /'
  else
    echo "ok   $name (exit $got)"
  fi
}

fmnist_slice 14

cat >"$work/train.toml" <<'EOF'
[model]
spec = "resnet20:classes=10,input=1x14x14"

[data]
train = "train.h5"
val = "test.h5"
batch = 96
workers = 1
mean = [0.286]
std = [0.353]

[train]
epochs = 1
optimizer = "sgd"
lr = 0.1
momentum = 0.9
seed = 3
log_every = 2
checkpoint_every = 4

[run]
threads = 1
EOF

# ---- 1 rank, stopped; resumed on 2 ranks ----
a=$work/run_a
run 0 stop train "$work/train.toml" --out "$a" --stop-after 4
mpi_run 0 resume -np 2 "$compress" train "$work/train.toml" --out "$a" --resume --json
expect_in resume out '"ranks":2'
expect_in resume out '"resumed_from":4'
expect_in resume out '"steps":12'
expect_in resume out '"comm_wait_fraction":'
expect_in resume err '2 ranks, comm wait'
[[ -f $a/model.onnx && -f $a/checkpoints/step-00000012.h5 ]] || fail "resume: no model.onnx or final checkpoint"
# logged steps 2, 4 (the first run), 6, 8, 10, 12 (rank 0 of the second): once each
steps=$(grep -c '"loss"' "$a/metrics.jsonl")
lines=$(grep '"loss"' "$a/metrics.jsonl" | grep -o '"step":[0-9]*' | sort | uniq -d | wc -l)
[[ $lines == 0 ]] || fail "metrics.jsonl repeats steps (both ranks wrote it?): $(cat "$a/metrics.jsonl")"
[[ $steps -ge 6 ]] || fail "metrics.jsonl has $steps step lines, expected 6"

# ---- sync_bn ----
sed 's/^\[train\]$/[train]\nsync_bn = true/' "$work/train.toml" >"$work/sync.toml"
run 0 plain1 train "$work/train.toml" --out "$work/run_p1" --stop-after 4
run 0 sync1 train "$work/sync.toml" --out "$work/run_s1" --stop-after 4
# one process: no extension, no MPI; the same losses to the last bit
diff <(grep -o '"loss":[^,]*' "$work/run_p1/metrics.jsonl") \
  <(grep -o '"loss":[^,]*' "$work/run_s1/metrics.jsonl") >/dev/null ||
  fail "sync1: sync_bn on one process changed the losses"
mpi_run 0 sync2 -np 2 "$compress" train "$work/sync.toml" --out "$work/run_s2" --stop-after 4 --json
expect_in sync2 out '"sync_bn":true'
n=$(grep -o '"stat_reductions":[0-9]*' "$work/sync2.out" | cut -d: -f2)
# 21 BatchNorms (19 and the two projection shortcuts'), 3 poolings each a step (2 forward, 1
# backward), 4 steps; (5C + 3) doubles each (forward: the shift, then the shifted sums): 31864
# bytes a step
[[ ${n:-0} == 252 ]] || fail "sync2: $n statistics reductions in 4 steps, expected 21 x 3 x 4 = 252"
expect_in sync2 out '"stat_reduced_bytes":127456'
sed 's/^sync_bn = true$/sync_bnn = true/' "$work/sync.toml" >"$work/sync_typo.toml"
run 1 sync_typo train "$work/sync_typo.toml" --out "$work/run_st"
expect_in sync_typo err "sync_bnn"
expect_in sync_typo err "sync_bn"

# ---- a pipeline on 2 ranks: the trained model as teacher, distilled into a student ----
cat >"$work/pipe.toml" <<EOF
[run]
out_dir = "$work/pipe"
seed = 3
threads = 1

[data]
train = "train.h5"
val = "test.h5"
batch = 192
mean = [0.286]
std = [0.353]

[teacher]
onnx = "$a/model.onnx"

[student]
spec = "resnet20:classes=10,input=1x14x14"

[distill]
epochs = 1
lr = 0.05
momentum = 0.9
log_every = 4
EOF
mpi_run 0 pipeline -np 2 "$compress" "$work/pipe.toml"
expect_in pipeline out "data parallel: 2 ranks"
expect_in pipeline out "distill: 6 steps"
for f in teacher.onnx student.onnx report.json; do
  [[ -f $work/pipe/$f ]] || fail "pipeline: no $f"
done
$py - "$work/pipe/report.json" <<'PY' || fail "pipeline: report.json lacks the distill stage's ranks and communication wait"
import json, sys
stages = {s["name"]: s for s in json.load(open(sys.argv[1]))["stages"]}
d = stages["distill"]
assert d["ranks"] == 2 and 0 <= d["comm_wait_fraction"] < 1 and d["images_per_s"] > 0, d
PY
grep -q '| distill | .* | 2 | ' "$work/pipe/report.md" || fail "pipeline: report.md's stage table lacks 2 ranks"
n=$(grep -c 'distill: training' "$work/pipeline.out")
[[ $n == 1 ]] || fail "pipeline: 'distill: training' printed $n times (rank 0 alone reports)"

# ---- kill -9 of one rank ----
sed 's/epochs = 1/epochs = 50/' "$work/train.toml" >"$work/long.toml"
k=$work/run_k
"${mpi[@]}" -np 2 "$compress" train "$work/long.toml" --out "$k" >"$work/kill.out" 2>&1 &
mp=$!
for _ in $(seq 1 600); do # until training runs (the first logged step)
  grep -q '"step"' "$k/metrics.jsonl" 2>/dev/null && break
  kill -0 $mp 2>/dev/null || break
  sleep 0.1
done
victim=
for p in $(pgrep -P $mp); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
done
if [[ -z $victim ]]; then
  fail "kill: no rank 1 under mpirun (pid $mp)"
  kill $mp 2>/dev/null
else
  kill -9 "$victim"
  start=$SECONDS
  while kill -0 $mp 2>/dev/null && ((SECONDS - start < 60)); do sleep 0.2; done
  took=$((SECONDS - start))
  if kill -0 $mp 2>/dev/null; then
    fail "kill: the job still runs 60 s after rank 1 was killed"
    kill -9 $mp
  fi
  wait $mp
  rc=$?
  echo "     kill: the job ended ${took} s after rank 1 was killed, exit $rc"
  ((took <= 30)) || fail "kill: the job took ${took} s to end (> 30 s)"
  [[ $rc != 0 ]] || fail "kill: mpirun exited 0 after a rank was killed"
  grep -q 'rank 1 .*exited on signal 9' "$work/kill.out" ||
    fail "kill: no message naming rank 1 and signal 9: $(tail -5 "$work/kill.out")"
fi

# ---- a data file missing on one rank ----
sed 's/train = "train.h5"/train = "missing.h5"/' "$work/train.toml" >"$work/missing.toml"
m=$work/run_m
"${mpi[@]}" -np 1 "$compress" train "$work/train.toml" --out "$m" : \
  -np 1 "$compress" train "$work/missing.toml" --out "$m" >"$work/missing.out" 2>"$work/missing.err"
rc=$?
[[ $rc != 0 ]] || fail "missing: mpirun exited 0"
expect_in missing err "compress train: rank 1 failed: $work/missing.toml:5:1: 'data.train': $work/missing.h5: cannot open"
expect_in missing err "compress train: rank 1: $work/missing.toml:5:1"
[[ ! -e $m ]] || fail "missing: the output folder was made although rank 1's check failed"

# ---- ranks that build different models ----
sed 's/resnet20/resnet32/' "$work/train.toml" >"$work/other.toml"
"${mpi[@]}" -np 1 "$compress" train "$work/train.toml" --out "$work/run_o" : \
  -np 1 "$compress" train "$work/other.toml" --out "$work/run_o2" >"$work/other.out" 2>"$work/other.err"
[[ $? != 0 ]] || fail "other: two different models trained together"
expect_in other err "ddp: the ranks built different models: 65 to 101 parameters"

# ---- other commands refuse to run on several ranks ----
"${mpi[@]}" -np 2 "$compress" eval "$a/model.onnx" --data "$work/test.h5" >"$work/eval.out" 2>"$work/eval.err"
[[ $? != 0 ]] || fail "eval: ran on 2 ranks"
expect_in eval err "compress eval: runs as one process, not on 2 ranks"

((fails == 0)) && echo "ok" || echo "FAILED ($fails)"
exit $((fails != 0))
