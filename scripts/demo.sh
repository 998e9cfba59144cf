#!/usr/bin/env bash
# Installs what is needed, builds, and runs the main job. Until the pipeline lands, the main job
# is the engine demo: a tiny CNN fitting one random batch, its loss printed as it falls.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
build/compress demo
