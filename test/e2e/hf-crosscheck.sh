#!/bin/bash
# Hugging Face transformers as an independent reference (registered by
# CMakeLists.txt):  hf-crosscheck.sh WORK_DIR BUILD_DIR
# Stages gpt2-tiny and llama-tiny (fp32), gpt2-tiny (bf16), llama-tiny
# (fp16) and gpt2-odd (fp32; 263 words: padded logits rows) with scripts/hf-crosscheck.py (weftc compile, weft-run, weft-export)
# and has transformers compute the losses of steps 1 and 8 from the exported
# weights in fp64, and train the 8 steps with torch's AdamW against every
# step's loss (docs/runtime.md, "Export"). Needs torch and transformers:
# installs them with pip when missing (about 3 GB with torch's CUDA
# libraries, 2-3 minutes from PyPI); where that fails (no network, no pip) it
# prints one SKIPPED line with pip's last line.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! python3 -c "import torch, transformers" 2>/dev/null; then
  echo "hf-crosscheck: installing torch and transformers (pip)"
  log=$(mktemp)
  if ! timeout 1200 python3 -m pip install -q torch transformers safetensors \
      numpy >"$log" 2>&1 ||
    ! python3 -c "import torch, transformers" 2>/dev/null; then
    echo "SKIPPED: torch or transformers is not installed and pip could not" \
      "install them ($(grep -v '^WARNING' "$log" | tail -n 1))"
    rm -f "$log"
    exit 0
  fi
  rm -f "$log"
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
