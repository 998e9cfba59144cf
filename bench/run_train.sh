#!/usr/bin/env bash
# Training throughput, compress against PyTorch (best of NCHW and channels_last), same model,
# batch and thread count, in one run. usage: bench/run_train.sh [BUILD_DIR] (default build)
#   STEPS=n      timed steps of each run (default 20)
#   ROUNDS=n     rounds; each runs compress then PyTorch, and the medians are printed (default 3)
#   THREADS=1,2  thread counts (default 2); every process is pinned to the first THREADS cores
#   PRECISIONS=fp32,bf16   (default both)
#   MODELS=a,b   only these rows (names as printed)
#   HOG=nice|normal  a CPU-bound loop on the last pinned core for the whole run, at nice 19 or
#                at normal priority: both programs measured beside the same co-tenant
#   TORCH_PYTHONS=/usr/bin/python3,/venv/bin/python3   Pythons, each with its PyTorch (default:
#                Debian's); each is measured in every round and the fastest's median counts
set -euo pipefail
cd "$(dirname "$0")/.."
compress=${1:-build}/compress
steps=${STEPS:-20}
rounds=${ROUNDS:-3}
threads_list=${THREADS:-2}
median() { /usr/bin/python3 -c 'import statistics,sys; v=[float(x) for x in sys.argv[1:] if x != "n/a"]; print(statistics.median(v) if v else "n/a")' "$@"; }
hog() { # CORE: a busy loop there until the script exits
  case ${HOG:-} in
  "") return 0 ;;
  nice) local prio=19 ;;
  normal) local prio=0 ;;
  *) echo "HOG=$HOG: nice or normal" >&2 && exit 2 ;;
  esac
  taskset -c "$1" nice -n "$prio" /usr/bin/python3 -c 'while True: pass' &
  hog_pid=$!
  trap 'kill $hog_pid 2>/dev/null' EXIT
}
IFS=, read -ra pythons <<<"${TORCH_PYTHONS:-/usr/bin/python3}"
versions=()
for py in "${pythons[@]}"; do versions+=("$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"); done
printf "%-18s %-6s %-3s %14s %14s %8s  %s\n" model prec thr "compress img/s" "torch img/s" ratio \
  "torch (per version)"
run() { # NAME SPEC TORCH_NAME PRECISION THREADS
  local ours=() cores="0-$(($5 - 1))" flag="" i
  local -a theirs
  [[ $4 == bf16 ]] && flag=--bf16
  hog $(($5 - 1))
  for ((i = 0; i < ${#pythons[@]}; i++)); do theirs[i]=""; done
  for ((r = 0; r < rounds; r++)); do
    ours+=("$(taskset -c "$cores" "$compress" bench train "$2" --batch 128 --threads "$5" \
      --steps "$steps" --precision "$4" --json |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["images_per_s"])')")
    for ((i = 0; i < ${#pythons[@]}; i++)); do
      theirs[i]+=" $(taskset -c "$cores" "${pythons[i]}" bench/train_speed_torch.py "$3" \
        --threads "$5" --steps "$steps" $flag --json |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["best"] or "n/a")')"
    done
  done
  if [[ -n ${hog_pid:-} ]]; then kill "$hog_pid" && wait "$hog_pid" 2>/dev/null || true; fi
  hog_pid=
  local a b=n/a per=""
  a=$(median "${ours[@]}")
  for ((i = 0; i < ${#pythons[@]}; i++)); do
    local m
    # shellcheck disable=SC2086 # the rounds' figures, one word each
    m=$(median ${theirs[i]})
    per+=" ${versions[i]}: $(/usr/bin/python3 -c "print('$m' if '$m' == 'n/a' else '%.1f' % $m)")"
    if [[ $m != n/a ]] && { [[ $b == n/a ]] || /usr/bin/python3 -c "import sys; sys.exit(not $m > $b)"; }; then
      b=$m
    fi
  done
  if [[ $b == n/a ]]; then # PyTorch 1.13 cannot train it in bf16 (no bf16 ReLU6 backward)
    /usr/bin/python3 -c "print('%-18s %-6s %-3s %14.1f %14s %8s ' % ('$1', '$4', '$5', $a, 'n/a', 'n/a') + '$per')"
  else
    /usr/bin/python3 -c "print('%-18s %-6s %-3s %14.1f %14.1f %7.2fx ' % ('$1', '$4', '$5', $a, $b, $a / $b) + '$per')"
  fi
}
source bench/train_models.sh
IFS=, read -ra thread_counts <<<"$threads_list"
IFS=, read -ra precisions <<<"${PRECISIONS:-fp32,bf16}" # bf16 needs AVX512-BF16 (compress refuses it elsewhere)
IFS=, read -ra only <<<"${MODELS:-}"
for t in "${thread_counts[@]}"; do
  for p in "${precisions[@]}"; do
    for m in "${train_models[@]}"; do
      read -r name spec torch_name <<<"$m"
      if ((${#only[@]})) && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
      run "$name" "$spec" "$torch_name" "$p" "$t"
    done
  done
done
