#!/usr/bin/env bash
# Configures and builds compress into build/ (or $1), passing any further arguments to cmake.
# Warnings are errors here, as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCX_WERROR=ON "$@"
cmake --build "$dir" -j "$(nproc)"
