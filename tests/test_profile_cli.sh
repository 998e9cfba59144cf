#!/usr/bin/env bash
# compress profile end to end: the golden CNN (tests/fixtures/golden/cnn.onnx) and a built-in
# spec, inference and training. The Chrome trace must be valid JSON with complete ("X") events
# on the forward and backward tracks (name, ph, ts, dur, pid, tid; ts and dur in microseconds),
# the JSON table must add up, and bad arguments exit 2.
#
# usage: test_profile_cli.sh COMPRESS FIXTURES
set -u
compress=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

run() { # run EXPECTED_STATUS NAME ARGS...
  local want=$1 name=$2
  shift 2
  "$compress" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local got=$?
  if [[ $got != "$want" ]]; then
    fail "$name: compress $* exited $got, expected $want"
    sed 's/^/    /' "$work/$name.err"
  else
    echo "ok   $name (exit $got)"
  fi
}

model=$fixtures/golden/cnn.onnx
run 0 train profile "$model" --batch 8 --steps 3 --training --trace "$work/trace.json" --threads 1
cat "$work/train.out"
grep -q "backward ms" "$work/train.out" || fail "train: no table"
grep -q "(optimizer)" "$work/train.out" || fail "train: no optimizer row"

python3 - "$work/trace.json" <<'EOF' || fail "train: the trace is wrong"
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
python3 - "$work/infer_json.out" <<'EOF' || fail "infer_json: the JSON is wrong"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["steps"] == 2 and r["backward_ms"] == 0, r
total = sum(o["forward_ms"] for o in r["ops"])
assert abs(total - r["forward_ms"]) <= 1e-4 * max(total, 1e-3), (total, r["forward_ms"])
assert abs(sum(o["share"] for o in r["ops"]) - 1) < 1e-3
assert any(n["op"] == "Conv" for n in r["nodes"])
EOF

run 0 spec profile resnet20:input=1x28x28 --batch 2 --steps 1 --warmup 0 --top 3 --threads 1
grep -q "the 3 slowest of" "$work/spec.out" || fail "spec: --top 3 not applied"

run 2 no_model profile
run 2 bad_batch profile "$model" --batch 0
run 2 bad_option profile "$model" --nope
run 1 missing profile "$work/missing.onnx"
[[ $(wc -l <"$work/missing.err") == 1 ]] || fail "missing: more than one line on stderr"

echo "profile: $fails failure(s)"
exit $((fails != 0))
