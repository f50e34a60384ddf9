#!/bin/bash
# A diverging run stops at the first non-finite loss on every rank, with one
# error line and no hang (registered by CMakeLists.txt):
#   nan-loss.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
# GPT-2 tiny with learning rate 1e6 and no clipping overflows by step 3.
set -u
work=$1/nan-loss corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
for ranks in 1 2; do
  "$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --dp "$ranks" --micro-batch $((4 / ranks)) \
    --lr 1e6 --grad-clip 0 --warmup-steps 1 -o "bundle$ranks" ||
    fail "weftc compile"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$run" \
    "bundle$ranks" --data tokens.bin --steps 20 --metrics "m$ranks.jsonl" \
    >out.txt 2>err.txt
  rc=$?
  cat err.txt
  [ $rc -ne 0 ] || fail "$ranks ranks: exit status 0"
  [ $rc -ne 124 ] || fail "$ranks ranks: timed out (hang)"
  [ "$(grep -c 'weft-run: error:' err.txt)" -eq 1 ] || fail "not one error line"
  grep -q "the loss is not finite" err.txt || fail "no non-finite loss message"
  steps=$(wc -l <"m$ranks.jsonl")
  [ "$steps" -lt 20 ] || fail "$ranks ranks: ran all 20 steps"
done
echo "PASS: nan-loss"
