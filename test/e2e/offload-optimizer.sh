#!/bin/bash
# Optimizer offload (plans with a host region) end to end (registered by
# CMakeLists.txt):
#   offload-optimizer.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC
#                        CLUSTER_DIR WEFT_EXPORT MODEL CASE
# CASE: serial (cpu-sim-1-host), zero1 or bf16-zero2 (DP2; under DP the
# planner offloads only with ZeRO >= 1, each rank stepping its shard), or
# tp2-pp2-dp2-bf16-zero1 (8 ranks, cpu-sim-8-host: the TP and pipeline
# collectives around the offloaded step). The
# same plan is compiled with and without `--offload optimizer`: the math is
# the same, only the placement differs, so every step's loss and grad norm
# must be bit-identical over 10 steps; a checkpoint at step 5 and --resume to
# step 10 must reproduce the straight run; weft-export of the offload run's
# step-10 checkpoint must equal the plain run's byte for byte; plan.json must
# show host_bytes > 0 and fewer persistent bytes than the plain plan.
set -u
work=$1/offload-$8-$9 corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6
export=$7 model=$8 case=$9
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"

ranks=2 cluster=cpu-sim-2-host.json bucket=100000
case $case in
serial) ranks=1 cluster=cpu-sim-1-host.json
  flags="--dp 1 --micro-batch 2" ;;
zero1) flags="--dp 2 --zero 1 --micro-batch 2" ;;
bf16-zero2) flags="--dp 2 --zero 2 --micro-batch 2 --precision bf16" ;;
tp2-pp2-dp2-bf16-zero1) ranks=8 cluster=cpu-sim-8-host.json bucket=20000
  flags="--tp 2 --pp 2 --dp 2 --zero 1 --micro-batch 1 --precision bf16" ;;
*) fail "unknown case $case" ;;
esac
mpi() {
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$@"
}
# Buckets of 100000 bytes (20000 for the 8-rank case's smaller shards): the
# offloaded AdamW runs in several buckets, each bucket's weights copied back
# while the next one steps.
compile() {
  "$weftc" compile --model "$model" --cluster "$clusters/$cluster" \
    --global-batch 4 --seq-len 32 --warmup-steps 2 --bucket-bytes $bucket \
    $flags "$@" || fail "weftc compile $*"
}
compile -o plain
compile --offload optimizer -o offload

# The offload plan keeps optimizer state in host memory.
sizes() {
  python3 -c 'import json,sys
p = json.load(open(sys.argv[1]))["programs"][0]
print(p["persistent_bytes"], p.get("host_bytes", 0))' "$1/plan.json"
}
read -r plain_persistent plain_host <<<"$(sizes plain)" || fail "plain sizes"
read -r off_persistent off_host <<<"$(sizes offload)" || fail "offload sizes"
[ "$plain_host" -eq 0 ] || fail "plain plan has host_bytes $plain_host"
[ "$off_host" -gt 0 ] || fail "offload plan has host_bytes $off_host"
[ "$off_persistent" -lt "$plain_persistent" ] ||
  fail "offload persistent_bytes $off_persistent >= plain $plain_persistent"
grep -q '"region": *"host"' offload/plan.json || fail "no host buffer"
# The copies are overlapped (weft-overlap-offload): the gradients go to the
# host on a `d2h` stream as their slots become final, the weights come back
# bucket by bucket on `h2d`; AdamW runs in more than one bucket.
python3 - offload/plan.json <<'PY' || fail "offload plan layout"
import json, sys
p = json.load(open(sys.argv[1]))["programs"][0]
streams = {s["name"]: s["instructions"] for s in p["streams"]}
assert "d2h" in streams and "h2d" in streams, sorted(streams)
steps = sum(i.get("op") == "optimizer_step" for i in streams["compute"])
d2h = sum(i.get("op") == "copy" for i in streams["d2h"])
h2d = sum(i.get("op") == "copy" for i in streams["h2d"])
assert steps > 1 and h2d == steps and d2h > steps, (steps, d2h, h2d)
print(f"offload: {steps} AdamW buckets, {d2h} gradient copies, {h2d} weight copies")
PY

common="--data tokens.bin --quiet --steps 10"
mpi "$run" plain $common --metrics plain.jsonl --checkpoint-dir plain-ck \
  --checkpoint-every 5 --save-weights-every 5 || fail "plain run exited $?"
mpi "$run" offload $common --metrics offload.jsonl --checkpoint-dir off-ck \
  --checkpoint-every 5 || fail "offload run exited $?"
# step, loss, grad norm of every step
cut -d, -f1-3 plain.jsonl >plain.txt
cut -d, -f1-3 offload.jsonl >offload.txt
[ "$(wc -l <plain.txt)" -eq 10 ] || fail "expected 10 steps: $(cat plain.txt)"
grep -q grad_norm plain.txt || fail "no grad norm in the metrics"
if ! cmp -s plain.txt offload.txt; then
  diff plain.txt offload.txt | head -6
  fail "offload losses or grad norms differ from the plain plan"
fi

# Resume the offload run from its step-5 checkpoint: bit-identical.
mkdir resume-ck && cp -r off-ck/step-5 resume-ck/ || fail "copy step-5"
mpi "$run" offload $common --metrics resumed.jsonl --checkpoint-dir resume-ck \
  --checkpoint-every 5 --resume || fail "resumed run exited $?"
sed -n 6,10p offload.txt >tail.txt
cut -d, -f1-3 resumed.jsonl >resumed.txt
cmp -s tail.txt resumed.txt || { diff tail.txt resumed.txt | head -6
  fail "resumed offload run differs"; }
for ((r = 0; r < ranks; ++r)); do
  cmp off-ck/step-10/rank-$r.bin resume-ck/step-10/rank-$r.bin ||
    fail "resumed step-10 rank-$r.bin differs"
done

# The exported model is the same whichever region held the master weights.
"$export" plain plain-ck/step-10 -o plain.safetensors >/dev/null ||
  fail "weft-export plain"
"$export" offload off-ck/step-10 -o offload.safetensors >/dev/null ||
  fail "weft-export offload"
cmp plain.safetensors offload.safetensors || fail "exports differ"

# Offloading every state group between steps moves only device bytes (the
# host region stays put) and changes nothing; a weights snapshot of the
# offload plan exports like the plain plan's snapshot (and, for fp32, like
# the full checkpoint: the working copy equals the master).
mpi "$run" offload $common --metrics moved.jsonl --checkpoint-dir moved-ck \
  --checkpoint-every 5 --save-weights-every 5 --offload-between-steps all \
  || fail "offload-between-steps run exited $?"
cut -d, -f1-3 moved.jsonl >moved.txt
cmp -s offload.txt moved.txt || fail "--offload-between-steps changed results"
for ((r = 0; r < ranks; ++r)); do
  cmp off-ck/step-10/rank-$r.bin moved-ck/step-10/rank-$r.bin ||
    fail "--offload-between-steps changed step-10 rank-$r.bin"
done
"$export" offload moved-ck/weights-10 -o weights.safetensors >/dev/null ||
  fail "weft-export of weights-10"
"$export" plain plain-ck/weights-10 -o plain-weights.safetensors \
  >/dev/null || fail "weft-export of the plain weights-10"
cmp plain-weights.safetensors weights.safetensors ||
  fail "the weights snapshots export differently"
if [[ "$case" != *bf16* ]]; then
  cmp offload.safetensors weights.safetensors ||
    fail "the fp32 weights snapshot exports unlike the full checkpoint"
fi
echo "PASS: offload-optimizer $model $case"
