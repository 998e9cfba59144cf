#!/usr/bin/env bash
# CPU milliseconds per training step (user + sys of all threads, OpenMP waits made passive), from
# the difference between a 12-step and a 2-step `compress profile --training` run, so compile and
# warm-up cancel out. On a machine shared with other jobs the wall clock moves by several times
# between runs; CPU time moves by a few percent.
#   usage: bench/cpu_step.sh SPEC [BUILD_DIR]     e.g. CX_LAYOUT=plain bench/cpu_step.sh resnet20
set -euo pipefail
cd "$(dirname "$0")/.."
spec=$1
compress=${2:-build}/compress
cpu() { # STEPS -> CPU seconds
  OMP_WAIT_POLICY=passive /usr/bin/time -f "%U %S" "$compress" profile "$spec" --training \
    --batch 128 --threads 2 --steps "$1" --warmup 1 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}'
}
a=$(cpu 2)
b=$(cpu 12)
awk -v a="$a" -v b="$b" -v s="$spec" 'BEGIN { printf "%s: %.0f CPU ms a step (batch 128, 2 threads)\n", s, (b - a) * 100 }'
