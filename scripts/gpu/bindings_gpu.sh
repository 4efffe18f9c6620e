#!/usr/bin/env bash
# The binding test vectors on a GPU machine, in one command: builds the tree with the CUDA module and
# runs dsv4.hpp's vector test with its tensors in device memory on the CUDA backend
# (DSV4_TEST_DEVICE=cuda), then every binding's tests (host memory). Logs in $OUT (./gpu-out).
# Usage: scripts/gpu/bindings_gpu.sh      (BUILD=dir to reuse a build tree; DSV4_TEST_SEED=n)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
B=${BUILD:-/tmp/dsv4-bindings-gpu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_BACKEND_CUDA=ON >"$OUT/bindings_cmake.log"
cmake --build "$B" -j "$(nproc)" >>"$OUT/bindings_cmake.log"
cd "$B"
DSV4_TEST_DEVICE=cuda ctest --output-on-failure -R '^(vectors_generate|cpp_binding)$' 2>&1 |
  tee "$OUT/bindings_cuda.log"
# The CUDA run must not have been skipped: the vector test names the device it ran on.
DSV4_VECTORS_DIR=$B/vectors DSV4_TEST_DEVICE=cuda ./bin/dsv4_hpp_test \
  --gtest_filter=Hpp.VectorsMatchTheReference 2>&1 | tee -a "$OUT/bindings_cuda.log" |
  grep '\[       OK \] Hpp.VectorsMatchTheReference' >/dev/null
ctest --output-on-failure -L bindings 2>&1 | tee "$OUT/bindings_host.log" | tail -3
