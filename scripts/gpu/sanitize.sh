#!/usr/bin/env bash
# compute-sanitizer's four tools over a subset of a GoogleTest CUDA suite, on a GPU machine.
#
#   scripts/gpu/sanitize.sh <test binary> [gtest filter] [-- more test arguments]
#
# e.g. (after a CMake build with CUDA on):
#   DSV4_TEST_DEVICE=cuda scripts/gpu/sanitize.sh build/bin/dsv4_kv_writer_test '*'
#   DSV4_TEST_DEVICE=cuda scripts/gpu/sanitize.sh build/bin/dsv4_conformance_test '*decode*'
# Runs memcheck (with device leak checks), racecheck, initcheck and synccheck (TOOLS overrides the
# list), one run each; logs and a JSON line per run (for scripts/reliability_report.py --add) go to
# $OUT (default ./gpu-out/sanitize). Exit 0: every tool clean; 1: a tool reported errors or the
# tests failed; 77: no GPU here.
set -uo pipefail
if [ $# -lt 1 ]; then
  sed -n '2,13p' "$0"
  exit 2
fi
BIN=$1
FILTER=${2:-*}
shift $(($# >= 2 ? 2 : 1))
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
OUT=${OUT:-$PWD/gpu-out/sanitize}
TOOLS=${TOOLS:-memcheck racecheck initcheck synccheck}
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p "$OUT"

export PATH=$PATH:/usr/local/cuda/compute-sanitizer
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 77
fi
if ! command -v compute-sanitizer >/dev/null; then
  echo "compute-sanitizer not found (CUDA toolkit in /usr/local/cuda?)" >&2
  exit 2
fi
COMMIT=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
status=0
for tool in $TOOLS; do
  opts=(--tool "$tool" --error-exitcode 3 --print-limit 50)
  case $tool in
    memcheck) opts+=(--leak-check full) ;;
    initcheck) opts+=(--track-unused-memory no) ;;
  esac
  log="$OUT/$tool.log"
  start=$SECONDS
  compute-sanitizer "${opts[@]}" "$BIN" --gtest_filter="$FILTER" "${EXTRA[@]}" >"$log" 2>&1
  rc=$?
  errors=$(grep -Eo "ERROR SUMMARY: [0-9]+" "$log" | tail -1 | grep -Eo "[0-9]+$")
  tests=$(grep -Eo "\[  PASSED  \] [0-9]+" "$log" | grep -Eo "[0-9]+$")
  echo "$tool: rc $rc, ${errors:-?} errors, ${tests:-0} tests passed, $((SECONDS - start)) s ($log)"
  printf '{"kind": "compute-sanitizer", "tool": "%s", "binary": "%s", "filter": "%s", "errors": %s, "tests": %s, "rc": %d, "seconds": %d, "gpu": "%s", "commit": "%s", "date": "%s"}\n' \
    "$tool" "$(basename "$BIN")" "$FILTER" "${errors:-null}" "${tests:-0}" "$rc" "$((SECONDS - start))" \
    "$GPU" "$COMMIT" "$(date -u +%F)" >>"$OUT/sanitize.jsonl"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
