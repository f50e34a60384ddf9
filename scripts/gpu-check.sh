#!/usr/bin/env bash
# Everything Weft checks and times on a GPU, in one call (the device machine is
# lent briefly and starts bare). Writes logs and JSON into ${OUT:-gpu-out}/all.tgz
# (updated after every stage) and prints a short table last.
#   scripts/gpu-check.sh [--quick|--tests-only]   (device tool: carry [".gpu"])
# WEFT_GPU_BUDGET_S (default 540): the seconds the run may take; a stage
# after the first three starts only while enough of them are left (else one
# "== skipped" line), so a run inside the device tool's timeout_s still ends
# with its summary.
# Stages: machine facts, the GPU unit tests (staged by scripts/gpu-prepare.sh
# and carried as .gpu/), weft-run on the GPU (CUDA against CPU backend, GPT-2
# throughput; scripts/gpu-e2e.py), the PyTorch GPT-2 baseline (eager and
# torch.compile; not with --tests-only), a one-step profile per configuration
# with the cost model fitted to it, the HF cross-check (--tests-only stops
# after it), GPU ceilings (copy bandwidth, bf16 GEMM), the memory-bound
# kernels' bandwidth (weft-bench-kernels), and the Hugging Face parameter
# counts of every preset (the reference the importer's tests pin).
set -uo pipefail
cd "$(dirname "$0")/.."
# Results come back from $OUT as one archive, $OUT/all.tgz (the device tool
# returns at most 8 files, and of a run cut short what is under $OUT): the
# stages write into a work directory, packed whole after every stage.
RESULTS=${OUT:-gpu-out}
mkdir -p "$RESULTS"
OUT=$(mktemp -d /tmp/weft-gpu-out.XXXXXX)
export OUT
export PYTHONUNBUFFERED=1
QUICK=0; TESTS_ONLY=0
case "${1:-}" in
  --quick) QUICK=1 ;;
  --tests-only) TESTS_ONLY=1 ;;
esac
status=0
BUDGET=${WEFT_GPU_BUDGET_S:-540}
START=$SECONDS
# have SECONDS NAME: whether NAME (needing about SECONDS) fits the budget.
have() {
  local left=$((BUDGET - (SECONDS - START)))
  [ "$left" -ge "$1" ] && return 0
  echo "== skipped $2: ${left} s of the ${BUDGET} s budget left, it needs about $1 (WEFT_GPU_BUDGET_S)"
  return 1
}
# cap SECONDS: a stage's time limit, SECONDS or what is left of the budget
# (at least 10), so that no stage runs the whole call past its timeout.
cap() {
  local left=$((BUDGET - (SECONDS - START) - 5))
  [ "$left" -lt 10 ] && left=10
  echo $(( left < $1 ? left : $1 ))
}
pack() { tar czf "$RESULTS/all.tgz.tmp" -C "$OUT" . && mv "$RESULTS/all.tgz.tmp" "$RESULTS/all.tgz"; }
trap pack EXIT

{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} 2>&1 | tee "$OUT/machine.txt"

# The staged binaries travel packed (scripts/gpu-prepare.sh).
[ -f .gpu/bins.tar.xz ] && tar -C .gpu -xJf .gpu/bins.tar.xz

echo "== GPU unit tests (binaries staged by scripts/gpu-prepare.sh)"
# The staged shared libraries (libmpi, OpenBLAS, ...) the binaries load; the
# CUDA toolkit libraries (cuBLASLt, NCCL, cudart) come from the machine.
if [ -f .gpu/libs.tar.xz ]; then
  mkdir -p /tmp/weft-gpu-libs && tar -C /tmp/weft-gpu-libs -xJf .gpu/libs.tar.xz
  export LD_LIBRARY_PATH=/tmp/weft-gpu-libs/lib:/usr/local/cuda/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# cuDNN for --cudnn-attention (dlopen'ed): the machine's, else the copy a pip
