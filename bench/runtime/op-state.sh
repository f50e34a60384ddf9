#!/usr/bin/env bash
# Op state (docs/autodiff.md): grad ops that read the forward's (or the
# re-run's) norm statistics, q, k, v, context, lse and MLP hidden state
# instead of recomputing them, against a baseline build, in one run:
#  1. the compiled plan of GPT-2 124M, bf16, one H100, micro-batch 32 x
#     seq 1024 (the GPU benchmark's shape), recompute none and full: backward GEMM
#     FLOPs, attention_forward launches, arena bytes, the planner's step
#     and weft-inspect's simulated step, by each build's weftc;
#  2. gpt2-medium on 64 GPUs (8 x dgx-a100-80g), ZeRO 0-3: planned and
#     simulated step (planner-vs-simulator.test's layouts);
#  3. the CPU backend's step time (1 rank, bench/runtime/Inputs/
#     gpt2-cpu-small.json: h 256, 4 layers; micro-batch 4 x seq 256,
#     mean step_time_s of steps 3-12; recompute none and full), each
#     build's weftc and weft-run,
#     alternately, three rounds, and the losses of both.
# Usage: bench/runtime/op-state.sh BASELINE_BUILD NEW_BUILD
set -euo pipefail
base=$(realpath "$1") new=$(realpath "$2")
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "## GPT-2 124M bf16, h100-1gpu, micro-batch 32 x 1024"
echo "| recompute | build | bwd GEMM TFLOP | attention_forward | arena GiB | planned ms | simulated ms |"
echo "|---|---|---:|---:|---:|---:|---:|"
for rc in none full; do
for b in base new; do
  dir=$out/gpt2-$rc-$b bin=${!b}/bin
  "$bin/weftc" compile --model gpt2 --cluster h100-1gpu --global-batch 32 \
    --seq-len 1024 --micro-batch 32 --precision bf16 --recompute "$rc" \
    -o "$dir" >/dev/null
  "$bin/weft-inspect" "$dir" timeline --json >"$dir.json"
  python3 - "$dir/plan.json" "$dir.json" "$rc | $b" <<'PY'
import json, sys
plan, timeline = (json.load(open(p)) for p in sys.argv[1:3])
program = plan["programs"][0]
ins = [i for s in program["streams"] for i in s["instructions"]]
bwd = sum(2.0 * i["m"] * i["n"] * i["k"] for i in ins
          if i.get("op") == "gemm" and i.get("phase", "").startswith("bwd"))
names = {k["id"]: k["name"] for k in plan["kernels"]}
attn = sum(i.get("op") == "kernel" and
           names[i["kernel"]].startswith("attention_forward") for i in ins)
print(f"| {sys.argv[3]} | {bwd / 1e12:.3f} | {attn} | "
      f"{program['arena_bytes'] / 2**30:.2f} | "
      f"{timeline['planned_step_time_s'] * 1e3:.1f} | "
      f"{timeline['simulated_step_time_s'] * 1e3:.1f} |")
PY
done
done

echo
echo "## simulated gpt2-medium DP64 (8 x dgx-a100-80g), bf16, micro-batch 2"
echo "| zero | build | planned ms | simulated ms |"
echo "|---|---|---:|---:|"
for z in 0 1 2 3; do
  for b in base new; do
    dir=$out/medium-$b-z$z bin=${!b}/bin
    "$bin/weftc" compile --model gpt2-medium --cluster dgx-a100-80g:8 \
      --global-batch 256 --seq-len 1024 --dp 64 --micro-batch 2 --zero "$z" \
      --precision bf16 -o "$dir" >/dev/null
    "$bin/weft-inspect" "$dir" timeline --json >"$dir.json"
    python3 - "$dir.json" "$z" "$b" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
print(f"| {sys.argv[2]} | {sys.argv[3]} | {t['planned_step_time_s']*1e3:.1f} | "
      f"{t['simulated_step_time_s']*1e3:.1f} |")
PY
  done
done

echo
echo "## CPU backend, 1 rank, gpt2-cpu-small (ms per step, steps 3-12)"
"$new/bin/weft-make-tokens" "$root/data/corpus.txt" "$out/tokens.bin" >/dev/null
for rc in none full; do
for round in 1 2 3; do
  for b in base new; do
    dir=$out/cpu-$rc-$b bin=${!b}/bin
    [ -d "$dir" ] || "$bin/weftc" compile \
      --model "$root/bench/runtime/Inputs/gpt2-cpu-small.json" \
      --cluster "$root/test/lit/weftc/Inputs/cpu-sim-1.json" \
      --global-batch 4 --seq-len 256 --micro-batch 4 --recompute "$rc" \
      -o "$dir" >/dev/null
    "$bin/weft-run" "$dir" --data "$out/tokens.bin" --steps 12 --quiet \
      --metrics "$dir.jsonl" >/dev/null
    python3 - "$dir.jsonl" "$rc $b" "$round" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["step_time_s"] for r in rows[2:12]]
first = " ".join("%.6f" % r["loss"] for r in rows[:3])
print(f"{sys.argv[2]} round {sys.argv[3]}: {1e3*sum(t)/len(t):.1f} ms, "
      f"losses {first} ... {rows[-1]['loss']:.6f}")
PY
  done
done
done
