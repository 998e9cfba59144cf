#!/bin/sh
# Convolution speed, compress against PyTorch on the same layers, batch and thread count.
# Builds nothing: run it after the build.
#
#   bench/run_conv.sh [path/to/bench_conv] [bench_conv args...]
#
# REPEAT=n runs both sides n times and keeps each layer's best, for machines shared with others.
set -e
here=$(dirname "$0")
bin=${1:-build/bench/bench_conv}
[ $# -gt 0 ] && shift
if [ ! -x "$bin" ]; then
  echo "run_conv.sh: $bin not found; build first (cmake --build build)" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
i=0
while [ "$i" -lt "${REPEAT:-1}" ]; do
  i=$((i + 1))
  "$bin" "$@" >"$dir/compress.$i.tsv"
done
/usr/bin/python3 "$here/conv_torch.py" --repeat "${REPEAT:-1}" "$dir"/compress.*.tsv
