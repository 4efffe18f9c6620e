#!/usr/bin/env bash
# A/B timing of the CUDA module against another version of it, case by case on one GPU.
# Usage: [OLD_TREE=dir | OLD=git-rev] CASES='CONFIG2 b=2$;prefill h64' [ROUNDS=2] scripts/gpu/ab_bench.sh
# OLD_TREE holds another version's include/ and backends/ (e.g. `git archive REV include backends | tar
# -x -C dir`, made where git history is at hand); OLD=REV extracts it here. The current tree's module,
# tests and benchmark are built (and its GPU tests run) by run_all.sh; the old module is built next to
# it with the same flags; each case then runs old, new, old, new... so drift hits both alike.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-$PWD/gpu-out}
B=${BUILD:-/tmp/dsv4-gpu}
mkdir -p "$OUT" "$B"
if [ -z "${OLD_TREE:-}" ]; then
  [ -n "${OLD:-}" ] || { echo "set OLD_TREE=dir or OLD=git-rev" >&2; exit 2; }
  OLD_TREE=$B/ab-old
  rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE" && git archive "$OLD" include backends | tar -x -C "$OLD_TREE" || exit 1
fi
bash scripts/gpu/run_all.sh test >"$OUT/ab_test.log" 2>&1
grep -E "passed, .* failed" "$OUT/ab_test.log" | tail -1
# build_module and its settings, exactly as run_all.sh defines them.
ARCH=${DSV4_CUDA_ARCH:-90a}
export PATH=/usr/local/cuda/bin:$PATH
eval "$(sed -n '/^MODULE_SOURCES/,/^}/p' scripts/gpu/run_all.sh)"
OLD_TREE=$(cd "$OLD_TREE" && pwd)
(cd "$OLD_TREE" && ROOT=$PWD build_module "$B/old.so" "$OUT/ab_build_old.log") || { tail "$OUT/ab_build_old.log"; exit 1; }
IFS=';' read -r -a CASE_LIST <<<"${CASES:?set CASES='name$;...'}"
for ((r = 0; r < ${ROUNDS:-2}; ++r)); do
  for c in "${CASE_LIST[@]}"; do
    for v in old new; do
      so=$B/old.so
      [ $v = new ] && so=$B/libdsv4-cuda.so
      "$B/bench_cuda" "$so" "$c" 2>&1 | grep -vE "^(device|ceilings|case)" | sed "s/^/$v /"
    done
  done
done | tee "$OUT/ab.log"
