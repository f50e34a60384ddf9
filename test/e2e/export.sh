#!/bin/bash
# weft-export end to end (registered by CMakeLists.txt):
#   export.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR
#             WEFT_EXPORT REFERENCE_PY PRESET_DIR MODEL
# Trains MODEL serially for 8 steps (checkpoints at 7 and 8), exports step 7
# and requires the independent numpy forward (test/reference/numpy_reference.py)
# on the exported weights and step 8's batch to equal weft-run's step-8 loss to
# relative 1e-6: that loss is computed from exactly the step-7 weights, so no
# step-0 checkpoint is needed, and trained weights (unlike the near-uniform
# initialization) make the loss sensitive to every detail of the model. Also checks the safetensors layout and
# that a damaged checkpoint is refused with one line and exit 2.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 export=$7 reference=$8
presets=$9 model=${10}
work=$1/export-$model
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
if ! python3 -c 'import numpy' 2>/dev/null; then
  python3 -m pip install -q numpy >pip.log 2>&1 ||
    { echo "SKIPPED: numpy unavailable ($(tail -n 1 pip.log))"; exit 0; }
fi
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model "$model" --cluster "$clusters/cpu-sim-1.json" \
  --global-batch 4 --seq-len 32 --lr 1e-2 --warmup-steps 2 --decay-steps 20 \
  --dp 1 --micro-batch 4 -o bundle || fail "weftc compile"
timeout 120 "$run" bundle --data tokens.bin --steps 8 --checkpoint-dir ck \
  --checkpoint-every 7 --metrics run.jsonl --quiet || fail "weft-run exited $?"
"$export" bundle ck/step-7 -o model.safetensors || fail "weft-export exited $?"
[ ! -e model.safetensors.tmp ] || fail "temporary file left behind"

ref=$(python3 "$reference" --config "$presets/$model.json" \
  --weights model.safetensors --tokens tokens.bin --step 8 --batch 4 \
  --seq-len 32) || fail "reference: $ref"
python3 - run.jsonl "$ref" model.safetensors <<'PY' || fail "checks"
import json, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1])]
ref = float(sys.argv[2])
print(f"weft-run step-8 loss {losses[7]!r}, numpy fp64 reference {ref!r}")
assert abs(losses[7] - ref) <= 1e-6 * abs(ref), "losses differ"
# Layout details the reference's loader does not pin down.
blob = open(sys.argv[3], "rb").read()
n = int.from_bytes(blob[:8], "little")
header = json.loads(blob[8:8 + n])
names = [k for k in header if k != "__metadata__"]
assert names == sorted(names), "keys not sorted"
assert all(header[k]["dtype"] == "F32" for k in names)
assert "lm_head.weight" not in header or "transformer.wte.weight" not in header
shape = {k: header[k]["shape"] for k in names}
if "model.layers.0.mlp.gate_proj.weight" in shape:  # nn.Linear is [out, in]
    assert shape["model.layers.0.mlp.gate_proj.weight"] == [176, 64], shape
    assert shape["model.layers.0.self_attn.k_proj.weight"] == [32, 64], shape
PY

cp -r ck/step-7 damaged && truncate -s 1000 damaged/rank-0.bin
"$export" bundle damaged -o bad.safetensors 2>err.txt
rc=$?
[ $rc -eq 2 ] || fail "damaged checkpoint: exit $rc, expected 2"
[ "$(wc -l <err.txt)" -eq 1 ] && grep -q "damaged/rank-0.bin" err.txt ||
  fail "damaged checkpoint message: $(cat err.txt)"
[ ! -e bad.safetensors ] || fail "wrote an output for a damaged checkpoint"
echo "PASS: export $model"
