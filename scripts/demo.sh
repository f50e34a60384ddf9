#!/usr/bin/env bash
# The main job on a built-in default: installs what is needed, builds, then
# imports GPT-2 small, summarizes what the IR analysis counts, and plans its
# training on one DGX A100 node with the reasoning shown.
#   scripts/demo.sh [MODEL] [CLUSTER]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2}
CLUSTER=${2:-dgx-a100-80g}
./scripts/install-deps.sh
./scripts/build.sh >/dev/null
BIN=${WEFT_BUILD_DIR:-build}/bin
OUT=${WEFT_DEMO_DIR:-demo-out}
mkdir -p "$OUT"

echo "== weftc import $MODEL -o $OUT/$MODEL.mlir"
"$BIN/weftc" import "$MODEL" -o "$OUT/$MODEL.mlir"
echo "   $(grep -c 'weft.param' "$OUT/$MODEL.mlir") parameters, $(grep -c 'weft.block' "$OUT/$MODEL.mlir") blocks"
echo
echo "== weftc summary $MODEL --seq-len 1024"
"$BIN/weftc" summary "$MODEL" --seq-len 1024
echo
echo "== weftc plan --model $MODEL --cluster $CLUSTER --global-batch 512 --seq-len 1024 --explain"
"$BIN/weftc" plan --model "$MODEL" --cluster "$CLUSTER" --global-batch 512 \
  --seq-len 1024 --explain --top 5
