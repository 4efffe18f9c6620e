#!/usr/bin/env bash
# The Python binding on one GPU, in one command: the Python tests (bindings/python/tests, all but
# test_vectors.py, which needs the vector files: the CPU ones and the GPU ones: torch CUDA, CuPy
# when installed, streams, graph capture/replay, torch.compile, bad input, the merge op),
# examples/python/vllm_step.py on the GPU (16 and 64 heads), and the host-overhead benchmark
# (bench/python/bench_overhead.py). Logs and JSON go to $OUT (default ./gpu-out/python).
#
#   scripts/gpu/python_gpu.sh [test] [example] [bench] [sanitize]     (default: test example bench)
#
# Needs a build of the repository with the CUDA module in $BUILD (default build/: `cmake --preset`
# or `cmake -S . -B build -G Ninja && cmake --build build`), $PYTHON (default python3) with torch
# built for CUDA, and pytest or plain unittest. `sanitize` runs the merge tests under
# compute-sanitizer memcheck.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$(realpath -m "${OUT:-$ROOT/gpu-out/python}")
mkdir -p "$OUT"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(test example bench)
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
rc=0
source scripts/gpu/python_env.sh

for step in "${STEPS[@]}"; do
  case $step in
    test)
      log "python tests (DSV4_TEST_SEED=${DSV4_TEST_SEED:-random})"
      if "$PYTHON" -c "import pytest" 2>/dev/null; then
        "$PYTHON" -m pytest -v -p no:cacheprovider --junitxml="$OUT/pytest.xml" \
          --ignore=bindings/python/tests/test_vectors.py bindings/python/tests 2>&1 |
          tee "$OUT/pytest.log" | grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed"
      else
        (cd bindings/python/tests &&
          "$PYTHON" -m unittest -v $(ls test_*.py | grep -v test_vectors | sed 's/\.py$//')) 2>&1 |
          tee "$OUT/pytest.log" | grep -E "ok$|FAIL|ERROR|skipped|^Ran|^OK|^FAILED"
      fi
      r=${PIPESTATUS[0]}
      log "tests rc=$r"
      [ "$r" -eq 0 ] || rc=1
      ;;
    example)
      for heads in 16 64; do
        log "vllm_step.py --device cuda --heads $heads"
        "$PYTHON" examples/python/vllm_step.py --device cuda --heads $heads 2>&1 | tee "$OUT/vllm_step_h$heads.log"
        r=${PIPESTATUS[0]}
        log "vllm_step rc=$r"
        [ "$r" -eq 0 ] || rc=1
      done
      ;;
    bench)
      log "bench_overhead.py"
      "$PYTHON" bench/python/bench_overhead.py --json "$OUT/overhead.json" 2>&1 | tee "$OUT/overhead.log"
      r=${PIPESTATUS[0]}
      log "bench rc=$r"
      [ "$r" -eq 0 ] || rc=1
      ;;
    sanitize)
      log "compute-sanitizer memcheck: merge tests"
      compute-sanitizer --tool memcheck --error-exitcode 3 "$PYTHON" -m pytest -q -p no:cacheprovider \
        bindings/python/tests/test_merge.py 2>&1 | tail -20 | tee "$OUT/sanitize.log"
      r=${PIPESTATUS[0]}
      log "sanitize rc=$r"
      [ "$r" -eq 0 ] || rc=1
      ;;
    *) log "unknown step $step"; rc=2 ;;
  esac
done
log "python_gpu.sh rc=$rc"
exit $rc
