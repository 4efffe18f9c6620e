#!/usr/bin/env bash
# The CPU benchmark in one run (`make bench-cpu`): the Google Benchmark binary (the machine's
# dot-product peak, the random-row gather bandwidth, libdsv4 on every shape, cache and thread
# count), then plain PyTorch on the same shapes (bench/cpu/torch_cpu.py, Debian's python3-torch),
# then bench/cpu/report.py: rooflines, ratios, targets, bench/results/cpu*.json for
# scripts/perf/make_performance.py and the plot docs/img/cpu-roofline.png.
#
#   bench/cpu/bench_all.sh [build dir, default build; relative to the repository root or absolute]
#   DSV4_BENCH_MAX_THREADS (default 2: 1 and 2 threads), DSV4_BENCH_REPS (default 5),
#   DSV4_BENCH_POOL_BYTES (default: the larger of 1 GiB and 4x the last-level cache),
#   DSV4_BENCH_HUGE_PAGES=1 (the C++ cases' caches on transparent huge pages)
#   PYTHON: the Python with torch for torch_cpu.py (default /usr/bin/python3, Debian's)
#
# Timings on a shared machine are noisy: run it when `uptime` shows a low load; the report records
# the load average before and after.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
case $build in
  /*) build_dir=$build ;;
  *) build_dir=$root/$build ;;
esac
bin="$build_dir/bin/dsv4_bench_cpu"
[ -x "$bin" ] || { echo "no $bin: build first (cmake --build $build --target dsv4_bench_cpu)" >&2; exit 1; }
python=${PYTHON:-/usr/bin/python3}
"$python" -c "import torch" 2>/dev/null ||
  { echo "$python has no torch: set PYTHON to a Python with it (Debian: python3-torch)" >&2; exit 1; }
# report.py needs only the standard library (matplotlib, when there, for the plot).
report_python=/usr/bin/python3
[ -x "$report_python" ] || report_python=$python
threads=${DSV4_BENCH_MAX_THREADS:-2}
reps=${DSV4_BENCH_REPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every cache the cases read spans at least 1 GiB and four times the last-level cache, so that
# rows come from memory (bench_decode_cpu.cpp and torch_cpu.py read this).
llc=$(getconf LEVEL3_CACHE_SIZE 2>/dev/null || echo 0)
export DSV4_BENCH_POOL_BYTES=${DSV4_BENCH_POOL_BYTES:-$(( (4 * ${llc:-0}) > (1 << 30) ? 4 * ${llc:-0} : 1 << 30 ))}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
flags=(--benchmark_min_time=0.5 --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true)
DSV4_BENCH_MAX_THREADS=$threads "$bin" "${flags[@]}" --benchmark_out="$tmp/gbench.json" \
  --benchmark_out_format=json
"$python" "$root/bench/cpu/torch_cpu.py" "$tmp/torch.json" "$threads" $((2 * reps - 1))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
isa=$(grep -o -w -E 'avx512f|avx512_bf16|amx_bf16|avx2' /proc/cpuinfo | sort -u | paste -sd ' ')
"$report_python" "$root/bench/cpu/report.py" --gbench "$tmp/gbench.json" --torch "$tmp/torch.json" \
  --out-dir "$root/bench/results" --plot "$root/docs/img/cpu-roofline.png" \
  --device "$model, $(nproc) CPUs ($isa)" --commit "$(git -C "$root" rev-parse --short HEAD)" \
  --command "bench/cpu/bench_all.sh $build (DSV4_BENCH_MAX_THREADS=$threads DSV4_BENCH_REPS=$reps)" \
  --load "$load_before" "$load_after"
