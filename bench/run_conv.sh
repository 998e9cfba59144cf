#!/bin/sh
# Convolution speed, compress against PyTorch on the same layers, batch and thread count.
# Builds nothing: run it after the build.
#
#   bench/run_conv.sh [path/to/bench_conv] [bench_conv args...]
#
# REPEAT=n measures each layer n times on both sides and keeps the best, for shared machines; on a
# busy one add --cpu-time (both sides timed by CPU time, waiting threads made to sleep).
set -e
bin=${1:-build/bench/bench_conv}
[ $# -gt 0 ] && shift
if [ ! -x "$bin" ]; then
  echo "run_conv.sh: $bin not found; build first (cmake --build build)" >&2
  exit 1
fi
case " $* " in *" --cpu-time "*) export OMP_WAIT_POLICY=passive ;; esac
exec /usr/bin/python3 "$(dirname "$0")/conv_torch.py" --repeat "${REPEAT:-1}" "$bin" "$@"
