#!/usr/bin/env bash
# The multi-GPU Python examples in one command, on a machine with 2 or 4 GPUs: tensor parallel
# (examples/python/tensor_parallel.py) and decode-context parallel (context_parallel.py), each on
# 2, 4 (when there are 4 GPUs) and 1 GPU(s) through torchrun, CONFIG1 / CONFIG2 steps at b = 64 and
# 256, NCCL's NVLink multicast off (NCCL_NVLS_ENABLE=0). Every case checks its result against a
# single-GPU run; the per-step times (attention, NCCL exchange, merge) are JSON records collected
# into DIR/multi_gpu.json, with each run's log beside them, and converted into DIR/multi-gpu.json
# (Google Benchmark JSON, by scripts/perf/multi_gpu_results.py): copy that to
# bench/results/multi-gpu-<machine>.json for docs/performance.md (scripts/perf/make_performance.py).
#
#   scripts/gpu/multi_gpu.sh [DIR]        (default: $OUT, else ./gpu-out/multi_gpu)
#
# Needs a build with the CUDA module in $BUILD (default build/) and python3 with torch for CUDA
# ($PYTHON). ARGS passes options to both examples (e.g. ARGS='--batches 64'); RUN_TIMEOUT (s) caps
# each torchrun (default 150).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$(realpath -m "${1:-${OUT:-$ROOT/gpu-out/multi_gpu}}")
mkdir -p "$OUT"
rm -f "$OUT"/*.jsonl "$OUT/summary.txt"
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
source scripts/gpu/python_env.sh
export NCCL_NVLS_ENABLE=0 OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
GPUS=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
COUNTS=()
for n in 2 4 1; do [ "$n" -le "$GPUS" ] && COUNTS+=("$n"); done
[ "$GPUS" -ge 1 ] || { log "no GPU for torch"; exit 2; }
[ "$GPUS" -ge 2 ] || log "warning: 1 GPU: only the 1-GPU runs"
rc=0
for n in "${COUNTS[@]}"; do
  for example in tensor_parallel context_parallel; do
    log "$example on $n GPU(s)"
    timeout "${RUN_TIMEOUT:-150}" "$PYTHON" -m torch.distributed.run --standalone \
      --nproc-per-node "$n" "examples/python/$example.py" --out "$OUT" ${ARGS:-} \
      >"$OUT/${example}_n$n.log" 2>&1
    r=$?
    grep -E '^\{' "$OUT/${example}_n$n.log" | cut -c1-240
    [ $r -eq 0 ] || { tail -20 "$OUT/${example}_n$n.log"; rc=1; }
    log "$example n=$n rc=$r"
  done
done
"$PYTHON" - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, os, sys
out = sys.argv[1]
records = []
for name in ("tensor_parallel", "context_parallel"):
    path = os.path.join(out, name + ".jsonl")
    if os.path.exists(path):
        records += [json.loads(line) for line in open(path) if line.strip()]
json.dump(records, open(os.path.join(out, "multi_gpu.json"), "w"), indent=1, sort_keys=True)
print("%-16s %-7s %4s %3s %10s %10s %8s %10s %10s %6s" % (
    "example", "config", "b", "gpus", "attn_us", "nccl_us", "merge_us", "step_us", "1gpu_us",
    "ok"))
for r in sorted(records, key=lambda r: (r["example"], r["config"], r["b"], r["world"])):
    print("%-16s %-7s %4d %3d %10.1f %10.1f %8.1f %10.1f %10.1f %6s" % (
        r["example"], r["config"], r["b"], r["world"], r["attention_us"], r["exchange_us"],
        r.get("merge_us", 0.0), r["step_us"], r["single_gpu_attention_us"], r["passed"]))
PY
# The same records as Google Benchmark JSON for docs/performance.md (device probed through torch and
# nvidia-smi; commit: $DSV4_COMMIT, else git).
"$PYTHON" scripts/perf/multi_gpu_results.py "$OUT/multi_gpu.json" "$OUT/multi-gpu.json" \
  --command "scripts/gpu/multi_gpu.sh DIR${ARGS:+ (ARGS='$ARGS')}" 2>&1 | tee -a "$OUT/summary.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
log "multi_gpu.sh rc=$rc"
exit $rc
