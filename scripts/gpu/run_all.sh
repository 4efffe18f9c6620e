#!/usr/bin/env bash
# Builds the CUDA backend, its tests and its benchmark on a GPU machine, runs them and leaves logs in
# $OUT (default ./gpu-out). Usage: scripts/gpu/run_all.sh [test|bench|sanitize|profile|util|sass|trace|probe|cmake]...
# Direct nvcc/g++ builds (no dependency on the rest of the tree building); `cmake` also builds the
# whole project with CMake/Ninja and runs ctest (conformance on CUDA when GTest is present).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
ARCH=${DSV4_CUDA_ARCH:-90a}
B=${BUILD:-/tmp/dsv4-gpu}
mkdir -p "$OUT" "$B"
export PATH=/usr/local/cuda/bin:$PATH
STEPS=("$@")
IFS=';' read -r -a PROFILE_FILTERS <<<"${PROFILE:-CONFIG1 b=64;prefill h64 topk 512 s_kv 8192}"
[ ${#STEPS[@]} -eq 0 ] && STEPS=(test bench)
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }

MODULE_SOURCES=(module.cpp planner.cpp attention.cu attention_sm90.cu attention_sm90_small.cu paged_kv.cu token_order.cu)
# build_module OUTPUT.so LOG [nvcc flags...]: the module's sources compiled in parallel, then linked.
build_module() {
  local so=$1 logf=$2
  shift 2
  local inc="-I$ROOT/include -I$ROOT/backends/include -I$ROOT/backends" objs=() pids=() rc=0
  : >"$logf"
  for src in "${MODULE_SOURCES[@]}"; do
    [ -f "backends/cuda/$src" ] || continue  # an older tree (ab_bench.sh) without this file
    local obj="$so.${src%.*}.o"
    objs+=("$obj")
    nvcc -O2 -std=c++17 -gencode arch=compute_${ARCH},code=sm_${ARCH} -Xcompiler -fPIC,-fvisibility=hidden "$@" \
      $inc -c "backends/cuda/$src" -o "$obj" >"$obj.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  for obj in "${objs[@]}"; do cat "$obj.log" >>"$logf"; done
  [ $rc -eq 0 ] || return 1
  nvcc -shared "${objs[@]}" -cudart static -o "$so" >>"$logf" 2>&1
}

# trace_case TRACE_MODULE.so CASE TAG: the bench's last launch of CASE dumped by a -DDSV4_SM90_TRACE
# module and summarised (scripts/gpu/trace_sm90.py; TRACE_CTA also lists that CTA chunk by chunk).
trace_case() {
  DSV4_TRACE_OUT="$OUT/trace_$3.bin" "$B/bench_cuda" "$1" "$2" 2>&1 | tail -3
  python3 scripts/gpu/trace_sm90.py "$OUT/trace_$3.bin" ${TRACE_CTA:-} | tee "$OUT/trace_$3.txt"
}

# ncu_launch [ncu options...] -- CASE: ncu on one launch (the fourth) of the kernels KERNEL_REGEX
# names, in a bench run of CASE.
ncu_launch() {
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
  ncu --kernel-name regex:${KERNEL_REGEX:-attention} --launch-skip 3 --launch-count 1 "${opts[@]}" \
    "$B/bench_cuda" "$B/libdsv4-cuda.so" "$2"
}

# What the build reads (sources, this script's flags, the target architecture) as one hash: a warm
# machine keeps $B between calls, and a build of another tree must not pass for this one's.
build_hash() {
  { echo "$ARCH"; find "$ROOT/include" "$ROOT/backends" "$ROOT/tests" "$ROOT/bench" "$ROOT/scripts/gpu/run_all.sh"     -type f | sort | xargs cat; } | md5sum | cut -d' ' -f1
}

build() {
  local hash
  hash=$(build_hash)
  [ "$(cat "$B/.built" 2>/dev/null)" = "$hash" ] && return 0
  log "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  log "nvcc: $(nvcc --version | tail -1)"
  local inc="-I$ROOT/include -I$ROOT/backends/include -I$ROOT/backends"
  local t0=$SECONDS
  build_module "$B/libdsv4-cuda.so" "$OUT/build_module.log" -Xptxas -v,--warn-on-local-memory-usage ||
    { cat "$OUT/build_module.log"; return 1; }
  grep -E "registers|spill" "$OUT/build_module.log" | head -12
  # Spills, serialised wgmma and ignored register budgets each cost the Hopper kernel dearly.
  grep -E "Potential Performance Loss|Local memory used" "$OUT/build_module.log" | sort | uniq -c
  log "module built in $((SECONDS - t0)) s"
  local cudalib="-L/usr/local/cuda/lib64 -lcudart_static -ldl -lpthread -lrt"
  g++ -O2 -std=c++17 $inc -I$ROOT/reference -I/usr/local/cuda/include tests/cuda/test_cuda_attention.cpp \
    reference/reference.cpp reference/reference_paged.cpp $cudalib -o "$B/test_cuda_attention" \
    >"$OUT/build_test.log" 2>&1 || { cat "$OUT/build_test.log"; return 1; }
  if [ -f bench/gpu/bench_cuda.cpp ]; then
    g++ -O2 -std=c++17 $inc -I$ROOT/reference -I$ROOT/tests/cuda -I/usr/local/cuda/include bench/gpu/bench_cuda.cpp \
      reference/reference.cpp $cudalib -lcublas -o "$B/bench_cuda" >"$OUT/build_bench.log" 2>&1 ||
      { cat "$OUT/build_bench.log"; return 1; }
  fi
  echo "$hash" >"$B/.built"
}

for step in "${STEPS[@]}"; do
  case $step in
    test)
      build || exit 1
      log "test_cuda_attention"
      "$B/test_cuda_attention" "$B/libdsv4-cuda.so" 2>&1 | tee "$OUT/test.log"
      log "test rc=${PIPESTATUS[0]}"
      ;;
    sanitize)
      build || exit 1
      # The persistent cases hand work items over between warpgroups: racecheck's timing exposes
      # hand-over races that plain runs hide.
      IFS=';' read -r -a SAN_FILTERS <<<"${SANITIZE_FILTER:-h16;csr-v4-h64;persist3-bf16;persist3-splits3}"
      for tool in memcheck racecheck; do
        for sf in "${SAN_FILTERS[@]}"; do
          log "compute-sanitizer $tool ($sf)"
          compute-sanitizer --tool $tool --error-exitcode 3 "$B/test_cuda_attention" "$B/libdsv4-cuda.so" "$sf" \
            2>&1 | tail -6 | tee -a "$OUT/sanitize.log"
          log "$tool rc=${PIPESTATUS[0]}"
        done
      done
      ;;
    bench)
      build || exit 1
      log "bench_cuda"
      "$B/bench_cuda" "$B/libdsv4-cuda.so" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
      log "bench rc=${PIPESTATUS[0]}"
      if [ -f bench/gpu/torch_baseline.py ]; then
        log "torch_baseline"
        PYTHONUNBUFFERED=1 python3 bench/gpu/torch_baseline.py 2>&1 | tee "$OUT/torch.log"
      fi
      ;;
    profile)
      build || exit 1
      for f in "${PROFILE_FILTERS[@]:-CONFIG1 b=64}"; do
        log "ncu: $f"
        tag=$(echo "$f" | tr -c 'a-zA-Z0-9' _)
        ncu_launch --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
          --metrics "regex:smsp__pcsamp_warps_issue_stalled_.*,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_xu.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum" \
          -- "$f" >"$OUT/ncu_$tag.log" 2>&1
        grep -E "Duration|Compute .SM. Throughput|Eligible Warps|smsp__|l1tex__" "$OUT/ncu_$tag.log" |
          grep -v " 0$" | head -60
      done
      ;;
    util)
      # Hardware utilisation of one launch per UTIL_CASE case (';'-separated; ncu, real clocks,
      # caches flushed before each replay): tensor pipes, issue slots, shared memory, L2 and DRAM.
      # Metrics this ncu does not know are dropped rather than failing the run.
      build || exit 1
      WANT=(gpu__time_duration.sum sm__throughput.avg.pct_of_peak_sustained_elapsed
        smsp__issue_active.avg.pct_of_peak_sustained_active
        sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
        sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
        sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
        l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
        l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed
        l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed
        l1tex__throughput.avg.pct_of_peak_sustained_active l1tex__m_xbar2l1tex_read_bytes.sum.per_second
        lts__throughput.avg.pct_of_peak_sustained_elapsed lts__t_bytes.sum.per_second
        dram__throughput.avg.pct_of_peak_sustained_elapsed dram__bytes_read.sum.per_second)
      ncu --query-metrics >"$OUT/ncu_metrics.txt" 2>&1
      HAVE=()
      for m in "${WANT[@]}"; do
        grep -qE "^ *${m%%.*} " "$OUT/ncu_metrics.txt" && HAVE+=("$m") || echo "ncu lacks ${m%%.*}"
      done
      [ ${#HAVE[@]} -gt 0 ] || HAVE=("${WANT[@]}")  # an unknown listing format: ask for all
      METRICS=$(IFS=,; echo "${HAVE[*]}")
      IFS=';' read -r -a UTIL_CASES <<<"${UTIL_CASE:-CONFIG2 bf16 b=64$}"
      for f in "${UTIL_CASES[@]}"; do
        log "ncu util: $f"
        ncu_launch --clock-control none --metrics "$METRICS" -- "$f" 2>&1 |
          grep -E "^ +[a-z0-9_]+__" | tee -a "$OUT/util.log"
      done
      ;;
    sass)
      build || exit 1
      IFS=';' read -r -a SASS_CASES <<<"${SASS_CASE:-CONFIG1 h8 b=128}"
      for f in "${SASS_CASES[@]}"; do
        log "ncu source: $f"
        tag=$(echo "$f" | tr -c 'a-zA-Z0-9' _)
        ncu_launch --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
          -- "$f" >"$OUT/sass_$tag.csv" 2>"$OUT/sass_$tag.err"
        python3 scripts/gpu/top_sass.py "$OUT/sass_$tag.csv" 60 | tee "$OUT/top_$tag.txt"
      done
      ;;
    trace)
      # Timeline of the Hopper kernel (scripts/gpu/trace_sm90.py): a module built with
      # -DDSV4_SM90_TRACE, the bench's last launch of each TRACE_CASE dumped and summarised.
      build || exit 1
      build_module "$B/libdsv4-cuda-trace.so" "$OUT/build_trace.log" -DDSV4_SM90_TRACE ||
        { cat "$OUT/build_trace.log"; exit 1; }
      IFS=';' read -r -a TRACE_CASES <<<"${TRACE_CASE:-CONFIG1 b=64}"
      for f in "${TRACE_CASES[@]}"; do
        tag=$(echo "$f" | tr -c 'a-zA-Z0-9' _)
        log "trace: $f"
        trace_case "$B/libdsv4-cuda-trace.so" "$f" "$tag"
      done
      ;;
    probe)
      # Row-gather probe (bench/gpu/gather_probe.cu): each copy method alone, tables in L2 and in HBM.
      # PROBE_BUSY: what else the SM runs meanwhile (none, mma: S-like wgmma, alu: FMA chains).
      nvcc -O2 -std=c++17 -gencode arch=compute_${ARCH},code=sm_${ARCH} -I$ROOT/include -I$ROOT/backends/include \
        -I$ROOT/backends bench/gpu/gather_probe.cu -o "$B/gather_probe" || exit 1
      log "gather_probe"
      for busy in ${PROBE_BUSY:-none}; do
        for rows in ${PROBE_ROWS:-8192 65536 1048576}; do
          for depth in ${PROBE_DEPTHS:-1 2}; do
            for m in ${PROBE_METHODS:-cp4 cp8 cp4x2 tma regs bulk f64 f128 f128a}; do
              "$B/gather_probe" $m $rows $depth 64 $busy 2>&1 | tee -a "$OUT/probe.log"
            done
          done
        done
      done
      ;;
    cmake)
      log "cmake build ($(ls /usr/include/gtest >/dev/null 2>&1 && echo with || echo without) GTest)"
      GT=OFF; ls /usr/include/gtest >/dev/null 2>&1 && GT=ON
      cmake -S . -B "$B/cmake" -G Ninja -DDSV4_CUDA_ARCHITECTURES=${ARCH}-real -DDSV4_BUILD_TESTS=$GT \
        -DDSV4_BUILD_EXAMPLES=OFF >"$OUT/cmake.log" 2>&1 && cmake --build "$B/cmake" -j16 >>"$OUT/cmake.log" 2>&1
      log "cmake rc=$?"
      tail -5 "$OUT/cmake.log"
      if [ $GT = ON ]; then
        (cd "$B/cmake" && DSV4_TEST_DEVICE=cuda ctest --output-on-failure -j4 2>&1 | tail -40 | tee "$OUT/ctest.log")
      fi
      ;;
  esac
done
cat "$OUT/summary.txt"
