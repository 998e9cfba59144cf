#!/usr/bin/env bash
# Builds the libFuzzer targets into build-fuzz/ (clang, ASan + UBSan) and runs each for longer
# than CI does:  scripts/fuzz.sh [seconds per target, default 600] [targets...]
# (targets are the names in fuzz/CMakeLists.txt, e.g. onnx npy; default: all of them).
# New corpus entries are kept in build-fuzz/fuzz/work/<target>/corpus (not committed: copy the
# interesting ones into fuzz/corpus/<target>/ by hand); findings go to .../findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCX_FUZZ=ON >/dev/null
cmake --build build-fuzz --target cx_fuzz_all -j "${CX_JOBS:-2}"
targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  for f in build-fuzz/fuzz/fuzz_*; do [ -x "$f" ] && targets+=("${f##*/fuzz_}"); done
fi
# keep going after a finding, so that one long run collects them all
export CX_FUZZ_ARGS=${CX_FUZZ_ARGS:--fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1}
status=0
for t in "${targets[@]}"; do
  echo "== fuzz_$t for ${seconds}s"
  fuzz/run_target.sh "build-fuzz/fuzz/fuzz_$t" "fuzz/corpus/$t" "$seconds" \
    "build-fuzz/fuzz/work/$t" || status=1
done
exit $status
