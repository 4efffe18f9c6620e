#!/usr/bin/env bash
# The GPU machine's one script: builds the tree with CMake's gpu-h200 preset (CMakePresets.json,
# into build-gpu/), runs the GPU tests, the GPU benchmarks and compute-sanitizer, and leaves logs,
# JUnit XML and benchmark JSON in <outdir>.
#
#   scripts/gpu/run.sh <outdir> [build|tests|bench|sanitize|all]...      (default: all)
#
#   build     cmake --preset gpu-h200 && cmake --build --preset gpu-h200
#   tests     ctest --preset gpu: the CUDA tests (label gpu; a missing GPU fails them), then
#             ctest --preset gpu-suites: the device-agnostic suites on the GPU (DSV4_TEST_DEVICE=
#             cuda: conformance, paged, merge, kv_writer, batch_invariance; the summary says how
#             many skipped)
#   bench     plain PyTorch on the benchmark's shapes (bench/gpu/torch_baseline.py -> torch.csv),
#             then dsv4_bench_cuda -> cuda-h200.json and dsv4_bench_host_overhead ->
#             cuda-h200-host.json (Google Benchmark JSON, what scripts/perf/make_performance.py reads)
#   sanitize  compute-sanitizer's memcheck, racecheck, initcheck and synccheck
#             (scripts/gpu/sanitize.sh) over a subset of the CUDA tests and the merge suite
#             -> sanitize.log, sanitize.jsonl
# tests, bench and sanitize use build-gpu/ as `build` left it (they build only where it has no
# binaries yet: a fresh copy of the tree may carry new timestamps that would rebuild everything),
# so the steps can be called one after another on the same machine, each within a 10-minute
# limit; every step appends to <outdir>/summary.txt.
#
# Environment: DSV4_COMMIT (the commit measured, for the JSON where the tree has no .git),
# DSV4_TEST_SEED (the tests' seed), JOBS (ctest's parallelism, default 8), BENCH_ARGS (more
# flags for dsv4_bench_cuda, e.g. --benchmark_filter=CONFIG1). GoogleTest and Google Benchmark
# come from the machine or, where it has none, from .gpu-deps/ (scripts/gpu/stage_deps.sh, run
# where they are installed; the preset searches there first).
set -uo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,28p' "$0"
  exit 2
