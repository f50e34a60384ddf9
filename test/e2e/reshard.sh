#!/bin/bash
# weft-reshard end to end (registered by CMakeLists.txt):
#   reshard.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#              WEFT_RESHARD MODEL LAYOUT_A LAYOUT_B
# Trains MODEL 8 steps serially (the reference), 4 steps under LAYOUT_A with a
# checkpoint, converts that checkpoint to LAYOUT_B with weft-reshard, resumes
# under LAYOUT_B to step 8 and requires the losses of steps 5-8 to equal the
# reference's to relative 1e-5. The same resume from a conversion that drops
# the AdamW moments (the test hook WEFT_TEST_RESHARD_DROP_MOMENTS) must differ
# by more than 1e-4, so the comparison can fail. Also: a checkpoint of another
# model is one error line, exit 2, and nothing written; an existing output
# step is refused.
#
# Layouts (ranks = dp x pp x tp; global batch 4 in every one):
#   serial      one rank, one micro-batch of 4
#   tp2         TP 2
#   pp2         PP 2, 1F1B, micro-batches of 1
#   tp2-pp2     TP 2 x PP 2, 1F1B
#   dp2         DP 2
#   dp2-zero1   DP 2 with ZeRO-1 (sharded master weights and moments)
#   dp2-zero2   DP 2 with ZeRO-2 (and sharded gradients)
#   dp2-zero3   DP 2 with ZeRO-3 (and sharded parameters), 2 micro-batches
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 reshard=$7 model=$8
layout_a=$9 layout_b=${10}
work=$1/reshard-$model-$layout_a-$layout_b
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
flags_of() { # LAYOUT -> "RANKS FLAGS..."
  case $1 in
  serial) echo "1 --dp 1 --micro-batch 4" ;;
  tp2) echo "2 --tp 2 --dp 1 --micro-batch 4" ;;
  pp2) echo "2 --pp 2 --dp 1 --micro-batch 1 --schedule 1f1b" ;;
  tp2-pp2) echo "4 --tp 2 --pp 2 --dp 1 --micro-batch 1 --schedule 1f1b" ;;
  dp2) echo "2 --dp 2 --micro-batch 2" ;;
  dp2-zero1) echo "2 --dp 2 --zero 1 --micro-batch 2" ;;
  dp2-zero2) echo "2 --dp 2 --zero 2 --micro-batch 2" ;;
  dp2-zero3) echo "2 --dp 2 --zero 3 --micro-batch 1" ;;
  *) fail "unknown layout '$1'" ;;
  esac
}
compile() { # NAME MODEL LAYOUT
  local spec ranks
  spec=$(flags_of "$3") || exit 1
  ranks=${spec%% *}
  # shellcheck disable=SC2086 # the layout's flags are words
  "$weftc" compile --model "$2" --cluster "$clusters/cpu-sim-$ranks.json" \
    --global-batch 4 --seq-len 32 --lr 1e-2 --warmup-steps 2 \
    --decay-steps 20 ${spec#* } -o "$1" >/dev/null || fail "weftc compile $1"
  echo "$ranks" >"$1.ranks"
}
train() { # BUNDLE STEPS CHECKPOINT_DIR METRICS [weft-run flags...]
  local bundle=$1 steps=$2 ck=$3 metrics=$4
  shift 4
  timeout 120 mpirun --allow-run-as-root --oversubscribe \
    -np "$(cat "$bundle.ranks")" "$run" "$bundle" --data tokens.bin \
    --steps "$steps" --checkpoint-dir "$ck" --metrics "$metrics" --quiet \
    "$@" || fail "weft-run $bundle exited $?"
}
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
compile reference "$model" serial
compile a "$model" "$layout_a"
compile b "$model" "$layout_b"
train reference 8 reference.ck reference.jsonl
train a 4 a.ck a.jsonl

"$reshard" a a.ck/step-4 b b.ck >reshard.log || fail "weft-reshard exited $?"
grep -q "wrote b.ck/step-4" reshard.log || fail "weft-reshard: $(cat reshard.log)"
train b 8 b.ck b.jsonl --resume
WEFT_TEST_RESHARD_DROP_MOMENTS=1 "$reshard" a a.ck b dropped.ck >/dev/null ||
  fail "weft-reshard (moments dropped) exited $?"
train b 8 dropped.ck dropped.jsonl --resume

python3 - "$layout_a" "$layout_b" <<'PY' || fail "losses"
import json, sys
load = lambda n: [json.loads(l) for l in open(n)]
ref, a, b, dropped = (load(n + ".jsonl") for n in ("reference", "a", "b", "dropped"))
assert [r["step"] for r in a] == [1, 2, 3, 4], a
assert [r["step"] for r in b] == [5, 6, 7, 8], b
rel = lambda x, y: abs(x["loss"] - y["loss"]) / abs(x["loss"])
worst = max(rel(x, y) for x, y in zip(ref, a))
assert worst <= 1e-5, f"{sys.argv[1]} steps 1-4 differ from serial by {worst:.2e}"
worst = 0.0
for x, y in zip(ref[4:], b):
    worst = max(worst, rel(x, y))
    assert rel(x, y) <= 1e-5, f"step {y['step']}: serial {x['loss']} resharded {y['loss']}"
lost = max(rel(x, y) for x, y in zip(ref[4:], dropped))
print(f"{sys.argv[1]} -> {sys.argv[2]}: steps 5-8 max relative loss difference "
      f"{worst:.2e} (moments dropped: {lost:.2e})")
assert lost > 1e-4, f"dropping the AdamW moments changed the losses by only {lost:.2e}"
PY

# A checkpoint of another model: one line, exit 2, nothing written.
other=llama-tiny
[ "$model" = llama-tiny ] && other=gpt2-tiny
compile other "$other" "$layout_b"
"$reshard" a a.ck/step-4 other other.ck >out.txt 2>err.txt
rc=$?
[ $rc -eq 2 ] || fail "other model: exit $rc, expected 2"
[ "$(wc -l <err.txt)" -eq 1 ] && grep -q "a different model" err.txt ||
  fail "other model message: $(cat err.txt)"
[ ! -e other.ck ] || fail "other model: wrote $(ls -R other.ck)"
echo "other model: $(cat err.txt)"
# An existing step is never replaced.
"$reshard" a a.ck/step-4 b b.ck 2>err.txt >/dev/null
rc=$?
[ $rc -eq 2 ] && grep -q "already exists" err.txt ||
  fail "existing output: exit $rc: $(cat err.txt)"
echo "PASS: reshard $model $layout_a -> $layout_b"
