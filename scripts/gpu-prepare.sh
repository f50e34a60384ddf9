#!/usr/bin/env bash
# Builds the GPU test binaries here (the device machine has no MLIR or
# OpenMPI to build the whole tree) and stages them in .gpu/ (git-ignored),
# to be carried to the device machine and run by scripts/gpu-check.sh:
#   .gpu/bins.tar.xz          bin/ and tools/ below, packed (the carry limit)
#   .gpu/bin/WeftCuda*Tests   every executable holding gpu-labelled tests
#   .gpu/tools/weft-bench-kernels  the memory-bound kernels' bandwidth
#   .gpu/tools/weft-run, .gpu/e2e/
#                             weft-run and the bundles and tokens of
#                             scripts/gpu-e2e.py (CUDA against the CPU backend,
#                             GPT-2 throughput and profile)
#   .gpu/tools/weft-inspect   plan fidelity (gpu-e2e.py fidelity)
#   .gpu/libs.tar.xz          the shared libraries they link that a bare
#                             device machine may lack (OpenMPI's libmpi and
#                             friends, OpenBLAS, gfortran, cudart); never libc,
#                             the C++ runtime, the CUDA driver, cuBLASLt or
#                             NCCL (too large to carry: the device machine's
#                             /usr/local/cuda/lib provides them).
#   .gpu/mpi.tar.xz           Open MPI's components (openmpi3/, pmix/), their
#                             libraries and help files: WeftCudaSessionTests
#                             calls MPI_Init (Session needs MPI; world size
#                             1, no mpirun). The other binaries never call it.
#                             And mpirun (orterun, orted) for gpu-e2e.py's
#                             multi-GPU cases where a machine has several.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${WEFT_BUILD_DIR:-build}
if [ -f "$BUILD/build.ninja" ]; then
  ninja -C "$BUILD" -j "${WEFT_JOBS:-$(nproc)}" \
    WeftCudaKernelsTests WeftCudaBackendTests WeftCudaSessionTests \
    weftc weft-run weft-make-tokens weft-inspect weft-bench-kernels >/dev/null
else
  ./scripts/build.sh >/dev/null
fi
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
# Every executable that holds a gpu-labelled test.
find "$BUILD"/ -type f -perm -u+x -name 'WeftCuda*Tests' -exec cp {} .gpu/bin/ \;
ls .gpu/bin/* >/dev/null 2>&1 || { echo "no WeftCuda*Tests in $BUILD (built with CUDA?)"; exit 1; }
# The tools and bundles of gpu-check.sh's end-to-end stage (weft-run on the
# GPU against the CPU backend, and the GPT-2 throughput runs): see
# scripts/gpu-e2e.py stage.
mkdir -p .gpu/tools
cp "$BUILD"/bin/weft-run "$BUILD"/bin/weft-bench-kernels "$BUILD"/bin/weft-inspect .gpu/tools/
python3 scripts/gpu-e2e.py stage --build "$BUILD" --out .gpu/e2e
for t in .gpu/bin/* .gpu/tools/*; do
  ldd "$t" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|\
    librt.so*|libcuda.so*|libnvidia*|libcublas*|libnccl*|libnvrtc*) ;;
    *) cp -L "$lib" .gpu/lib/ ;;
  esac
done
tar -C .gpu -cJf .gpu/libs.tar.xz lib && rm -rf .gpu/lib
# Open MPI for singleton MPI_Init on the device machine (components are
# dlopen'ed from compiled-in paths: gpu-check.sh points Open MPI and PMIx at
# the staged copies).
ompi=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
if [ -d "$ompi" ]; then
  mkdir -p .gpu/mpi/openmpi3 .gpu/mpi/pmix .gpu/mpi/lib .gpu/mpi/help
  cp -L "$ompi"/*.so .gpu/mpi/openmpi3/
  [ -d "$pmix" ] && cp -L "$pmix"/*.so .gpu/mpi/pmix/ 2>/dev/null || true
  cp -L /usr/lib/x86_64-linux-gnu/openmpi/lib/libmca_common_*.so* .gpu/mpi/lib/ 2>/dev/null || true
  cp /usr/share/openmpi/help-*.txt .gpu/mpi/help/ 2>/dev/null || true
  # mpirun (Open MPI 4: orterun; orted for other nodes) for the multi-GPU
  # cases of gpu-e2e.py, where the machine has several GPUs.
  mkdir -p .gpu/mpi/bin
  for tool in orterun orted; do
    [ -x "/usr/bin/$tool" ] && cp -L "/usr/bin/$tool" .gpu/mpi/bin/
  done
  ln -sf orterun .gpu/mpi/bin/mpirun
  for f in .gpu/mpi/openmpi3/*.so .gpu/mpi/pmix/*.so .gpu/mpi/bin/orte*; do
    [ -e "$f" ] && ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++*|libgcc_s*|ld-linux*|libpthread*|libdl.so*|\
      librt.so*|libcuda.so*|libnvidia*|libcublas*|libnccl*|libnvrtc*) ;;
      *) cp -Ln "$lib" .gpu/mpi/lib/ 2>/dev/null || true ;;
    esac
  done
  tar -C .gpu -cJf .gpu/mpi.tar.xz mpi && rm -rf .gpu/mpi
fi
ls .gpu/bin .gpu/tools
# The device tool carries at most 64 MiB: the binaries (each with every
# kernel's sm_80 and sm_90 code) go as one xz archive, about a fifth of
# their size; gpu-check.sh unpacks it. hf-crosscheck.py stage adds ~7 MiB.
tar -C .gpu -cJf .gpu/bins.tar.xz bin tools && rm -rf .gpu/bin .gpu/tools
du -sh .gpu
mib=$(du -sm .gpu | cut -f1)
[ "$mib" -le 56 ] || echo "warning: .gpu is $mib MiB; with the HF cross-check it may pass the device tool's 64 MiB"
