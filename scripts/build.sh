#!/usr/bin/env bash
# Configures and builds Weft into ${WEFT_BUILD_DIR:-build} (ccache-friendly).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${WEFT_BUILD_DIR:-build}
JOBS=${WEFT_JOBS:-$(nproc)}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >"$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log"; exit 1; }
fi
ninja -C "$BUILD" -j "$JOBS"
