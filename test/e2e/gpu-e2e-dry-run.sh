#!/bin/bash
# scripts/gpu-e2e.py rehearsed without a GPU (registered by CMakeLists.txt):
#   gpu-e2e-dry-run.sh WORK_DIR BUILD_DIR
# Stages every bundle the GPU run takes, then runs `check --quick` with
# WEFT_E2E_DRY_RUN=1 (each weft-run on the CPU backend, CUDA-only flags
# dropped, the throughput rows on gpt2-tiny-bf16; the two-rank cases under
# mpirun as if the machine had two GPUs), and `profile` and `fidelity` on a
# CPU trace: a mistake in the script's loops, comparisons or output then
# costs no device time. Every row must pass; the timings mean nothing.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$1/gpu-e2e-dry-run
build=$2
rm -rf "$work"
mkdir -p "$work/out"
python3 "$root/scripts/gpu-e2e.py" stage --build "$build" --out "$work/e2e" \
  >"$work/stage.log" 2>&1 || { tail -3 "$work/stage.log"; echo "FAIL: staging"; exit 1; }
export OUT=$work/out WEFT_E2E_DRY_RUN=1 WEFT_E2E_GPUS=2
python3 "$root/scripts/gpu-e2e.py" check --quick --tools "$build/bin" "$work/e2e" \
  >"$work/check.txt" 2>&1
rc=$?
sed -n '/^== weft-run on the GPU/,$p' "$work/check.txt"
[ $rc = 0 ] || { grep -E "^FAIL|Traceback|Error" "$work/check.txt" | head -5; echo "FAIL: check"; exit 1; }
grep -q "^gpt2-tiny-dp2-zero1-bf16  ok" "$work/check.txt" ||
  { echo "FAIL: the two-rank rows did not run"; exit 1; }
grep -q "^gpt2-124m-bf16-b32 cuda-fast  [0-9.]* ms" "$work/check.txt" ||
  { echo "FAIL: no throughput row"; exit 1; }
bundle=$work/e2e/gpt2-tiny-bf16
"$build/bin/weft-run" "$bundle" --data "$work/e2e/tokens.bin" --steps 2 --backend cpu \
  --trace "$work/trace.json" --quiet || { echo "FAIL: the trace run"; exit 1; }
python3 "$root/scripts/gpu-e2e.py" profile "$bundle" "$work/trace.json" \
  --tools "$build/bin" >"$work/profile.txt" 2>&1 &&
  grep -q "^step 2: " "$work/profile.txt" ||
  { cat "$work/profile.txt"; echo "FAIL: profile"; exit 1; }
python3 "$root/scripts/gpu-e2e.py" fidelity "$bundle" "$work/trace.json" --mode cuda-fast \
  --tools "$build/bin" --dir "$work/e2e" >"$work/fidelity.txt" 2>&1 &&
  grep -q "^gpt2-124m-bf16-b32 cuda-fast: measured" "$work/fidelity.txt" ||
  { cat "$work/fidelity.txt"; echo "FAIL: fidelity"; exit 1; }
echo "gpu-e2e dry run: check, profile and fidelity ran"
