#!/usr/bin/env bash
# Issue 60 on a GPU machine, one command: builds the tree with the CUDA module (CMake, GoogleTest
# needed: .ci/install-deps.sh), runs the GPU parts of the hardening work and compute-sanitizer over
# them, and leaves logs in $OUT (default ./gpu-out/hardening).
#   1. the KV writer suite on the GPU (duplicate slots: the last row wins, spec 12.4)
#   2. the paged edge cases on the GPU (a CSR export of a step without tokens writes indptr {0})
#   3. scripts/gpu/sanitize.sh (memcheck, racecheck, initcheck, synccheck) over both
# Exit 0 when all pass; 77 without a GPU.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out/hardening}
B=${BUILD:-/tmp/dsv4-hardening}
ARCH=${DSV4_CUDA_ARCH:-90a}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 77
fi
cmake -S . -B "$B" -G Ninja -DDSV4_BACKEND_CUDA=ON -DDSV4_CUDA_ARCHITECTURES="${ARCH}-real" \
  -DDSV4_BUILD_BENCH=OFF -DDSV4_BUILD_EXAMPLES=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$B" -j"$(nproc)" --target dsv4-backend-cuda dsv4_kv_writer_test dsv4_paged_test >>"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
export DSV4_TEST_DEVICE=cuda
status=0
run() {  # name, command...
  local name=$1
  shift
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: rc $rc ($(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$name.log" | tr '\n' ' '))"
  [ $rc -eq 0 ] || status=1
}
run kv_writer "$B/bin/dsv4_kv_writer_test"
run paged_edges "$B/bin/dsv4_paged_test" --gtest_filter='PagedEdges.*:PagedRandom.ExportMatchesReference'
OUT="$OUT/sanitize" scripts/gpu/sanitize.sh "$B/bin/dsv4_kv_writer_test" '*' || status=1
OUT="$OUT/sanitize-paged" scripts/gpu/sanitize.sh "$B/bin/dsv4_paged_test" 'PagedEdges.*' || status=1
echo "logs in $OUT (records for scripts/reliability_report.py --from $OUT/sanitize)"
exit $status
