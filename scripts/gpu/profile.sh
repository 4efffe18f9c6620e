#!/usr/bin/env bash
# Tuning tools for the CUDA module on a GPU machine, over the gpu-h200 build (scripts/gpu/run.sh
# <outdir> build first). Cases are Google Benchmark filters of dsv4_bench_cuda's names, ';'-separated;
# a name ends in /manual_time, so a trailing '/' (not '$') ends a case's name.
#
#   scripts/gpu/profile.sh <outdir> [profile|util|sass|trace|probe]...
#
#   profile  ncu: speed of light, warp stalls, pipes and bank conflicts of one launch of each
#            PROFILE case (default 'cuda/CONFIG1/b:64/;cuda/prefill/heads:64/topk:512/s_kv:8192/')
#   util     ncu: hardware utilisation (tensor pipes, issue slots, shared memory, L2, DRAM) of one
#            launch of each UTIL_CASE case at real clocks (default 'cuda/CONFIG2/cache:bf16/b:64/')
#   sass     ncu: the leading stall reasons per SASS instruction of each SASS_CASE case
#            (default 'cuda/CONFIG1/heads:8/b:128/'; scripts/gpu/top_sass.py)
#   trace    the Hopper kernels' timeline: a module built with -DDSV4_SM90_TRACE (build-gpu-trace/),
#            the last launch of each TRACE_CASE case (default 'cuda/CONFIG1/b:64/') dumped and
#            summarised by scripts/gpu/trace_sm90.py (TRACE_CTA: also that CTA chunk by chunk)
#   probe    the row-gather probe (bench/gpu/gather_probe.cu): each copy method alone, tables in L2
#            and in HBM (PROBE_BUSY, PROBE_ROWS, PROBE_DEPTHS, PROBE_METHODS)
# KERNEL_REGEX picks the kernels ncu looks at (default: attention); it skips each case's first
# three launches (warm-up) and profiles the fourth.
set -uo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,20p' "$0"
  exit 2
fi
OUT=$(realpath -m "$1")
shift
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$ROOT/build-gpu
BENCH=$BUILD/bin/dsv4_bench_cuda
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
# Only the default mode's runs, one repetition: the launches ncu counts are the case's own.
export DSV4_BENCH_INVARIANT=0
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
[ -x "$BENCH" ] || { log "no $BENCH: scripts/gpu/run.sh <outdir> build first"; exit 2; }
tag_of() { echo "$1" | tr -c 'a-zA-Z0-9' _; }

# ncu_launch [ncu options...] -- CASE: ncu on the fourth launch of the KERNEL_REGEX kernels in a
# run of CASE.
ncu_launch() {
  local opts=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    opts+=("$1")
    shift
  done
  ncu --kernel-name "regex:${KERNEL_REGEX:-attention}" --launch-skip 3 --launch-count 1 "${opts[@]}" \
    "$BENCH" --benchmark_filter="$2" --benchmark_repetitions=1
}

