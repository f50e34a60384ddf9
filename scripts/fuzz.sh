#!/usr/bin/env bash
# Fuzzes the Hugging Face config importer with libFuzzer (not part of CI).
#   scripts/fuzz.sh [SECONDS]   (default 60)
# Builds with clang-22 into build-fuzz/, the importer instrumented for
# coverage, seeded with the preset configs and the lit test inputs.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
./scripts/install-deps.sh
for p in clang-22 libclang-rt-22-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends clang-22 libclang-rt-22-dev >/dev/null; break; }
done
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DCMAKE_CUDA_COMPILER=OFF -DWEFT_ENABLE_FUZZERS=ON \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address" \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit >/dev/null
fi
ninja -C build-fuzz weft-fuzz-import
corpus=build-fuzz/fuzz-corpus
mkdir -p "$corpus"
cp compiler/Import/presets/*.json test/lit/weftc/Inputs/*.json "$corpus/"
build-fuzz/bin/weft-fuzz-import -max_total_time="$SECONDS_TO_RUN" \
  -rss_limit_mb=2048 -timeout=10 "$corpus"
