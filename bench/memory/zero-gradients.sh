#!/usr/bin/env bash
# Memory benchmark: the planned device bytes of ZeRO 1-3 plans (bf16, DP on
# one node: 8 GPUs for GPT-2 small, 4 for medium; 4 micro-batches per
# replica), per role program from plan.json: persistent, arena, and their
# sum, of the most loaded role; with a
# baseline build, the same plans compiled by it and the ratio new/baseline
# of the sum (the arena is where ZeRO-2/3's gradients live).
#
#   bench/memory/zero-gradients.sh [BUILD_DIR [BASELINE_BUILD_DIR]]
#
# Defaults: build, no baseline. WEFT_SEQ_LEN (256) sets the sequence length.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
BASE=${2:-}
SEQ=${WEFT_SEQ_LEN:-256}
WORK=$(mktemp -d /tmp/weft-zero-gradients.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
# One node of DP simulated GPUs.
for dp in 4 8; do
  python3 - "$WORK/cluster-$dp.json" "$dp" <<'PY'
import json, sys
cluster = json.load(open("examples/clusters/cpu-sim-2.json"))
cluster.update(name=f"cpu-sim-{sys.argv[2]}", gpus_per_node=int(sys.argv[2]))
json.dump(cluster, open(sys.argv[1], "w"))
PY
done

# Prints "persistent arena" of the most loaded role (MiB).
bytes_of() {
  python3 - "$1/plan.json" <<'PY'
import json, sys
programs = json.load(open(sys.argv[1]))["programs"]
worst = max(programs, key=lambda p: p["persistent_bytes"] + p["arena_bytes"])
print(worst["persistent_bytes"] / 2**20, worst["arena_bytes"] / 2**20)
PY
}

compile() { # WEFTC OUT MODEL DP ZERO
  "$1" compile --model "$3" --cluster "$WORK/cluster-$4.json" --dp "$4" \
    --zero "$5" --global-batch $((4 * $4)) --micro-batch 1 --seq-len "$SEQ" \
    --precision bf16 -o "$2" >/dev/null
}

if [ -n "$BASE" ]; then
  echo "| model | DP | ZeRO | persistent MiB | arena MiB | total MiB | baseline arena MiB | baseline total MiB | total ratio |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
else
  echo "| model | DP | ZeRO | persistent MiB | arena MiB | total MiB |"
  echo "|---|---:|---:|---:|---:|---:|"
fi
for case in "gpt2 8" "gpt2-medium 4"; do
  read -r model dp <<<"$case"
  for zero in 1 2 3; do
    compile "$BUILD/bin/weftc" "$WORK/new" "$model" "$dp" "$zero"
    read -r persistent arena < <(bytes_of "$WORK/new")
    row=$(python3 -c "print(f'| $model | $dp | $zero | {$persistent:.1f} | {$arena:.1f} | {$persistent + $arena:.1f} |', end='')")
    if [ -n "$BASE" ]; then
      compile "$BASE/bin/weftc" "$WORK/base" "$model" "$dp" "$zero"
      read -r bp ba < <(bytes_of "$WORK/base")
      row+=$(python3 -c "print(f' {$ba:.1f} | {$bp + $ba:.1f} | {($persistent + $arena) / ($bp + $ba):.2f} |', end='')")
    fi
    echo "$row"
  done
done
