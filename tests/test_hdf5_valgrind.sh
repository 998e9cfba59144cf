#!/usr/bin/env bash
# valgrind over the HDF5 readers: every input of the dataset and checkpoint fuzz targets'
# committed corpora, and every bad HDF5 fixture, through the target as a plain program
# (fuzz/replay.c), must give no invalid read, write or use of an uninitialised value. The
# sanitizer build misses reads that libhdf5 (not instrumented) makes past its own buffers
# unless a redzone happens to follow them; valgrind does not (docs/fuzzing.md).
# Exits 77 (ctest's skip) when valgrind is not installed.
# usage: test_hdf5_valgrind.sh REPLAY_DATASET REPLAY_CHECKPOINT SOURCE_DIR
set -u
if ! command -v valgrind >/dev/null; then
  echo "skip: valgrind is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
dataset=$(realpath "$1") checkpoint=$(realpath "$2") src=$(realpath "$3")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fails=0 count=0
check() { # driver file
  local out
  count=$((count + 1))
  if ! out=$(valgrind -q --error-exitcode=9 "$1" "$2" 2>&1); then
    echo "FAIL $2 (${1##*/}):"
    echo "$out" | head -20 | sed 's/^/    /'
    fails=$((fails + 1))
  fi
}
for f in "$src"/fuzz/corpus/dataset/*; do check "$dataset" "$f"; done
for f in "$src"/fuzz/corpus/checkpoint/*; do check "$checkpoint" "$f"; done
for f in "$src"/tests/fixtures/bad/*.h5; do
  case ${f##*/} in
    fuzz_checkpoint_*) check "$checkpoint" "$f" ;;
    *) check "$dataset" "$f" ;;
  esac
done
echo "$((count - fails)) of $count inputs clean under valgrind"
[ "$fails" = 0 ]
