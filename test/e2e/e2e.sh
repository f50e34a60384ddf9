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

resume() { # NP VARIANT DP MICRO ACCUM: 8 steps straight vs 4 + resume to 8
  "$gen" mlp "$2" "$3" "$4" "$5" bundle || fail "generator"
  local common="bundle --data tokens.bin --seed 7"
  mpi "$1" "$run" $common --steps 8 --metrics full.jsonl \
    --checkpoint-dir full || fail "uninterrupted run exited $?"
  mpi "$1" "$run" $common --steps 4 --metrics a.jsonl --checkpoint-dir part \
    --checkpoint-every 2 || fail "first half exited $?"
  mpi "$1" "$run" $common --steps 8 --metrics b.jsonl --checkpoint-dir part \
    --resume >resume.txt || fail "resumed run exited $?"
  grep -q "checkpoint loaded part/step-4" resume.txt || fail "did not load step 4"
  same_losses full.jsonl a.jsonl b.jsonl
  for f in full/step-8/rank-*.bin; do
    cmp "$f" "part/step-8/${f##*/}" || fail "final state differs: $f"
  done
}

same_losses() { # FULL PARTS...: step, loss and grad norm strings identical
  cut -d, -f1-3 "$1" >expected.txt
  shift
  cat "$@" | cut -d, -f1-3 >actual.txt
  [ "$(wc -l <expected.txt)" -eq 8 ] || fail "expected 8 steps"
  cmp expected.txt actual.txt || fail "losses differ after resume"
}

offload() { # NP VARIANT DP MICRO ACCUM WHERE: the same run with every state
  # group offloaded after every step (checkpoints then written from the host
  # copies) must match the plain run: losses, checkpoints, weights snapshots.
  "$gen" mlp "$2" "$3" "$4" "$5" bundle || fail "generator"
  local common="bundle --data tokens.bin --seed 7 --steps 6 \
    --checkpoint-every 3 --save-weights-every 2"
  mpi "$1" "$run" $common --metrics plain.jsonl --checkpoint-dir plain \
    >plain.txt || fail "plain run exited $?"
  mpi "$1" "$run" $common --metrics moved.jsonl --checkpoint-dir moved \
    --offload-between-steps all --offload-to "$6" >moved.txt \
    || fail "offloading run exited $?"
  cut -d, -f1-3 plain.jsonl >expected.txt
  cut -d, -f1-3 moved.jsonl >actual.txt
  [ "$(wc -l <expected.txt)" -eq 6 ] || fail "expected 6 steps"
  cmp expected.txt actual.txt || fail "losses differ with offload"
  grep -q '"offload_bytes":[1-9]' moved.jsonl || fail "no offload in metrics"
  grep -q "offload after step 6: .* to host-$6" moved.txt \
    || fail "no offload log line"
  grep -q "reload before step 2" moved.txt || fail "no reload log line"
  local n=0
  for f in plain/step-*/* plain/weights-*/*; do
    cmp "$f" "moved/${f#plain/}" || fail "files differ: $f"
    n=$((n + 1))
  done
  [ -e moved/weights-6/COMPLETE ] && [ -e moved/step-6/COMPLETE ] \
    && [ "$n" -ge 12 ] || fail "missing checkpoints ($n files)"
  # weft-export (beside weft-run) reads a weights snapshot like a full save.
  local export="$(dirname "$run")/weft-export"
  "$export" bundle moved/step-6 -o full.safetensors >/dev/null \
    && "$export" bundle moved/weights-6 -o weights.safetensors >/dev/null \
    || fail "weft-export"
  cmp full.safetensors weights.safetensors || fail "weights export differs"
}

flip_byte() { # FILE OFFSET
  python3 -c 'import sys
f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x40]))' "$1" "$2"
}

checkpoint_at_4() { # a DP2 bundle trained 4 steps into ck/step-4
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  mpi 2 "$run" bundle --data tokens.bin --steps 4 --checkpoint-dir ck \
    --quiet || fail "training exited $?"
}

case $case_name in
serial) train 1 serial 1 4 1 ;;
ddp2) train 2 ddp 2 2 1 ;;
ddp2-accum) train 2 ddp 2 1 2 ;;
zero1) train 2 zero1 2 2 1 ;;
zero1-accum) train 2 zero1 2 1 2 ;;
ddp2-pp2)
  train 4 pipe 2 2 1
  # The DP replicas of each stage shared one program.
  python3 -c 'import json, sys
