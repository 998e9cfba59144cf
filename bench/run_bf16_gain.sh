#!/usr/bin/env bash
# bf16 training throughput over our own fp32 (issue 17's "bf16 >= 1.5x our fp32"), the two runs
# alternating round by round so that both see the same load; run_train.sh measures the precisions
# minutes apart, and this host's drift between them moved that ratio by +-5%.
# usage: bench/run_bf16_gain.sh [BUILD_DIR] (default build)
#   STEPS=n ROUNDS=n THREADS=1,2 MODELS=a,b   as run_train.sh (defaults 20, 7, 2, both ResNet-20s;
#   names from bench/train_models.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
compress=${1:-build}/compress
steps=${STEPS:-20}
rounds=${ROUNDS:-7}
median() { /usr/bin/python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
speed() { # SPEC PRECISION THREADS
  taskset -c "0-$(($3 - 1))" "$compress" bench train "$1" --batch 128 --threads "$3" \
    --steps "$steps" --precision "$2" --json |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])'
}
source bench/train_models.sh
spec_of() { # NAME: its compress spec (bench/train_models.sh)
  local m name spec rest
  for m in "${train_models[@]}"; do
    read -r name spec rest <<<"$m"
    [[ $name == "$1" ]] && echo "$spec" && return
  done
  echo "$1: not a model of bench/train_models.sh" >&2
  exit 2
}
IFS=, read -ra names <<<"${MODELS:-resnet20,resnet20_32}"
IFS=, read -ra thread_counts <<<"${THREADS:-2}"
printf "%-18s %-3s %12s %12s %8s\n" model thr "fp32 img/s" "bf16 img/s" bf16/fp32
for t in "${thread_counts[@]}"; do
  for name in "${names[@]}"; do
    spec=$(spec_of "$name")
    f=() b=()
    for ((r = 0; r < rounds; r++)); do
      f+=("$(speed "$spec" fp32 "$t")")
      b+=("$(speed "$spec" bf16 "$t")")
    done
    mf=$(median "${f[@]}") mb=$(median "${b[@]}")
    /usr/bin/python3 -c "print('%-18s %-3s %12.1f %12.1f %7.2fx' % ('$name', '$t', $mf, $mb, $mb / $mf))"
  done
done
