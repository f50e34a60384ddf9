#!/bin/bash
# The executor's device paths without a GPU (registered by CMakeLists.txt):
#   cpu-staged.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
# `--backend cpu-staged` is the CPU backend whose regions the executor may
# only reach through the backend's copies, as on CUDA: staged token batches,
# parameters built in host memory and copied, state groups offloaded between
# steps through copies, checkpoints and weights snapshots streamed through
# an 8 MiB host buffer, resumes copied back chunk by chunk. gpt2-tiny bf16
# DP2 x PP2 with ZeRO-1 (4 ranks) must train as on `--backend cpu` bit for
# bit, write byte-identical rank files, and resume from either backend's
# checkpoint to the same step-4 state.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6
work=$1/cpu-staged
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-4.json" \
  --global-batch 8 --seq-len 32 --dp 2 --pp 2 --zero 1 --micro-batch 2 \
  --precision bf16 --lr 3e-3 --warmup-steps 1 -o bundle >/dev/null \
  || fail "weftc compile"
mpi() { timeout 150 mpirun --allow-run-as-root --oversubscribe -np 4 "$run" bundle \
  --data tokens.bin --quiet "$@"; }
for backend in cpu cpu-staged; do
  mpi --backend $backend --steps 4 --checkpoint-dir ck-$backend \
    --checkpoint-every 2 --save-weights-every 4 --offload-between-steps all \
    --metrics $backend.jsonl || fail "weft-run --backend $backend exited $?"
done
python3 - <<'PY' || fail "the staged run's losses differ"
import json
cpu = [json.loads(l) for l in open("cpu.jsonl")]
staged = [json.loads(l) for l in open("cpu-staged.jsonl")]
assert len(cpu) == 4 and len(staged) == 4, (len(cpu), len(staged))
for a, b in zip(cpu, staged):
    assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), (a, b)
print(f"losses equal bit for bit: {cpu[0]['loss']:.6f} -> {cpu[-1]['loss']:.6f}")
PY
for dir in step-2 step-4 weights-4; do
  for r in 0 1 2 3; do
    cmp -s ck-cpu/$dir/rank-$r.bin ck-cpu-staged/$dir/rank-$r.bin ||
      fail "$dir/rank-$r.bin differs between the backends"
  done
done
# Each backend resumes from the other's step-2 checkpoint.
for pair in "cpu cpu-staged" "cpu-staged cpu"; do
  set -- $pair
  mkdir -p resume-$1 && cp -r ck-$2/step-2 resume-$1/ || fail "copy"
  mpi --backend $1 --steps 4 --checkpoint-dir resume-$1 --checkpoint-every 4 \
    --resume || fail "resume on $1 from $2's checkpoint exited $?"
  for r in 0 1 2 3; do
    cmp -s resume-$1/step-4/rank-$r.bin ck-cpu/step-4/rank-$r.bin ||
      fail "resumed on $1 from $2: step-4 rank $r differs"
  done
done
echo "PASS: cpu-staged trains, saves and resumes as cpu (4 ranks, 3 saves each)"
