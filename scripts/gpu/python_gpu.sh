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
# or `cmake -S . -B build -G Ninja && cmake --build build`), $PYTHON (default python3) with torch built for CUDA, and
# pytest or plain unittest. `sanitize` runs the merge tests under compute-sanitizer memcheck.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(realpath -m "${BUILD:-build}")
OUT=$(realpath -m "${OUT:-$ROOT/gpu-out/python}")
mkdir -p "$OUT"
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(test example bench)
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
export PATH=/usr/local/cuda/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
export DSV4_LIBRARY=$BUILD/lib/libdsv4.so.0 PYTHONPATH=$ROOT/bindings/python
rc=0

[ -f "$DSV4_LIBRARY" ] || { log "no $DSV4_LIBRARY: build the repository into $BUILD first"; exit 2; }
[ -f "$BUILD/lib/dsv4/backends/libdsv4-cuda.so" ] ||
  log "warning: no CUDA module in $BUILD/lib/dsv4/backends (GPU tests will fail)"
log "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
log "python: $("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1)"

# The tests' float64 reference (a test-only library): from the build, else compiled here.
PYREF=$BUILD/bindings/python/libdsv4_pyref.so
if [ ! -f "$PYREF" ]; then
  cmake --build "$BUILD" --target dsv4_pyref >"$OUT/pyref_build.log" 2>&1 ||
    { PYREF=$OUT/libdsv4_pyref.so
      g++ -O2 -std=c++17 -shared -fPIC -I"$ROOT/reference" -I"$ROOT/include" \
        bindings/python/tests/reference_shim.cpp reference/reference.cpp \
        reference/reference_paged.cpp reference/compare_rule.cpp -o "$PYREF" >>"$OUT/pyref_build.log" 2>&1 ||
        { cat "$OUT/pyref_build.log"; log "cannot build the reference library"; exit 2; }; }
fi
export DSV4_PYREF_LIBRARY=$PYREF

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
