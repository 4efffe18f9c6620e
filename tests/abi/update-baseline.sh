#!/usr/bin/env bash
# Regenerates tests/abi/libdsv4.abi, the ABI baseline that the `abi_baseline` ctest compares the built
# library against (abidiff). Run it from any directory after an intentional, reviewed ABI change
# (and add the CHANGELOG "ABI" line):
#   tests/abi/update-baseline.sh [path/to/libdsv4.so.0]     (default: build/lib/libdsv4.so.0)
# The library must be built with debug info (RelWithDebInfo, the default).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
lib="${1:-$root/build/lib/libdsv4.so.0}"
if [ ! -f "$lib" ]; then
  echo "update-baseline.sh: $lib not found; build first (make build) or pass the library path" >&2
  exit 1
fi
abidw --headers-dir "$root/include/dsv4" --drop-private-types --exported-interfaces-only \
  --no-corpus-path --no-comp-dir-path --short-locs \
  --out-file "$root/tests/abi/libdsv4.abi" "$lib"
echo "wrote $root/tests/abi/libdsv4.abi from $lib"
