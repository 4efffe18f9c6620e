#!/usr/bin/env bash
# Runs the CPU benchmark (Google Benchmark) and writes its JSON to bench/results/cpu.json, with the
# device, commit and command added to the JSON's context block for scripts/perf/make_performance.py.
#
#   scripts/perf/bench_cpu.sh [build dir, default build] [extra benchmark flags...]
#
# Medians of 5 repetitions of at least 1 s each; DSV4_CPU_THREADS sets the backend's threads.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
shift || true
bin="$root/$build/bin/dsv4_bench_cpu"
[ -x "$bin" ] || { echo "no $bin: build first (cmake --build $build)" >&2; exit 1; }
out="$root/bench/results/cpu.json"
flags=(--benchmark_min_time=1 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true "$@")
"$bin" "${flags[@]}" --benchmark_out="$out" --benchmark_out_format=json
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
isa=$(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' /proc/cpuinfo | sort -u | paste -sd ' ')
# Google Benchmark's own context has the date, host, CPU count and load; this adds what it lacks.
DEVICE="$model, $(nproc) CPUs ($isa)" COMMIT=$(git -C "$root" rev-parse --short HEAD) \
  COMMAND="scripts/perf/bench_cpu.sh $build $* (= $build/bin/dsv4_bench_cpu ${flags[*]})" \
  python3 - "$out" <<'PY'
import json, os, sys
path = sys.argv[1]
with open(path) as f:
    data = json.load(f)
data["context"].update(backend="cpu", device=os.environ["DEVICE"], commit=os.environ["COMMIT"],
                       command=os.environ["COMMAND"].replace("  ", " "))
with open(path, "w") as f:
    json.dump(data, f, indent=2)
    f.write("\n")
PY
echo "wrote $out"
