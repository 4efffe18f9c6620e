#!/usr/bin/env bash
# The HIP module's source on an NVIDIA GPU (issue 57's proof on real hardware), in one command:
#   scripts/gpu/hip_on_nvidia.sh OUT_DIR
# Builds the HIP-on-NVIDIA test module (DSV4_HIP_ON_NVIDIA, nvcc, sm_90a unless
# DSV4_HIP_NVIDIA_ARCH says otherwise) with the test suites and the benchmark, then runs through it
# (DSV4_TEST_DEVICE=cuda DSV4_BACKEND=hip DSV4_BACKEND_PATH=<its directory>):
#   1. the conformance, paged, merge, KV-writer and batch-invariance suites and the graph-replay
#      test (GoogleTest),
#   2. compute-sanitizer memcheck and racecheck on a subset (split and unsplit runs, every layout
#      family, the merge, graph replay),
#   3. the benchmark (bench/hip: CONFIG1-4 and 8/16/32 heads, with the GPU's FP32 FMA rate and copy
#      bandwidth measured in the same run).
# Logs, GoogleTest JSON and the benchmark's JSON land in OUT_DIR; OUT_DIR/summary.txt says what
# passed. The exit status is non-zero when a step failed. Needs CUDA 13 (nvcc, compute-sanitizer),
# CMake >= 3.25, Ninja, GoogleTest and Google Benchmark; no network. About 5 minutes on 16 cores;
# every step after the build has a time limit that keeps the whole within BUDGET seconds (default
# 450): a step cut short is reported as "timed out" and fails the run.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUT_DIR" >&2; exit 2; }
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
B=${BUILD:-$ROOT/build-hip-nvidia}
ARCH=${DSV4_HIP_NVIDIA_ARCH:-90a-real}
JOBS=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH:/usr/local/cuda/compute-sanitizer
: >"$OUT/summary.txt"
FAILED=0
BUDGET=${BUDGET:-450}
# secs_left RESERVE CAP: the limit of a step that leaves RESERVE seconds of BUDGET to later steps
# (at most CAP, at least 20).
secs_left() {
  local t=$((BUDGET - SECONDS - $1))
  [ $t -gt "$2" ] && t=$2
  [ $t -lt 20 ] && t=20
  echo $t
}
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
step_rc() {  # step_rc NAME RC
  if [ "$2" -eq 0 ]; then
    log "$1: ok"
  elif [ "$2" -eq 124 ]; then
    log "$1: timed out (incomplete; rerun it alone with a larger BUDGET)"
    FAILED=1
  else
    log "$1: FAILED (rc $2)"
    FAILED=1
  fi
}

log "tree: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (modified)')"
log "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
log "nvcc: $(nvcc --version | tail -1)"

# ---- build ------------------------------------------------------------------------------------
t0=$SECONDS
HAVE_GTEST=ON
[ -d /usr/include/gtest ] || [ -d /usr/local/include/gtest ] || HAVE_GTEST=OFF
cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSV4_BACKEND_CUDA=OFF \
  -DDSV4_BACKEND_HIP=OFF -DDSV4_HIP_EMULATOR=OFF -DDSV4_HIP_ON_NVIDIA=ON \
  -DDSV4_HIP_NVIDIA_ARCHITECTURES="$ARCH" -DDSV4_BUILD_TESTS=$HAVE_GTEST \
  -DDSV4_BUILD_EXAMPLES=OFF >"$OUT/cmake.log" 2>&1
rc=$?
TARGETS=(dsv4-backend-hip-nvidia)
if [ $rc -eq 0 ]; then
  known=$(cmake --build "$B" --target help 2>/dev/null)
  for t in dsv4_conformance_test dsv4_paged_test dsv4_merge_test dsv4_kv_writer_test \
           dsv4_graph_test dsv4_batch_invariance_test dsv4_bench_hip_nvidia; do
    if echo "$known" | grep -q "^$t:"; then TARGETS+=("$t"); else log "not built (missing GoogleTest or Google Benchmark): $t"; fi
  done
  cmake --build "$B" -j "$JOBS" --target "${TARGETS[@]}" >"$OUT/build.log" 2>&1
  rc=$?
fi
step_rc "build ($((SECONDS - t0)) s)" $rc
if [ $rc -ne 0 ]; then
  tail -30 "$OUT/cmake.log" "$OUT/build.log" 2>/dev/null
  exit 1
fi
grep -E "registers|spill" "$OUT/build.log" | head -20 >"$OUT/ptxas.txt" || true

export DSV4_TEST_DEVICE=cuda DSV4_BACKEND=hip DSV4_BACKEND_PATH="$B/lib/dsv4/hip-nvidia"
unset DSV4_BACKEND_DISABLE
BIN=$B/bin
if [ ! -x "$BIN/dsv4_conformance_test" ]; then
  log "suites and sanitizers need GoogleTest: skipped"
  FAILED=1
fi

