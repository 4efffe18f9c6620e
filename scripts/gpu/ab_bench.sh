#!/usr/bin/env bash
# A/B timing of the CUDA module against other versions of it, case by case on one GPU.
#
#   [OLD_TREE=dir | OLD=git-rev] CASES='cuda/CONFIG2/b:2/;cuda/prefill/heads:64' [ROUNDS=2]
#   [EXTRA='v1=dir;v2=dir'] [FLUSH_MODES='memset read'] scripts/gpu/ab_bench.sh <outdir>
#
# OLD_TREE is another version's source tree (OLD=REV extracts one with git archive, where git
# history is at hand); EXTRA names more trees. Each version's module is built with the gpu-h200
# preset in <tree>/build-gpu (its target dsv4-backend-cuda only); the current tree is built by
# scripts/gpu/run.sh <outdir> build. The current tree's benchmark then times each case (a Google
# Benchmark filter) with each version's module (DSV4_BACKEND_PATH), old, new, old, new..., so that
# drift hits all alike; FLUSH_MODES: the L2 states (DSV4_BENCH_FLUSH) each is timed in. The versions
# must speak the module ABI of the current libdsv4. Medians in <outdir>/ab.log. Benchmark names end
# in /manual_time: end a case with '/' (not '$') to match it alone.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
OUT=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
ROOT=$PWD
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH DSV4_BENCH_INVARIANT=0
if [ -z "${OLD_TREE:-}" ]; then
  [ -n "${OLD:-}" ] || { echo "set OLD_TREE=dir or OLD=git-rev" >&2; exit 2; }
  OLD_TREE=$ROOT/build-gpu/ab-old
  rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE" && git archive "$OLD" | tar -x -C "$OLD_TREE" || exit 1
fi
scripts/gpu/run.sh "$OUT" build || exit 1
declare -A TREE=([old]=$(cd "$OLD_TREE" && pwd) [new]=$ROOT)
VERSIONS=(old new)
IFS=';' read -r -a EXTRA_LIST <<<"${EXTRA:-}"
for e in "${EXTRA_LIST[@]}"; do
  TREE[${e%%=*}]=$(cd "${e#*=}" && pwd)
  VERSIONS+=("${e%%=*}")
done
for v in "${VERSIONS[@]}"; do
  [ "$v" = new ] && continue
  t=${TREE[$v]}
  if [ ! -f "$t/build-gpu/build.ninja" ]; then
    (cd "$t" && cmake --preset gpu-h200 -DDSV4_BUILD_TESTS=OFF -DDSV4_BUILD_BENCH=OFF \
      -DDSV4_BUILD_EXAMPLES=OFF) >"$OUT/ab_build_$v.log" 2>&1 || { tail "$OUT/ab_build_$v.log"; exit 1; }
  fi
  cmake --build "$t/build-gpu" --target dsv4-backend-cuda >>"$OUT/ab_build_$v.log" 2>&1 ||
    { tail "$OUT/ab_build_$v.log"; exit 1; }
done
IFS=';' read -r -a CASE_LIST <<<"${CASES:?set CASES='name/;...'}"
read -r -a FLUSH_LIST <<<"${FLUSH_MODES:-memset}"
for ((r = 0; r < ${ROUNDS:-2}; ++r)); do
  for c in "${CASE_LIST[@]}"; do
    for f in "${FLUSH_LIST[@]}"; do
      tag=$([ ${#FLUSH_LIST[@]} -gt 1 ] && echo "/$f")
      for v in "${VERSIONS[@]}"; do
        DSV4_BACKEND_PATH=${TREE[$v]}/build-gpu/lib/dsv4/backends DSV4_BENCH_FLUSH=$f \
          "$ROOT/build-gpu/bin/dsv4_bench_cuda" --benchmark_filter="$c" 2>&1 | grep -E "_median" |
          sed "s|^|$v$tag |"
      done
    done
  done
done | tee "$OUT/ab.log"
