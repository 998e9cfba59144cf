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
  libpng-dev libjpeg62-turbo-dev           # image-folder importer
  python3 python3-numpy python3-torch      # reference fixtures and benchmarks
  python3-h5py                             # the data tests read our HDF5 files with h5py
  python3-torchvision                      # the loader benchmark's PyTorch side
  dataset-fashion-mnist                    # real data for stage tests
  golang-github-burntsushi-toml-dev        # ships the official toml-test suite (tests only)
  clang                                    # libFuzzer for the fuzz targets (fuzz/, scripts/fuzz.sh)
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

# ONNX Runtime and the ONNX checker are not in Debian; the tests use them from PyPI, installed into
# the Debian interpreter so that they sit beside python3-torch. Debian's torch is built against
# numpy 1.x, so numpy (and onnx's ml-dtypes) are held below 2: with numpy 2 from PyPI, torch's
# tensor.numpy() fails with "Numpy is not available".
# tensorboard: the training tests read our event files back with its EventAccumulator.
pip_packages=("numpy<2" "ml-dtypes<0.6" onnx onnxruntime tensorboard)
if ! /usr/bin/python3 -c '
import numpy, onnx, onnxruntime, torch, tensorboard
assert numpy.__version__.startswith("1.")
torch.zeros(1).numpy()' 2>/dev/null; then
  /usr/bin/python3 -m pip install --quiet --break-system-packages "${pip_packages[@]}"
fi
