#!/usr/bin/env bash
# ONNX Runtime as the peer of our QuantizeLinear / DequantizeLinear, on QDQ files that ONNX
# Runtime's own quantize_static makes (per-channel int8 weights, int8 or uint8 activations,
# int32 biases behind DequantizeLinear) from built-in specs exported as float ONNX
# and from a small depthwise CNN (tests/quant_ort.py does the Python side):
#   - compress infer runs each file; its output is within MAX_LSB units of the output's scale of
#     ONNX Runtime's, optimized (QLinearConv: integer accumulation and requantization) and not
#     (float Q/DQ like ours), and the argmax agrees wherever ONNX Runtime's margin decides it;
#   - compress convert (import, then export) gives a file onnx.checker accepts, with the same ops
#     and integer initializers, on which ONNX Runtime's outputs are identical to the original's.
# ONNX Runtime's integer kernels on x86 without VNNI (this machine's AVX2 EPYC) multiply u8 by s8
# with vpmaddubsw, whose int16 sums saturate with full-range int8 weights: measured on the
# depthwise net, its QLinearConv output is up to 25 LSB from its own float Q/DQ result. Its
# quantization docs prescribe reduce_range (7-bit weights) there; so full-range files are held
# to ONNX Runtime's float Q/DQ run (its optimized result is printed), reduce_range files to both.
# Why MAX_LSB = 2: we simulate in f32 (DequantizeLinear, f32 convolution, QuantizeLinear), ONNX
# Runtime accumulates in int32 and requantizes with a float multiplier, so a value within f32
# rounding of a .5 boundary can round to the neighbouring integer at any quantized activation;
# such a flip moves the next layer's pre-rounding values by a fraction of an LSB, so flips stay
# rare and the output moves by an LSB or two. Measured: see the lines this test prints.
# Exits 77 (ctest's skip) when the tests' Python lacks onnx or onnxruntime.
# usage: test_quant_ort.sh COMPRESS
set -u
compress=$(realpath "$1")
here=$(dirname "$(realpath "$0")")
py=${CX_PYTHON:-/opt/compress-venv/bin/python}
if ! "$py" -c "import numpy, onnx, onnxruntime.quantization" 2>/dev/null; then
  echo "skip: $py cannot import numpy, onnx and onnxruntime.quantization (scripts/install-deps.sh)"
  exit 77
fi
work=$(mktemp -d)
if [[ -n ${KEEP:-} ]]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
cd /
export OMP_NUM_THREADS=1
fails=0
source "$here/cli_lib.sh" || { echo "FAIL: tests/cli_lib.sh did not load"; exit 1; }
MAX_LSB=2

# NAME FLOAT.onnx ACTIVATIONS [--reduce-range]: quantize_static, then compress infer and convert
check_qdq() {
  local name=$1 float=$2 act=$3 rr=${4:-} f=$work/$1
  "$py" "$here/quant_ort.py" quantize "$float" "$f.qdq.onnx" "$f.x.npy" --activations "$act" $rr \
    >"$work/$name.q.out" 2>&1 || { fail "$name: quantize_static"; tail -5 "$work/$name.q.out"; return; }
  echo "-- $name: $(grep '^quantize_static' "$work/$name.q.out")"
  run 0 "$name-infer" infer "$f.qdq.onnx" -i "$f.x.npy" -o "$f.ours.npy"
  local only=--float-only
  [[ -n $rr ]] && only=
  "$py" "$here/quant_ort.py" compare "$f.qdq.onnx" "$f.x.npy" "$f.ours.npy" --max-lsb $MAX_LSB \
    $only || fail "$name: compress infer against ONNX Runtime"
  run 0 "$name-convert" convert "$f.qdq.onnx" "$f.back.onnx"
  "$py" "$here/quant_ort.py" roundtrip "$f.qdq.onnx" "$f.back.onnx" "$f.x.npy" ||
    fail "$name: import → export round trip"
}

# NAME SPEC ACTIVATIONS (SPEC "dwnet": quant_ort.py make-dwnet): full-range int8 weights against
# ONNX Runtime's float Q/DQ, and 7-bit (reduce_range) weights against its integer kernels too
check_model() {
  local name=$1 spec=$2 act=$3 f=$work/$1.float.onnx
  if [[ $spec == dwnet ]]; then
    "$py" "$here/quant_ort.py" make-dwnet "$f" || { fail "$name: make-dwnet"; return; }
  else
    run 0 "$name-export" export-model "$spec" "$f" --fold-bn
  fi
  check_qdq "$name" "$f" "$act"
  check_qdq "$name.rr" "$f" "$act" --reduce-range
}

check_model r20_int8 "resnet20:classes=10,input=1x28x28" int8
check_model r20_uint8 "resnet20:classes=10,input=1x28x28" uint8
# a random-init MobileNet's logits are ~1e-9 (their quantized scale too): a small depthwise
# network written with onnx.helper stands in for it
check_model dw_int8 dwnet int8
check_model dw_uint8 dwnet uint8

echo "$fails failure(s)"
exit $((fails != 0))
