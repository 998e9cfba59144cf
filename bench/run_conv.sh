#!/bin/sh
# Convolution speed, compress against PyTorch on the same layers, batch and thread count.
# Builds nothing: run it after the build.   bench/run_conv.sh [path/to/bench_conv] [bench_conv args]
set -e
here=$(dirname "$0")
bin=${1:-build/bench/bench_conv}
[ $# -gt 0 ] && shift
if [ ! -x "$bin" ]; then
  echo "run_conv.sh: $bin not found; build first (cmake --build build)" >&2
  exit 1
fi
tsv=$(mktemp)
trap 'rm -f "$tsv"' EXIT
"$bin" "$@" >"$tsv"
/usr/bin/python3 "$here/conv_torch.py" "$tsv"
