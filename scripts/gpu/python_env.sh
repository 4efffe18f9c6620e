# Sourced by scripts/gpu/python_gpu.sh and multi_gpu.sh (ROOT, OUT and log() set): the Python
# binding from the source tree over the build in $BUILD (default build/), and the tests' float64
# reference library (from the build, else compiled here into $OUT).
BUILD=$(realpath -m "${BUILD:-$ROOT/build}")
PYTHON=${PYTHON:-python3}
export PATH=/usr/local/cuda/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
export DSV4_LIBRARY=$BUILD/lib/libdsv4.so.0 PYTHONPATH=$ROOT/bindings/python

[ -f "$DSV4_LIBRARY" ] || { log "no $DSV4_LIBRARY: build the repository into $BUILD first"; exit 2; }
[ -f "$BUILD/lib/dsv4/backends/libdsv4-cuda.so" ] ||
  log "warning: no CUDA module in $BUILD/lib/dsv4/backends (GPU runs will fail)"
log "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1) x $(nvidia-smi -L 2>/dev/null | wc -l)"
log "python: $("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' 2>&1)"

DSV4_PYREF_LIBRARY=$BUILD/bindings/python/libdsv4_pyref.so
if [ ! -f "$DSV4_PYREF_LIBRARY" ] &&
  ! cmake --build "$BUILD" --target dsv4_pyref >"$OUT/pyref_build.log" 2>&1; then
  DSV4_PYREF_LIBRARY=$OUT/libdsv4_pyref.so
  g++ -O2 -std=c++17 -shared -fPIC -I"$ROOT/reference" -I"$ROOT/include" \
    "$ROOT/bindings/python/tests/reference_shim.cpp" "$ROOT/reference/reference.cpp" \
    "$ROOT/reference/reference_paged.cpp" "$ROOT/reference/compare_rule.cpp" \
    -o "$DSV4_PYREF_LIBRARY" >>"$OUT/pyref_build.log" 2>&1 ||
    { cat "$OUT/pyref_build.log"; log "cannot build the reference library"; exit 2; }
fi
export DSV4_PYREF_LIBRARY
