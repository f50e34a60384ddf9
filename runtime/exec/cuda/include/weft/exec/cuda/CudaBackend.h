//===- CudaBackend.h - The CUDA backend (issue 6) ---------------*- C++ -*-===//
//
// A Backend whose regions are device memory: one cudaMalloc per region at
// open, one cudaStream per plan stream and one cudaEvent per plan event,
// GEMMs through cuBLASLt (algorithm chosen per shape at prepare()), kernels
// through the CUDA kernel table (the same names, constants and operand order
// as the CPU registry), NCCL collectives on the plan stream's cudaStream, and
// whole-step CUDA graph capture. execute() enqueues and returns; nothing is
// allocated after prepare() and allocateRegion().
//
// Plain C++ header (no CUDA types): CUDA handles stay inside the library.
// docs/runtime.md ("CUDA backend") is the specification, including what has
// not been run on a GPU yet.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_CUDABACKEND_H
#define WEFT_EXEC_CUDA_CUDABACKEND_H

#include "weft/exec/Backend.h"
#include "weft/exec/KernelRegistry.h"
#include "weft/exec/cuda/Probe.h"

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::exec::cuda {

struct CudaBackendOptions {
  /// The device: -1 picks the node-local rank (LOCAL_RANK,
  /// OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID) modulo the
  /// device count, or device 0.
  int device = -1;
  /// Capture the whole step as one CUDA graph after a warm-up step and
  /// replay it (weft-run --no-graph turns it off).
  bool graph = true;
  /// Time every instruction on the device for the executor's trace (timing
  /// events before and after it on its stream; Options::deviceTimes). Needs
  /// graph off.
  bool deviceTimes = false;
  /// fp32 GEMMs stay exact fp32 (CUBLAS_COMPUTE_32F) unless this is set
  /// (CUBLAS_COMPUTE_32F_FAST_TF32: ~1e-3 relative error).
  bool tf32 = false;
  /// bf16/f16 operands go straight to the kernels that take 16-bit storage
  /// (the tensor-core attention) instead of being widened to fp32 scratch.
  /// Off by default until those kernels have been checked on a GPU.
  bool halfKernels = false;
  /// Registry kernels run the bundle's generated code (weft-generate-kernels:
  /// its fatbin where `weftc compile --cuda-arch` wrote one for this device,
  /// else NVRTC at load) instead of the library kernels; bf16/f16 operands
  /// are widened to fp32 around them. A kernel the library lacks runs its
  /// generated code either way. Takes precedence over halfKernels for the
  /// kernels it runs.
  bool generatedKernels = false;
  /// With halfKernels, the 16-bit attention kernels run on cuDNN's fused
  /// flash attention (libcudnn loaded at run time, deterministic backward)
  /// where cuDNN takes their shape; the others, and all of them without
  /// libcudnn, keep the tensor-core kernels (a warning says why). Off by
  /// default until checked on a GPU.
  bool cudnnAttention = false;
  /// Where NVRTC's cubins are cached: empty picks defaultKernelCacheDir()
  /// (GeneratedKernels.h), "off" disables the cache.
  std::string kernelCache;
  /// cuBLASLt workspace per plan stream (one allocation at prepare()).
  int64_t gemmWorkspaceBytes = 32 << 20;
  /// At prepare(), time the heuristic's first 8 algorithms of every GEMM
  /// shape on scratch operands and keep the fastest (weft-run
  /// --gemm-autotune); rank 0 logs the step's GEMM time under both choices.
  /// Off by default: the choice follows timings, so two runs may round
  /// differently.
  bool gemmAutotune = false;
  /// World rank, for error messages ("rank R: ...").
  int rank = 0;
  /// With NCCL communicators: how long synchronize() waits for the streams
  /// before it aborts NCCL and throws (0: no limit; the session's
  /// watchdog). A communicator's asynchronous error aborts at once.
  double watchdogSeconds = 0;
};

/// The kernel names the CUDA table implements, in name order.
std::vector<std::string_view> cudaKernelNames();
/// Whether kernel `name` takes operands of these types (bf16/f16 and f32,
/// in signature order) without widening when CudaBackendOptions::halfKernels
/// is set. Host-only.
bool takesHalfOperands(std::string_view name, const KernelConstants &constants,
                       const std::vector<plan::DType> &reads,
                       const std::vector<plan::DType> &writes);
/// How the backend runs one kernel instruction of a program with
/// CudaBackendOptions::halfKernels on (host-only).
enum class KernelPath {
  Fp32,      // fp32 (and i32) operands: the fp32 kernel as they are
  Half,      // 16-bit operands straight to the kernel's 16-bit twin
  Widened,   // 16-bit operands widened to fp32 scratch and narrowed back
  Generated, // no library entry: the bundle's generated code
  Missing,   // neither a library entry nor a generated source (prepare() fails)
};
struct KernelDispatch {
  const plan::Instruction *inst = nullptr;
  std::string kernel; // the bundle's kernel name
  KernelPath path = KernelPath::Fp32;
};
/// Every kernel instruction of `program`, in stream order (as without
/// CudaBackendOptions::generatedKernels).
std::vector<KernelDispatch> kernelDispatch(const plan::Bundle &bundle,
                                           const plan::Program &program);

/// Null when `name` (or `base` of `base.suffix`) has a CUDA entry; otherwise
/// the load-time error prepare() throws for it (naming the kernel).
/// Host-only: callable without a device.
std::string cudaKernelMissing(std::string_view name);

/// The backend. Everything an executor drives (events, steps, graphs, NVTX
/// ranges, NCCL through connect/communicate, buckets, the staging copies) is
/// the Backend interface; these are the CUDA-only extras.
class CudaBackend : public Backend {
public:
  /// Page-locked host memory owned by the backend (cudaHostAlloc), for
  /// staging load_batch tokens: allocate at load, never in steady state.
  /// stagingBuffer() is this.
  virtual std::byte *pinnedStaging(int64_t bytes) = 0;

  /// How many gemms with an epilogue (weft-fuse-gemm-epilogues) run it in
  /// cuBLASLt; the others run the kernels it folds after the gemm (a shape or
  /// activation cuBLASLt does not offer).
  virtual int64_t cublasEpilogues() const = 0;

  /// NCCL (issue 6): builds the world communicator from an ncclUniqueId that
  /// `broadcastId(bytes, size)` broadcasts from world rank 0 (a no-op for
  /// world size 1), then one communicator per group family of `bundle` by
  /// ncclCommSplit (each rank joins the family's group containing it).
  /// Collective over the world. Throws Error when built without NCCL.
  /// Backend::connect(..., MPI_Comm) is this with MPI_Bcast over the world.
  using Backend::connect;
  virtual void
  connect(const plan::Bundle &bundle, int rank, int worldSize,
          const std::function<void(void *, size_t)> &broadcastId) = 0;
};

/// Throws Error("no CUDA device: ...") without a device, or naming the
/// failing CUDA/cuBLASLt call.
std::unique_ptr<CudaBackend> makeCudaBackend(const CudaBackendOptions &options);

/// Whether the library was built with NCCL (multi-rank support).
bool builtWithNccl();
/// Whether the library was built with NVTX ranges.
bool builtWithNvtx();
/// Whether the library was built with the cuDNN frontend (cuDNN attention;
/// libcudnn itself is loaded at run time).
bool builtWithCudnn();

/// The device `options.device` resolves to for `deviceCount` devices, from
/// the node-local rank variables of the environment (host-only; tested).
int chooseDevice(int requested, int deviceCount);

/// Which GPU a rank runs on: its host and the device's UUID (what NCCL
/// compares), and the device ordinal as this process numbers it.
struct DeviceIdentity {
  std::string host;
  std::string uuid;
  int ordinal = -1;
};

/// Empty when every rank has its own GPU; otherwise the one-line problem
/// naming the first two ranks (indices of `ranks`) that share one. NCCL
/// refuses two ranks on one GPU with a generic error after its setup; this
/// says which ranks and what to change (host-only; tested).
std::string sharedDeviceProblem(const std::vector<DeviceIdentity> &ranks);

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_CUDABACKEND_H
