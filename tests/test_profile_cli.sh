#!/usr/bin/env bash
# compress profile end to end: the golden CNN (tests/fixtures/golden/cnn.onnx) and a built-in
# spec, inference and training; and compress train --profile on a tiny synthetic data set (with
# gradient checkpointing on, whose planned memory is printed). The Chrome trace must be valid JSON with complete ("X") events
# on the forward and backward tracks (name, ph, ts, dur, pid, tid; ts and dur in microseconds),
# the JSON table must add up, and bad arguments exit 2.
#
# usage: test_profile_cli.sh COMPRESS FIXTURES
set -u
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
compress=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

model=$fixtures/golden/cnn.onnx
run 0 train profile "$model" --batch 8 --steps 3 --training --trace "$work/trace.json" --threads 1
cat "$work/train.out"
grep -q "backward ms" "$work/train.out" || fail "train: no table"
grep -q "(optimizer)" "$work/train.out" || fail "train: no optimizer row"

$py - "$work/trace.json" <<'EOF' || fail "train: the trace is wrong"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
for e in x:
    assert {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"} <= set(e), e
    assert e["ts"] >= 0 and e["dur"] >= 0, e
tids = {e["tid"] for e in x}
assert {1, 2} <= tids, tids
names = {e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert {"forward", "backward"} <= names, names
steps = {e["args"]["step"] for e in x}
assert steps == {0, 1, 2}, steps
fwd = [e for e in x if e["tid"] == 1]
assert len(fwd) % 3 == 0 and fwd, len(fwd)
print(f"trace: {len(x)} events, {len(fwd) // 3} forward nodes a step")
EOF

run 0 infer_json profile "$model" --batch 4 --steps 2 --json --threads 1
$py - "$work/infer_json.out" <<'EOF' || fail "infer_json: the JSON is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["steps"] == 2 and r["backward_ms"] == 0, r
total = sum(o["forward_ms"] for o in r["ops"])
# every value is printed with 6 decimals: allow each its half-unit of rounding
assert abs(total - r["forward_ms"]) <= 1e-4 * total + 5e-7 * (len(r["ops"]) + 1), (total, r["forward_ms"])
assert abs(sum(o["share"] for o in r["ops"]) - 1) < 1e-3
# inference programs fuse Conv (+BN, +activation) into ConvFused (core/infer_fuse.h)
assert any(n["op"] in ("Conv", "ConvFused") for n in r["nodes"]), r["nodes"]
EOF

run 0 spec profile resnet20:input=1x28x28 --batch 2 --steps 1 --warmup 0 --top 3 --threads 1
grep -q "the 3 slowest of" "$work/spec.out" || fail "spec: --top 3 not applied"

# ---- compress train --profile: a window of a real training run ----
$py - "$work" <<'EOF' || fail "train data: numpy could not write the arrays"
import numpy as np, sys
r = np.random.default_rng(0)
np.save(sys.argv[1] + "/x.npy", r.integers(0, 256, (96, 12, 12), dtype=np.uint8))
np.save(sys.argv[1] + "/y.npy", (np.arange(96) % 4).astype(np.int64))
EOF
run 0 import data import npy "$work/x.npy" "$work/y.npy" -o "$work/set.h5"
cat >"$work/t.toml" <<'EOF'
[model]
spec = "resnet20:classes=4,input=1x12x12"
[data]
train = "set.h5"
batch = 16
[train]
epochs = 2
lr = 0.05
log_every = 4
checkpoint_segments = "blocks"
[run]
threads = 1
EOF
run 0 train_profile train "$work/t.toml" --out "$work/run" --profile-after 2 --profile-steps 3
out=$work/train_profile.out
grep -q "^memory: arena" "$out" || fail "train_profile: no planned memory"
grep -q "^gradient checkpointing: .* recomputed" "$out" || fail "train_profile: no recompute line"
grep -q "profile of training steps 3 to 5" "$out" || fail "train_profile: no profile heading"
grep -q "^Conv " "$out" || fail "train_profile: no Conv row in the table"
grep -q "^(optimizer) " "$out" || fail "train_profile: no optimizer row"
$py - "$work/run/profile_trace.json" "$work/run/profile.json" <<'EOF' || fail "train_profile: files"
import json, sys
d = json.load(open(sys.argv[1]))
x = [e for e in d["traceEvents"] if e["ph"] == "X"]
assert {e["tid"] for e in x} == {1, 2, 3}, {e["tid"] for e in x}
assert {e["args"]["step"] for e in x} == {3, 4, 5}, {e["args"]["step"] for e in x}
assert any(e["cat"] == "Conv" and e["tid"] == 2 for e in x), "no Conv in backward"
assert any(e["name"] == "optimizer" and e["tid"] == 3 for e in x), "no optimizer event"
p = json.load(open(sys.argv[2]))
assert p["steps"] == 3, p["steps"]
conv = [o for o in p["ops"] if o["name"] == "Conv"][0]
assert conv["forward_ms"] > 0 and conv["backward_ms"] > 0, conv
assert abs(sum(o["share"] for o in p["ops"]) - 1) < 1e-3
print(f"train --profile: {len(x)} events; Conv {conv['share']:.0%} of a step")
EOF
run 2 train_bad_window train "$work/t.toml" --out "$work/run2" --profile-steps 0

run 2 no_model profile
run 2 bad_batch profile "$model" --batch 0
run 2 bad_option profile "$model" --nope
run 1 missing profile "$work/missing.onnx"
[[ $(wc -l <"$work/missing.err") == 1 ]] || fail "missing: more than one line on stderr"

echo "profile: $fails failure(s)"
exit $((fails != 0))