fi
OUTDIR=$(realpath -m "$1")
shift
STEPS=("$@")
[ ${#STEPS[@]} -eq 0 ] && STEPS=(all)
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$ROOT/build-gpu
JOBS=${JOBS:-8}
mkdir -p "$OUTDIR"
export PATH=/usr/local/cuda/bin:$PATH
if [ -z "${DSV4_COMMIT:-}" ]; then
  DSV4_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export DSV4_COMMIT
log() { echo "== $(date -u +%T) $*" | tee -a "$OUTDIR/summary.txt"; }

# step_build: configure once, then build (incremental).
step_build() {
  local t0=$SECONDS
  log "build: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(nvcc --version | tail -1); commit $DSV4_COMMIT"
  if [ ! -f "$BUILD/build.ninja" ]; then
    cmake --preset gpu-h200 >"$OUTDIR/build.log" 2>&1 || { tail -30 "$OUTDIR/build.log"; log "configure failed"; return 1; }
  fi
  grep -E "GTest|benchmark|Google" "$BUILD/CMakeCache.txt" | grep -E "_DIR:PATH" | tee -a "$OUTDIR/summary.txt"
  cmake --build --preset gpu-h200 >>"$OUTDIR/build.log" 2>&1 || { grep -E "error|FAILED" "$OUTDIR/build.log" | head -30; log "build failed"; return 1; }
  log "built in $((SECONDS - t0)) s"
}

# ctest_step NAME PRESET: one test preset, its log and JUnit XML in OUTDIR.
ctest_step() {
  local name=$1 preset=$2 t0=$SECONDS rc
  ctest --preset "$preset" -j "$JOBS" --output-junit "$OUTDIR/$name.xml" >"$OUTDIR/$name.log" 2>&1
  rc=$?
  grep -E "tests passed|tests failed|Total Test time" "$OUTDIR/$name.log" | tee -a "$OUTDIR/summary.txt"
  sed -n '/The following tests FAILED/,$p' "$OUTDIR/$name.log" | head -40 | tee -a "$OUTDIR/summary.txt"
  local total skipped
  total=$(grep -oE "out of [0-9]+" "$OUTDIR/$name.log" | grep -oE "[0-9]+$")
  skipped=$(grep -cE "^[[:space:]]+[0-9]+ - .*\(Skipped\)$" "$OUTDIR/$name.log")
  log "$name: rc $rc, $skipped of ${total:-0} skipped, $((SECONDS - t0)) s"
  return $rc
}

step_tests() {
  nvidia-smi -L >/dev/null 2>&1 || { log "tests: no GPU here (nvidia-smi -L failed)"; return 1; }
  local rc=0
  ctest_step tests-gpu gpu || rc=1
  ctest_step tests-suites gpu-suites || rc=1
  return $rc
}

step_bench() {
  local t0=$SECONDS rc=0
  "$BUILD/bin/dsv4_bench_cuda" --list_torch_shapes >"$BUILD/torch_shapes.txt"
  if PYTHONUNBUFFERED=1 python3 bench/gpu/torch_baseline.py --shapes "$BUILD/torch_shapes.txt" \
    --out "$OUTDIR/torch.csv" >"$OUTDIR/torch.log" 2>&1; then
    log "torch baseline: $(head -1 "$OUTDIR/torch.log"), $(($(wc -l <"$OUTDIR/torch.csv") - 1)) shapes"
  else
    log "torch baseline failed or skipped: $(tail -1 "$OUTDIR/torch.log")"
    rm -f "$OUTDIR/torch.csv"
  fi
  local torch=()
  [ -f "$OUTDIR/torch.csv" ] && torch=(--torch_csv="$OUTDIR/torch.csv")
  # shellcheck disable=SC2086
  "$BUILD/bin/dsv4_bench_cuda" "${torch[@]}" --benchmark_out="$OUTDIR/cuda-h200.json" \
    --benchmark_out_format=json ${BENCH_ARGS:-} >"$OUTDIR/bench.log" 2>&1 || rc=1
  log "dsv4_bench_cuda: rc $rc, $(grep -c "_median" "$OUTDIR/bench.log") cases, $(grep -c "ERROR OCCURRED" "$OUTDIR/bench.log") errors"
  grep -E "_median" "$OUTDIR/bench.log" | grep -E "CONFIG[1-4]/b:(2|64)/|host|merge/parts:8" | cut -c1-160 | tee -a "$OUTDIR/summary.txt"
  "$BUILD/bin/dsv4_bench_host_overhead" --benchmark_out="$OUTDIR/cuda-h200-host.json" \
    --benchmark_out_format=json >>"$OUTDIR/bench.log" 2>&1 || rc=1
  grep -E "cuda/host/.*_median" "$OUTDIR/bench.log" | tee -a "$OUTDIR/summary.txt"
  log "bench: rc $rc, $((SECONDS - t0)) s"
  return $rc
}

# The CUDA cases compute-sanitizer runs: small heads, CSR lists, persistent CTAs with splits and a
# graph, CTA pairs with splits, and list building on the device.
SANITIZE_CUDA_FILTER='Cases/CudaExplicit.*/v4_decode_h16:Cases/CudaExplicit.*/csr_v4_h64:Cases/CudaExplicit.*/sm90_persist3_bf16_h64_short:Cases/CudaExplicit.*/sm90_persist3_splits3_v4_h96:Cases/CudaExplicit.*/sm90s_persist4_v4_h16_graph:Cases/CudaExplicit.*/sm90_splits12_v4_h128_b2:Cases/CudaPaged.*/paged_c4a_h64'

# sanitize_one NAME ENV BINARY FILTER: sanitize.sh's four tools on one test binary (at most 270 s
# in all) with the environment variable ENV set; their logs' tails and JSON lines gathered into
# OUTDIR/sanitize.log and sanitize.jsonl.
sanitize_one() {
  local name=$1 variable=$2 bin=$3 filter=$4 rc
  local dir=$BUILD/sanitize/$name
  rm -rf "$dir"
  env "$variable" OUT="$dir" timeout 270 scripts/gpu/sanitize.sh "$bin" "$filter" >"$dir.txt" 2>&1
  rc=$?
  { echo "=== $name: $bin --gtest_filter=$filter (rc $rc)"; cat "$dir.txt"
    for f in "$dir"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -15 "$f"; }; done; } >>"$OUTDIR/sanitize.log"
  [ -f "$dir/sanitize.jsonl" ] && cat "$dir/sanitize.jsonl" >>"$OUTDIR/sanitize.jsonl"
  sed "s/^/  $name /" "$dir.txt" | tee -a "$OUTDIR/summary.txt"
  return $rc
}

step_sanitize() {
  local t0=$SECONDS rc=0
  mkdir -p "$BUILD/sanitize"
  sanitize_one cuda DSV4_TEST_REQUIRE_GPU=1 "$BUILD/bin/dsv4_cuda_attention_test" \
    "$SANITIZE_CUDA_FILTER" || rc=1
  sanitize_one merge DSV4_TEST_DEVICE=cuda "$BUILD/bin/dsv4_merge_test" '*' || rc=1
  log "sanitize: rc $rc, $((SECONDS - t0)) s"
  return $rc
}

status=0
for step in "${STEPS[@]}"; do
  case $step in
    build) step_build || status=1 ;;
    tests | bench | sanitize)
      if [ ! -x "$BUILD/bin/dsv4_cuda_attention_test" ] || [ ! -x "$BUILD/bin/dsv4_bench_cuda" ]; then
        step_build || exit 1
      fi
      "step_$step" || status=1
      ;;
    all)
      step_build || exit 1
      for s in tests bench sanitize; do "step_$s" || status=1; done
      ;;
    *)
      echo "unknown step: $step (build, tests, bench, sanitize, all)" >&2
      exit 2
      ;;
  esac
done
exit $status
