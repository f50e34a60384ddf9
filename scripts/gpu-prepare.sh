#!/usr/bin/env bash
# Builds the GPU test binaries here (the device machine has no MLIR or
# OpenMPI to build the whole tree) and stages them in .gpu/ (git-ignored),
# to be carried to the device machine and run by scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${WEFT_BUILD_DIR:-build}
./scripts/build.sh >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin
# Every executable that holds a gpu-labelled test.
find "$BUILD" -type f -perm -u+x -name 'WeftCuda*Tests' -exec cp {} .gpu/bin/ \;
ls .gpu/bin
