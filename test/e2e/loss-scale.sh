#!/bin/bash
# Dynamic loss scaling of a compiled fp16 plan (registered by CMakeLists.txt):
#   loss-scale.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#                 LAYOUT [WEFT_RESHARD]
# Compiles gpt2-tiny in fp16 with the loss scale starting at 2^24, far above
# what f16 gradients hold (65504), and a growth window of 5 steps, and trains
# 16 steps under LAYOUT (serial, or dp2-zero1: both ranks must agree on every
# skip). Required (docs/runtime.md, "Loss scaling"):
# - the first steps overflow and are skipped, the scale halving each time,
#   until it fits; then steps apply and the scale doubles every 5 of them;
# - a skipped step leaves the weights alone: the loss of every step up to and
#   including the first applied one equals, bit for bit, that of the same plan
#   compiled with lr 0 (weights never change), and afterwards they differ;
# - the loss falls once steps apply;
# - a checkpoint taken while backing off, resumed, continues bit for bit;
# - with WEFT_RESHARD (serial only): that checkpoint converted to DP 2 ZeRO-1
#   keeps the scaler's state: resumed there, the scale follows the same
#   sequence and the losses stay within 2e-3 of the serial run.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 layout=$7 reshard=${8:-}
case $layout in
serial) ranks=1 flags="--dp 1 --micro-batch 4" ;;
dp2-zero1) ranks=2 flags="--dp 2 --zero 1 --micro-batch 2" ;;
*) echo "FAIL: unknown layout '$layout'"; exit 1 ;;
esac
work=$1/loss-scale-$layout
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
compile() { # NAME LR
  # shellcheck disable=SC2086 # the layout's flags are words
  "$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --precision fp16 \
    --initial-loss-scale 16777216 --loss-scale-window 5 --lr "$2" \
    --warmup-steps 2 --decay-steps 20 $flags -o "$1" >/dev/null \
    || fail "weftc compile $1"
}
train() { # BUNDLE METRICS STEPS [ARGS...]
  local bundle=$1 metrics=$2 steps=$3; shift 3
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$run" \
    "$bundle" --data tokens.bin --steps "$steps" --metrics "$metrics" --quiet \
    "$@" || fail "weft-run $bundle exited $?"
}
compile scaled 3e-3
compile frozen 0
train scaled scaled.jsonl 16
train frozen frozen.jsonl 16
train scaled first.jsonl 4 --checkpoint-dir ck --checkpoint-every 4
train scaled resumed.jsonl 16 --checkpoint-dir ck --resume
python3 - <<'PY' || fail "loss scaling misbehaved"
import json
load = lambda n: [json.loads(l) for l in open(n)]
scaled, frozen = load("scaled.jsonl"), load("frozen.jsonl")
skipped = [m["step"] for m in scaled if m["skipped"]]
assert skipped and skipped == list(range(1, len(skipped) + 1)), skipped
assert len(skipped) < 12, f"never stopped overflowing: {skipped}"
for m in scaled:
    s = m["step"]
    if s <= len(skipped):
        want = 16777216 / 2 ** (s - 1)
    else:
        applied_before = s - 1 - len(skipped)
        want = 16777216 / 2 ** len(skipped) * 2 ** (applied_before // 5)
    assert m["loss_scale"] == want, (s, m["loss_scale"], want)
    assert (m["grad_norm"] is None) == m["skipped"], m
first_applied = len(skipped) + 1
for a, b in zip(scaled, frozen):
    if a["step"] <= first_applied:
        assert a["loss"] == b["loss"], f"step {a['step']}: weights moved"
assert scaled[-1]["loss"] < frozen[-1]["loss"] - 0.3, "did not train"
first = load("first.jsonl") + load("resumed.jsonl")
assert [(m["step"], m["loss"], m["loss_scale"]) for m in first] == \
       [(m["step"], m["loss"], m["loss_scale"]) for m in scaled], \
       "the resumed run differs"
print(f"{len(skipped)} steps skipped, scale {scaled[-1]['loss_scale']:g} "
      f"at step {scaled[-1]['step']}, loss {scaled[0]['loss']:.3f} -> "
      f"{scaled[-1]['loss']:.3f}; resumed from step 4 bit for bit")
PY
if [ -n "$reshard" ] && [ "$layout" = serial ]; then
  ranks=2 flags="--dp 2 --zero 1 --micro-batch 2"
  compile dp2 3e-3
  "$reshard" scaled ck/step-4 dp2 ck-dp2 >/dev/null || fail "weft-reshard"
  train dp2 dp2.jsonl 16 --checkpoint-dir ck-dp2 --resume
  python3 - <<'PY' || fail "the resharded run lost the scaler's state"
import json
load = lambda n: [json.loads(l) for l in open(n)]
scaled, moved = load("scaled.jsonl")[4:], load("dp2.jsonl")
assert [m["loss_scale"] for m in moved] == [m["loss_scale"] for m in scaled]
worst = max(abs(a["loss"] - b["loss"]) / a["loss"] for a, b in zip(scaled, moved))
assert worst <= 2e-3, worst
print(f"resharded to DP 2 ZeRO-1 at step 4: same scale sequence, loss within "
      f"{worst:.1e}")
PY
fi
echo "PASS: fp16 dynamic loss scaling, $layout"