status=0
for step in "$@"; do
  case $step in
    profile)
      IFS=';' read -r -a CASES <<<"${PROFILE:-cuda/CONFIG1/b:64/;cuda/prefill/heads:64/topk:512/s_kv:8192/}"
      for c in "${CASES[@]}"; do
        log "ncu: $c"
        ncu_launch --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
          --metrics "regex:smsp__pcsamp_warps_issue_stalled_.*,smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,smsp__inst_executed_op_ldsm.sum,smsp__inst_executed_pipe_lsu.sum,smsp__inst_executed_pipe_alu.sum,smsp__inst_executed_pipe_fma.sum,smsp__inst_executed_pipe_xu.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_shared_st.sum" \
          -- "$c" >"$OUT/ncu_$(tag_of "$c").log" 2>&1 || status=1
        grep -E "Duration|Compute .SM. Throughput|Eligible Warps|smsp__|l1tex__" "$OUT/ncu_$(tag_of "$c").log" |
          grep -v " 0$" | head -60
      done
      ;;
    util)
      # Metrics this ncu does not know are dropped rather than failing the run.
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
        if grep -qE "^ *${m%%.*} " "$OUT/ncu_metrics.txt"; then HAVE+=("$m"); else echo "ncu lacks ${m%%.*}"; fi
      done
      [ ${#HAVE[@]} -gt 0 ] || HAVE=("${WANT[@]}")  # an unknown listing format: ask for all
      METRICS=$(IFS=,; echo "${HAVE[*]}")
      IFS=';' read -r -a CASES <<<"${UTIL_CASE:-cuda/CONFIG2/cache:bf16/b:64/}"
      for c in "${CASES[@]}"; do
        log "ncu util: $c"
        ncu_launch --clock-control none --metrics "$METRICS" -- "$c" 2>&1 |
          grep -E "^ +[a-z0-9_]+__" | tee -a "$OUT/util.log"
      done
      ;;
    sass)
      IFS=';' read -r -a CASES <<<"${SASS_CASE:-cuda/CONFIG1/heads:8/b:128/}"
      for c in "${CASES[@]}"; do
        log "ncu source: $c"
        tag=$(tag_of "$c")
        ncu_launch --section SourceCounters --section WarpStateStats --page source --print-source sass --csv \
          -- "$c" >"$OUT/sass_$tag.csv" 2>"$OUT/sass_$tag.err" || status=1
        python3 scripts/gpu/top_sass.py "$OUT/sass_$tag.csv" 60 | tee "$OUT/top_$tag.txt"
      done
      ;;
    trace)
      TRACE_BUILD=$ROOT/build-gpu-trace
      if [ ! -f "$TRACE_BUILD/build.ninja" ]; then
        cmake --preset gpu-h200 -B "$TRACE_BUILD" -DCMAKE_CUDA_FLAGS="-lineinfo -DDSV4_SM90_TRACE" \
          -DDSV4_BUILD_TESTS=OFF -DDSV4_BUILD_BENCH=OFF -DDSV4_BUILD_EXAMPLES=OFF >"$OUT/trace_build.log" 2>&1
      fi
      cmake --build "$TRACE_BUILD" --target dsv4-backend-cuda >>"$OUT/trace_build.log" 2>&1 ||
        { tail -20 "$OUT/trace_build.log"; exit 1; }
      IFS=';' read -r -a CASES <<<"${TRACE_CASE:-cuda/CONFIG1/b:64/}"
      for c in "${CASES[@]}"; do
        tag=$(tag_of "$c")
        log "trace: $c"
        DSV4_BACKEND_PATH=$TRACE_BUILD/lib/dsv4/backends DSV4_TRACE_OUT="$OUT/trace_$tag.bin" \
          "$BENCH" --benchmark_filter="$c" --benchmark_repetitions=1 2>&1 | tail -3
        python3 scripts/gpu/trace_sm90.py "$OUT/trace_$tag.bin" ${TRACE_CTA:-} | tee "$OUT/trace_$tag.txt"
      done
      ;;
    probe)
      [ -x "$BUILD/bin/gather_probe" ] || { log "no gather_probe (built with sm_90a only)"; exit 2; }
      log "gather_probe"
      for busy in ${PROBE_BUSY:-none}; do
        for rows in ${PROBE_ROWS:-8192 65536 1048576}; do
          for depth in ${PROBE_DEPTHS:-1 2}; do
            for m in ${PROBE_METHODS:-cp4 cp8 cp4x2 tma regs bulk f64 f128 f128a}; do
              "$BUILD/bin/gather_probe" "$m" "$rows" "$depth" 64 "$busy" 2>&1 | tee -a "$OUT/probe.log"
            done
          done
        done
      done
      ;;
    *)
      echo "unknown step: $step (profile, util, sass, trace, probe)" >&2
      exit 2
      ;;
  esac
done
exit $status