# wheel installed with PyTorch (nvidia-cudnn), else none (Weft's kernels run).
if ! ls /usr/local/cuda/lib*/libcudnn.so.9 >/dev/null 2>&1 &&
   ! ldconfig -p 2>/dev/null | grep -q 'libcudnn.so.9 '; then
  wheel=$(python3 -c 'import nvidia.cudnn as c; print(list(c.__path__)[0])' 2>/dev/null)
  if [ -n "$wheel" ] && [ -f "$wheel/lib/libcudnn.so.9" ]; then
    export WEFT_CUDNN_LIBRARY=$wheel/lib/libcudnn.so.9
    export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$wheel/lib
    echo "cuDNN: $WEFT_CUDNN_LIBRARY (PyTorch's wheel)"
  else
    echo "cuDNN: none found (--cudnn-attention rows run Weft's attention)"
  fi
fi
# Open MPI's components for WeftCudaSessionTests (singleton MPI_Init, world
# size 1): staged by gpu-prepare.sh, found through the MCA search paths.
if [ -f .gpu/mpi.tar.xz ]; then
  mkdir -p /tmp/weft-gpu-mpi && tar -C /tmp/weft-gpu-mpi -xJf .gpu/mpi.tar.xz
  export LD_LIBRARY_PATH=/tmp/weft-gpu-mpi/mpi/lib:$LD_LIBRARY_PATH
  # mpirun for the multi-GPU cases (gpu-e2e.py), where there are GPUs enough.
  [ -d /tmp/weft-gpu-mpi/mpi/bin ] && export PATH=/tmp/weft-gpu-mpi/mpi/bin:$PATH
  export OMPI_MCA_mca_base_component_path=/tmp/weft-gpu-mpi/mpi/openmpi3
  export PMIX_MCA_mca_base_component_path=/tmp/weft-gpu-mpi/mpi/pmix
  export OPAL_PKGDATADIR=/tmp/weft-gpu-mpi/mpi/help
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # A singleton (the session tests, without mpirun) forks no orted.
  export OMPI_MCA_ess_singleton_isolated=1
