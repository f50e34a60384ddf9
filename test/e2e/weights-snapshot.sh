#!/bin/bash
# Weights snapshots of compiled ZeRO plans (registered by CMakeLists.txt):
#   weights-snapshot.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC
#                       CLUSTER_DIR WEFT_EXPORT PRECISION ZERO
# Trains gpt2-tiny 3 steps on DP 2 with ZeRO-ZERO in PRECISION, saving a full
# checkpoint and a weights snapshot after step 3. ZeRO-1/2 rebuild the working
# copy by all-gathers at the start of the next step (docs/lowering.md), so
# between steps the replicas still hold step 2's weights: the snapshot must
# hold the shards the optimizer wrote instead (weightsSnapshotLayout,
# docs/runtime.md). Exported, the snapshot must equal the full checkpoint's
# export (fp32: byte for byte; bf16: the fp32 masters rounded to bf16), and
# each rank's snapshot must hold about 1/dp of the working weights.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 export_tool=$7
precision=$8 zero=$9
work=$1/weights-snapshot-$precision-zero$zero
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model gpt2-tiny --cluster "$clusters/cpu-sim-2.json" \
  --global-batch 4 --seq-len 32 --dp 2 --zero "$zero" --micro-batch 1 \
  --precision "$precision" --lr 3e-3 --warmup-steps 1 -o bundle >/dev/null \
  || fail "weftc compile"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$run" bundle \
  --data tokens.bin --steps 3 --checkpoint-dir ck --checkpoint-every 3 \
  --save-weights-every 3 --quiet || fail "weft-run exited $?"
"$export_tool" bundle ck/step-3 -o full.safetensors >/dev/null \
  || fail "weft-export of the checkpoint"
"$export_tool" bundle ck/weights-3 -o weights.safetensors >/dev/null \
  || fail "weft-export of the weights snapshot"
python3 - "$precision" <<'PY' || fail "the weights snapshot is not step 3's"
import json, os, struct, sys
precision = sys.argv[1]
def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        out[name] = struct.unpack(f"<{len(raw) // 4}I", raw)
    return out
def bf16(bits): # round to nearest even, as the runtime stores bf16
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16 & 0xFFFFFFFF
full, snap = load("full.safetensors"), load("weights.safetensors")
assert full.keys() == snap.keys(), (sorted(full), sorted(snap))
for name in full:
    want = full[name] if precision == "fp32" else tuple(map(bf16, full[name]))
    assert snap[name] == want, f"{name}: the snapshot differs from step 3"
# The snapshot holds this rank's shard of the working weights: about half
# the elements of the model at DP 2 (slot padding aside).
params = sum(len(v) for v in full.values())
element = 4 if precision == "fp32" else 2
size = os.path.getsize("ck/weights-3/rank-0.bin")
assert size < 0.6 * params * element, (size, params * element)
print(f"{precision} ZeRO: snapshot of step 3 exported like the checkpoint; "
      f"rank file {size} bytes for {params} parameters")
PY
echo "PASS: weights snapshot, $precision, ZeRO-$zero"
