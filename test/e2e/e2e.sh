#!/bin/bash
# End-to-end cases for weft-run (registered by CMakeLists.txt):
#   e2e.sh CASE WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFT_E2E_BUNDLE
# Training cases compare every step with a serial reference; fault cases
# expect a non-zero exit, one precise message and no hang.
set -u
case_name=$1 work=$2/$1 corpus=$3 run=$4 tokenize=$5 gen=$6
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
mpi() { timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"

train() { # NP VARIANT DP MICRO ACCUM: train 6 steps and compare
  "$gen" mlp "$2" "$3" "$4" "$5" bundle || fail "generator"
  mpi "$1" "$run" bundle --data tokens.bin --steps 6 --seed 7 \
    --metrics metrics.jsonl --trace trace.json || fail "weft-run exited $?"
  "$gen" check metrics.jsonl tokens.bin 6 7 $(($3 * $4 * $5)) \
    || fail "losses differ from the serial reference"
}

expect_error() { # PATTERN NP ARGS...: non-zero exit, one error line
  local pattern=$1 np=$2; shift 2
  mpi "$np" "$run" "$@" >out.txt 2>err.txt
  local rc=$?
  cat err.txt
  [ $rc -ne 0 ] || fail "exit status 0"
  [ $rc -ne 124 ] || fail "timed out (hang)"
  grep -q -- "$pattern" err.txt || fail "no message matching '$pattern'"
  [ "$(grep -c 'weft-run: error:' err.txt)" -eq 1 ] || fail "not one error line"
}

case $case_name in
serial) train 1 serial 1 4 1 ;;
ddp2) train 2 ddp 2 2 1 ;;
ddp2-accum) train 2 ddp 2 1 2 ;;
zero1) train 2 zero1 2 2 1 ;;
zero1-accum) train 2 zero1 2 1 2 ;;
wrong-world-size)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  expect_error "the plan needs 2 ranks (dp 2 x pp 1 x tp 1) but the MPI world has 3" \
    3 bundle --data tokens.bin ;;
edited-bundle)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  sed -i 's/"lr": 0.01/"lr": 0.02/' bundle/plan.json
  grep -q '"lr": 0.02' bundle/plan.json || fail "edit did not apply"
  expect_error "content_hash" 2 bundle --data tokens.bin ;;
truncated-bundle)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  truncate -s 2000 bundle/plan.json
  expect_error "bundle/plan.json" 2 bundle --data tokens.bin ;;
short-data)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  head -c 40 "$corpus" >short.txt
  "$tokenize" short.txt short.bin >/dev/null || fail tokenizer
  expect_error "short.bin: data file holds 40 tokens" 2 bundle --data short.bin ;;
cuda-backend)
  "$gen" mlp serial 1 4 1 bundle || fail generator
  expect_error "cuda backend is not built" 1 bundle --data tokens.bin --backend cuda ;;
deadlock-verifier)
  "$gen" deadlock bundle || fail generator
  expect_error "deadlock: rank 0" 2 bundle --data tokens.bin ;;
watchdog)
  "$gen" deadlock bundle || fail generator
  expect_error "watchdog: rank 0 step 1 made no progress" 2 bundle \
    --data tokens.bin --unverified --watchdog-s 2 ;;
*) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
