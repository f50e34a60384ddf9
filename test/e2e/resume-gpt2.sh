#!/bin/bash
# Bit-identical resume of a `weftc compile` bundle (registered by
# CMakeLists.txt):
#   resume-gpt2.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
# GPT-2 tiny under DP2 with 2-step accumulation: 8 steps straight against 4
# steps, a checkpoint and --resume to 8; the step/loss/grad-norm strings and
# the final rank files must be identical byte for byte.
set -u
work=$1/resume-gpt2 corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
mpi() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-2.json" \
  --global-batch 8 --seq-len 32 --dp 2 --micro-batch 2 -o bundle \
  || fail "weftc compile"
common="bundle --data tokens.bin --quiet"
mpi "$run" $common --steps 8 --metrics full.jsonl --checkpoint-dir full \
  || fail "uninterrupted run exited $?"
mpi "$run" $common --steps 4 --metrics a.jsonl --checkpoint-dir part \
  || fail "first half exited $?"
mpi "$run" $common --steps 8 --metrics b.jsonl --checkpoint-dir part --resume \
  || fail "resumed run exited $?"
cut -d, -f1-3 full.jsonl >expected.txt
cat a.jsonl b.jsonl | cut -d, -f1-3 >actual.txt
[ "$(wc -l <expected.txt)" -eq 8 ] || fail "expected 8 steps"
cmp expected.txt actual.txt || fail "losses differ after resume"
for f in full/step-8/rank-0.bin full/step-8/rank-1.bin; do
  cmp "$f" "part/step-8/${f##*/}" || fail "final state differs: $f"
done
echo "PASS: resume-gpt2"
