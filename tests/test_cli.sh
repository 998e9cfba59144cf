#!/usr/bin/env bash
# The ONNX commands end to end: compress inspect, infer and convert on the CNN that
# test_onnx_export wrote (cnn.onnx, cnn_input.npy, cnn_input_s64.npy in FILES), with a bad input
# for each. A failure (exit 1) must print exactly one line naming the file; usage errors exit 2.
#
# usage: test_cli.sh COMPRESS FILES
set -u
py=${CX_PYTHON:?"the tests' Python (ctest sets it: tests/CMakeLists.txt, CX_PYTHON)"}
compress=$1
files=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

source "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }

model=$files/cnn.onnx
input=$files/cnn_input.npy
[[ -f $model && -f $input ]] || {
  echo "FAIL: $model or $input is missing (test_onnx_export writes them)"
  exit 1
}
head -c 300 "$model" >"$work/truncated.onnx"

# ---- inspect ----
run 0 inspect inspect "$model"
expect_in inspect out "opset 13"
expect_in inspect out "[N,3,8,8]"
expect_in inspect out "Conv 3, BatchNormalization 4"
expect_in inspect out "conv1"
expect_in inspect out "24592"
run 0 inspect_json inspect "$model" --json
expect_in inspect_json out '"opset":13'
expect_in inspect_json out '"shape":["N",3,8,8]'
expect_in inspect_json out '"total_macs":24592'
if [ -x "$py" ]; then
  $py -c 'import json, sys; json.load(sys.stdin)' <"$work/inspect_json.out" ||
    fail "inspect --json: not valid JSON"
fi
run 1 inspect_missing inspect "$work/missing.onnx"
one_line_error inspect_missing "missing.onnx"
run 1 inspect_truncated inspect "$work/truncated.onnx"
one_line_error inspect_truncated "truncated.onnx"
run 2 inspect_usage inspect
run 2 inspect_option inspect "$model" --bogus

# ---- infer ----
run 0 infer infer "$model" -i "$input" -o "$work/out.npy"
[[ -f $work/out.npy && -f $work/out_1.npy ]] || fail "infer: out.npy and out_1.npy not both written"
expect_in infer out "[2,10]"
run 0 infer_json infer "$model" -i "$input" -o "$work/json.npy" --json
expect_in infer_json out '"batch":2'
expect_in infer_json out '"shape":[2,10]'
run 1 infer_dtype infer "$model" -i "$files/cnn_input_s64.npy" -o "$work/bad.npy"
one_line_error infer_dtype "cnn_input_s64.npy"
run 1 infer_shape infer "$model" -i "$work/out.npy" -o "$work/bad.npy"
one_line_error infer_shape "out.npy: shape [2,10]"
run 1 infer_count infer "$model" -i "$input" -i "$input" -o "$work/bad.npy"
one_line_error infer_count "2 file(s)"
run 1 infer_model infer "$work/truncated.onnx" -i "$input" -o "$work/bad.npy"
one_line_error infer_model "truncated.onnx"
run 1 infer_npy infer "$model" -i "$work/truncated.onnx" -o "$work/bad.npy"
one_line_error infer_npy "truncated.onnx"
[[ ! -e $work/bad.npy ]] || fail "infer: a failed run wrote bad.npy"
run 2 infer_usage infer "$model" -i "$input"

# ---- convert ----
run 0 convert convert "$model" "$work/c17.onnx" --opset 17
expect_in convert out "opset 17"
run 0 infer_c17 infer "$work/c17.onnx" -i "$input" -o "$work/c17.npy"
cmp -s "$work/out.npy" "$work/c17.npy" || fail "convert: opset 17's output differs from opset 13's"
run 0 convert_fold convert "$model" "$work/fold.onnx" --opset 15 --fold-bn --json
expect_in convert_fold out '"folded_batch_norms":4'
expect_in convert_fold out '"opset":15'
run 0 inspect_fold inspect "$work/fold.onnx"
grep -q BatchNormalization "$work/inspect_fold.out" &&
  fail "convert --fold-bn: a BatchNormalization is left"
