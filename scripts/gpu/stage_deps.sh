#!/usr/bin/env bash
# Stages GoogleTest, GoogleMock and Google Benchmark (headers, libraries, CMake package files) from
# this Debian machine (.ci/install-deps.sh installs them) into .gpu-deps/usr, for GPU machines that
# lack them and cannot fetch anything: the gpu-h200 preset searches .gpu-deps/usr first
# (CMAKE_PREFIX_PATH). Carry .gpu-deps with the working tree to the GPU machine (about 3 MB; git
# ignores it). Usage: scripts/gpu/stage_deps.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=.gpu-deps
rm -rf "$DEST"
mkdir -p "$DEST"
for pkg in libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    { echo "$pkg is not installed here: run .ci/install-deps.sh first" >&2; exit 1; }
  dpkg -L "$pkg" | while read -r f; do
    case $f in /usr/share/* | /usr/src/*) continue ;; esac
    if [ -f "$f" ] || [ -L "$f" ]; then
      mkdir -p "$DEST$(dirname "$f")"
      cp -P "$f" "$DEST$f"
    fi
  done
done
echo "staged in $DEST ($(du -sh "$DEST" | cut -f1)): $(cd "$DEST" && find . -name '*Config.cmake' | tr '\n' ' ')"
