#!/usr/bin/env bash
# compress tune end to end, on 1200 Fashion-MNIST images at 16x16: a ResNet-20 teacher (one
# epoch of 12 steps) and a ResNet-20 student distilled from it (two epochs), distill lr and
# temperature searched by TPE, trials stopped early by successive halving after epoch 1.
#   - bad [tune] tables (a key the pipeline does not have, with its did-you-mean; a table the
#     file lacks; a value the pipeline refuses; an inverted range) exit 1 with one line at the
#     key's position in [tune], and write no trial;
#   - 3 TPE trials: the teacher stage trains in trial 1 only (the others link it and read its
#     output cache), trials.jsonl has a line per trial with its keys, results and time (its
#     params those of each trial's pipeline.toml), each trial stopped early exactly when the
#     successive-halving rule says so (checked again here from the trials' epoch-1 values),
#     best.toml is the best complete trial's pipeline and runs as is;
#   - resume: trials = 4 runs trial 4 alone; a trial left "running" (a tune killed during it)
#     runs again with the same keys; a budget smaller than a trial, or a changed search space,
#     is refused before anything runs.
#
# usage: test_tune_cli.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=1
# the trials' reports leave out ONNX Runtime's figures (a Python start per model, most of a short
# trial's time); the checks here use $py
export CX_PYTHON=/nonexistent
fails=0

source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

fmnist_slice 16

cat >"$work/tune.toml" <<'TOML'
[run]
out_dir = "out"
seed = 3
threads = 1

[data]
train = "train.h5"
val = "test.h5"
batch = 100
mean = [0.286]
std = [0.353]

[teacher]
spec = "resnet20:classes=10,input=1x16x16"

[teacher.train]
epochs = 1
lr = 0.1
momentum = 0.9

[student]
spec = "resnet20:classes=10,input=1x16x16,seed=7"

[distill]
epochs = 2
lr = 0.05
momentum = 0.9

[tune]
trials = 3
startup = 2
early_stop = "asha"
reduction = 2
"distill.lr" = {log = [0.01, 0.3]}
"distill.temperature" = [1.0, 8.0]
TOML
out=$work/out

# bad_tune NAME SED_EXPR POSITION TEXT: the tune file edited by SED_EXPR fails with one line
# "compress tune: bad.toml:POSITION: ...TEXT..." and no trial
bad_tune() {
  sed "$2" "$work/tune.toml" >"$work/bad.toml"
  run 1 "$1" tune "$work/bad.toml" --out "$work/bad_out"
  one_line_error "$1" "compress tune: $work/bad.toml:$3: "
  expect_in "$1" err "$4"
  [[ ! -e $work/bad_out ]] || fail "$1: the output folder was made"
}
bad_tune unknown-key 's/"distill.lr"/"distill.lrr"/' 34:17 \
  "with distill.lrr = 0.01 the pipeline is refused: unknown key 'lrr' in [distill]; did you mean 'lr'?"
bad_tune no-table 's/"distill.temperature"/"prune.sparsity"/' 35:20 "the file has no [prune] table"
bad_tune refused 's/"distill.temperature" = \[1.0, 8.0\]/"distill.alpha" = [0.5, 2.0]/' 35:19 \
  "with distill.alpha = 2.0 the pipeline is refused: 'distill.alpha': 2 is out of range"
bad_tune inverted 's/\[1.0, 8.0\]/[8.0, 1.0]/' 35:25 "an inverted range"
bad_tune int-as-range 's/"distill.temperature" = \[1.0, 8.0\]/"distill.epochs" = [1, 2]/' 35:20 \
  "'distill.epochs': must be an integer, found float 1 (a list of two numbers is a float range: {int = [lo, hi]} searches integers"