b = json.load(open("bundle/plan.json"))
roles = sorted(r for p in b["programs"] for r in p["roles"])
sys.exit(b["rank_roles"] != [0, 1, 0, 1] or roles != [0, 1])' ||
    fail "the replicas do not share programs" ;;
ddp2-pp2-accum) train 4 pipe 2 1 2 ;;
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
  # With CUDA built and no device: "no CUDA device: ..."; without CUDA at build
  # time: "built without CUDA"; with a device: "does not drive it yet".
  expect_error "no CUDA device: \|built without CUDA\|does not drive it yet" 1 \
    bundle --data tokens.bin --backend cuda
  # --no-graph is a flag (no value), accepted before and after --backend.
  expect_error "no CUDA device: \|built without CUDA\|does not drive it yet" 1 \
    bundle --no-graph --data tokens.bin --backend cuda
  # The GEMM epilogues are decided by the compiler now.
  expect_error "gemm-epilogues is a compiler option now: weftc compile" 1 \
    bundle --data tokens.bin --backend cuda --gemm-epilogues
  # An unknown backend names the ones there are.
  expect_error "unknown backend 'tpu' (expected cpu, cuda or cpu-staged)" 1 \
    bundle --data tokens.bin --backend tpu ;;
deadlock-verifier)
  "$gen" deadlock bundle || fail generator
  expect_error "deadlock: rank 0" 2 bundle --data tokens.bin ;;
watchdog)
  "$gen" deadlock bundle || fail generator
  expect_error "watchdog: rank 0 step 1 made no progress" 2 bundle \
    --data tokens.bin --unverified --watchdog-s 2 ;;
resume-serial) resume 1 serial 1 4 1 ;;
resume-ddp2) resume 2 ddp 2 2 1 ;;
resume-zero1) resume 2 zero1 2 2 1 ;;
resume-after-crash)
  # A kill before the rename leaves step-4.tmp, one before the marker leaves
  # step-6 without COMPLETE: both ignored, the run resumes from step 2.
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  common="bundle --data tokens.bin --seed 7"
  mpi 2 "$run" $common --steps 8 --metrics full.jsonl || fail "full run"
  mpi 2 "$run" $common --steps 2 --metrics a.jsonl --checkpoint-dir part \
    || fail "first run"
  WEFT_TEST_CHECKPOINT_CRASH=before-rename mpi 2 "$run" $common --steps 4 \
    --checkpoint-dir part --resume >/dev/null 2>&1 && fail "no crash"
  [ -f part/step-4.tmp/manifest.json ] || fail "no step-4.tmp left behind"
  WEFT_TEST_CHECKPOINT_CRASH=before-marker mpi 2 "$run" $common --steps 6 \
    --checkpoint-dir part --resume >/dev/null 2>&1 && fail "no crash"
  [ -d part/step-6 ] && [ ! -e part/step-6/COMPLETE ] || fail "no unmarked step-6"
  mpi 2 "$run" $common --steps 8 --metrics b.jsonl --checkpoint-dir part \
    --resume >resume.txt || fail "resumed run exited $?"
  grep -q "checkpoint loaded part/step-2" resume.txt || fail "did not load step 2"
  same_losses full.jsonl a.jsonl b.jsonl ;;
corrupt-checkpoint)
  checkpoint_at_4
  flip_byte ck/step-4/rank-1.bin 5000
  expect_error "rank 1: ck/step-4/rank-1.bin: checksum mismatch" 2 bundle \
    --data tokens.bin --checkpoint-dir ck --resume ;;
truncated-checkpoint)
  checkpoint_at_4
  truncate -s 4096 ck/step-4/rank-0.bin
  expect_error "ck/step-4/rank-0.bin: file holds 4096 bytes" 2 bundle \
    --data tokens.bin --checkpoint-dir ck --resume ;;
checkpoint-other-bundle)
  checkpoint_at_4
  "$gen" mlp zero1 2 2 1 other || fail generator
  expect_error "ck/step-4/manifest.json: written for bundle" 2 other \
    --data tokens.bin --checkpoint-dir ck --resume ;;
no-checkpoint)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  mkdir -p ck/step-3.tmp
  expect_error "ck: no complete checkpoint to resume from" 2 bundle \
    --data tokens.bin --checkpoint-dir ck --resume ;;
