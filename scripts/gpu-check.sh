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
      timeout 150 "$t" "${filter[@]}" --gtest_output="xml:$OUT/$name.xml" >"$OUT/$name.log" 2>&1 || status=1
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
python3 scripts/gpu-e2e.py check $e2e_args .gpu/e2e 2>&1 | tee "$OUT/gpu_e2e.txt" || status=1
pack
# The baseline right after Weft's throughput (the ratio is the headline; the
# device budget may end the run before the stages after it).
if [ $TESTS_ONLY = 0 ] && have 150 "the PyTorch GPT-2 baseline"; then
  echo "== PyTorch GPT-2 baseline"
  sizes=124m,350m,1.5b; [ $QUICK = 1 ] && sizes=124m
  timeout 300 python3 bench/gpu/torch_gpt2_baseline.py --sizes "$sizes" | tee "$OUT/torch_baseline.jsonl" || status=1
  pack
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
    timeout 90 .gpu/tools/weft-run $bundle --data .gpu/e2e/tokens.bin --steps 2 --backend cuda \
        --device-times $flags --trace "$trace" --quiet ||
      { echo "device times failed: the profile waits for every launch instead"; status=1
        CUDA_LAUNCH_BLOCKING=1 timeout 90 .gpu/tools/weft-run $bundle --data .gpu/e2e/tokens.bin \
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
  timeout 150 python3 scripts/hf-crosscheck.py check .gpu/hf-crosscheck 2>&1 | tee "$OUT/hf_crosscheck.txt" || status=1
fi

[ $TESTS_ONLY = 1 ] && exit $status

pack
if have 40 "the GPU ceilings"; then
  echo "== GPU ceilings"
  python3 bench/gpu/ceilings.py | tee "$OUT/ceilings.json" || status=1
fi

pack
if have 60 "the memory-bound kernels' bandwidth"; then
  echo "== memory-bound kernels against the copy bandwidth (weft-bench-kernels)"
  timeout 120 .gpu/tools/weft-bench-kernels --json "$OUT/kernels.jsonl" | tee "$OUT/kernels.txt" || status=1
fi

pack
# --quick timed Weft's 350M too: its baseline last, where the budget allows.
if [ $QUICK = 1 ] && have 120 "the PyTorch 350M baseline"; then
  echo "== PyTorch GPT-2 baseline, 350M"
  timeout 200 python3 bench/gpu/torch_gpt2_baseline.py --sizes 350m | tee -a "$OUT/torch_baseline.jsonl" || status=1
fi

pack
if have 30 "the HF parameter counts"; then
  echo "== HF parameter counts"
  python3 test/reference/hf_param_counts.py --out "$OUT/hf_param_counts.json" || status=1
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
PY
exit $status
