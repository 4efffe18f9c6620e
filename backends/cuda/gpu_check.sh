#!/usr/bin/env bash
# The CUDA module's checks on a GPU machine (an H200 for the figures in docs/cuda-backend.md), one
# command from the repository root:   bash backends/cuda/gpu_check.sh [build-dir]
# Builds the tree for sm_90a (+ compute_80 PTX) with the tests, records ptxas's registers and
# spills per kernel, then runs every test that exercises the CUDA module on the GPU: the planner,
# the module harness, the conformance suite (fp16 cases included), the batch-invariance test where
# the tree has it, and the binding vectors on device pointers. Logs go to $OUT (default
# ./gpu-check-out). Exits non-zero if a build step or a test fails.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-gpu-check}
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/device.txt"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDSV4_CUDA_ARCHITECTURES="90a-real;80-virtual" \
  -DCMAKE_CUDA_FLAGS="-Xptxas=-v" >"$OUT/configure.log" 2>&1 || { tail -20 "$OUT/configure.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
# ptxas: registers, stack and spills of every sm_90a kernel (docs/cuda-backend.md keeps the table).
grep -E "Compiling entry function|bytes stack frame|Used [0-9]+ registers" "$OUT/build.log" >"$OUT/ptxas.txt"
grep -c "Compiling entry function" "$OUT/ptxas.txt" | sed 's/^/kernels compiled: /'
export DSV4_TEST_DEVICE=cuda
rc=0
(cd "$B" && ctest --output-on-failure -j1 -L conformance 2>&1 | tee "$OUT/ctest_conformance.log") || rc=1
(cd "$B" && ctest --output-on-failure -j1 -R 'cuda\.|batch_invariance|vectors|cpp_binding|merge|kv_write|paged' \
  2>&1 | tee "$OUT/ctest.log") || rc=1
tail -3 "$OUT/ctest_conformance.log" "$OUT/ctest.log"
exit $rc
