#!/usr/bin/env bash
# Installs the Debian packages libdsv4 needs to build and test, if any are missing.
# Safe to run repeatedly; needs root (or sudo) only when something is missing.
#   .ci/install-deps.sh          what the build and the tests need
#   .ci/install-deps.sh bench    also what `make bench-cpu` needs (plots; OpenBLAS, which Debian's
#                                PyTorch then uses for its fp32 products instead of the reference BLAS)
set -euo pipefail
# clang-14 + libclang-rt-14-dev: the libFuzzer targets of fuzz/ (make fuzz, make test's smoke).
# hipcc + libamdhip64-dev: the HIP module's compiler and headers (clang-15, rocm-device-libs; 26
# packages, 66 MB download, 345 MB installed). The module opens libamdhip64 at run time.
pkgs=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
      python3 abigail-tools libdlpack-dev cmake-format clang-format rustc cargo golang-go
      python3-numpy python3-torch python3-pytest python3-venv python3-pip python3-setuptools
      nlohmann-json3-dev libsimde-dev hipcc libamdhip64-dev pocl-opencl-icd ocl-icd-opencl-dev
      opencl-c-headers clinfo libze1 libze-dev clang-14 llvm-spirv-14 spirv-tools
      libclang-rt-14-dev)
if [ "${1:-}" = bench ]; then
  pkgs+=(python3-matplotlib libopenblas0-pthread)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
