#!/usr/bin/env bash
# Installs what is needed, builds, and runs the quick pipeline example: a ResNet-20 teacher, a
# MobileNetV2-0.5 student from scratch, the same student distilled from the teacher and then
# channel-pruned to half its MACs, on
# Fashion-MNIST (examples/fashion_mnist/pipeline.toml). Prints where the report is.
# Pass --out DIR (or any other `compress pipeline` option) to change the run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build

# The data sets, made once from Debian's dataset-fashion-mnist (the pipeline reads HDF5).
example=examples/fashion_mnist
idx=/usr/share/datasets/fashion-mnist
names="T-shirt/top,Trouser,Pullover,Dress,Coat,Sandal,Shirt,Sneaker,Bag,Ankle boot"
for part in train:train t10k:test; do
  src=${part%%:*} dst=$example/fashion-${part##*:}.h5
  [[ -f $dst ]] || build/compress data import idx "$idx/$src-images-idx3-ubyte.gz" \
    "$idx/$src-labels-idx1-ubyte.gz" -o "$dst" --class-names "$names"
done

build/compress pipeline "$example/pipeline.toml" "$@"
