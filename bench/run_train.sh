#!/usr/bin/env bash
# Training throughput, compress against PyTorch (best of NCHW and channels_last), same model,
# batch and thread count, in one run. usage: bench/run_train.sh [BUILD_DIR] (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
compress=${1:-build}/compress
steps=${STEPS:-20}
printf "%-18s %-6s %14s %14s %8s\n" model prec "compress img/s" "torch img/s" ratio
run() { # NAME SPEC TORCH_NAME PRECISION
  local ours theirs
  ours=$("$compress" bench train "$2" --batch 128 --threads 2 --steps "$steps" --precision "$4" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')
  local flag=""
  [[ $4 == bf16 ]] && flag=--bf16
  theirs=$(/usr/bin/python3 bench/train_speed_torch.py "$3" --threads 2 --steps "$steps" $flag --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["best"] or "n/a")')
  if [[ $theirs == n/a ]]; then # PyTorch 1.13 cannot train it in bf16 (no bf16 ReLU6 backward)
    /usr/bin/python3 -c "print('%-18s %-6s %14.1f %14s %8s' % ('$1', '$4', $ours, 'n/a', 'n/a'))"
  else
    /usr/bin/python3 -c "print('%-18s %-6s %14.1f %14.1f %7.2fx' % ('$1', '$4', $ours, $theirs, $ours / $theirs))"
  fi
}
run resnet20 "resnet20:classes=10,input=1x28x28" resnet20 fp32
run mobilenet_v2_0.5 "mobilenet_v2:width=0.5,classes=10,input=1x28x28" mobilenet_v2_0.5 fp32
run mobilenet_v2 "mobilenet_v2:classes=10,input=3x32x32" mobilenet_v2 fp32
# bf16 autocast: needs a CPU with AVX512-BF16 (compress refuses it elsewhere)
run resnet20 "resnet20:classes=10,input=1x28x28" resnet20 bf16
run mobilenet_v2_0.5 "mobilenet_v2:width=0.5,classes=10,input=1x28x28" mobilenet_v2_0.5 bf16
