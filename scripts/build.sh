#!/usr/bin/env bash
# Configures and builds Weft into ${WEFT_BUILD_DIR:-build} (ccache-friendly).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${WEFT_BUILD_DIR:-build}
JOBS=${WEFT_JOBS:-$(nproc)}
# ccache keys on relative paths below the checkout, so a fresh clone in
# another folder (CI) reuses what an earlier build here compiled.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >"$BUILD.configure.log" 2>&1 ||
    { cat "$BUILD.configure.log"; exit 1; }
fi
ninja -C "$BUILD" -j "$JOBS"
