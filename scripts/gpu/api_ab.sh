#!/usr/bin/env bash
# A/B timing of two libdsv4 versions (library and CUDA module together) through the public C API,
# for versions whose backend-module ABIs differ (scripts/gpu/ab_bench.sh swaps modules and needs one
# ABI). bench/gpu/api_ab.cpp is built against the OLD version's headers, which both versions serve,
# and run with each version's libdsv4.so.0 in turn (old, new, old, new...), ROUNDS times.
#
#   OLD=git-rev | OLD_TREE=dir  [NEW_BUILD=dir] [ROUNDS=3] [CASE=substring] [ARCH=90a-real]
#   scripts/gpu/api_ab.sh <outdir>
#
# Each version is built with CMake (library and CUDA module only) into <tree>/build-api-ab;
# NEW_BUILD may name an existing build of this tree instead. Logs in <outdir>/api_ab.log, and the
# median of each version's per-round medians in <outdir>/api_ab.txt.
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
OUT=$(realpath -m "$1")
cd "$(dirname "$0")/../.."
ROOT=$PWD
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
if [ -z "${OLD_TREE:-}" ]; then
  [ -n "${OLD:-}" ] || { echo "set OLD=git-rev or OLD_TREE=dir" >&2; exit 2; }
  OLD_TREE=$OUT/old-src
  rm -rf "$OLD_TREE" && mkdir -p "$OLD_TREE" && git archive "$OLD" | tar -x -C "$OLD_TREE" || exit 1
fi
OLD_TREE=$(cd "$OLD_TREE" && pwd)

# build <tree>: the library and the CUDA module, into <tree>/build-api-ab.
build() {
  local tree=$1
  cmake -S "$tree" -B "$tree/build-api-ab" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DDSV4_CUDA_ARCHITECTURES="${ARCH:-90a-real}" -DDSV4_BUILD_TESTS=OFF -DDSV4_BUILD_BENCH=OFF \
    -DDSV4_BUILD_EXAMPLES=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build "$tree/build-api-ab" --target dsv4 dsv4-backend-cuda >>"$OUT/build.log" 2>&1 ||
    { tail -20 "$OUT/build.log"; exit 1; }
}
build "$OLD_TREE"
NEW_BUILD=${NEW_BUILD:-}
if [ -z "$NEW_BUILD" ]; then
  build "$ROOT"
  NEW_BUILD=$ROOT/build-api-ab
fi
declare -A LIB=([old]=$OLD_TREE/build-api-ab/lib [new]=$(realpath "$NEW_BUILD")/lib)
for v in old new; do
  [ -f "${LIB[$v]}/dsv4/backends/libdsv4-cuda.so" ] || { echo "no CUDA module in ${LIB[$v]}" >&2; exit 1; }
done

CLIENT=$OUT/api_ab
g++ -O2 -std=c++17 -I"$OLD_TREE/include" -I/usr/local/cuda/include bench/gpu/api_ab.cpp \
  -o "$CLIENT" -L"${LIB[old]}" -ldsv4 -L/usr/local/cuda/lib64 -lcudart || exit 1

for ((r = 1; r <= ${ROUNDS:-3}; ++r)); do
  for v in old new; do
    LD_LIBRARY_PATH=${LIB[$v]}:${LD_LIBRARY_PATH:-} "$CLIENT" ${CASE:+"$CASE"} | sed "s|^|$v |"
  done
done | tee "$OUT/api_ab.log"

# Per case and version, the median of the rounds' medians, and new over old.
awk '$2 !~ /^#/ && $4 ~ /^[0-9.]+$/ { t[$2 " " $1] = t[$2 " " $1] " " $3; cases[$2] = 1 }
  function median(list,   a, n, i, j, x) {
    n = split(list, a, " ")
    for (i = 2; i <= n; ++i) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; --j) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "%-44s %10s %10s %8s\n", "case (median of rounds, us)", "old", "new", "new/old"
    for (c in cases) {
      o = median(t[c " old"]); n = median(t[c " new"])
      printf "%-44s %10.1f %10.1f %8.3f\n", c, o, n, (o > 0 ? n / o : 0)
    }
  }' "$OUT/api_ab.log" | tee "$OUT/api_ab.txt"
