#!/usr/bin/env bash
# The GPU check (docs/cuda.md), in two halves:
#
#   scripts/gpu-check.sh prepare   here, on a development machine with the CUDA toolkit: builds
#                                  build-gpu/ (the CUDA backend; no MPI) and packs into .gpu/ what
#                                  a bare GPU machine lacks: our binaries, the Debian libraries
#                                  they link (glibc, libstdc++ and the CUDA libraries excepted),
#                                  xz-compressed, and Fashion-MNIST's test images.
#   scripts/gpu-check.sh run [OUT] on the GPU machine (an H100/H200 whose python3 has PyTorch with
#                                  CUDA 13, no Debian packages, no network), from the repository
#                                  root with .gpu/ carried: unpacks, finds cuDNN/cuBLAS/cudart
#                                  (those PyTorch brings), runs the CUDA tests, the training
#                                  benchmark against PyTorch and the quick example pipeline with
#                                  --device cuda, writing gpu-check.log (and per-test logs, the
#                                  pipeline's report.md) to OUT. Budget: about 10 minutes.
#
# The device tool carries at most 64 MiB: the 26 MB training images do not fit, so on the GPU
# the tests' "training" file is the 10 000 test images (the tests compare the GPU with the CPU
# on the same data, which this does not change), and the example pipeline trains on 8 000 of
# them and validates on the other 2 000 (its accuracies are then not the CPU run's figures).
# The device tool brings back at most 8 files: the per-test logs are also in gpu-check.log.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
tests=(test_ops_activation test_ops_compare test_ops_conv test_ops_eltwise test_ops_gather
       test_ops_layer_norm test_ops_linear test_ops_loss test_ops_norm test_ops_optim test_ops_pool
       test_ops_quant test_ops_reduce test_ops_select test_ops_shape test_compose
       test_cuda_coverage test_cuda_monitor test_ddp)

