#!/bin/bash
# Compiles every generated kernel source of real bundles (registered by
# CMakeLists.txt):
#   compile-kernels.sh MODE WORK_DIR WEFTC CLUSTER_DIR KERNEL_INCLUDE COMPILER
#                      CHECKER MODEL...
# For each MODEL, `weftc compile` writes a serial bundle (the command line of
# test/e2e/compile.sh); MODEL:tp2 is the same on two ranks with tensor
# parallelism 2 (vocabulary-parallel kernels); MODEL:norms the serial bundle
# with --residual-norms (the fused norms); MODEL:constants is the serial
# bundle again, for kernels whose constants take other code paths (nvcc skips
# the kernels an earlier bundle had, as for :tp2; the host check runs all). Every kernel listed in a
# plan.json must have a generated source with CUDA entries in kernels/, and
# every one must compile:
#   MODE cuda: COMPILER is nvcc; device code for sm_80 and sm_90 (one nvcc
#              per file, two at a time) plus the host side, without a
#              register spilled to local memory (ptxas -warn-spills);
#   MODE host: COMPILER is the host C++ compiler; each source as plain C++17
#              (warnings are errors) into a shared object, whose host entry
#              CHECKER (weft-kernel-check) runs against the runtime's
#              registry kernel on random operands.
# A failure names the file and the compiler's (or checker's) first error
# line. With COMPILER "none" the test prints SKIPPED and passes.
set -u
mode=$1 work=$2 weftc=$3 clusters=$4 include=$5 compiler=$6 checker=$7
shift 7
if [ "$compiler" = none ]; then
  echo "SKIPPED: nvcc not found; the generated CUDA kernels are not compiled"
  exit 0
fi
fail() { echo "FAIL: $*"; exit 1; }
work=$work/$mode
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

# kernels.txt: one line per kernel, "SOURCE KERNEL NAME=VALUE...".
for spec in "$@"; do
  model=${spec%%:*} bundle=${spec/:/-} flags=(--cluster "$clusters/cpu-sim-1.json")
  [ "${spec%:tp2}" = "$spec" ] ||
    flags=(--cluster "$clusters/cpu-sim-2.json" --tp 2)
  [ "${spec%:norms}" = "$spec" ] || flags+=(--residual-norms)
  "$weftc" compile --model "$model" "${flags[@]}" \
    --global-batch 4 --seq-len 32 --lr 1e-2 --warmup-steps 2 \
    --decay-steps 20 --dp 1 --micro-batch 4 -o "$bundle" >/dev/null ||
    fail "weftc compile $spec"
  # nvcc takes a :tp2 or :constants bundle's kernels only where no earlier
  # bundle had that registry kernel (the others differ only in constants).
  python3 - "$bundle" "$mode" "$spec" <<'PY' || fail "$spec: kernel sources"
import json, os, sys
bundle, mode, spec = sys.argv[1:]
plan = json.load(open(os.path.join(bundle, "plan.json")))
assert plan["kernels"], "no kernels in the plan"
seen = set()
if os.path.exists("kernels.txt"):
    seen = {line.split()[1].split(".")[0] for line in open("kernels.txt")}
with open("kernels.txt", "a") as out:
    for kernel in plan["kernels"]:
        path = os.path.join(bundle, kernel["source"])
        assert 'extern "C" __global__' in open(path).read(), \
            f"{path}: no generated CUDA entry"
        if mode == "cuda" and ":" in spec and \
                kernel["name"].split(".")[0] in seen:
            continue
        constants = " ".join(f"{k}={v}" for k, v in kernel["constants"].items())
        print(path, kernel["name"], constants, file=out)
PY
done

# One kernel: compile (and check) it; on failure print its name and the first
# error line.
compile_one() {
  local src=$1 kernel=$2 log=$1.log
  shift 2
  if [ "$mode" = cuda ]; then
    "$compiler" -std=c++17 -I "$include" \
      -gencode arch=compute_80,code=sm_80 \
      -gencode arch=compute_90,code=sm_90 -Xptxas -warn-spills \
      -c "$src" -o "$src.o" >"$log" 2>&1 &&
      if grep -q 'spilled' "$log"; then
        echo "error: ptxas spills registers: $(grep -m1 spilled "$log")" >>"$log"
        false
      fi
  else
    "$compiler" -x c++ -std=c++17 -O2 -Wall -Wextra -Werror -fPIC -shared \
      -I "$include" "$src" -o "$src.so" >"$log" 2>&1 &&
      "$checker" "$PWD/$src.so" "$kernel" "$@" >>"$log" 2>&1
  fi || {
    echo "FAIL: $src: $(grep -m1 -i 'error\|registry' "$log" || head -n1 "$log")"
    return 1
  }
  [ "$mode" = cuda ] || tail -n1 "$log"
}
export -f compile_one
export mode compiler include checker
start=$(date +%s%N)
xargs -P 2 -L 1 bash -c 'compile_one "$@"' _ <kernels.txt ||
  fail "some kernels did not compile"
ms=$((($(date +%s%N) - start) / 1000000))
printf 'PASS: %s kernel sources compiled (%s) in %d.%03d s\n' \
  "$(wc -l <kernels.txt)" "$mode" $((ms / 1000)) $((ms % 1000))