fi
if ls .gpu/bin/* >/dev/null 2>&1; then
  for t in .gpu/bin/*; do
    # cuDNN's graph builds (40 of them) get a call and a time limit of their
    # own, so a slow cuDNN cannot cost the kernel tests after them.
    runs=all; [ "$(basename "$t")" = WeftCudaKernelsTests ] && runs="rest cudnn"
    for run in $runs; do
      name=$(basename "$t"); filter=()
      [ $run = rest ] && filter=(--gtest_filter=-*Cudnn*)
      [ $run = cudnn ] && { filter=(--gtest_filter=*Cudnn*); name=$name-cudnn; }
      # Full log kept; the tail and every skip/failure line printed.
      timeout "$(cap 150)" "$t" "${filter[@]}" --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.log" 2>&1 || status=1
      log="$OUT/$name.log"
      echo "-- $name"
      grep -m1 "no CUDA device" "$log" || true
      grep -E "^\[ +(PASSED|FAILED|SKIPPED) +\] [0-9]+ test|^\[  FAILED  \] [A-Za-z]|Failure$|CUDA table|built with|cuDNN (refused|took)" \
        "$log" | head -n 60
    done
  done
else
  echo "no staged GPU test binaries in .gpu/bin: run scripts/gpu-prepare.sh first"
  status=1
fi

pack
echo "== weft-run on the GPU (staged by scripts/gpu-e2e.py stage)"
e2e_args=${WEFT_E2E_ARGS:-}; [ $QUICK = 1 ] && e2e_args="$e2e_args --quick"
# Its cases start until about 200 s of the budget are left (the baseline
# and a profile after it); the rest are skipped, one line each.
export WEFT_E2E_DEADLINE=$(( $(date +%s) + BUDGET - (SECONDS - START) - 200 ))
python3 scripts/gpu-e2e.py check $e2e_args .gpu/e2e 2>&1 | tee "$OUT/gpu_e2e.txt" || status=1
pack
# The baseline right after Weft's throughput (the ratio is the headline; the
# device budget may end the run before the stages after it).
if [ $TESTS_ONLY = 0 ] && have 150 "the PyTorch GPT-2 baseline"; then
  echo "== PyTorch GPT-2 baseline"
  sizes="124m 350m 1.5b"; [ $QUICK = 1 ] && sizes=124m
  # One call per size (each compiles its own graphs), each within the budget.
  first=1
  for size in $sizes; do
    [ $first = 1 ] || have 150 "the PyTorch $size baseline" || continue
    first=0
    timeout "$(cap 300)" python3 bench/gpu/torch_gpt2_baseline.py --sizes "$size" |
      tee -a "$OUT/torch_baseline.jsonl" || status=1
    pack
  done
fi
profile=.gpu/e2e/gpt2-124m-bf16-b32
if [ -d $profile ]; then
  for tag in widening fast cudnn; do
    have 60 "the $tag profile" || continue
    # fast and cudnn run the bundle compiled with --gemm-epilogues
    # --residual-norms.
    flags="" bundle=$profile
    [ $tag = fast ] && flags="--half-kernels" bundle=$profile-epilogues
    [ $tag = cudnn ] && flags="--half-kernels --cudnn-attention --gemm-autotune" bundle=$profile-epilogues
    echo "== where a step's time goes: GPT-2 124M bf16, batch 32, timed on the device ($tag: $flags, $bundle)"
    # Device times (timing events around every instruction); should they
    # fail, every launch waited for (host times then are device times plus
    # the launch).
    trace="$OUT/profile-trace-$tag.json"
    timeout "$(cap 90)" .gpu/tools/weft-run $bundle --data .gpu/e2e/tokens.bin --steps 2 --backend cuda \
        --device-times $flags --trace "$trace" --quiet ||
      { echo "device times failed: the profile waits for every launch instead"; status=1
        CUDA_LAUNCH_BLOCKING=1 timeout "$(cap 90)" .gpu/tools/weft-run $bundle --data .gpu/e2e/tokens.bin \
          --steps 2 --backend cuda --no-graph $flags --trace "$trace" --quiet; }
    [ -f "$trace" ] && python3 scripts/gpu-e2e.py profile $bundle "$trace" | tee "$OUT/profile-$tag.txt" ||
      status=1
    # The cost model fitted to this step; the timed steps of the same mode
    # simulated with it (plan fidelity).
    mode=cuda; [ $tag = fast ] && mode=cuda-fast; [ $tag = cudnn ] && mode=cuda-cudnn
    [ -f "$OUT/profile-trace-$tag.json" ] &&
      python3 scripts/gpu-e2e.py fidelity $bundle "$OUT/profile-trace-$tag.json" --mode $mode |
        tee "$OUT/fidelity-$tag.txt" || status=1
    pack
  done
fi
if have 60 "the HF cross-check"; then
  echo "== HF cross-check of weft-export (staged by scripts/hf-crosscheck.py stage)"
  timeout "$(cap 150)" python3 scripts/hf-crosscheck.py check .gpu/hf-crosscheck 2>&1 | tee "$OUT/hf_crosscheck.txt" || status=1
fi

[ $TESTS_ONLY = 1 ] && exit $status

pack
if have 40 "the GPU ceilings"; then
  echo "== GPU ceilings"
  timeout "$(cap 60)" python3 bench/gpu/ceilings.py | tee "$OUT/ceilings.json" || status=1
fi

pack
if have 60 "the memory-bound kernels' bandwidth"; then
  echo "== memory-bound kernels against the copy bandwidth (weft-bench-kernels)"
  timeout "$(cap 120)" .gpu/tools/weft-bench-kernels --json "$OUT/kernels.jsonl" | tee "$OUT/kernels.txt" || status=1
fi

pack
# --quick timed Weft's 350M too: its baseline last, where the budget allows.
if [ $QUICK = 1 ] && have 120 "the PyTorch 350M baseline"; then
  echo "== PyTorch GPT-2 baseline, 350M"
  timeout "$(cap 200)" python3 bench/gpu/torch_gpt2_baseline.py --sizes 350m | tee -a "$OUT/torch_baseline.jsonl" || status=1
fi

pack
if have 30 "the HF parameter counts"; then
  echo "== HF parameter counts"
  timeout "$(cap 60)" python3 test/reference/hf_param_counts.py --out "$OUT/hf_param_counts.json" || status=1
fi


pack
echo "== summary ($((SECONDS - START)) s of the ${BUDGET} s budget)"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
try:
    c = json.load(open(f"{out}/ceilings.json"))
    print(f"{c['gpu']}: copy {c['copy_gb_s']} GB/s, bf16 GEMM 8192^3 {c['bf16_gemm_8192_tflops']} TFLOP/s")
except (OSError, ValueError, KeyError) as e:
    print(f"no ceilings ({e})")
print(f"{'model':6s} {'mode':9s} {'batch':>5s} {'step ms':>8s} {'tok/s':>9s} {'TFLOP/s':>8s} {'MFU':>6s} {'mem GiB':>7s}")
try:
    for line in open(f"{out}/torch_baseline.jsonl"):
        r = json.loads(line)
        print(f"{r['size']:6s} {r['mode']:9s} {r['batch']:5d} {r['step_ms']:8.1f} {r['tokens_per_s']:9d} "
              f"{r['model_tflops']:8.1f} {r['mfu']*100:5.1f}% {r['peak_mem_gib']:7.2f}")
except (OSError, ValueError, KeyError) as e:
    print(f"no PyTorch baseline ({e})")

# Issue 6's targets, each with what this run measured.
import glob, os
weft = {}  # case -> mode -> summary
for path in glob.glob(f"{out}/*.summary.json"):
    r = json.load(open(path))
    weft.setdefault(r["case"], {})[r["mode"]] = r
torch = {}
try:
    for line in open(f"{out}/torch_baseline.jsonl"):
        r = json.loads(line)
        torch[(r["size"], r["mode"])] = r
except (OSError, ValueError):
    pass
def verdict(ok):
    return "meets" if ok else "MISSES"
print("== issue 6 targets")
for case, modes in sorted(weft.items()):
    size = case.split("-")[1]  # gpt2-124m-bf16-b32 -> 124m
    mode, best = max(modes.items(), key=lambda kv: kv[1]["tokens_per_s"])
    compiled = torch.get((size, "compiled"))
    if compiled:
        ratio = best["tokens_per_s"] / compiled["tokens_per_s"]
        print(f"{case}: {verdict(ratio >= 1.0)} >= 1.0x torch.compile: {ratio:.3f}x "
              f"({mode} {best['tokens_per_s']:,.0f} tok/s, compiled {compiled['tokens_per_s']:,} tok/s)")
    else:
        print(f"{case}: no torch.compile {size} row to compare with")
    print(f"{case}: {verdict(best['mfu'] >= 0.45)} >= 45% MFU: {best['mfu'] * 100:.1f}% ({mode})")
    for m, r in sorted(modes.items()):
        if m != "cuda-nograph":
            print(f"{case} {m}: {verdict(r['host_s'] < 50e-6)} < 50 us host per step: "
                  f"{r['host_s'] * 1e6:.0f} us")
        off = r["step_ms"] / r["predicted_step_ms"] - 1
        print(f"{case} {m}: {verdict(abs(off) <= 0.03)} step within 3% of the plan's prediction: "
              f"{r['step_ms']:.1f} ms vs {r['predicted_step_ms']:.1f} ms ({off * 100:+.1f}%)")
        if r.get("allocated_bytes"):
            planned = r["planned_bytes"] + r["workspace_bytes"]
            off = r["allocated_bytes"] / planned - 1
            print(f"{case} {m}: {verdict(abs(off) <= 0.03)} memory within 3% of the plan and "
                  f"workspace: {r['allocated_bytes'] / 2**30:.2f} GiB vs {planned / 2**30:.2f} GiB "
                  f"({off * 100:+.1f}%)")
try:
    rows = [json.loads(l) for l in open(f"{out}/kernels.jsonl")]
    bound = [r for r in rows if not r.get("error") and r["flops"] == 0
             and "widening" not in r["kernel"] and "ceiling" not in r["kernel"]]
    for r in bound:
        fraction = r["bytes"] / r["us"] * 1e-3 / r["copy_gb_s"]
        print(f"{r['kernel']}: {verdict(fraction >= 0.8)} >= 80% of the copy bandwidth: "
              f"{fraction * 100:.0f}%")
    for r in rows:
        if r.get("error"):
            print(f"{r['kernel']}: failed ({r['error']})")
except (OSError, ValueError, KeyError) as e:
    print(f"no kernel bandwidths ({e})")
PY
exit $status
