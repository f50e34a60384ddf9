#!/usr/bin/env bash
# The main job on a built-in default: installs what is needed, builds, then
# imports GPT-2 small, summarizes what the IR analysis counts, and plans its
# training on one DGX A100 node with the reasoning shown; then compiles a tiny
# GPT-2 for two data-parallel CPU ranks and trains it with mpirun on the
# shipped corpus, showing the loss fall.
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

echo
echo "== weftc compile --model gpt2-tiny --cluster examples/clusters/cpu-sim-2.json --dp 2 -o $OUT/bundle"
"$BIN/weftc" compile --model gpt2-tiny --cluster examples/clusters/cpu-sim-2.json \
  --global-batch 8 --seq-len 64 --dp 2 --micro-batch 2 --lr 3e-3 \
  --warmup-steps 10 --decay-steps 200 -o "$OUT/bundle"
"$BIN/weft-make-tokens" data/corpus.txt "$OUT/tokens.bin" >/dev/null
echo
echo "== mpirun -np 2 weft-run $OUT/bundle --data $OUT/tokens.bin --steps 200"
MPIRUN_FLAGS="--oversubscribe"
[ "$(id -u)" -eq 0 ] && MPIRUN_FLAGS="$MPIRUN_FLAGS --allow-run-as-root"
mpirun $MPIRUN_FLAGS -np 2 "$BIN/weft-run" "$OUT/bundle" \
  --data "$OUT/tokens.bin" --steps 200 --metrics "$OUT/metrics.jsonl"
