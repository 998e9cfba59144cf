#!/usr/bin/env bash
# Installs what compress needs to build and test on Debian 12, as root. Safe to run again:
# apt and pip skip what is already present.
set -euo pipefail

apt_packages=(
  build-essential cmake pkg-config
  libdnnl-dev                              # oneDNN 2.x: conv, matmul, batch norm, pooling
  libprotobuf-c-dev protobuf-c-compiler    # ONNX import/export
  libonnx-dev libonnx-testdata             # onnx.proto schema; ONNX node tests
  libhdf5-dev                              # data sets and checkpoints
  zlib1g-dev                               # gzipped IDX files
  libopenmpi-dev openmpi-bin               # data-parallel training
  iproute2                                 # two hosts in network namespaces (test_ddp_netns)
  libpng-dev libjpeg62-turbo-dev           # image-folder importer
  python3 python3-numpy python3-torch      # reference fixtures and benchmarks
  python3-venv                             # the tests' Python is a venv (below)
  python3-h5py                             # the data tests read our HDF5 files with h5py
  python3-torchvision                      # the loader benchmark's PyTorch side
  dataset-fashion-mnist                    # real data for stage tests
  golang-github-burntsushi-toml-dev        # ships the official toml-test suite (tests only)
  clang                                    # libFuzzer for the fuzz targets (fuzz/, scripts/fuzz.sh)
  valgrind                                 # the HDF5 readers under valgrind (test_hdf5_valgrind)
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The tests' Python: a venv of its own, so that what else the machine has installed does not
# change what the tests import (Debian's python3-protobuf, pulled in by python3-onnx, would
# shadow the protobuf PyPI's tensorboard needs; a numpy 2 in /usr/local would break Debian's
# torch and h5py). --system-site-packages lets it see Debian's torch, torchvision and h5py; the
# PyPI packages are installed into it with --ignore-installed, so they come first whatever the
# system holds. tests/CMakeLists.txt (CX_PYTHON) points every test at it.
# ONNX Runtime and the ONNX checker are not in Debian; tensorboard: the training tests read our
# event files back with its EventAccumulator. Debian's torch is built against numpy 1.x, so numpy
# (and onnx's ml-dtypes) are held below 2: with numpy 2, torch's tensor.numpy() fails with
# "Numpy is not available".
venv=${CX_VENV:-/opt/compress-venv}
pip_packages=("numpy<2" "ml-dtypes<0.6" onnx onnxruntime tensorboard)
if ! "$venv/bin/python3" -c '
import numpy, onnx, onnxruntime, torch, torchvision, h5py, tensorboard, google.protobuf, sys
assert numpy.__version__.startswith("1.")
assert all(m.__file__.startswith(sys.prefix) for m in (numpy, onnx, google.protobuf))
torch.zeros(1).numpy()
from tensorboard.backend.event_processing import event_accumulator' 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python3" -m pip install --quiet --ignore-installed "${pip_packages[@]}"
fi