prepare() {
  set -e
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCX_WERROR=ON -DCX_WITH_MPI=OFF >/dev/null
  cmake --build build-gpu -j "$(nproc)" --target compress "${tests[@]}"
  rm -rf .gpu && mkdir -p .gpu/pack/bin .gpu/pack/lib .gpu/data
  cp build-gpu/compress .gpu/pack/bin/
  for t in "${tests[@]}"; do cp "build-gpu/tests/$t" .gpu/pack/bin/; done
  ldd .gpu/pack/bin/* | awk '/=> \// {print $3}' | sort -u |
    grep -v -E '/(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl)\.so' |
    xargs -I{} cp -L {} .gpu/pack/lib/
  tar -C .gpu/pack -cf - bin lib | xz -T0 -6 > .gpu/pack.tar.xz
  rm -rf .gpu/pack
  cp /usr/share/datasets/fashion-mnist/t10k-* .gpu/data/
  du -sh .gpu/*
}

# The directories holding the CUDA libraries our binaries load, wherever PyTorch's wheels or a
# toolkit put them.
cuda_lib_dirs() {
  find /usr/local /opt /usr/lib /usr/lib64 /root -xdev \( -name 'libcudnn.so.9' -o \
    -name 'libcublas.so.13' -o -name 'libcublasLt.so.13' -o -name 'libcudart.so.13' -o \
    -name 'libnccl.so.2' \) \
    2>/dev/null | xargs -r -n1 dirname | sort -u | paste -sd:
}

run() {
  local out=${1:-${OUT:-/tmp/gpu-check}}
  mkdir -p "$out"
  exec > >(tee "$out/gpu-check.log") 2>&1
  local root=/tmp/cxgpu
  rm -rf "$root" && mkdir -p "$root" && xz -dc .gpu/pack.tar.xz | tar -C "$root" -xf - || return 1
  export LD_LIBRARY_PATH="$root/lib:$(cuda_lib_dirs)"
  echo "== machine"; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.total --format=csv
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  if ldd "$root/bin/compress" | grep "not found"; then echo "libraries missing"; return 1; fi
  local fm=/usr/share/datasets/fashion-mnist
  mkdir -p "$fm" && cp .gpu/data/t10k-* "$fm/"
  cp "$fm/t10k-images-idx3-ubyte.gz" "$fm/train-images-idx3-ubyte.gz"
  cp "$fm/t10k-labels-idx1-ubyte.gz" "$fm/train-labels-idx1-ubyte.gz"
  echo "== CUDA tests"
  local t rc failed=0 logs=$root/logs
  mkdir -p "$logs"
  for t in "${tests[@]}"; do
    [ "$t" = test_compose ] || [ "$t" = test_cuda_monitor ] || [ "$t" = test_ddp ] && continue
    CX_TEST_BACKEND=cuda timeout 120 "$root/bin/$t" > "$logs/$t.txt" 2>&1; rc=$?
    echo "$t: rc $rc, $(grep -c '^ok' "$logs/$t.txt") ok, $(grep -c '^FAIL' "$logs/$t.txt") FAIL, $(grep -c '^not on' "$logs/$t.txt") not on cuda"
    grep -E '^FAIL|^skipped|^not on' "$logs/$t.txt" | head -30
    [ $rc -gt 1 ] && [ $rc -ne 77 ] && tail -20 "$logs/$t.txt"
    [ $rc -ne 0 ] && failed=$((failed + 1))
  done
  timeout 180 "$root/bin/test_compose" cuda > "$logs/test_compose_cuda.txt" 2>&1; rc=$?
  echo "test_compose cuda: rc $rc"; grep -v '^$' "$logs/test_compose_cuda.txt" | tail -12
  [ $rc -ne 0 ] && failed=$((failed + 1))
  timeout 120 "$root/bin/test_cuda_monitor" gpu > "$logs/test_cuda_monitor_gpu.txt" 2>&1; rc=$?
  echo "test_cuda_monitor gpu: rc $rc"; grep -v '^$' "$logs/test_cuda_monitor_gpu.txt" | tail -20
  [ $rc -ne 0 ] && failed=$((failed + 1))
  timeout 180 "$root/bin/test_ddp" nccl > "$logs/test_ddp_nccl.txt" 2>&1; rc=$?
  echo "test_ddp nccl (one rank through NCCL against none): rc $rc"
  grep -v '^$' "$logs/test_ddp_nccl.txt" | tail -12
  [ $rc -ne 0 ] && failed=$((failed + 1))
  echo "== compress profile --device cuda (CUDA events per node, Chrome trace)"
  timeout 120 "$root/bin/compress" profile resnet20:input=3x32x32 --training --device cuda \
    --batch 128 --steps 5 --top 8 --trace "$root/profile_trace.json" 2>&1 | tail -24; rc=$?
  [ $rc -ne 0 ] && failed=$((failed + 1))
  echo "== training throughput, 3x224x224, batch ${CX_GPU_BATCH:-256}: compress vs PyTorch (channels_last, autocast)"
  local m p
  for m in resnet50 mobilenet_v2 efficientnet_b0; do
    for p in ${CX_GPU_PRECISIONS:-fp16}; do
      timeout 120 "$root/bin/compress" bench train "$m" --device cuda --precision "$p" \
        --batch "${CX_GPU_BATCH:-256}" --steps 10 --warmup 3 --json 2>&1 | tail -2
      timeout 120 python3 bench/train_gpu_torch.py "$m" --precision "$p" \
        --batch "${CX_GPU_BATCH:-256}" --json 2>&1 | tail -2
    done
  done
  echo "== the quick example pipeline on the GPU (8 000 of the test images to train, 2 000 to validate)"
  local ex=/tmp/cxgpu/example
  mkdir -p "$ex" && cp examples/fashion_mnist/pipeline.toml "$ex/"
  "$root/bin/compress" data import idx "$fm/t10k-images-idx3-ubyte.gz" \
    "$fm/t10k-labels-idx1-ubyte.gz" -o "$ex/fashion-train.h5" --val-fraction 0.2 --seed 1 &&
    sed -i 's|^val = "fashion-test.h5".*|val = "fashion-train.h5"\nval_part = "val"|' \
      "$ex/pipeline.toml" &&
    (cd "$ex" && timeout 240 "$root/bin/compress" pipeline pipeline.toml --device cuda \
       --out "$ex/run") > "$out/pipeline.txt" 2>&1
  rc=$?
  echo "pipeline: rc $rc"; tail -25 "$out/pipeline.txt"
  echo "GPU monitoring: $(grep -m1 -o ' GPU [^E]*' "$out/pipeline.txt")"
  grep -m1 gpu_memory_used_mb "$ex/run/metrics.jsonl"
  [ -f "$ex/run/report.md" ] && cp "$ex/run/report.md" "$out/report.md"
  [ $rc -ne 0 ] && failed=$((failed + 1))
  echo "== $failed CUDA check(s) failed"
  return $((failed != 0))
}

case "$mode" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: scripts/gpu-check.sh prepare | run [OUT]" >&2; exit 2 ;;
esac
