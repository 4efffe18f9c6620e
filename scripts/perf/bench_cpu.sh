#!/usr/bin/env bash
# Runs the CPU benchmark: bench/cpu/bench_all.sh (the Google Benchmark binary with the machine's
# peak and gather bandwidth, then plain PyTorch on the same shapes) writes bench/results/cpu*.json
# with the device, commit and command in their context blocks for
# scripts/perf/make_performance.py, and the plot docs/img/cpu-roofline.png.
#
#   scripts/perf/bench_cpu.sh [build dir, default build]
set -euo pipefail
exec "$(cd "$(dirname "$0")/../.." && pwd)/bench/cpu/bench_all.sh" "$@"