# ---- 1. suites --------------------------------------------------------------------------------
# The conformance suite is CPU-bound (the float64 reference): its shards run side by side.
if [ -x "$BIN/dsv4_conformance_test" ]; then
t0=$SECONDS
SHARDS=${SHARDS:-8}
limit=$(secs_left 150 240)
pids=()
for i in $(seq 0 $((SHARDS - 1))); do
  GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i timeout "$limit" "$BIN/dsv4_conformance_test" \
    --gtest_output=json:"$OUT/conformance.$i.json" >"$OUT/conformance.$i.log" 2>&1 &
  pids+=($!)
done
for suite in paged merge kv_writer graph batch_invariance; do
  timeout "$limit" "$BIN/dsv4_${suite}_test" --gtest_output=json:"$OUT/$suite.json" \
    >"$OUT/$suite.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do
  wait "$pid"
  r=$?
  [ $r -eq 124 ] && rc=124
  [ $r -ne 0 ] && [ $rc -eq 0 ] && rc=1
done
# What did not run: value checks are a CPU-backend feature, thread counts a CPU-backend knob; any
# other skip (a plan this module refused, a device problem) is a failure.
grep -h "^\[  SKIPPED \]" "$OUT"/*.log | grep -v -E " ms\)|tests?, listed below" | sort -u \
  >"$OUT/skipped.txt"
unexpected=$(grep -v -E "PagedBadInput\.|Determinism\.CpuThreadCountDoesNotChangeBits" \
  "$OUT/skipped.txt" || true)
if [ -n "$unexpected" ]; then
  log "unexpected skips ($(echo "$unexpected" | wc -l); all in skipped.txt):"
  echo "$unexpected" | head -20 | tee -a "$OUT/summary.txt"
  rc=1
fi
if grep -l -E "refuses|unsupported|UNSUPPORTED" "$OUT"/conformance.*.log >/dev/null 2>&1; then
  log "a plan was refused (see the conformance logs)"
  rc=1
fi
passed=$(grep -h "^\[  PASSED  \]" "$OUT"/*.log | awk '{s += $4} END {print s + 0}')
failed=$(grep -h "^\[  FAILED  \]" "$OUT"/*.log | grep -c " ms)" || true)
log "suites: $passed passed, $failed failed, $(wc -l <"$OUT/skipped.txt") skipped ($((SECONDS - t0)) s; seeds in the logs)"
grep -h "seed" "$OUT"/conformance.0.log | head -1 | tee -a "$OUT/summary.txt"
step_rc "suites" $rc

# ---- 2. compute-sanitizer ---------------------------------------------------------------------
t0=$SECONDS
command -v compute-sanitizer >/dev/null ||
  log "compute-sanitizer not found (PATH, /usr/local/cuda/bin, /usr/local/cuda/compute-sanitizer)"
SAN_CONFORMANCE=${SAN_CONFORMANCE:-"*decode_fp8v4_bs2_extra_4d*:*decode_bf16_b74_h3*:*decode_fp8v32_nolen_h128*:*decode_fp16_csr*:*prefill_fp8pt_q_e4m3_extra*:*fnuz_extra*:Determinism.*"}
for tool in memcheck racecheck; do
  rc=0
  timeout "$(secs_left 60 60)" compute-sanitizer --tool $tool --error-exitcode 3 \
    "$BIN/dsv4_conformance_test" \
    --gtest_filter="$SAN_CONFORMANCE" >"$OUT/sanitize_$tool.conformance.log" 2>&1 || rc=$?
  for suite in merge graph; do
    filter="*"
    [ $suite = merge ] && filter="*h16*:*h3*"
    r=0
    timeout "$(secs_left 60 60)" compute-sanitizer --tool $tool --error-exitcode 3 \
      "$BIN/dsv4_${suite}_test" --gtest_filter="$filter" >"$OUT/sanitize_$tool.$suite.log" 2>&1 ||
      r=$?
    [ $r -ne 0 ] && [ $rc -ne 124 ] && rc=$r
  done
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT"/sanitize_$tool.*.log | sort | uniq -c |
    tee -a "$OUT/summary.txt"
  step_rc "compute-sanitizer $tool" $rc
done
log "sanitizers took $((SECONDS - t0)) s"
fi

# ---- 3. benchmark -----------------------------------------------------------------------------
if [ -x "$BIN/dsv4_bench_hip_nvidia" ]; then
  t0=$SECONDS
  timeout "$(secs_left 0 300)" "$BIN/dsv4_bench_hip_nvidia" --benchmark_out="$OUT/bench.json" \
    --benchmark_out_format=json --benchmark_counters_tabular=true 2>&1 | tee "$OUT/bench.log"
  step_rc "benchmark ($((SECONDS - t0)) s)" "${PIPESTATUS[0]}"
else
  log "benchmark needs Google Benchmark: skipped"
  FAILED=1
fi

log "total $SECONDS s"
cat "$OUT/summary.txt"
exit $FAILED
