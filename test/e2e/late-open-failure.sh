#!/bin/bash
# A failure on one rank after the open's validation (here rank 1 cannot
# allocate its regions: its address space is capped) is agreed by every rank:
# rank 0 prints it as one line naming rank 1, the job exits non-zero, nothing
# hangs in step 1's first collective (registered by CMakeLists.txt):
#   late-open-failure.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
# Before 2026-12-02 rank 1 threw alone and, printing nothing (only rank 0
# prints the agreed line), took the job down without a word.
set -u
work=$1/late-open-failure corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
# GPT-2 124M at DP 2: about 1.9 GB of persistent region and 1.6 GB of arena
# per rank, against a 2 GB address space (the binary and its libraries need
# about 1 GB of it).
"$weftc" compile --model gpt2 --cluster "$clusters/cpu-sim-2.json" \
  --global-batch 4 --seq-len 1024 --dp 2 --micro-batch 2 -o bundle >/dev/null ||
  fail "weftc compile"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 sh -c \
  "if [ \"\${OMPI_COMM_WORLD_RANK:-0}\" = 1 ]; then ulimit -v 2000000; fi
   exec \"$run\" bundle --data tokens.bin --steps 1 --quiet" >out.txt 2>err.txt
rc=$?
grep "weft-run" err.txt
[ $rc -ne 0 ] || fail "exit status 0"
[ $rc -ne 124 ] || fail "timed out (hang)"
[ "$(grep -c 'weft-run: error:' err.txt)" -eq 1 ] || fail "not one error line"
grep -q "^weft-run: error: rank 1: cannot allocate the .* region" err.txt ||
  fail "no agreed line naming rank 1's allocation"
echo "PASS: late-open-failure"