run 0 infer_fold infer "$work/fold.onnx" -i "$input" -o "$work/fold.npy"
run 1 convert_truncated convert "$work/truncated.onnx" "$work/never.onnx"
one_line_error convert_truncated "truncated.onnx"
[[ ! -e $work/never.onnx ]] || fail "convert: a failed run wrote never.onnx"
ls "$work" | grep -qE '\.(tmp|check)\.' && fail "convert: left a temporary file"
run 1 convert_dir convert "$model" "$work/no/such/folder/x.onnx"
one_line_error convert_dir "no/such/folder"
expect_in convert_dir err "convert: $work/no/such/folder/x.onnx: cannot create" # OUT, first
run 2 convert_opset convert "$model" "$work/x.onnx" --opset 12
run 2 convert_usage convert "$model"

# ---- model specs wherever an ONNX path goes; export-model runs in ONNX Runtime ----
spec="mobilenet_v2:width=0.5,classes=10,input=1x28x28"
run 0 inspect_spec inspect "$spec"
expect_in inspect_spec out "total"
run 1 inspect_badspec inspect "mobilenet_v2:widht=0.5"
one_line_error inspect_badspec "widht"
run 0 export_model export-model "$spec" "$work/mv2.onnx"
$py -c "import numpy as np; np.save('$work/img.npy', np.random.RandomState(0).rand(3, 1, 28, 28).astype(np.float32))"
run 0 infer_exported infer "$work/mv2.onnx" -i "$work/img.npy" -o "$work/ours.npy"
mkdir -p "$work/ort"
if $py "$(dirname "$0")/ort_check.py" "$work/mv2.onnx" "$work/ort" "$work/img.npy" >/dev/null; then
  $py -c "
import numpy as np, sys
a, b = np.load('$work/ours.npy'), np.load('$work/ort/output_0.npy')
err = np.abs(a - b).max() / np.abs(b).max()
print('ok   export-model in ONNX Runtime: relative error %.2e' % err)
sys.exit(0 if err <= 1e-5 else 1)" || fail "export-model: ONNX Runtime disagrees with compress infer"
else
  fail "export-model: ONNX Runtime or the checker refused $work/mv2.onnx"
fi

# ---- bench train: whole training steps, images/s ----
run 0 bench_train bench train "resnet20:classes=10,input=1x16x16" --batch 4 --steps 2 --warmup 1 --json
$py -c "import json; r = json.load(open('$work/bench_train.out')); assert r['images_per_s'] > 0" ||
  fail "bench train: no throughput in its JSON"
run 2 bench_usage bench inference resnet20

# ---- OpenMP's waiting policy (cli/omp_env.c): set by re-executing once, unless the user set one ----
omp_env_of() { # prints what a running bench sees of GOMP_SPINCOUNT, given extra env assignments
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u CX_OMP_ENV_SET "$@" "$compress" bench train \
    "resnet20:classes=10,input=1x16x16" --batch 4 --steps 1000000 >/dev/null 2>&1 &
  local pid=$! seen=""
  for _ in $(seq 200); do # until the process has run main (and so has re-executed, or not)
    seen=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -E '^(GOMP_SPINCOUNT|CX_OMP_ENV_SET)=' | sort | tr '\n' ' ')
    [[ -n $seen ]] && break
    sleep 0.05
  done
  kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  echo "$seen"
}
# beside a normal-priority busy loop on one of its CPUs: the short spin (other load on this
# machine only adds to what it sees, so this holds on a shared one); alone: either, by the load
taskset -c "$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')" sh -c 'while :; do :; done' &
hog=$!
sleep 0.2
busy=$(omp_env_of)
kill "$hog"; wait "$hog" 2>/dev/null
alone=$(omp_env_of) own=$(omp_env_of GOMP_SPINCOUNT=77)
if [[ $busy != "CX_OMP_ENV_SET=short GOMP_SPINCOUNT=1000 " ]]; then
  fail "omp env: beside a busy loop the run saw '$busy'"
elif [[ $alone != "CX_OMP_ENV_SET=short GOMP_SPINCOUNT=1000 " &&
        $alone != "CX_OMP_ENV_SET=long GOMP_SPINCOUNT=300000 " ]]; then
  fail "omp env: alone the run saw '$alone'"
elif [[ $own != "GOMP_SPINCOUNT=77 " ]]; then
  fail "omp env: a user's GOMP_SPINCOUNT became '$own'"
else
  echo "ok   OpenMP waiting policy: short spin beside a busy loop, '${alone% }' alone, the user's own kept"
fi

# ---- registered in the help ----
run 0 help --help
for c in inspect infer convert export-model models bench; do expect_in help out "  $c"; done

if ((fails)); then
  echo "FAIL: $fails check(s)"
  exit 1
fi
echo "ok: all CLI checks passed"
