#!/bin/bash
# weft-run launched by Slurm's srun instead of mpirun (registered by
# CMakeLists.txt):
#   srun.sh WORK_DIR CORPUS WEFT_RUN WEFT_MAKE_TOKENS WEFTC CLUSTER_DIR MODEL
# Skips visibly (one "SKIPPED:" line, exit 0) when srun is not on PATH, when
# no controller answers, when sinfo shows no idle (or mixed) node, or when
# Slurm has no pmix MPI plugin; scripts/slurm-local.sh starts a single-node
# cluster on this machine.
# Otherwise: compiles MODEL as DP2 (global batch 4, seq 32), trains 4 steps
# under `srun --mpi=pmix -n 2` (Open MPI's ranks bootstrap from Slurm's PMIx
# server, no mpirun) and under `mpirun -np 2`, and requires identical per-step
# losses and gradient norms; then `srun -n 3` must fail within 60 s with the
# world-size error as the one `weft-run: error:` line and a non-zero exit.
#
# Both runs pin OpenBLAS to one thread: mpirun binds each rank to a core, so
# OpenBLAS starts one thread, while srun under task/none (slurm-local.sh)
# binds nothing and OpenBLAS starts one per CPU; a different GEMM thread
# count changes the rounding (relative ~1e-7 from step 2 on). The unpinned
# srun run is also checked, to relative 1e-5.
set -u
corpus=$2 run=$3 tokenize=$4 weftc=$5 clusters=$6 model=$7
skip() { echo "SKIPPED: $*"; exit 0; }
for tool in srun sinfo scontrol; do
  command -v $tool >/dev/null || skip "$tool not on PATH (no Slurm)"
done
timeout 30 scontrol ping >/dev/null 2>&1 ||
  skip "no Slurm controller answers (scontrol ping; scripts/slurm-local.sh starts one)"
nodes=$(timeout 30 sinfo -h -t idle,mix -o %n 2>&1)
rc=$?
if [ $rc -ne 0 ] || [ -z "$nodes" ]; then
  skip "no idle Slurm node (sinfo: $(echo "${nodes:-none}" | head -n 1))"
fi
srun --mpi=list 2>&1 | grep -qw pmix ||
  skip "Slurm has no pmix MPI plugin (srun --mpi=list); Open MPI needs it"

work=$1/srun-$(basename "$model" .json)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }
"$tokenize" "$corpus" tokens.bin >/dev/null || fail "tokenizer"
"$weftc" compile --model "$model" --cluster "$clusters/cpu-sim-2.json" \
  --global-batch 4 --seq-len 32 --lr 1e-2 --warmup-steps 2 \
  --decay-steps 20 --dp 2 --micro-batch 2 -o bundle || fail "weftc compile"
common=(bundle --data tokens.bin --steps 4 --quiet)
srun_=(srun --mpi=pmix --kill-on-bad-exit=1 -J weft-e2e-srun)

OPENBLAS_NUM_THREADS=1 timeout 60 "${srun_[@]}" -n 2 "$run" "${common[@]}" \
  --metrics srun.jsonl || fail "srun -n 2 weft-run exited $?"
OPENBLAS_NUM_THREADS=1 timeout 60 mpirun --allow-run-as-root --oversubscribe \
  -np 2 "$run" "${common[@]}" --metrics mpirun.jsonl ||
  fail "mpirun -np 2 weft-run exited $?"
timeout 60 "${srun_[@]}" -n 2 "$run" "${common[@]}" \
  --metrics srun-unpinned.jsonl || fail "srun -n 2 (unpinned) exited $?"

python3 - <<'PY' || fail "srun and mpirun runs differ"
import json
def load(name):
    return [json.loads(l) for l in open(name + ".jsonl")]
s, m, u = load("srun"), load("mpirun"), load("srun-unpinned")
assert len(s) == len(m) == len(u) == 4, (len(s), len(m), len(u))
for x, y in zip(s, m):
    assert (x["step"], x["loss"], x["grad_norm"]) == \
        (y["step"], y["loss"], y["grad_norm"]), f"srun {x} mpirun {y}"
worst = max(abs(x["loss"] - y["loss"]) / abs(y["loss"]) for x, y in zip(u, m))
assert worst <= 1e-5, f"unpinned srun differs by {worst:.2e}: {u} {m}"
print("srun -n 2 == mpirun -np 2: 4 steps, losses " +
      " ".join(f"{x['loss']:.6f}" for x in s) +
      f" (unpinned srun within {worst:.1e})")
PY

start=$SECONDS
timeout 60 "${srun_[@]}" -n 3 "$run" "${common[@]}" >out.txt 2>err.txt
rc=$?
cat err.txt
[ $rc -ne 0 ] || fail "srun -n 3: exit status 0"
[ $rc -ne 124 ] || fail "srun -n 3: timed out (hang)"
grep -q "the plan needs 2 ranks (dp 2 x pp 1 x tp 1) but the MPI world has 3" \
  err.txt || fail "srun -n 3: no world-size message"
[ "$(cat out.txt err.txt | grep -c 'weft-run: error:')" -eq 1 ] ||
  fail "srun -n 3: not one error line"
echo "srun -n 3: exit $rc after $((SECONDS - start)) s"
echo "PASS: srun $model"