run 0 tune tune "$work/tune.toml"
expect_in tune out "trial 3/3"
expect_in tune out "best: trial"
# the teacher trained once: in trial 1; the others took it, and read its outputs from the cache
n=$(cat "$out"/trials/*/log.txt | grep -c "^teacher: training")
[[ $n == 1 ]] || fail "tune: the teacher trained $n times"
grep -q "^teacher: training" "$out/trials/0001/log.txt" || fail "tune: trial 1 did not train it"
for t in 0002 0003; do
  expect_in tune out "(from an earlier trial: teacher)"
  # (a trial stopped early stops before it counts them)
  grep "teacher outputs of" "$out/trials/$t/log.txt" | grep -qv "outputs of 0 batches computed" &&
    fail "tune: trial $t computed teacher outputs"
  [[ -L $out/trials/$t/teacher.onnx && -L $out/trials/$t/teacher_cache ]] ||
    fail "tune: trial $t has its own teacher"
done

# check_results N: trials.jsonl has N lines, each complete or stopped early with its pipeline's
# keys and its stage's results; best.toml is the best complete one's pipeline
check_results() {
  "$py" - "$out" "$1" <<'PY' || fail "results after $1 trials"
import json, sys, tomllib
out, n = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(f"{out}/trials.jsonl")]
assert [l["trial"] for l in lines] == list(range(1, n + 1)), lines
for i, l in enumerate(lines):
    assert l["status"] in ("complete", "pruned") and l["objective"] == "distill.top1", l
    p = tomllib.load(open(f"{out}/{l['folder']}/pipeline.toml", "rb"))
    assert p["distill"]["lr"] == l["params"]["distill.lr"], (p["distill"], l)
    assert p["distill"]["temperature"] == l["params"]["distill.temperature"]
    assert 0.01 <= l["params"]["distill.lr"] <= 0.3 and l["seconds"] > 0
    assert "tune" not in p
    # the rung after epoch 1: its value is the trial's validation top-1 of epoch 0
    val = [json.loads(m) for m in open(f"{out}/{l['folder']}/metrics.jsonl")]
    val = [m["val_top1"] for m in val if m.get("stage") == "distill" and "val_top1" in m
           and m["epoch"] == 0]
    assert l["rungs"] == val[-1:], (l["rungs"], val)
    # successive halving (reduction 2): it goes on when at most (k + 1) // 2 - 1 of the k
    # trials before it that reached the rung did better (at least the best goes on)
    before = [o["rungs"][0] for o in lines[:i] if o["rungs"]]
    better = sum(b > l["rungs"][0] for b in before)
    go = better < max((len(before) + 1) // 2, 1)
    assert (l["status"] == "complete") == go, (l, before)
    if go:
        assert l["value"] == l["top1"] and l["top1"] is not None, l
        open(f"{out}/{l['folder']}/stages/distill.done").read()
    else:
        assert l["value"] == l["rungs"][0] and l["top1"] is None, l
complete = [l for l in lines if l["status"] == "complete"]
print("stopped early:", [l["trial"] for l in lines if l["status"] == "pruned"])
best = max(complete, key=lambda l: (l["value"], -l["trial"]))
b = tomllib.load(open(f"{out}/best.toml", "rb"))
assert b["distill"]["lr"] == best["params"]["distill.lr"], (b, best)
assert b["run"]["out_dir"] == f"{out}/{best['folder']}", b["run"]
print("best", best["trial"], best["value"])
PY
}
check_results 3
run 0 best pipeline "$out/best.toml"
expect_in best out "distill: complete"

# resume: one more trial, the first three kept
sed -i 's/^trials = 3/trials = 4/' "$work/tune.toml"
cp "$out/trials.jsonl" "$work/three.jsonl"
run 0 more tune "$work/tune.toml"
expect_in more out "trial 4/4"
grep -q "trial [123]/" "$work/more.out" && fail "more: an earlier trial ran again"
head -3 "$out/trials.jsonl" | cmp -s - "$work/three.jsonl" || fail "more: trials 1-3 changed"
check_results 4
# a tune killed during trial 4: its record says "running" and its distill stage is not done
cp "$out/trials/0004/pipeline.toml" "$work/four.toml"
sed -i 's/^status = .*/status = "running"/' "$out/trials/0004/trial.toml"
rm -f "$out/trials/0004/stages/distill.done"
run 0 again tune "$work/tune.toml"
expect_in again out "trial 4: continuing it"
expect_in again out "(from an earlier trial: teacher)"
cmp -s "$out/trials/0004/pipeline.toml" "$work/four.toml" || fail "again: trial 4's keys changed"
check_results 4

# before anything runs: a budget smaller than a trial (10 ms, which any trial outlasts: these
# trials average under 2 s on a quiet machine, so "2s" made the check depend on the load), a
# changed space
sed 's/^trials = 4/trials = 5\nbudget = "0.01s"/' "$work/tune.toml" >"$work/budget.toml"
run 1 budget tune "$work/budget.toml" --out "$out"
one_line_error budget "is smaller than one trial"
[[ ! -e $out/trials/0005 ]] || fail "budget: a trial ran"
sed 's/\[1.0, 8.0\]/[1.0, 6.0]/; s/^trials = 4/trials = 5/' "$work/tune.toml" >"$work/space.toml"
run 1 space tune "$work/space.toml" --out "$out"
one_line_error space "holds the trials of another pipeline, search space or objective"

exit $((fails != 0))
