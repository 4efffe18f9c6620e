#!/usr/bin/env bash
# On a machine whose CPU has AVX512_BF16 and/or AMX-BF16 (e.g. an H200 host: Intel Sapphire Rapids
# has both, AMD Zen 4 has AVX512_BF16): builds the tree (CPU only), then runs every fast CPU kernel
# the CPU has natively through the conformance suite and the batch-invariance test, and the CPU
# benchmark. The project's own machines can only run the AVX2 kernel natively (AVX-512 and AMX run
# there emulated, in ctest).
#
#   scripts/cpu/isa_check.sh [build dir, default $BUILD or build-isa]
#   PYTHON: the Python with torch for the benchmark's PyTorch comparison (default /usr/bin/python3;
#   e.g. PYTHON=/opt/torch/.venv/bin/python3 where torch lives in a virtual environment)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
build=$(realpath -m "${1:-${BUILD:-build-isa}}")  # relative: to the repository root
# Packages: those of .ci/install-deps.sh (and its "bench" extras for the benchmark at the end).
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_BACKEND_CUDA=OFF
cmake --build "$build" -j "$(nproc)" --target dsv4 dsv4-backend-cpu dsv4_conformance_test \
  dsv4_batch_invariance_test dsv4_bench_cpu
grep -o -w -E 'avx2|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | paste -sd ' '
status=0
for isa in avx2 avx512_bf16 amx; do
  echo "== DSV4_CPU_ISA=$isa"
  if ! DSV4_CPU_ISA=$isa DSV4_CONFORMANCE_EXPECT_KERNEL=cpu-fast-$isa DSV4_BACKEND=cpu \
      "$build/bin/dsv4_conformance_test" --gtest_brief=1; then
    echo "conformance with $isa: FAILED (or this CPU lacks $isa: see the kernel line above)"
    status=1
  fi
  DSV4_CPU_ISA=$isa "$build/bin/dsv4_batch_invariance_test" --gtest_brief=1 || status=1
done
# The benchmark of this build (bench_all.sh's default is build/), with $PYTHON's torch.
DSV4_BENCH_MAX_THREADS=${DSV4_BENCH_MAX_THREADS:-2} PYTHON=${PYTHON:-/usr/bin/python3} \
  bench/cpu/bench_all.sh "$build" || status=1
exit $status
