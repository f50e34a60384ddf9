#!/usr/bin/env bash
# The planner's step time against weft-inspect's simulation of the compiled
# plan on the surveyed layouts (docs/benchmarks.md, "Planner against
# simulator"): one row per layout, planned / simulated ms and the
# simulation's difference from the plan. Each layout is `weftc compile ...
# --precision bf16`, then `weft-inspect B timeline --json`.
#
#   bench/inspect/planner-vs-simulator.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$PWD/${1:-build}/bin
[ -x "$BIN/weftc" ] && [ -x "$BIN/weft-inspect" ] ||
  { echo "planner-vs-simulator: weftc and weft-inspect not built in ${1:-build}" >&2; exit 1; }
WORK=$(mktemp -d /tmp/weft-planner-vs-simulator.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo "| layout | planned / simulated ms |"
echo "|---|---|"
row() { # NAME WEFTC-FLAGS...
  local name=$1; shift
  "$BIN/weftc" compile "$@" --precision bf16 -o "$WORK/$name" >/dev/null
  "$BIN/weft-inspect" "$WORK/$name" timeline --json >"$WORK/$name.json"
  python3 - "$name" "$WORK/$name.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[2]))
print(f"| {sys.argv[1]} | {t['planned_step_time_s'] * 1e3:.1f} / "
      f"{t['simulated_step_time_s'] * 1e3:.1f} ({t['difference_fraction'] * 100:+.1f}%) |")
PY
}
dp64=(--model gpt2-medium --cluster dgx-a100-80g:8 --global-batch 256
      --seq-len 1024 --dp 64 --micro-batch 2)
for z in 0 1 2 3; do row "gpt2-medium DP64 ZeRO-$z" "${dp64[@]}" --zero $z; done
row "gpt2-medium DP64 ZeRO-3, depth 1" "${dp64[@]}" --zero 3 --prefetch-depth 1
row "gpt2 DP16 ZeRO-3 (dgx-a100-80g:2, batch 64 x 1024)" --model gpt2 \
  --cluster dgx-a100-80g:2 --global-batch 64 --seq-len 1024 --dp 16 --zero 3
l7=(--model llama-2-7b --cluster dgx-h100-80g:2 --global-batch 64 --seq-len 2048)
row "llama-2-7b TP8 DP2" "${l7[@]}" --tp 8 --dp 2
row "llama-2-7b TP8 DP2 SP" "${l7[@]}" --tp 8 --dp 2 --sequence-parallel on
row "llama-2-7b TP4 PP2 DP2" "${l7[@]}" --tp 4 --pp 2 --dp 2
row "gpt2-medium TP2 DP4 (dgx-a100-80g:1, batch 64 x 1024)" \
  --model gpt2-medium --cluster dgx-a100-80g:1 --global-batch 64 \
  --seq-len 1024 --tp 2 --dp 4
one=(--model gpt2 --cluster h100-1gpu --global-batch 32 --seq-len 1024
     --micro-batch 32 --dp 1)
row "gpt2, h100-1gpu, batch 32" "${one[@]}"
row "the same, --gemm-epilogues --residual-norms" "${one[@]}" \
  --gemm-epilogues --residual-norms
