#!/usr/bin/env bash
# The main job on a built-in default: installs what is needed, builds, then
# imports GPT-2 small, summarizes what the IR analysis counts, and plans its
# training on one DGX A100 node with the reasoning shown; then compiles a tiny
# GPT-2 for a simulated 8-rank cluster (TP 2 x PP 2 x DP 2 with ZeRO-3: 1F1B
# pipeline, parameters sharded over the DP pair and gathered where used),
# checks the plan, and trains it on the CPU backend with mpirun on the shipped
# corpus, showing the loss fall.
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
echo "== weftc compile --model gpt2-tiny --cluster examples/clusters/cpu-sim-8.json --tp 2 --pp 2 --dp 2 --zero 3 -o $OUT/bundle"
"$BIN/weftc" compile --model gpt2-tiny --cluster examples/clusters/cpu-sim-8.json \
  --global-batch 8 --seq-len 64 --tp 2 --pp 2 --dp 2 --zero 3 --micro-batch 1 \
  --schedule 1f1b --lr 3e-3 --warmup-steps 10 --decay-steps 200 -o "$OUT/bundle"
"$BIN/weft-inspect" "$OUT/bundle" verify
"$BIN/weft-make-tokens" data/corpus.txt "$OUT/tokens.bin" >/dev/null
echo
echo "== mpirun -np 8 weft-run $OUT/bundle --data $OUT/tokens.bin --steps 200"
MPIRUN_FLAGS="--oversubscribe"
[ "$(id -u)" -eq 0 ] && MPIRUN_FLAGS="$MPIRUN_FLAGS --allow-run-as-root"
mpirun $MPIRUN_FLAGS -np 8 "$BIN/weft-run" "$OUT/bundle" \
  --data "$OUT/tokens.bin" --steps 200 --metrics "$OUT/metrics.jsonl"
