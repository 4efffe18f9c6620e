#!/usr/bin/env bash
# A/B timing of the CUDA module against another version of it, case by case on one GPU.
# Usage: [OLD_TREE=dir | OLD=git-rev] CASES='CONFIG2 b=2$;prefill h64' [ROUNDS=2] [EXTRA='v1=dir;v2=dir']
#        [TRACE_CASE='prefill h64 topk 512 s_kv 8192$'] [FLUSH_MODES='memset read'] scripts/gpu/ab_bench.sh
# OLD_TREE holds another version's include/ and backends/ (e.g. `git archive REV include backends | tar
# -x -C dir`, made where git history is at hand); OLD=REV extracts it here. The current tree's module,
# tests and benchmark are built (and its GPU tests run) by run_all.sh; the old module is built next to
# it with the same flags; each case then runs old, new, old, new... so drift hits both alike. EXTRA names
# more trees (include/ and backends/) timed in the same rotation; FLUSH_MODES: the L2 states
# (DSV4_BENCH_FLUSH) each version is timed in, labelled version/mode when there are several;
# TRACE_CASE: each version's timeline (a -DDSV4_SM90_TRACE module, scripts/gpu/trace_sm90.py) for
# those cases first.
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
# build_module, trace_case and their settings, exactly as run_all.sh defines them.
ARCH=${DSV4_CUDA_ARCH:-90a}
export PATH=/usr/local/cuda/bin:$PATH
eval "$(sed -n '/^MODULE_SOURCES/,/^}/p; /^trace_case()/,/^}/p' scripts/gpu/run_all.sh)"
OLD_TREE=$(cd "$OLD_TREE" && pwd)
declare -A TREE=([old]=$OLD_TREE [new]=$PWD)
VERSIONS=(old new)
IFS=';' read -r -a EXTRA_LIST <<<"${EXTRA:-}"
for e in "${EXTRA_LIST[@]}"; do
  TREE[${e%%=*}]=$(cd "${e#*=}" && pwd)
  VERSIONS+=("${e%%=*}")
done
declare -A SO=([new]=$B/libdsv4-cuda.so)
for v in "${VERSIONS[@]}"; do
  [ $v = new ] && continue
  SO[$v]=$B/ab-$v.so
  (cd "${TREE[$v]}" && ROOT=$PWD build_module "${SO[$v]}" "$OUT/ab_build_$v.log") || { tail "$OUT/ab_build_$v.log"; exit 1; }
done
if [ -n "${TRACE_CASE:-}" ]; then
  IFS=';' read -r -a TRACE_LIST <<<"$TRACE_CASE"
  for v in "${VERSIONS[@]}"; do
    (cd "${TREE[$v]}" && ROOT=$PWD build_module "$B/ab-trace-$v.so" "$OUT/ab_build_trace_$v.log" -DDSV4_SM90_TRACE) ||
      { tail "$OUT/ab_build_trace_$v.log"; exit 1; }
    for c in "${TRACE_LIST[@]}"; do
      tag=$v-$(echo "$c" | tr -c 'a-zA-Z0-9' _)
      echo "== trace $v: $c"
      trace_case "$B/ab-trace-$v.so" "$c" "$tag"
    done
  done
fi
IFS=';' read -r -a CASE_LIST <<<"${CASES:?set CASES='name$;...'}"
read -r -a FLUSH_LIST <<<"${FLUSH_MODES:-memset}"
for ((r = 0; r < ${ROUNDS:-2}; ++r)); do
  for c in "${CASE_LIST[@]}"; do
    for f in "${FLUSH_LIST[@]}"; do
      tag=$([ ${#FLUSH_LIST[@]} -gt 1 ] && echo "/$f")
      for v in "${VERSIONS[@]}"; do
        DSV4_BENCH_FLUSH=$f "$B/bench_cuda" "${SO[$v]}" "$c" 2>&1 | grep -vE "^(device|ceilings|case|L2 before)" |
          sed "s|^|$v$tag |"
      done
    done
  done
done | tee "$OUT/ab.log"
