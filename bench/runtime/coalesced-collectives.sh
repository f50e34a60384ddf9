#!/usr/bin/env bash
# Coalesced DP collectives against a baseline build, in one run:
#  1. weft-inspect's simulated step and the stored collective instructions
#     of gpt2-medium on 64 GPUs over 8 DGX nodes (bf16, 2 micro-batches),
#     ZeRO 0-3, compiled by each build's weftc;
#  2. the CPU backend's step time (2 ranks, gpt2-tiny, DP2, sequence 64,
#     8 micro-batches, 30 steps; mean step_time_s of steps 6-30), each
#     build's weftc and weft-run, alternately, two rounds.
# Usage: bench/runtime/coalesced-collectives.sh BASELINE_BUILD NEW_BUILD
set -euo pipefail
base=$(realpath "$1") new=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "## simulated gpt2-medium DP64 (8 x dgx-a100-80g)"
echo "| zero | build | collectives | instructions | planned ms | simulated ms |"
echo "|---|---|---:|---:|---:|---:|"
for z in 0 1 2 3; do
  for b in base new; do
    dir=$out/$b-z$z bin=${!b}/bin
    "$bin/weftc" compile --model gpt2-medium --cluster dgx-a100-80g:8 \
      --global-batch 256 --seq-len 1024 --dp 64 --micro-batch 2 --zero "$z" \
      --precision bf16 -o "$dir" >/dev/null
    "$bin/weft-inspect" "$dir" timeline --json >"$dir.json"
    python3 - "$dir/plan.json" "$dir.json" "$z" "$b" <<'PY'
import json, sys
plan, timeline = (json.load(open(p)) for p in sys.argv[1:3])
ops = [i.get("op") for p in plan["programs"] for s in p["streams"]
       for i in s["instructions"]]
coll = sum(o in ("all_reduce", "reduce_scatter", "all_gather") for o in ops)
print(f"| {sys.argv[3]} | {sys.argv[4]} | {coll} | {len(ops)} | "
      f"{timeline['planned_step_time_s']*1e3:.1f} | "
      f"{timeline['simulated_step_time_s']*1e3:.1f} |")
PY
  done
done

echo
echo "## CPU backend, gpt2-tiny DP2, 8 micro-batches (ms per step, steps 6-30)"
"$new/bin/weft-make-tokens" "$root/data/corpus.txt" "$out/tokens.bin" >/dev/null
for z in 1 2 3; do
  for round in 1 2; do
    for b in base new; do
      dir=$out/cpu-$b-z$z bin=${!b}/bin
      [ -d "$dir" ] || "$bin/weftc" compile --model gpt2-tiny \
        --cluster "$root/test/lit/weftc/Inputs/cpu-sim-2.json" --global-batch 16 \
        --seq-len 64 --dp 2 --micro-batch 1 --zero "$z" -o "$dir" >/dev/null
      mpirun --allow-run-as-root --oversubscribe -np 2 "$bin/weft-run" "$dir" \
        --data "$out/tokens.bin" --steps 30 --quiet --metrics "$dir.jsonl" >/dev/null
      python3 - "$dir.jsonl" "$z" "$b" "$round" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["step_time_s"] for r in rows[5:30]]
print(f"zero {sys.argv[2]} {sys.argv[3]} round {sys.argv[4]}: "
      f"{1e3*sum(t)/len(t):.1f} ms, loss at step 30 {rows[-1]['loss']:.4f}")
PY
    done
  done
done
