#!/bin/bash
# End-to-end `weftc compile` (registered by CMakeLists.txt):
#   compile.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#              [MODEL [ZERO]]
# Compiles MODEL (default gpt2-tiny) serially (one micro-batch of 4) and for
# DP2 with ZeRO stage ZERO (default 0; micro-batch 1 x 2 accumulation steps,
# the same global batch), trains 8 steps of each on the corpus and requires
# the loss to fall and DP2 to match serial at every step to relative 1e-5
# (the data order does not depend on the layout).
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 model=${7:-gpt2-tiny}
zero=${8:-0}
work=$1/compile-$model-zero$zero
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
compile() { # NAME RANKS FLAGS...
  local name=$1 ranks=$2; shift 2
  "$weftc" compile --model "$model" --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --lr 1e-2 --warmup-steps 2 \
    --decay-steps 20 "$@" -o "$name" || fail "weftc compile $name"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$run" \
    "$name" --data tokens.bin --steps 8 --metrics "$name.jsonl" \
    || fail "weft-run $name exited $?"
}
compile serial 1 --dp 1 --micro-batch 4
compile dp2 2 --dp 2 --micro-batch 1 --zero "$zero"
python3 - serial.jsonl dp2.jsonl <<'PY' || fail "losses"
import json, sys
serial, dp2 = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert len(serial) == len(dp2) == 8, (serial, dp2)
assert serial[-1] < serial[0] - 1.0, f"loss did not fall: {serial}"
for step, (a, b) in enumerate(zip(serial, dp2), 1):
    assert abs(a - b) <= 1e-5 * abs(a), f"step {step}: serial {a} dp2 {b}"
print("serial", serial, "\ndp2   ", dp2)
PY
# Utilization and memory per step: MFU x step time is the planner's MFU x its
# step time (the same model FLOPs and peak), and the memory in use is the
# most any rank's program plans (arena + persistent), each region rounded up
# to whole 4 KiB pages by the CPU backend.
python3 - dp2.jsonl dp2/plan.json <<'PY' || fail "utilization"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1])]
bundle = json.load(open(sys.argv[2]))
predicted = bundle["prediction"]
page = lambda n: -(-max(n, 1) // 4096) * 4096
planned = max(page(p["arena_bytes"]) + page(p["persistent_bytes"])
              for p in bundle["programs"])
for s in steps:
    assert s["memory_bytes"] == planned, (s["memory_bytes"], planned)
    want = predicted["mfu"] * predicted["step_time_s"]
    got = s["mfu"] * s["step_time_s"]
    assert abs(got - want) <= 1e-9 * want, (got, want)
    assert s["tflops_per_rank"] > 0
    # The host's share: issuing (the whole step on the CPU backend) and the
    # statistics after the device finished, both within the step.
    assert 0 < s["issue_s"] and 0 < s["finish_s"], s
    assert s["issue_s"] + s["finish_s"] <= s["step_time_s"], s
print("memory", planned, "bytes; MFU", [round(s["mfu"], 5) for s in steps])
PY
"$(dirname "$0")/out-of-vocabulary.sh" "$run" serial 1 || fail "out of vocabulary"
echo "PASS: compile $model zero $zero"
