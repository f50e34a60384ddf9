#!/bin/bash
# Hugging Face transformers as an independent reference (registered by
# CMakeLists.txt):  hf-crosscheck.sh WORK_DIR BUILD_DIR
# Stages gpt2-tiny and llama-tiny (fp32), gpt2-tiny (bf16), llama-tiny
# (fp16) and gpt2-odd (fp32; 263 words: padded logits rows) with scripts/hf-crosscheck.py (weftc compile, weft-run, weft-export)
# and has transformers compute the losses of steps 1 and 8 from the exported
# weights in fp64, and train the 8 steps with torch's AdamW against every
# step's loss (docs/runtime.md, "Export"). Needs torch and transformers
# (`pip install torch transformers`, about 3 GB with torch's CUDA libraries):
# without them it prints one SKIPPED line.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! python3 -c "import torch, transformers" 2>/dev/null; then
  echo "SKIPPED: torch or transformers is not installed (pip install torch transformers)"
  exit 0
fi
out=$1/hf-crosscheck
rm -rf "$out"
python3 "$root/scripts/hf-crosscheck.py" stage --build "$2" --out "$out" \
  || { echo "FAIL: staging"; exit 1; }
python3 "$root/scripts/hf-crosscheck.py" check "$out" 2>&1 \
  | grep -v "^\[transformers\]"
status=${PIPESTATUS[0]}
[ "$status" = 0 ] && echo "PASS: transformers agrees" || echo "FAIL: hf-crosscheck"
exit "$status"
