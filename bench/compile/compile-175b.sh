#!/usr/bin/env bash
# Compile benchmark (issue 4): weftc compile of a 175B GPT (GPT-3 shapes as a
# GPT-2-style config.json) for 1024 ranks, TP8 x PP16 x DP8, micro-batch 1.
# Prints one row per global batch: wall time, peak RSS, plan.json bytes,
# stored and expanded programs, instructions and the per-phase times of
# `weftc compile --timing` (step: weft-optimizer and the overlap passes).
# Targets: < 10 s and plan.json < 50 MB.
#
#   bench/compile/compile-175b.sh [BUILD_DIR] [GLOBAL_BATCH...]
#
# Defaults: build, global batches 64 (8 micro-batches per replica) and 128.
# WEFT_COMPILE_FLAGS adds flags, e.g. "--precision bf16 --zero 1".
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
[ $# -gt 0 ] && shift
BATCHES=(64 128)
[ $# -gt 0 ] && BATCHES=("$@")
WEFTC=$PWD/$BUILD/bin/weftc
[ -x "$WEFTC" ] || { echo "compile-175b: $WEFTC not built" >&2; exit 1; }
WORK=$(mktemp -d /tmp/weft-compile-175b.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cat >"$WORK/gpt3-175b.json" <<'JSON'
{"model_type": "gpt2", "n_embd": 12288, "n_layer": 96, "n_head": 96,
 "vocab_size": 50257, "n_positions": 2048, "tie_word_embeddings": true}
JSON
echo "| global batch (micro-batches per replica) | wall s | peak RSS MB | plan.json MB | stored programs | roles | stored instructions | schedule s | step s | plan-memory s | kernels s | emit s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for batch in "${BATCHES[@]}"; do
  out=$WORK/out-$batch
  /usr/bin/time -f "%e %M" -o "$WORK/time" "$WEFTC" compile \
    --model "$WORK/gpt3-175b.json" --cluster dgx-a100-80g:128 \
    --tp 8 --pp 16 --dp 8 --global-batch "$batch" --seq-len 2048 \
    --micro-batch 1 ${WEFT_COMPILE_FLAGS:-} -o "$out" --timing \
    >/dev/null 2>"$WORK/timing"
  read -r wall rss <"$WORK/time"
  pass() { awk -v name="$1" '$NF == name { print $1; exit }' "$WORK/timing"; }
  # weft-step: weft-optimizer and the overlap passes.
  step=$(awk '$NF ~ /^Weft(Optimizer|Overlap)/ { s += $1 } END { printf "%.4f", s }' \
    "$WORK/timing")
  python3 - "$out/plan.json" "$batch" "$wall" "$rss" "$(pass WeftSchedule)" "$step" \
    "$(pass WeftPlanMemory)" "$(pass WeftGenerateKernels)" \
    "$(pass emit-bundle)" <<'PY'
import json, os, sys
path, batch, wall, rss, sched, step, mem, kern, emit = sys.argv[1:]
manifest = json.load(open(path))
programs = manifest["programs"]
roles = sum(len(p["roles"]) for p in programs)
instructions = sum(len(s["instructions"]) for p in programs for s in p["streams"])
print(f"| {batch} ({int(batch) // 8}) | {float(wall):.1f} | {int(rss) // 1024} "
      f"| {os.path.getsize(path) / 1e6:.1f} | {len(programs)} | {roles} "
      f"| {instructions:,} | {sched} | {step} | {mem} | {kern} | {emit} |")
PY
  rm -rf "$out"
done