checkpoint-write-error)
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  touch in-the-way
  expect_error "in-the-way: cannot create" 2 bundle --data tokens.bin \
    --steps 2 --checkpoint-dir in-the-way
  expect_error "resume need --checkpoint-dir" 2 bundle --data tokens.bin \
    --resume
  # Usage errors are one line with a pointer to --help, before any rank
  # opens the bundle: an unknown last flag is named as unknown, an output
  # file that is a directory or in a missing one fails before the steps.
  expect_error "unknown option --bogus (weft-run --help for usage)" 2 \
    bundle --data tokens.bin --bogus
  expect_error "\-\-metrics in-the-way/m.jsonl: no directory in-the-way" 2 \
    bundle --data tokens.bin --metrics in-the-way/m.jsonl
  mkdir -p a-dir
  expect_error "\-\-trace a-dir: is a directory" 2 bundle --data tokens.bin \
    --trace a-dir
  [ "$(grep -c usage: err.txt)" -eq 0 ] || fail "the usage text on an error" ;;
offload-ddp2)
  offload 2 ddp 2 2 1 pinned
  # ZeRO-0: both DP replicas hold the same weights; rank 0 writes the
  # snapshot once and rank 1's entry names its file (exported above).
  [ -e moved/weights-6/rank-0.bin ] && [ ! -e moved/weights-6/rank-1.bin ] \
    && grep -q '"written_by": 0' moved/weights-6/manifest.json \
    || fail "the ZeRO-0 weights snapshot is not written once" ;;
offload-zero1)
  offload 2 zero1 2 1 2 pageable
  # ZeRO-1: each rank's snapshot is its own shard.
  [ -e moved/weights-6/rank-1.bin ] || fail "ZeRO-1 snapshot lacks rank 1"
  expect_error "unknown state group 'weights'" 2 bundle --data tokens.bin \
    --offload-between-steps weights ;;
retention)
  # --keep-checkpoints 2 --keep-weights 1 on DP 2: after 8 steps, saves at
  # 2, 4, 6 and 8, only step-6 and step-8 and weights-8 are left, with the
  # leftovers of earlier steps; a resume from them matches the straight run.
  "$gen" mlp ddp 2 2 1 bundle || fail generator
  common="bundle --data tokens.bin --seed 7"
  mpi 2 "$run" $common --steps 8 --metrics full.jsonl || fail "full run"
  mkdir -p ck/step-1.tmp ck/step-3 ck/step-20.tmp
  mpi 2 "$run" $common --steps 6 --metrics a.jsonl --checkpoint-dir ck \
    --checkpoint-every 2 --save-weights-every 2 --keep-checkpoints 2 \
    --keep-weights 1 >a.txt || fail "first run exited $?"
  grep -q "checkpoint removed ck/step-2 (retention)" a.txt \
    || fail "no removal logged"
  mpi 2 "$run" $common --steps 8 --metrics b.jsonl --checkpoint-dir ck \
    --resume --checkpoint-every 2 --save-weights-every 2 \
    --keep-checkpoints 2 --keep-weights 1 >b.txt || fail "resume exited $?"
  grep -q "checkpoint loaded ck/step-6" b.txt || fail "did not load step 6"
  [ "$(cd ck && echo *)" = "step-20.tmp step-6 step-8 weights-8" ] \
    || fail "left in ck: $(cd ck && echo *)"
  same_losses full.jsonl a.jsonl b.jsonl
  expect_error "\-\-keep-checkpoints expects a whole number >= 1, got '0'" 2 \
    $common --checkpoint-dir ck --keep-checkpoints 0
  expect_error "\-\-keep-weights and --resume need --checkpoint-dir D" 2 \
    $common --keep-weights 3
  expect_error "\-\-resume-any-data applies to --resume only" 2 $common \
    --checkpoint-dir ck --resume-any-data
  # The checkpoint records the data file: another one (the corpus's lines
  # reversed: as long, other tokens) is refused unless asked for.
  tac "$corpus" >other.txt && "$tokenize" other.txt other.bin >/dev/null \
    || fail tokenizer
  expect_error "ck/step-8/manifest.json: trained on a data file of" 2 bundle \
    --data other.bin --steps 10 --checkpoint-dir ck --resume
  mpi 2 "$run" bundle --data other.bin --steps 10 --checkpoint-dir ck \
    --resume --resume-any-data --quiet || fail "--resume-any-data exited $?"
  [ -e ck/step-10/COMPLETE ] || fail "no step-10 after --resume-any-data" ;;
*) fail "unknown case $case_name" ;;
esac
echo "PASS: $case_name"
