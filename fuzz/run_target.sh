#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time and fails on any finding (crash, sanitizer report,
# leak, an input slower than 10 s, more than 2 GB of memory).
#   run_target.sh [--fresh] <binary> <seed corpus> <seconds> <work folder>
# (0 seconds: every corpus input run once, nothing mutated: a regression run)
# The target fuzzes <work folder>/corpus, seeded from the committed corpus (which it never
# writes); --fresh starts that copy anew (ctest), without it new entries are kept (scripts/fuzz.sh).
# A finding is left in <work folder>/findings/ and its path printed. $CX_FUZZ_ARGS adds libFuzzer
# flags (scripts/fuzz.sh: -fork=1 -ignore_crashes=1 to collect every finding of a long run).
set -euo pipefail
fresh=0
if [ "${1:-}" = --fresh ]; then fresh=1; shift; fi
bin=$1 seeds=$2 seconds=$3 work=$4
# ctest's runs (--fresh) start from a fixed seed, so CI fuzzes the same inputs each time (a
# finding there is reproducible, not luck); scripts/fuzz.sh's long runs draw theirs.
seed=()
if [ "$fresh" = 1 ]; then rm -rf "$work"; seed=(-seed="${CX_FUZZ_SEED:-1}"); fi
mkdir -p "$work/corpus" "$work/findings"
for f in "$seeds"/*; do
  [ -e "$work/corpus/$(basename "$f")" ] || cp "$f" "$work/corpus/"
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
touch "$work/started" # findings of earlier runs (kept by scripts/fuzz.sh) do not count
status=0
# 0 seconds: replay the corpus once (every committed input, no mutation)
if [ "$seconds" = 0 ]; then bound=(-runs=0); else bound=(-max_total_time="$seconds"); fi
"$bin" "${seed[@]}" "${bound[@]}" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$work/findings/" ${CX_FUZZ_ARGS:-} "$work/corpus" >"$work/log" 2>&1 ||
  status=$?
tail -n 30 "$work/log"
found=$(find "$work/findings" -type f -newer "$work/started" | head -n 5)
if [ "$status" != 0 ] || [ -n "$found" ]; then
  echo "$(basename "$bin"): finding(s) (exit $status): ${found:-see $work/log}"
  exit 1
fi
echo "$(basename "$bin"): no findings in ${seconds}s (0: the corpus replayed); corpus $(find "$work/corpus" -type f | wc -l) files"
