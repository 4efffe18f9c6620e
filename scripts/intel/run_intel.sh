#!/usr/bin/env bash
# One command on an Intel GPU machine (Intel's compute runtime: intel-level-zero-gpu and
# intel-opencl-icd, a Level Zero loader of version 1.9 or newer): builds libdsv4 with the OpenCL and
# Level Zero modules, runs the test suites on the GPU through Level Zero (DSV4_TEST_DEVICE=level-zero)
# and through Intel's OpenCL runtime (DSV4_TEST_DEVICE=opencl), then the benchmark.
#
#   scripts/intel/run_intel.sh [steps...]      steps: build test bench (default: all three)
#   BUILD=dir (default build-intel), BATCH=64, OPENCL_DEVICE=index of the Intel GPU among the
#   OpenCL 2.0+ devices (default 0), DSV4_TEST_SEED to reproduce a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-intel}
BATCH=${BATCH:-64}
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(build test bench)

for step in "${steps[@]}"; do
  case "$step" in
    build)
      ./.ci/install-deps.sh
      cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_BACKEND_CUDA=OFF \
        -DDSV4_BACKEND_OPENCL=ON -DDSV4_BACKEND_LEVEL_ZERO=ON
      cmake --build "$BUILD" -j "$(nproc)"
      "$BUILD"/bin/dsv4 info
      ;;
    test)
      for dev in level-zero opencl; do
        echo "== test suites on DSV4_TEST_DEVICE=$dev"
        (cd "$BUILD" && DSV4_TEST_DEVICE=$dev DSV4_TEST_OPENCL_DEVICE=${OPENCL_DEVICE:-0} \
          ctest --output-on-failure -L 'conformance|paged|kv_writer|merge' -LE 'opencl|mutation' -j 2)
      done
      (cd "$BUILD" && ctest --output-on-failure -L opencl -j 2)
      ;;
    bench)
      "$BUILD"/bin/dsv4_bench_intel --api level-zero --batch "$BATCH"
      "$BUILD"/bin/dsv4_bench_intel --api level-zero --batch 2
      ;;
    *)
      echo "unknown step '$step' (build test bench)" >&2
      exit 2
      ;;
  esac
done
