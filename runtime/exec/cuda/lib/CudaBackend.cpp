//===- CudaBackend.cpp - Device execution of the compute opcodes ----------===//
//
// Every CUDA, cuBLASLt and NCCL status is checked; a failure throws Error
// "rank R: <where>: <call> failed: <name> (<description>)". execute()
// enqueues on the plan stream's cudaStream and returns; all device memory
// (regions, cuBLASLt workspaces, per-stream scratch for bf16/f16 widening and
// kernel workspaces, the optimizer scalars) is allocated at prepare() and
// allocateRegion(), none in steady state.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/cuda/CudaBackend.h"
#include "AdamWStep.h"
#include "Describe.h"
#include "HostMath.h"
#include "Internal.h"
#include "Nccl.h"
#include "VmmRegion.h"
#include "weft/exec/Error.h"
#include "weft/exec/OperandChecks.h"
#include "weft/exec/cuda/CudnnAttention.h"
#include "weft/exec/cuda/GemmKey.h"
#include "weft/exec/cuda/GeneratedKernels.h"
#include "weft/exec/cuda/Workspace.h"
#include "weft/kernels/Activations.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/CpuKernels.h"
#include "weft/kernels/Optimizer.h"
#include "weft/plan/Epilogue.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#ifdef WEFT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

namespace weft::exec::cuda {

using plan::DType;
using plan::Instruction;
using plan::Opcode;

namespace {
using plan::GemmEpilogue;

/// Whether an epilogue reads or writes the aux matrix (else only the bias
/// vector: Bias reads it, BiasGrad writes it).
bool usesAux(GemmEpilogue kind) {
  return kind == GemmEpilogue::GeluBias || kind == GemmEpilogue::DGelu;
}
} // namespace

bool builtWithNccl() {
#ifdef WEFT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool builtWithNvtx() {
#ifdef WEFT_HAVE_NVTX
  return true;
#else
  return false;
#endif
}

int chooseDevice(int requested, int deviceCount) {
  if (deviceCount <= 0)
    return -1;
  if (requested >= 0)
    return requested < deviceCount ? requested : -1;
  for (const char *name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char *value = std::getenv(name);
    if (!value || !*value)
      continue;
    char *end = nullptr;
    long local = std::strtol(value, &end, 10);
    if (*end == '\0' && local >= 0)
      return int(local % deviceCount);
  }
  return 0;
}

std::string sharedDeviceProblem(const std::vector<DeviceIdentity> &ranks) {
  std::map<std::pair<std::string, std::string>, size_t> first;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const DeviceIdentity &id = ranks[rank];
    auto [it, inserted] = first.emplace(std::pair(id.host, id.uuid), rank);
    if (inserted)
      continue;
    return "ranks " + std::to_string(it->second) + " and " +
           std::to_string(rank) + " both run on " + id.uuid + " of host " +
           id.host + " (device " + std::to_string(ranks[it->second].ordinal) +
           " and " + std::to_string(id.ordinal) +
           " of their processes): NCCL needs one GPU per rank; start at most "
           "as many ranks per host as it has GPUs, or give each rank its own "
           "(CUDA_VISIBLE_DEVICES, --device)";
  }
  return {};
}

namespace {

std::string cublasName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  default:
    return "cublasStatus " + std::to_string(int(status));
  }
}

/// How the helper kernels read and write a float operand of `dtype`.
FloatStorage storageOf(DType dtype) {
  return dtype == DType::BF16  ? FloatStorage::BF16
         : dtype == DType::F16 ? FloatStorage::F16
                               : FloatStorage::F32;
}

/// The bit pattern of `value` stored as one element of `dtype`.
uint64_t fillBits(DType dtype, double value) {
  uint64_t bits = 0;
  switch (dtype) {
  case DType::F32: {
    float f = float(value);
    std::memcpy(&bits, &f, 4);
    break;
  }
  case DType::BF16:
    bits = kernels::floatToBf16(float(value)).bits;
    break;
  case DType::F16:
    bits = kernels::floatToF16(float(value)).bits;
    break;
  case DType::F64:
    std::memcpy(&bits, &value, 8);
    break;
  case DType::I32:
    bits = uint32_t(int32_t(value));
    break;
  case DType::I64:
    bits = uint64_t(int64_t(value));
    break;
  case DType::U16:
    bits = uint16_t(value);
    break;
  case DType::U8:
    bits = uint8_t(value);
    break;
  }
  return bits;
}

/// One cached cuBLASLt GEMM configuration.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false; // cuBLASLt has an algorithm for the key
  /// With CudaBackendOptions::gemmAutotune: the heuristic's candidates, best
  /// guess first, which autotuneGemms() times (cleared after).
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
};

/// Per gemm instruction: its plan and host scalars (stable addresses).
struct PreparedGemm {
  const GemmPlan *plan = nullptr;
  float alpha32 = 1, beta32 = 0;
  double alpha64 = 1, beta64 = 0;
  bool f64 = false;
  /// With an epilogue cuBLASLt runs (weft/plan/Epilogue.h): where its bias,
  /// aux matrix and D live (the regions' bases are known once
  /// allocateRegion has run).
  std::optional<GemmEpilogue> epilogue;
  struct Place {
    plan::Region region = plan::Region::Persistent;
    int64_t offset = 0; // bytes into the region
  } bias, aux, output;
};

/// A kernel's generated code loaded on the device: its entries in launch
/// order (the source's `// weft-launch:` lines).
struct GeneratedModule {
  cudaLibrary_t library = nullptr;
  std::vector<cudaKernel_t> entries;
  std::vector<GeneratedLaunch> launches;
  /// writes[gradientWrite] is a loss kernel's gradient, which the generated
  /// code does not multiply by the (static) loss scale; -1: none.
  int gradientWrite = -1;
};

struct ResolvedKernel {
  const KernelSpec *spec = nullptr;
  const CudaKernelEntry *entry = nullptr;
  KernelConstants constants;
  /// Runs its generated code (CudaBackendOptions::generatedKernels, or no
  /// library entry); loaded by prepareKernel.
  bool generated = false;
  std::unique_ptr<GeneratedModule> module;
};

/// Host work of one instruction on host-region operands (optimizer offload),
/// launched in stream order with cudaLaunchHostFunc: a fill, the clip of the
/// offloaded gradients, or AdamW with the CPU kernel. The operands are fixed by
/// the plan, so a captured graph replays the same task; the step's scalars and
/// the loss scaler's skip are read from `context` (the backend's copy of the
/// step's StepContext, refreshed at beginStep() and when the instruction is
/// issued) when the task runs, not when it is enqueued.
struct HostTask {
  const Instruction *inst = nullptr;
  std::vector<Operand> reads, writes;
  const StepContext *context = nullptr;
  std::vector<float> wide; // a bf16/f16 gradient widened to fp32
};

/// Runs on CUDA's host-callback thread: must not call the CUDA API.
void CUDART_CB runHostTask(void *data) {
  HostTask &task = *static_cast<HostTask *>(data);
  const Instruction &inst = *task.inst;
  if (inst.opcode == Opcode::Copy) { // host to host
    if (task.writes[0].data != task.reads[0].data)
      std::memmove(task.writes[0].data, task.reads[0].data,
                   size_t(task.reads[0].bytes));
    return;
  }
  if (inst.opcode == Opcode::Fill) {
    int64_t eb = plan::elementBytes(inst.dtype);
    uint64_t bits = fillBits(inst.dtype, inst.value);
    for (const Operand &out : task.writes)
      for (int64_t i = 0; i < out.bytes / eb; ++i)
        std::memcpy(out.data + i * eb, &bits, size_t(eb)); // little-endian
    return;
  }
  const StepContext &context = *task.context;
  if (inst.opcode == Opcode::Clip) {
    clipOnHost(context, inst.dtype, task.reads[0].as<const float>(),
               task.writes);
    return;
  }
  std::optional<kernels::AdamWStep> step =
      hostAdamWStep(context, inst, task.reads);
  if (!step) // the loss scaler skipped this step
    return;
  const Operand &grad = task.reads[1];
  const float *g = grad.as<const float>();
  if (grad.dtype == DType::BF16) {
    kernels::cpu::fromBf16(inst.count, grad.as<const kernels::BF16>(),
                           task.wide.data());
    g = task.wide.data();
  } else if (grad.dtype == DType::F16) {
    kernels::cpu::fromF16(inst.count, grad.as<const kernels::F16>(),
                          task.wide.data());
    g = task.wide.data();
  }
  float *param = task.writes[0].as<float>();
  kernels::cpu::adamwStep(*step, inst.count, g, param,
                          task.writes[1].as<float>(),
                          task.writes[2].as<float>());
  if (task.writes.size() < 4)
    return;
  const Operand &copy = task.writes[3];
  if (copy.dtype == DType::BF16)
    kernels::cpu::toBf16(inst.count, param, copy.as<kernels::BF16>());
  else if (copy.dtype == DType::F16)
    kernels::cpu::toF16(inst.count, param, copy.as<kernels::F16>());
  else
    std::memcpy(copy.data, param, size_t(inst.count) * 4);
}

class DeviceBackend final : public CudaBackend {
public:
  explicit DeviceBackend(const CudaBackendOptions &options)
      : options_(options) {}
  ~DeviceBackend() override;

  void open();

  std::string_view name() const override { return "cuda"; }
  std::byte *allocateRegion(plan::Region region, int64_t bytes) override;
  int64_t cublasEpilogues() const override {
    return std::count_if(gemms_.begin(), gemms_.end(), [](const auto &entry) {
      return entry.second.epilogue.has_value();
    });
  }
  int64_t decommit(std::byte *data, int64_t bytes) override;
  void recommit(std::byte *data, int64_t bytes) override;
  bool hostAddressable() const override { return false; }
  void poison(std::byte *data, int64_t bytes) override;
  std::byte *stagingBuffer(int64_t bytes) override {
    return pinnedStaging(bytes);
  }
  void copyToHostAsync(std::byte *host, const std::byte *device, int64_t bytes,
                       int64_t stream) override;
  void copyToHost(std::byte *host, const std::byte *device,
                  int64_t bytes) override;
  void copyToDevice(std::byte *device, const std::byte *host,
                    int64_t bytes) override;
  int64_t deviceBytesInUse() const override { return inUse_; }
  int64_t workspaceBytes() const override { return workspaceBytes_; }
  int64_t deviceBytesAllocated() const override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess)
      return -1;
    return int64_t(freeAtOpen_) - int64_t(free);
  }
  void prepare(const plan::Bundle &bundle,
               const plan::Program &program) override;
  void execute(const Instruction &inst, int64_t stream,
               const std::vector<Operand> &reads,
               const std::vector<Operand> &writes,
               const StepContext &context) override;

  void recordEvent(int64_t event, int64_t stream) override;
  void waitEvent(int64_t event, int64_t stream) override;
  void beginStep(const StepContext &context) override;
  bool registerHostMemory(std::byte *host, int64_t bytes) override;
  void unregisterHostMemory(std::byte *host) override;
  void synchronize() override;
  /// synchronize() with NCCL communicators: polls the streams, NCCL's
  /// asynchronous errors and the watchdog.
  void waitWatchingNccl();
  /// Ends a capture (discarding it) and destroys the step graph, without
  /// waiting for a replay still running.
  void discardGraph() noexcept;
  /// After a failure: discardGraph(), then aborts NCCL.
  void abortAfterFailure() noexcept;
  std::byte *pinnedStaging(int64_t bytes) override;
  void copyToDeviceAsync(std::byte *device, const std::byte *host,
                         int64_t bytes, int64_t stream) override;
  void beginCapture() override;
  void endCapture() override;
  bool hasGraph() const override { return graphExec_ != nullptr; }
  void replay() override;
  /// Forgets the captured step (the executor captures the next one anew).
  void dropGraph();
  bool graphEnabled() const override { return options_.graph; }
  bool timesInstructions() const override { return options_.deviceTimes; }
  std::string_view instructionNote(const Instruction &inst) const override {
    if (cudnnKernels_.count(&inst))
      return "cuDNN";
    if (epilogueSteps_.count(&inst)) // cuBLASLt lacks the epilogue
      return "epilogue as kernels";
    return {};
  }
  void markInstruction(int64_t stream, int64_t mark) override;
  std::vector<double> markTimes(int64_t count) override;
  void pushRange(const std::string &name) override;
  void popRange() override;
  void connect(const plan::Bundle &bundle, int rank, int worldSize,
               const std::function<void(void *, size_t)> &broadcastId) override;
  void connect(const plan::Bundle &bundle, int rank, int worldSize,
               MPI_Comm world) override {
    // No NCCL communicator when no program of the bundle communicates (the
    // same answer on every rank): a serial plan runs without NCCL.
    bool communicates = false;
    for (const plan::Program &program : bundle.programs)
      for (const plan::Stream &stream : program.streams)
        for (const Instruction &inst : stream.instructions)
          communicates = communicates || plan::isCollective(inst.opcode) ||
                         plan::isPointToPoint(inst.opcode);
    options_.rank = rank;
    if (!communicates)
      return;
    checkOneGpuPerRank(worldSize, world);
    connect(bundle, rank, worldSize, [world](void *data, size_t bytes) {
      MPI_Bcast(data, int(bytes), MPI_BYTE, 0, world);
    });
  }
  // NCCL work is ordered on the plan stream's cudaStream: complete as far as
  // the stream's next instruction is concerned.
  bool communicationDone(int64_t) override { return true; }
  bool coalescesCommunication() const override { return true; }
  void communicate(const Instruction &inst, int64_t stream,
                   const std::vector<Operand> &reads,
                   const std::vector<Operand> &writes,
                   const std::string &where) override;
  void beginBucket() override;
  void endBucket() override;
  void abortCommunication() override;

private:
  /// Gathers every rank's (host, GPU UUID) over `world` and throws Error on
  /// every rank when two share a GPU (before NCCL's own, vaguer refusal).
  void checkOneGpuPerRank(int worldSize, MPI_Comm world);
  std::string prefix() const {
    return "rank " + std::to_string(options_.rank) + ": ";
  }
  void check(cudaError_t rc, const char *call, const std::string &where) const {
    if (rc == cudaSuccess)
      return;
    throw Error(prefix() + (where.empty() ? "" : where + ": ") + call +
                " failed: " + cudaGetErrorName(rc) + " (" +
                cudaGetErrorString(rc) + ")");
  }
  void check(cublasStatus_t rc, const char *call,
             const std::string &where) const {
    if (rc == CUBLAS_STATUS_SUCCESS)
      return;
    throw Error(prefix() + (where.empty() ? "" : where + ": ") + call +
                " failed: " + cublasName(rc));
  }
  /// An instruction's name in errors: "stream 0 'compute' instruction 12
  /// (fwd L0) gemm" for one of the prepared program's (an epilogue's steps,
  /// made by the backend, say their stream, opcode and phase).
  std::string where(const Instruction &inst, int64_t stream) const {
    std::string opcode(plan::toString(inst.opcode));
    if (program_ && stream >= 0 && size_t(stream) < program_->streams.size()) {
      const std::vector<Instruction> &insts =
          program_->streams[size_t(stream)].instructions;
      std::less<const Instruction *> before;
      if (!insts.empty() && !before(&inst, insts.data()) &&
          before(&inst, insts.data() + insts.size()))
        return describeInstruction(*program_, size_t(stream),
                                   size_t(&inst - insts.data())) +
               " " + opcode;
    }
    return "stream " + std::to_string(stream) + " " + opcode +
           (inst.phase.empty() ? "" : " '" + inst.phase + "'");
  }
  /// An instruction whose name is built only when a check fails (checks
  /// run on every instruction of an eager step).
  struct At {
    const Instruction &inst;
    int64_t stream;
  };
  void check(cudaError_t rc, const char *call, const At &at) const {
    if (rc != cudaSuccess)
      check(rc, call, where(at.inst, at.stream));
  }
  void check(cublasStatus_t rc, const char *call, const At &at) const {
    if (rc != CUBLAS_STATUS_SUCCESS)
      check(rc, call, where(at.inst, at.stream));
  }
  cudaStream_t streamOf(int64_t stream) const {
    if (stream < 0 || size_t(stream) >= streams_.size())
      throw Error(prefix() + "stream " + std::to_string(stream) +
                  " does not exist (prepare() made " +
                  std::to_string(streams_.size()) + ")");
    return streams_[size_t(stream)];
  }

  void prepareKernel(const plan::Bundle &bundle, const plan::Program &program,
                     const Instruction &inst, size_t stream,
                     const std::string &where);
  /// A gemm's epilogue on cuBLASLt where it offers the shape (and the GELU
  /// is the tanh one it computes); `prepared` then runs it.
  void prepareEpilogue(const plan::Program &program, const Instruction &gemm,
                       const GemmKey &key, PreparedGemm &prepared,
                       const std::string &where);
  void prepareOther(const plan::Program &program, const Instruction &inst,
                    const std::string &where);
  /// Loads `kernel`'s generated code: the bundle's fatbin when it has one
  /// for this device, else an NVRTC cubin (through the kernel cache).
  void loadGenerated(const plan::Bundle &bundle, const plan::Kernel &kernel,
                     ResolvedKernel &resolved, const std::string &where);
  /// Launches the entries of `kernel`'s generated code on call_'s operands
  /// (`writes`: the plan's, for the loss-scaled gradient's size); the first
  /// failure.
  cudaError_t launchGenerated(const ResolvedKernel &kernel,
                              const std::vector<Operand> &writes,
                              cudaStream_t stream);
  /// CudaBackendOptions::gemmAutotune: times every cached plan's candidates
  /// on scratch operands and keeps the fastest (after the workspace exists).
  void autotuneGemms();
  /// The cached plan of `key`; null when cuBLASLt has no algorithm for it.
  const GemmPlan *findGemmPlan(const GemmKey &key, const std::string &where);
  const GemmPlan &gemmPlan(const GemmKey &key, const std::string &where);
  void runKernel(const Instruction &inst, int64_t stream,
                 const std::vector<Operand> &reads,
                 const std::vector<Operand> &writes);
  void runGemm(const Instruction &inst, int64_t stream,
               const std::vector<Operand> &reads,
               const std::vector<Operand> &writes);
  void runOptimizer(const Instruction &inst, int64_t stream,
                    const std::vector<Operand> &reads,
                    const std::vector<Operand> &writes,
                    const StepContext &context);
  /// Enqueues `inst` (fill or optimizer_step on host-region operands) as a
  /// host function on `stream`.
  void runOnHost(const Instruction &inst, int64_t stream,
                 const std::vector<Operand> &reads,
                 const std::vector<Operand> &writes,
                 const StepContext &context);
  /// Whether `inst` writes host-region buffers only (prepare()'s answer).
  bool onHost(const Instruction &inst) const {
    return hostInstructions_.count(&inst) != 0;
  }
  /// The stream's pieces of the workspace (nullptr where it needs none).
  std::byte *workspacePiece(const std::vector<size_t> &offsets,
                            int64_t stream) const {
    size_t offset = offsets[size_t(stream)];
    return offset == WorkspaceLayout::kNone
               ? nullptr
               : static_cast<std::byte *>(workspace_) + offset;
  }
  float *scratchOf(int64_t stream) const {
    return reinterpret_cast<float *>(
        workspacePiece(workspaceLayout_.scratch, stream));
  }

  CudaBackendOptions options_;
  int device_ = -1;
  bool prepared_ = false;
  std::vector<void *> regions_; // cudaMalloc'd device regions
  std::map<plan::Region, std::byte *> regionBase_; // by allocateRegion
  /// Device regions on the driver's virtual memory management, whose chunks
  /// offload can release (VmmRegion.h); preferred where available.
  std::vector<std::unique_ptr<VmmRegion>> vmmRegions_;
  VmmRegion *vmmRegionOf(const std::byte *data, int64_t bytes) const {
    for (const auto &region : vmmRegions_)
      if (region->contains(data, bytes))
        return region.get();
    return nullptr;
  }
  std::vector<void *> hostRegions_; // the plan's host region (pinned)
  std::vector<void *> staging_;     // pinned host
  // Fills and optimizer steps on host-region operands (prepare()), and
  // their tasks, made at the first execute() and reused by every step and
  // by a captured graph (stable addresses).
  std::unordered_map<const Instruction *, int64_t> hostInstructions_;
  std::unordered_map<const Instruction *, std::unique_ptr<HostTask>> hostTasks_;
  StepContext hostContext_; // what host tasks read when they run
  /// Copies `context` into hostContext_, writing only the fields that
  /// changed (host tasks of this step may be reading the others).
  void refreshHostContext(const StepContext &context);
  int64_t inUse_ = 0;
  int64_t workspaceBytes_ = 0; // the prepare() allocation
  size_t freeAtOpen_ = 0;      // cudaMemGetInfo once the context exists
  std::vector<std::pair<Operand, float *>> widenedCopies_; // per kernel call
  bool vmmFallbackNoted_ = false;
  std::vector<cudaStream_t> streams_;
  /// The program prepare() was given (the session's, which outlives the
  /// backend's use of it): names its instructions in errors.
  const plan::Program *program_ = nullptr;
  std::vector<cudaEvent_t> events_;     // plan events
  std::vector<cudaEvent_t> joinEvents_; // graph capture: per stream
  cudaEvent_t forkEvent_ = nullptr;     // graph capture and beginStep
  cudaEvent_t uploadDone_ = nullptr;    // the step scalars were copied
  /// Device timing: the step's start, and the marks (made at prepare: two
  /// per instruction, as many as the executor enqueues in a step).
  cudaEvent_t stepStartMark_ = nullptr;
  std::vector<cudaEvent_t> marks_;
  cublasLtHandle_t lt_ = nullptr;
  std::map<GemmKey, GemmPlan> gemmCache_;
  std::unordered_map<const Instruction *, PreparedGemm> gemms_;
  /// The gemms whose epilogue cuBLASLt does not run: the kernels it folds
  /// (plan::epilogueSteps), run after the plain gemm, and their operands.
  std::unordered_map<const Instruction *, std::vector<plan::EpilogueStep>>
      epilogueSteps_;
  std::vector<Operand> stepReads_, stepWrites_;
  /// A byte of a region, from allocateRegion's base.
  std::byte *at(const PreparedGemm::Place &place) const {
    return regionBase_.at(place.region) + place.offset;
  }
  std::vector<ResolvedKernel> kernels_; // by bundle kernel id
  /// Generated code: NVRTC through the cache (made on first use), what was
  /// loaded from where, and the kernel instructions that run it.
  std::unique_ptr<KernelCompiler> compiler_;
  int rtcArch_ = 0; // the device's sm_XY, as XY, for NVRTC
  int fatbinModules_ = 0;
  int fatbinMisses_ = 0; // fatbins without code for this device
  int64_t generatedLaunches_ = 0;
  std::vector<void *> generatedArgs_, generatedArgAddresses_;
  // One device allocation at prepare() (Workspace.h): per stream what its
  // instructions need (kernel scratch, a cuBLASLt workspace, a double
  // accumulator), then the step scalars.
  void *workspace_ = nullptr;
  std::vector<StreamWorkspaceNeeds> workspaceNeeds_; // by plan stream
  WorkspaceLayout workspaceLayout_;
  kernels::AdamWStep *stepDevice_ = nullptr;
  kernels::AdamWStep *stepHost_ = nullptr; // pinned
  int64_t uploadedStep_ = -1;
  CudaKernelCall call_;
  CudaHalfCall halfCall_;
  /// Kernel instructions that run on their 16-bit operands (halfPath,
  /// decided once by prepareKernel).
  std::unordered_map<const Instruction *, kernels::gpu::HalfType> halfKernels_;
  /// With cudnnAttention: cuDNN (opened by the first attention kernel; why
  /// not, once it failed) and the 16-bit attention kernels it runs.
  std::unique_ptr<CudnnAttention> cudnn_;
  std::string cudnnUnavailable_;
  std::set<std::string> cudnnRefusals_; // reasons warned about
  std::unordered_map<const Instruction *, const CudnnAttentionGraph *>
      cudnnKernels_;
  int64_t cudnnCandidates_ = 0;
  void prepareCudnnAttention(const ResolvedKernel &kernel,
                             const Instruction &inst, int64_t &scratchFloats,
                             const std::string &what);
  float lossScale_ = 1; // training.loss_scale.initial (static only)
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graphExec_ = nullptr;
  bool capturing_ = false;
  std::unique_ptr<NcclComms> comms_;
  std::vector<std::string> streamNames_; // the plan's, for NCCL's channels
  bool hostRegisterNoted_ = false;
  /// The stream of each generated kernel with a __device__ workspace.
  std::map<int64_t, size_t> workspaceStream_;
};

DeviceBackend::~DeviceBackend() {
  // Never throws: errors here are ignored (the process is exiting or the
  // step already reported the failure). The graph goes before the
  // communicators: ncclCommDestroy waits until no graph holds the calls
  // captured on them.
  discardGraph();
  if (device_ >= 0)
    cudaDeviceSynchronize();
  cudnn_.reset(); // its graphs' buffers and handle before the streams
  comms_.reset(); // ncclCommDestroy (a failed collective already aborted)
  for (auto &[key, plan] : gemmCache_) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  if (lt_)
    cublasLtDestroy(lt_);
  for (ResolvedKernel &kernel : kernels_)
    if (kernel.module && kernel.module->library)
      cudaLibraryUnload(kernel.module->library);
  for (cudaEvent_t event : events_)
    cudaEventDestroy(event);
  for (cudaEvent_t event : joinEvents_)
    cudaEventDestroy(event);
  if (forkEvent_)
    cudaEventDestroy(forkEvent_);
  if (uploadDone_)
    cudaEventDestroy(uploadDone_);
  if (stepStartMark_)
    cudaEventDestroy(stepStartMark_);
  for (cudaEvent_t mark : marks_)
    cudaEventDestroy(mark);
  for (cudaStream_t stream : streams_)
    cudaStreamDestroy(stream);
  for (void *region : regions_)
    cudaFree(region);
  vmmRegions_.clear();
  for (void *region : hostRegions_)
    cudaFreeHost(region);
  if (workspace_)
    cudaFree(workspace_);
  if (stepHost_)
    cudaFreeHost(stepHost_);
  for (void *host : staging_)
    cudaFreeHost(host);
}

void DeviceBackend::open() {
  std::string problem = cudaDeviceProblem();
  if (!problem.empty())
    throw Error(problem);
  int count = cudaDeviceCount();
  device_ = chooseDevice(options_.device, count);
  if (device_ < 0)
    throw Error(prefix() + "CUDA device " + std::to_string(options_.device) +
                " does not exist (" + std::to_string(count) + " devices)");
  check(cudaSetDevice(device_), "cudaSetDevice", "opening");
  // Creates the context; what the device has free after it is the baseline
  // of deviceBytesAllocated().
  check(cudaFree(nullptr), "cudaFree", "opening");
  size_t total = 0;
  check(cudaMemGetInfo(&freeAtOpen_, &total), "cudaMemGetInfo", "opening");
  check(cublasLtCreate(&lt_), "cublasLtCreate", "opening");
  check(cudaEventCreateWithFlags(&forkEvent_, cudaEventDisableTiming),
        "cudaEventCreate", "opening");
  check(cudaEventCreateWithFlags(&uploadDone_, cudaEventDisableTiming),
        "cudaEventCreate", "opening");
  void *host = nullptr;
  check(cudaHostAlloc(&host, sizeof(kernels::AdamWStep), cudaHostAllocDefault),
        "cudaHostAlloc", "opening");
  stepHost_ = static_cast<kernels::AdamWStep *>(host);
}

//===--- Memory ----------------------------------------------------------===//

std::byte *DeviceBackend::allocateRegion(plan::Region region, int64_t bytes) {
  std::string what = "allocating the " + std::string(plan::toString(region)) +
                     " region of " + std::to_string(bytes) + " bytes";
  void *data = nullptr;
  if (region == plan::Region::Host) {
    // Pinned host memory: DMA-able by copy instructions in either direction
    // and read and written by host tasks; not device memory (not in use).
    check(cudaHostAlloc(&data, size_t(std::max<int64_t>(bytes, 1)),
                        cudaHostAllocDefault),
          "cudaHostAlloc", what);
    hostRegions_.push_back(data);
    std::memset(data, 0, size_t(std::max<int64_t>(bytes, 1)));
    regionBase_[region] = static_cast<std::byte *>(data);
    return static_cast<std::byte *>(data);
  }
  // Prefer a region whose physical memory offload can return; WEFT_CUDA_VMM=0
  // forces plain cudaMalloc.
  const char *vmm = std::getenv("WEFT_CUDA_VMM");
  bool tryVmm = !vmm || std::string_view(vmm) != "0";
  std::string why;
  std::unique_ptr<VmmRegion> mapped;
  if (tryVmm)
    mapped = VmmRegion::create(device_, bytes, why);
  if (mapped) {
    data = mapped->data();
    vmmRegions_.push_back(std::move(mapped));
  } else {
    if (tryVmm && !vmmFallbackNoted_) {
      std::fprintf(stderr,
                   "weft-run: cuda: device regions without virtual "
                   "memory management (%s): offload cannot return "
                   "device memory\n",
                   why.c_str());
      vmmFallbackNoted_ = true;
    }
    check(cudaMalloc(&data, size_t(std::max<int64_t>(bytes, 1))), "cudaMalloc",
          what);
    regions_.push_back(data);
  }
  // As on the CPU: the persistent region starts zeroed, the arena NaN-filled
  // (all-ones bytes) so reads of unwritten bytes are visible.
  check(cudaMemset(data, region == plan::Region::Arena ? 0xff : 0,
                   size_t(std::max<int64_t>(bytes, 1))),
        "cudaMemset", what);
  // The fill runs on the legacy stream, which the plan's non-blocking
  // streams do not wait for: done before anything is written here.
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", what);
  inUse_ += bytes;
  regionBase_[region] = static_cast<std::byte *>(data);
  return static_cast<std::byte *>(data);
}

int64_t DeviceBackend::decommit(std::byte *data, int64_t bytes) {
  // The range is poisoned (stray reads of the bytes that stay backed show
  // NaN); a VMM region then returns the chunks wholly inside it, while a
  // cudaMalloc allocation cannot be partly returned and stays allocated.
  synchronize();
  check(cudaMemset(data, 0xff, size_t(bytes)), "cudaMemset", "decommit");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "decommit");
  VmmRegion *region = vmmRegionOf(data, bytes);
  if (!region)
    return 0;
  // A captured step is dropped (the next step captures again): NCCL
  // registers the buffers of collectives captured in a graph, which cuMem
  // memory qualifies for, maps them on its peers and deregisters them only
  // when the graph is destroyed, so a replay after the chunks were replaced
  // would move data through the released memory.
  dropGraph();
  int64_t released = region->decommit(data, bytes);
  inUse_ -= released;
  return released;
}

void DeviceBackend::recommit(std::byte *data, int64_t bytes) {
  if (VmmRegion *region = vmmRegionOf(data, bytes))
    inUse_ += region->recommit(data, bytes);
}

void DeviceBackend::poison(std::byte *data, int64_t bytes) {
  synchronize();
  check(cudaMemset(data, 0xff, size_t(bytes)), "cudaMemset", "poison");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "poison");
}
void DeviceBackend::copyToHostAsync(std::byte *host, const std::byte *device,
                                    int64_t bytes, int64_t stream) {
  // cudaMemcpyDefault: the source may be the pinned host region (the sum of
  // squares an offloaded clip reads).
  check(cudaMemcpyAsync(host, device, size_t(bytes), cudaMemcpyDefault,
                        streamOf(stream)),
        "cudaMemcpyAsync", "stream " + std::to_string(stream) + " statistics");
}
void DeviceBackend::copyToHost(std::byte *host, const std::byte *device,
                               int64_t bytes) {
  synchronize();
  check(cudaMemcpy(host, device, size_t(bytes), cudaMemcpyDeviceToHost),
        "cudaMemcpy", "copy to host");
}

void DeviceBackend::copyToDevice(std::byte *device, const std::byte *host,
                                 int64_t bytes) {
  synchronize();
  check(cudaMemcpy(device, host, size_t(bytes), cudaMemcpyHostToDevice),
        "cudaMemcpy", "copy to device");
  // From pageable memory cudaMemcpy may return before the DMA has landed,
  // and the plan's non-blocking streams do not wait for the legacy stream:
  // the copy is complete when this returns (Backend.h's contract).
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "copy to device");
}

bool DeviceBackend::registerHostMemory(std::byte *host, int64_t bytes) {
  cudaError_t rc = cudaHostRegister(host, size_t(std::max<int64_t>(bytes, 1)),
                                    cudaHostRegisterDefault);
  if (rc == cudaSuccess)
    return true;
  cudaGetLastError(); // not sticky: clear it
  if (!hostRegisterNoted_)
    std::fprintf(stderr,
                 "weft-run: cuda: warning: cudaHostRegister of %lld bytes "
                 "failed (%s): offload copies go through the driver's "
                 "staging\n",
                 static_cast<long long>(bytes), cudaGetErrorName(rc));
  hostRegisterNoted_ = true;
  return false;
}

void DeviceBackend::unregisterHostMemory(std::byte *host) {
  if (cudaHostUnregister(host) != cudaSuccess)
    cudaGetLastError();
}

std::byte *DeviceBackend::pinnedStaging(int64_t bytes) {
  void *host = nullptr;
  check(cudaHostAlloc(&host, size_t(std::max<int64_t>(bytes, 1)),
                      cudaHostAllocDefault),
        "cudaHostAlloc",
        "allocating " + std::to_string(bytes) + " bytes of staging memory");
  staging_.push_back(host);
  return static_cast<std::byte *>(host);
}

void DeviceBackend::copyToDeviceAsync(std::byte *device, const std::byte *host,
                                      int64_t bytes, int64_t stream) {
  check(cudaMemcpyAsync(device, host, size_t(bytes), cudaMemcpyHostToDevice,
                        streamOf(stream)),
        "cudaMemcpyAsync", "stream " + std::to_string(stream) + " load_batch");
}

void DeviceBackend::synchronize() {
  if (comms_)
    waitWatchingNccl();
  for (cudaStream_t stream : streams_)
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", "");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", "");
}

void DeviceBackend::waitWatchingNccl() {
  // A collective whose peer died spins on the device forever: poll the
  // streams and NCCL's asynchronous errors instead of blocking, and give up
  // after the watchdog's time.
  auto start = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    bool done = true;
    for (cudaStream_t stream : streams_) {
      cudaError_t rc = cudaStreamQuery(stream);
      if (rc == cudaErrorNotReady) {
        done = false;
        break;
      }
      check(rc, "cudaStreamQuery", "synchronize");
    }
    if (done)
      return;
    if (std::string error = comms_->asyncError(); !error.empty()) {
      abortAfterFailure();
      throw Error(prefix() + "NCCL: " + error +
                  " (NCCL communicators aborted)");
    }
    double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (options_.watchdogSeconds > 0 && waited > options_.watchdogSeconds) {
      abortAfterFailure();
      throw Error(prefix() + "watchdog: the device work issued has not " +
                  "finished after " + std::to_string(int64_t(waited)) +
                  " s (a collective waiting for a peer?); NCCL communicators "
                  "aborted");
    }
    // Spin first (a step's end is usually near), then sleep a little.
    if (polls < 1000)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void DeviceBackend::discardGraph() noexcept {
  if (capturing_) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(streams_[0], &partial) == cudaSuccess && partial)
      cudaGraphDestroy(partial);
    capturing_ = false;
  }
  // An exec still running is freed when it ends (cudaGraphExecDestroy).
  if (graphExec_)
    cudaGraphExecDestroy(graphExec_);
  graphExec_ = nullptr;
  if (graph_)
    cudaGraphDestroy(graph_);
  graph_ = nullptr;
}

void DeviceBackend::abortAfterFailure() noexcept {
  // NCCL's abort waits until no graph holds its calls (a running one ends
  // once the abort stops its NCCL kernels).
  discardGraph();
  if (comms_)
    comms_->abort();
}

//===--- Prepare ---------------------------------------------------------===//

void DeviceBackend::prepare(const plan::Bundle &bundle,
                            const plan::Program &program) {
  if (prepared_)
    throw Error(prefix() + "the CUDA backend is prepared once per program");
  prepared_ = true;
  program_ = &program;
  for (const plan::Stream &stream : program.streams)
    streamNames_.push_back(stream.name);
  // Dynamic loss scaling: the optimizer steps that read the gradients' sum
  // of squares decide the overflow skip on the device. A separate clip
  // would have the host decide mid-step, which a captured step cannot.
  if (bundle.training.lossScale.dynamic)
    for (const plan::Stream &stream : program.streams)
      for (const Instruction &inst : stream.instructions)
        if (inst.opcode == Opcode::Clip)
          throw Error(prefix() +
                      "dynamic loss scaling with a clip instruction is not "
                      "supported on the CUDA backend (its skip is decided on "
                      "the host): recompile the bundle, whose optimizer_steps "
                      "then read the gradient norm, or use --backend cpu");
  lossScale_ = float(bundle.training.lossScale.initial);
  size_t numStreams = std::max<size_t>(1, program.streams.size());
  for (size_t s = 0; s < numStreams; ++s) {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "cudaStreamCreate", "stream " + std::to_string(s));
    streams_.push_back(stream);
    cudaEvent_t join = nullptr;
    check(cudaEventCreateWithFlags(&join, cudaEventDisableTiming),
          "cudaEventCreate", "stream " + std::to_string(s));
    joinEvents_.push_back(join);
  }
  for (int64_t e = 0; e < program.numEvents; ++e) {
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
          "cudaEventCreate", "event " + std::to_string(e));
    events_.push_back(event);
  }
  if (options_.deviceTimes) {
    // Timing events: the step's start and two marks per instruction.
    if (options_.graph)
      throw Error(prefix() + "device timing marks eagerly issued steps: "
                             "turn graph capture off");
    size_t instructions = 0;
    for (const plan::Stream &stream : program.streams)
      instructions += stream.instructions.size();
    check(cudaEventCreate(&stepStartMark_), "cudaEventCreate", "device timing");
    marks_.reserve(2 * instructions);
    for (size_t m = 0; m < 2 * instructions; ++m) {
      cudaEvent_t mark = nullptr;
      check(cudaEventCreate(&mark), "cudaEventCreate", "device timing");
      marks_.push_back(mark);
    }
  }

  kernels_.clear();
  kernels_.resize(bundle.kernels.size());
  for (const plan::Kernel &kernel : bundle.kernels) {
    ResolvedKernel &resolved = kernels_[size_t(kernel.id)];
    resolved.spec = findKernel(kernel.name);
    resolved.entry = findCudaKernel(kernel.name);
    if (resolved.spec)
      resolved.constants =
          resolveConstants(*resolved.spec, kernel.constants,
                           "kernels[" + std::to_string(kernel.id) + "]");
    resolved.generated = options_.generatedKernels || !resolved.entry;
  }
  workspaceNeeds_.assign(numStreams, {});
  size_t maxOperands = forEachInstruction(
      program, prefix(),
      [&](const Instruction &inst, size_t stream, const std::string &at) {
        workspaceNeeds_[stream].gemms |= inst.opcode == Opcode::Gemm;
        if (inst.opcode == Opcode::Kernel)
          prepareKernel(bundle, program, inst, stream, at);
        else
          prepareOther(program, inst, at);
        // An epilogue cuBLASLt does not run: the kernels it folds, after
        // the gemm.
        if (inst.epilogue != GemmEpilogue::None && !gemms_[&inst].epilogue)
          epilogueSteps_[&inst] = prepareEpilogueSteps(
              inst, at, [&](const Instruction &step, const std::string &what) {
                if (step.opcode == Opcode::Kernel)
                  prepareKernel(bundle, program, step, stream, what);
                else
                  prepareOther(program, step, what);
              });
      });
  stepReads_.reserve(maxOperands);
  stepWrites_.reserve(maxOperands);
  if (compiler_ && options_.rank == 0)
    for (const std::string &warning : compiler_->warnings())
      std::fprintf(stderr, "weft-run: warning: cuda: %s\n", warning.c_str());
  if (generatedLaunches_ > 0 && options_.rank == 0) {
    std::string rtc;
    if (compiler_)
      rtc = ", " + std::to_string(compiler_->compiled()) +
            " compiled by NVRTC " + nvrtcVersion() + ", " +
            std::to_string(compiler_->cacheHits()) + " from the cache" +
            (compiler_->cacheDir().empty() ? std::string(" (no cache)")
                                           : " in " + compiler_->cacheDir());
    if (fatbinMisses_)
      rtc += " (" + std::to_string(fatbinMisses_) +
             " fatbins had no code for this GPU)";
    std::fprintf(stderr,
                 "weft-run: cuda: %lld kernel launches run generated code: "
                 "%d modules from the bundle's fatbins%s\n",
                 (long long)generatedLaunches_, fatbinModules_, rtc.c_str());
  }
  if (options_.cudnnAttention && options_.rank == 0) {
    if (cudnn_)
      std::fprintf(stderr,
                   "weft-run: cuda: %zu of %lld 16-bit attention kernels run "
                   "on cuDNN %s\n",
                   cudnnKernels_.size(), (long long)cudnnCandidates_,
                   cudnn_->version().c_str());
    else if (!cudnnUnavailable_.empty())
      std::fprintf(stderr,
                   "weft-run: cuda: warning: no cuDNN attention (%s); Weft's "
                   "attention kernels run instead\n",
                   cudnnUnavailable_.c_str());
  }
  if (options_.rank == 0 && (cublasEpilogues() || !epilogueSteps_.empty()))
    std::fprintf(stderr,
                 "weft-run: cuda: %lld of %lld GEMM epilogues run in "
                 "cuBLASLt (the others as their kernels after the gemm)\n",
                 (long long)cublasEpilogues(),
                 (long long)(cublasEpilogues() + epilogueSteps_.size()));
  call_.reads.reserve(maxOperands);
  call_.writes.reserve(maxOperands);
  call_.readIndices.reserve(maxOperands);

  // The one workspace allocation.
  workspaceLayout_ =
      layoutWorkspace(workspaceNeeds_, options_.gemmWorkspaceBytes);
  size_t total = workspaceLayout_.totalBytes;
  check(cudaMalloc(&workspace_, total), "cudaMalloc",
        "allocating " + std::to_string(total) + " bytes of workspace");
  workspaceBytes_ = int64_t(total);
  stepDevice_ = reinterpret_cast<kernels::AdamWStep *>(
      static_cast<std::byte *>(workspace_) + workspaceLayout_.stepScalars);
  if (options_.gemmAutotune)
    autotuneGemms();
}

void DeviceBackend::autotuneGemms() {
  // A stream with a cuBLASLt workspace (every stream that runs gemms has
  // one).
  int64_t timing = 0;
  while (size_t(timing + 1) < streams_.size() &&
         !workspacePiece(workspaceLayout_.gemm, timing))
    ++timing;
  cudaStream_t stream = streams_[size_t(timing)];
  void *workspace = workspacePiece(workspaceLayout_.gemm, timing);
  size_t workspaceBytes = workspace ? size_t(options_.gemmWorkspaceBytes) : 0;
  // Scratch operands as large as the largest timed shape needs, allocated
  // for the timing only (cudaMalloc/cudaFree here, before the session
  // allocates its regions), filled with finite noise on the timing stream
  // (zeros would run faster than data: less power, higher clocks; NaNs
  // could run slower).
  struct Scratch {
    void *data = nullptr;
    size_t bytes = 0;
    ~Scratch() { cudaFree(data); }
    bool reserve(size_t want, cudaStream_t stream) {
      if (want <= bytes)
        return true;
      cudaFree(data);
      data = nullptr;
      bytes = 0;
      if (cudaMalloc(&data, want) != cudaSuccess ||
          fillNoise(data, want, stream) != cudaSuccess) {
        cudaGetLastError(); // not sticky: clear it for the launches after
        cudaFree(data);
        data = nullptr;
        return false;
      }
      bytes = want;
      return true;
    }
  } a, b, c, vector, aux;
  struct Events {
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Events() {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
  } events;
  check(cudaEventCreate(&events.start), "cudaEventCreate", "autotuning GEMMs");
  check(cudaEventCreate(&events.stop), "cudaEventCreate", "autotuning GEMMs");
  // Only the plans instructions run (a fused gemm's plain twin is not).
  std::set<const GemmPlan *> used;
  for (const auto &[inst, prepared] : gemms_)
    used.insert(prepared.plan);
  // Per timed plan: the heuristic's first choice and the kept one, ms/call.
  std::map<const GemmPlan *, std::pair<float, float>> times;
  int untimed = 0, changed = 0;
  for (auto &[key, plan] : gemmCache_) {
    std::vector<cublasLtMatmulHeuristicResult_t> candidates =
        std::move(plan.candidates);
    plan.candidates.clear();
    if (!plan.found || candidates.size() < 2 || !used.count(&plan))
      continue;
    size_t element = plan::elementBytes(key.dtype);
    size_t bytesA = size_t(key.lda) * size_t(key.transA ? key.m : key.k);
    size_t bytesB = size_t(key.ldb) * size_t(key.transB ? key.k : key.n);
    size_t bytesC = size_t(key.ldc) * size_t(key.n);
    bool fits = a.reserve(bytesA * element, stream) &&
                b.reserve(bytesB * element, stream) &&
                c.reserve(bytesC * element, stream);
    if (fits && key.epilogue) {
      auto set = [&](cublasLtMatmulDescAttributes_t attribute, void *ptr) {
        check(cublasLtMatmulDescSetAttribute(plan.desc, attribute, &ptr,
                                             sizeof ptr),
              "cublasLtMatmulDescSetAttribute", "autotuning GEMMs");
      };
      // runGemm points both at the instruction's operands before every call.
      bool bias = *key.epilogue != GemmEpilogue::DGelu;
      fits = (!bias || vector.reserve(size_t(key.m) * element, stream)) &&
             (!usesAux(*key.epilogue) ||
              aux.reserve(size_t(key.m * key.n) * element, stream));
      if (fits && bias)
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, vector.data);
      if (fits && usesAux(*key.epilogue))
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux.data);
    }
    if (!fits) {
      ++untimed; // no memory for its operands: the heuristic's choice
      continue;
    }
    double one = 1, beta64 = key.betaZero ? 0.0 : 1.0;
    float one32 = 1, beta32 = key.betaZero ? 0.0f : 1.0f;
    bool f64 = key.dtype == DType::F64;
    const void *alpha = f64 ? static_cast<const void *>(&one)
                            : static_cast<const void *>(&one32);
    const void *beta = f64 ? static_cast<const void *>(&beta64)
                           : static_cast<const void *>(&beta32);
    // Per candidate: a warm-up call, one timed call that sizes the run, then
    // enough calls for about a millisecond (5 to 200) between two events.
    auto timeCalls = [&](const cublasLtMatmulHeuristicResult_t &candidate,
                         int calls) {
      bool ok = cudaEventRecord(events.start, stream) == cudaSuccess;
      for (int r = 0; ok && r < calls; ++r)
        ok = cublasLtMatmul(lt_, plan.desc, alpha, a.data, plan.a, b.data,
                            plan.b, beta, c.data, plan.c, c.data, plan.c,
                            &candidate.algo, workspace, candidate.workspaceSize,
                            stream) == CUBLAS_STATUS_SUCCESS;
      ok = ok && cudaEventRecord(events.stop, stream) == cudaSuccess &&
           cudaEventSynchronize(events.stop) == cudaSuccess;
      float elapsed = 0;
      ok = ok && cudaEventElapsedTime(&elapsed, events.start, events.stop) ==
                     cudaSuccess;
      if (!ok) {
        cudaGetLastError(); // a refused candidate: not the next launch's error
        cudaStreamSynchronize(stream);
        return std::numeric_limits<float>::infinity();
      }
      return elapsed / float(calls);
    };
    std::vector<float> ms;
    for (const cublasLtMatmulHeuristicResult_t &candidate : candidates) {
      float estimate = candidate.workspaceSize <= workspaceBytes
                           ? timeCalls(candidate, 2)
                           : std::numeric_limits<float>::infinity();
      int calls = std::isfinite(estimate) && estimate > 0
                      ? int(std::clamp(1.0f / estimate, 5.0f, 200.0f))
                      : 5;
      ms.push_back(std::isfinite(estimate) ? timeCalls(candidate, calls)
                                           : estimate);
    }
    // The heuristic's first choice unless another is more than 3% faster
    // (closer is timing noise, and the first is what an untuned run uses).
    size_t best = 0;
    for (size_t i = 1; i < ms.size(); ++i)
      if (std::isfinite(ms[i]) &&
          (!std::isfinite(ms[best]) || ms[i] < 0.97f * ms[best]))
        best = i;
    if (!std::isfinite(ms[best])) {
      ++untimed; // no candidate ran: the heuristic's choice
      continue;
    }
    changed += best != 0;
    plan.algo = candidates[best].algo;
    plan.workspace = candidates[best].workspaceSize;
    times[&plan] = {std::isfinite(ms[0]) ? ms[0] : ms[best], ms[best]};
  }
  if (options_.rank != 0)
    return;
  // Every gemm instruction runs once a step: the step's GEMM time under
  // each choice, for the timed shapes.
  double heuristic = 0, tuned = 0;
  int64_t calls = 0;
  for (const auto &[inst, prepared] : gemms_)
    if (auto it = times.find(prepared.plan); it != times.end()) {
      heuristic += it->second.first;
      tuned += it->second.second;
      ++calls;
    }
  std::fprintf(stderr,
               "weft-run: cuda: cuBLASLt autotune: %zu GEMM shapes timed "
               "(%d take another algorithm than the heuristic's first; %d "
               "not timed: no memory for their operands or no candidate "
               "ran), their %lld calls a step %.3f ms -> %.3f ms\n",
               times.size(), changed, untimed, (long long)calls, heuristic,
               tuned);
}

void DeviceBackend::prepareKernel(const plan::Bundle &bundle,
                                  const plan::Program &program,
                                  const Instruction &inst, size_t stream,
                                  const std::string &where) {
  const plan::Kernel &kernel = bundle.kernels[size_t(inst.kernel)];
  const ResolvedKernel &resolved = kernels_[size_t(inst.kernel)];
  std::string what = where + ": kernel '" + kernel.name + "'";
  if (!resolved.spec)
    throw Error(what + " is not in the kernel registry");
  if (!resolved.entry)
    if (std::string problem = generatedSourceProblem(bundle, kernel);
        !problem.empty())
      throw Error(where + ": " + cudaKernelMissing(kernel.name) + ", and " +
                  problem);
  int64_t widened = checkKernelOperands(program, inst, *resolved.spec,
                                        resolved.constants, what);
  if (resolved.generated) {
    if (!resolved.module)
      loadGenerated(bundle, kernel, kernels_[size_t(inst.kernel)], what);
    // A generated kernel's __device__ workspace is one per loaded module:
    // two of its launches must not overlap, so they share one stream.
    auto source = bundle.files.find(kernel.source);
    if (source != bundle.files.end() &&
        source->second.find("__device__ float ws_") != std::string::npos) {
      auto [at, fresh] = workspaceStream_.emplace(inst.kernel, stream);
      if (!fresh && at->second != stream)
        throw Error(what +
                    ": its generated code keeps a __device__ "
                    "workspace, so its launches must not overlap, but "
                    "it runs on streams " +
                    std::to_string(at->second) + " and " +
                    std::to_string(stream));
    }
    ++generatedLaunches_;
    size_t operands = inst.reads.size() + inst.writes.size();
    if (generatedArgs_.size() < operands) {
      generatedArgs_.resize(operands);
      generatedArgAddresses_.resize(operands);
    }
    int64_t &scratch = workspaceNeeds_[stream].scratchFloats;
    scratch = std::max(scratch, widened);
    return;
  }
  if (options_.halfKernels)
    if (std::optional<kernels::gpu::HalfType> type =
            halfPath(*resolved.entry, resolved.constants,
                     operandTypes(program, inst.reads),
                     operandTypes(program, inst.writes))) {
      halfKernels_[&inst] = *type;
      widened = 0; // runs on the 16-bit operands themselves
    }
  // Kernel scratch first (kept 4-float aligned), then widened operands.
  int64_t kernelScratch = scratchFloatsOf(*resolved.entry, resolved.constants,
                                          halfKernels_.count(&inst) != 0);
  if (options_.cudnnAttention && halfKernels_.count(&inst))
    prepareCudnnAttention(resolved, inst, kernelScratch, what);
  int64_t scratch = (kernelScratch + 63) / 64 * 64;
  int64_t &needed = workspaceNeeds_[stream].scratchFloats;
  needed = std::max(needed, scratch + widened);
}

void DeviceBackend::prepareCudnnAttention(const ResolvedKernel &kernel,
                                          const Instruction &inst,
                                          int64_t &scratchFloats,
                                          const std::string &what) {
  std::string_view name = kernel.spec->name;
  bool backward = name == "attention_backward";
  if (!backward && name != "attention_forward")
    return;
  ++cudnnCandidates_;
  if (!cudnn_ && cudnnUnavailable_.empty())
    cudnn_ = CudnnAttention::open(cudnnUnavailable_);
  if (!cudnn_)
    return;
  std::string why;
  const CudnnAttentionGraph *graph = cudnn_->prepare(
      backward, halfKernels_.at(&inst), attentionDims(kernel.constants), why);
  if (!graph) {
    if (options_.rank == 0 && cudnnRefusals_.insert(why).second)
      std::fprintf(stderr,
                   "weft-run: cuda: warning: %s: cuDNN cannot run it (%s); "
                   "Weft's kernel runs it (warned once per reason)\n",
                   what.c_str(), why.c_str());
    return;
  }
  cudnnKernels_[&inst] = graph;
  // cuDNN's workspace is the kernel's scratch (256-byte aligned per stream).
  int64_t bytes = CudnnAttention::workspaceBytes(*graph);
  scratchFloats = std::max(scratchFloats, (bytes + 3) / 4);
}

const GemmPlan &DeviceBackend::gemmPlan(const GemmKey &key,
                                        const std::string &where) {
  const GemmPlan *plan = findGemmPlan(key, where);
  if (!plan)
    throw Error(where + ": gemm " + describe(key) +
                ": cuBLASLt has no algorithm for this shape");
  return *plan;
}

const GemmPlan *DeviceBackend::findGemmPlan(const GemmKey &key,
                                            const std::string &where) {
  auto it = gemmCache_.find(key);
  if (it != gemmCache_.end())
    return it->second.found ? &it->second : nullptr;
  std::string what = where + ": gemm " + describe(key);
  cudaDataType_t type = key.dtype == DType::BF16  ? CUDA_R_16BF
                        : key.dtype == DType::F16 ? CUDA_R_16F
                        : key.dtype == DType::F64 ? CUDA_R_64F
                                                  : CUDA_R_32F;
  // fp32 stays exact fp32 unless tf32 is asked for; bf16/fp16 accumulate in
  // fp32.
  cublasComputeType_t compute = key.dtype == DType::F64 ? CUBLAS_COMPUTE_64F
                                : key.dtype == DType::F32 && options_.tf32
                                    ? CUBLAS_COMPUTE_32F_FAST_TF32
                                    : CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = key.dtype == DType::F64 ? CUDA_R_64F : CUDA_R_32F;
  GemmPlan plan;
  check(cublasLtMatmulDescCreate(&plan.desc, compute, scaleType),
        "cublasLtMatmulDescCreate", what);
  // Own it at once, so the destructor frees whatever was created.
  GemmPlan &stored = gemmCache_[key];
  stored = plan;
  cublasOperation_t opA = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(stored.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                       &opA, sizeof opA),
        "cublasLtMatmulDescSetAttribute", what);
  check(cublasLtMatmulDescSetAttribute(stored.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                       &opB, sizeof opB),
        "cublasLtMatmulDescSetAttribute", what);
  if (key.epilogue) {
    // The heuristic reads the bias and aux pointers' alignment from their
    // values (they are not dereferenced); runGemm sets the real ones before
    // every call.
    GemmEpilogue kind = *key.epilogue;
    cublasLtEpilogue_t epilogue =
        kind == GemmEpilogue::Bias       ? CUBLASLT_EPILOGUE_BIAS
        : kind == GemmEpilogue::GeluBias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
        : kind == GemmEpilogue::DGelu    ? CUBLASLT_EPILOGUE_DGELU
                                         : CUBLASLT_EPILOGUE_BGRADA;
    // An attribute this cuBLASLt refuses is no error either: the plain
    // gemm and the folded kernels run (the entry stays cached as not found).
    bool accepted = true;
    auto set = [&](cublasLtMatmulDescAttributes_t attribute, const void *value,
                   size_t bytes) {
      accepted = accepted &&
                 cublasLtMatmulDescSetAttribute(stored.desc, attribute, value,
                                                bytes) == CUBLAS_STATUS_SUCCESS;
    };
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    const void *bias = reinterpret_cast<const void *>(uintptr_t(key.alignBias));
    const void *aux = reinterpret_cast<const void *>(uintptr_t(key.alignAux));
    int64_t auxLd = key.m; // aux is packed like D
    if (kind != GemmEpilogue::DGelu)
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (usesAux(kind)) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd, sizeof auxLd);
    }
    if (!accepted)
      return nullptr;
  }
  check(cublasLtMatrixLayoutCreate(&stored.a, type, key.transA ? key.k : key.m,
                                   key.transA ? key.m : key.k, key.lda),
        "cublasLtMatrixLayoutCreate", what);
  check(cublasLtMatrixLayoutCreate(&stored.b, type, key.transB ? key.n : key.k,
                                   key.transB ? key.k : key.n, key.ldb),
        "cublasLtMatrixLayoutCreate", what);
  check(cublasLtMatrixLayoutCreate(&stored.c, type, key.m, key.n, key.ldc),
        "cublasLtMatrixLayoutCreate", what);
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate",
        what);
  uint64_t workspace = uint64_t(options_.gemmWorkspaceBytes);
  uint32_t alignA = uint32_t(key.alignA), alignB = uint32_t(key.alignB),
           alignC = uint32_t(key.alignC);
  const struct {
    cublasLtMatmulPreferenceAttributes_t attribute;
    const void *value;
    size_t bytes;
  } preferences[] = {
      {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &alignA, sizeof alignA},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &alignB, sizeof alignB},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &alignC, sizeof alignC},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &alignC, sizeof alignC},
  };
  cublasStatus_t rc = CUBLAS_STATUS_SUCCESS;
  for (const auto &preference : preferences)
    if (rc == CUBLAS_STATUS_SUCCESS)
      rc = cublasLtMatmulPreferenceSetAttribute(
          pref, preference.attribute, preference.value, preference.bytes);
  // The heuristic's best guess, or with autotuning its first candidates
  // (timed once the workspace exists: autotuneGemms).
  constexpr int kAutotuneCandidates = 8;
  std::vector<cublasLtMatmulHeuristicResult_t> results(
      options_.gemmAutotune ? kAutotuneCandidates : 1);
  int returned = 0;
  if (rc == CUBLAS_STATUS_SUCCESS)
    rc = cublasLtMatmulAlgoGetHeuristic(
        lt_, stored.desc, stored.a, stored.b, stored.c, stored.c, pref,
        int(results.size()), results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  results.resize(size_t(std::max(returned, 0)));
  results.erase(std::remove_if(results.begin(), results.end(),
                               [](const cublasLtMatmulHeuristicResult_t &r) {
                                 return r.state != CUBLAS_STATUS_SUCCESS;
                               }),
                results.end());
  // An epilogue cuBLASLt does not offer for the shape is no error, whatever
  // status says so: the caller runs the plain gemm and the kernels after it.
  bool offered = rc == CUBLAS_STATUS_SUCCESS && !results.empty();
  if (key.epilogue && !offered)
    return nullptr;
  check(rc, "cublasLtMatmulAlgoGetHeuristic", what);
  if (!offered)
    return nullptr;
  stored.algo = results.front().algo;
  stored.workspace = results.front().workspaceSize;
  stored.found = true;
  if (results.size() > 1)
    stored.candidates = std::move(results);
  return &stored;
}

void DeviceBackend::prepareEpilogue(const plan::Program &program,
                                    const Instruction &gemm, const GemmKey &key,
                                    PreparedGemm &prepared,
                                    const std::string &where) {
  GemmEpilogue kind = gemm.epilogue;
  // The operands after the product's (plan/Epilogue.h): the bias or the
  // activation's input is the first extra read, the activation or the bias
  // gradient the second write.
  size_t extra = plan::productReads(gemm);
  if (gemm.reads.size() < extra + plan::epilogueShape(kind).reads ||
      gemm.writes.size() < 1 + plan::epilogueShape(kind).writes)
    throw Error(where + ": the " + std::string(plan::toString(kind)) +
                " epilogue's operands are missing");
  if (usesAux(kind)) {
    int64_t act = -1;
    int64_t id =
        gemm.epilogueKernels.empty() ? -1 : gemm.epilogueKernels.back();
    if (id >= 0 && size_t(id) < kernels_.size()) {
      const KernelConstants &c = kernels_[size_t(id)].constants;
      if (auto it = c.find("act"); it != c.end())
        act = it->second;
    }
    if (act != int64_t(kernels::Activation::GeluTanh))
      return; // cuBLASLt's GELU is the tanh approximation
  }
  auto place = [&](const plan::BufferRange &range) {
    const plan::Buffer &buffer = program.buffers[size_t(range.buffer)];
    return PreparedGemm::Place{buffer.region, buffer.offset + range.offset};
  };
  // Bias, GeluBias: the bias read; BiasGrad: the gradient written. GeluBias:
  // the pre-activation it writes as D; DGelu: the activation's input read.
  plan::BufferRange bias, aux, output = gemm.writes[0];
  if (kind == GemmEpilogue::BiasGrad)
    bias = gemm.writes[1];
  else if (kind != GemmEpilogue::DGelu)
    bias = gemm.reads[extra];
  if (kind == GemmEpilogue::GeluBias) {
    aux = gemm.writes[0];
    output = gemm.writes[1];
  } else if (kind == GemmEpilogue::DGelu) {
    aux = gemm.reads[extra];
  }
  // cuBLASLt's bias, bias gradient and aux take D's type (cublasLt.h), its
  // aux a leading dimension that is a multiple of 8; weft-fuse-gemm-epilogues
  // only folds such operands, but a plan from elsewhere runs the folded
  // kernels after the gemm instead.
  auto fits = [&](const plan::BufferRange &range, int64_t elements) {
    return program.buffers[size_t(range.buffer)].dtype == gemm.dtype &&
           range.bytes >= elements * plan::elementBytes(gemm.dtype);
  };
  if (!fits(output, key.m * key.n) ||
      (kind != GemmEpilogue::DGelu && !fits(bias, key.m)) ||
      (usesAux(kind) && (!fits(aux, key.m * key.n) || key.m % 8 != 0)))
    return;
  // The packed layouts the folded kernels assume (checkStructure requires
  // them of a loaded plan): D and aux with leading dimension m; the bias
  // gradient's A untransposed, also m.
  if (key.ldc != key.m ||
      (kind == GemmEpilogue::BiasGrad && (key.transA || key.lda != key.m)))
    return;
  // Unfused, the gemm and each folded kernel write one after the other; one
  // cuBLASLt call reads and writes at once, so its outputs must be clear of
  // its inputs and of each other (the compiler folds only such operands).
  auto overlaps = [&](const plan::BufferRange &x, const plan::BufferRange &y) {
    PreparedGemm::Place px = place(x), py = place(y);
    return px.region == py.region && px.offset < py.offset + y.bytes &&
           py.offset < px.offset + x.bytes;
  };
  std::vector<plan::BufferRange> outputs = {output},
                                 inputs = {gemm.reads[0], gemm.reads[1]};
  if (kind == GemmEpilogue::GeluBias)
    outputs.push_back(aux);
  if (kind == GemmEpilogue::BiasGrad)
    outputs.push_back(bias);
  else if (kind != GemmEpilogue::DGelu)
    inputs.push_back(bias);
  if (kind == GemmEpilogue::DGelu)
    inputs.push_back(aux);
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const plan::BufferRange &input : inputs)
      if (overlaps(outputs[i], input))
        return;
    for (size_t j = 0; j < i; ++j)
      if (overlaps(outputs[i], outputs[j]))
        return;
  }
  GemmKey fused = key;
  fused.epilogue = kind;
  if (kind != GemmEpilogue::DGelu)
    fused.alignBias = operandAlignment(place(bias).offset);
  if (usesAux(kind))
    fused.alignAux = operandAlignment(place(aux).offset);
  fused.alignC = std::min(fused.alignC, operandAlignment(place(output).offset));
  const GemmPlan *plan = findGemmPlan(fused, where);
  if (!plan)
    return;
  prepared.plan = plan;
  prepared.epilogue = kind;
  prepared.bias = place(bias);
  prepared.aux = place(aux);
  prepared.output = place(output);
}

void DeviceBackend::prepareOther(const plan::Program &program,
                                 const Instruction &inst,
                                 const std::string &where) {
  // The dtype check comes first: checkOperands sizes ranges by the dtype.
  if (inst.opcode == Opcode::Gemm)
    if (std::string why = gemmUnsupported(inst.dtype); !why.empty())
      throw Error(where + ": " + why);
  checkOperands(program, inst, where, "CUDA");
  // checkOperands admits host operands only in copy, fill, and an
  // optimizer_step or clip on host memory alone: those run on the host, in
  // stream order (cudaLaunchHostFunc), but a copy between the device and
  // the host. A host-to-host cudaMemcpyAsync would run at issue, before
  // what the stream still has to do to its source.
  auto inHost = [&](const plan::BufferRange &range) {
    return program.buffers[size_t(range.buffer)].region == plan::Region::Host;
  };
  bool host = false;
  for (const plan::BufferRange &range : inst.writes)
    host = host || inHost(range);
  if (host &&
      (inst.opcode == Opcode::Fill || inst.opcode == Opcode::OptimizerStep ||
       inst.opcode == Opcode::Clip ||
       (inst.opcode == Opcode::Copy && inHost(inst.reads[0])))) {
    if (inst.opcode == Opcode::Fill)
      for (const plan::BufferRange &range : inst.writes)
        if (!inHost(range))
          throw Error(where + ": fill writes host and device buffers in one "
                              "instruction (not supported on CUDA)");
    hostInstructions_[&inst] =
        inst.opcode == Opcode::OptimizerStep &&
                isHalfFloat(program.buffers[size_t(inst.reads[1].buffer)].dtype)
            ? inst.count
            : 0;
    return;
  }
  switch (inst.opcode) {
  case Opcode::Gemm: {
    GemmKey key = gemmKeyOf(program, inst);
    if (std::string why = gemmShapeProblem(key); !why.empty())
      throw Error(where + ": " + why);
    const plan::GemmParams &g = inst.gemm;
    PreparedGemm prepared;
    prepared.plan = &gemmPlan(key, where);
    if (inst.epilogue != GemmEpilogue::None)
      prepareEpilogue(program, inst, key, prepared, where);
    prepared.f64 = inst.dtype == DType::F64;
    prepared.alpha32 = float(g.alpha);
    prepared.beta32 = float(g.beta);
    prepared.alpha64 = g.alpha;
    prepared.beta64 = g.beta;
    gemms_[&inst] = prepared;
    break;
  }
  case Opcode::Copy:
    if (inst.reads[0].buffer == inst.writes[0].buffer &&
        inst.reads[0].offset < inst.writes[0].offset + inst.writes[0].bytes &&
        inst.writes[0].offset < inst.reads[0].offset + inst.reads[0].bytes &&
        !(inst.reads[0] == inst.writes[0]))
      throw Error(where + ": copy between overlapping ranges is not "
                          "supported on CUDA");
    if (inst.writes[0].bytes < inst.reads[0].bytes)
      throw Error(where + ": copy operand destination has " +
                  std::to_string(inst.writes[0].bytes) + " bytes, needs " +
                  std::to_string(inst.reads[0].bytes));
    break;
  default:
    break;
  }
}

//===--- Execute ---------------------------------------------------------===//

void DeviceBackend::execute(const Instruction &inst, int64_t stream,
                            const std::vector<Operand> &reads,
                            const std::vector<Operand> &writes,
                            const StepContext &context) {
  cudaStream_t s = streamOf(stream);
  switch (inst.opcode) {
  case Opcode::Kernel:
    runKernel(inst, stream, reads, writes);
    return;
  case Opcode::Gemm:
    runGemm(inst, stream, reads, writes);
    if (auto steps = epilogueSteps_.find(&inst); steps != epilogueSteps_.end())
      for (const plan::EpilogueStep &step : steps->second) {
        epilogueOperands(step, reads, writes, stepReads_, stepWrites_);
        execute(step.inst, stream, stepReads_, stepWrites_, context);
      }
    return;
  case Opcode::Copy:
    if (onHost(inst)) { // host to host
      runOnHost(inst, stream, reads, writes, context);
      return;
    }
    // cudaMemcpyDefault: the host region is pinned memory, so the same call
    // moves device->device, device->host and host->device, in stream order.
    if (reads[0].data != writes[0].data)
      check(cudaMemcpyAsync(writes[0].data, reads[0].data,
                            size_t(reads[0].bytes), cudaMemcpyDefault, s),
            "cudaMemcpyAsync", At{inst, stream});
    return;
  case Opcode::Fill: {
    if (onHost(inst)) {
      runOnHost(inst, stream, reads, writes, context);
      return;
    }
    int eb = int(plan::elementBytes(inst.dtype));
    uint64_t bits = fillBits(inst.dtype, inst.value);
    for (const Operand &out : writes)
      check(fillPattern(out.data, out.bytes / eb, eb, bits, s), "fill",
            At{inst, stream});
    return;
  }
  case Opcode::OptimizerStep:
    if (onHost(inst))
      runOnHost(inst, stream, reads, writes, context);
    else
      runOptimizer(inst, stream, reads, writes, context);
    return;
  case Opcode::GradNorm: {
    auto *acc = reinterpret_cast<double *>(
        workspacePiece(workspaceLayout_.accumulator, stream));
    const At at{inst, stream};
    check(cudaMemsetAsync(acc, 0, sizeof(double), s), "cudaMemsetAsync", at);
    for (const Operand &grad : reads)
      check(sumSquaresAccumulate(grad.bytes / plan::elementBytes(inst.dtype),
                                 grad.data, storageOf(inst.dtype), acc, s),
            "sum of squares", at);
    check(doubleToFloat(acc, writes[0].as<float>(), s), "sum of squares", at);
    return;
  }
  case Opcode::Clip: {
    if (onHost(inst)) {
      runOnHost(inst, stream, reads, writes, context);
      return;
    }
    // The gradients carry the loss scale: compare the scaled norm with the
    // scaled limit.
    float maxNorm = float(context.training->gradClip) * lossScale_;
    for (const Operand &grad : writes)
      check(clipByNorm(grad.bytes / plan::elementBytes(inst.dtype), grad.data,
                       storageOf(inst.dtype), reads[0].as<float>(), maxNorm, s),
            "clip", At{inst, stream});
    return;
  }
  case Opcode::RecordEvent:
    recordEvent(inst.event, stream);
    return;
  case Opcode::WaitEvent:
    waitEvent(inst.event, stream);
    return;
  case Opcode::Release:
    return;
  default:
    throw Error(prefix() + where(inst, stream) +
                ": the cuda backend does not execute " +
                std::string(plan::toString(inst.opcode)) +
                " (communication goes through communicate())");
  }
}

void DeviceBackend::runKernel(const Instruction &inst, int64_t stream,
                              const std::vector<Operand> &reads,
                              const std::vector<Operand> &writes) {
  const ResolvedKernel &kernel = kernels_[size_t(inst.kernel)];
  cudaStream_t s = streamOf(stream);
  auto fail = [&](cudaError_t rc, const char *call) {
    if (rc != cudaSuccess)
      check(rc, call,
            where(inst, stream) + " kernel '" + std::string(kernel.spec->name) +
                "'");
  };
  auto half = halfKernels_.find(&inst);
  if (half != halfKernels_.end()) { // 16-bit operands as they are
    halfCall_.constants = &kernel.constants;
    halfCall_.type = half->second;
    halfCall_.stream = s;
    halfCall_.lossScale = lossScale_;
    halfCall_.scratch = scratchOf(stream);
    halfCall_.reads.clear();
    halfCall_.writes.clear();
    for (const Operand &operand : reads)
      halfCall_.reads.push_back(operand.data);
    for (const Operand &operand : writes)
      halfCall_.writes.push_back(operand.data);
    auto graph = cudnnKernels_.find(&inst);
    auto aligned = [](const void *p) {
      return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    };
    // cuDNN reads and writes 16-byte vectors: an operand off that alignment
    // (none in planned arenas) runs Weft's kernel.
    if (graph != cudnnKernels_.end() &&
        std::all_of(halfCall_.reads.begin(), halfCall_.reads.end(), aligned) &&
        std::all_of(halfCall_.writes.begin(), halfCall_.writes.end(),
                    aligned)) {
      std::string error = cudnn_->run(*graph->second, halfCall_.reads,
                                      halfCall_.writes, halfCall_.scratch, s);
      if (!error.empty())
        throw Error(prefix() + where(inst, stream) + " kernel '" +
                    std::string(kernel.spec->name) +
                    "': cuDNN attention failed: " + error);
      return;
    }
    fail(kernel.entry->runHalf(halfCall_), "kernel launch");
    return;
  }
  call_.constants = &kernel.constants;
  call_.stream = s;
  call_.lossScale = lossScale_;
  call_.reads.clear();
  call_.writes.clear();
  call_.writeStorage.clear();
  call_.readIndices.clear();
  float *scratch = scratchOf(stream);
  call_.scratch = scratch;
  if (!kernel.generated) // prepareKernel's layout: the fp32 path's scratch
    scratch += (scratchFloatsOf(*kernel.entry, kernel.constants, false) + 63) /
               64 * 64;
  WidenedCopies copies(scratch, widenedCopies_);
  auto widen = [&](const Operand &operand) -> float * {
    if (!isHalfFloat(operand.dtype))
      return operand.dtype == DType::F32 ? operand.as<float>() : nullptr;
    auto [out, fresh] = copies.place(operand);
    if (fresh)
      fail(halfToF32(operand.elements(), operand.as<std::uint16_t>(),
                     storageOf(operand.dtype), out, s),
           "half widening");
    return out;
  };
  for (const Operand &operand : reads) {
    call_.reads.push_back(widen(operand));
    call_.readIndices.push_back(
        operand.dtype == DType::I32 ? operand.as<const int32_t>() : nullptr);
  }
  // Writes are widened too: gradient kernels accumulate into them.
  for (const Operand &operand : writes) {
    call_.writes.push_back(widen(operand));
    call_.writeStorage.push_back(isHalfFloat(operand.dtype)
                                     ? storageOf(operand.dtype)
                                     : FloatStorage::F32);
  }
  if (kernel.generated)
    fail(launchGenerated(kernel, writes, s), "generated kernel launch");
  else
    fail(kernel.entry->run(call_), "kernel launch");
  for (size_t i = 0; i < writes.size(); ++i)
    if (isHalfFloat(writes[i].dtype))
      fail(f32ToHalf(writes[i].elements(), call_.writes[i],
                     storageOf(writes[i].dtype), writes[i].as<std::uint16_t>(),
                     s),
           "half narrowing");
}

void DeviceBackend::loadGenerated(const plan::Bundle &bundle,
                                  const plan::Kernel &kernel,
                                  ResolvedKernel &resolved,
                                  const std::string &where) {
  auto source = bundle.files.find(kernel.source);
  if (source == bundle.files.end())
    throw Error(where + ": the bundle has no generated source '" +
                kernel.source + "'");
  auto module = std::make_unique<GeneratedModule>();
  module->launches = parseLaunches(source->second, kernel.source, kernel.name);
  std::string_view name = resolved.spec->name;
  if ((name == "cross_entropy" || name == "cross_entropy_shard_finish") &&
      resolved.constants.at("grad"))
    module->gradientWrite = 1;
  // Loads `image` and resolves every entry. Loading is lazy (the default
  // since CUDA 12.2: cudaLibraryLoadData and cudaLibraryGetKernel succeed
  // for an image without code for this GPU, and the first launch fails), so
  // each entry's attributes are asked for, which loads it into the context:
  // the error says whether the image runs here.
  auto load = [&](const std::string &image) -> std::string {
    std::string failed;
    cudaError_t rc =
        cudaLibraryLoadData(&module->library, image.data(), nullptr, nullptr, 0,
                            nullptr, nullptr, 0);
    if (rc != cudaSuccess) {
      failed = std::string("cudaLibraryLoadData: ") + cudaGetErrorName(rc);
      module->library = nullptr;
    }
    for (const GeneratedLaunch &launch : module->launches) {
      if (!failed.empty())
        break;
      cudaKernel_t entry = nullptr;
      cudaFuncAttributes attributes{};
      rc = cudaLibraryGetKernel(&entry, module->library, launch.entry.c_str());
      if (rc == cudaSuccess)
        rc = cudaFuncGetAttributes(&attributes,
                                   reinterpret_cast<const void *>(entry));
      if (rc != cudaSuccess)
        failed = "entry '" + launch.entry + "': " + cudaGetErrorName(rc);
      else if (launch.block > attributes.maxThreadsPerBlock)
        failed = "entry '" + launch.entry + "': blocks of " +
                 std::to_string(launch.block) + " threads, at most " +
                 std::to_string(attributes.maxThreadsPerBlock);
      else
        module->entries.push_back(entry);
    }
    if (!failed.empty()) {
      cudaGetLastError(); // not sticky: clear it
      if (module->library)
        cudaLibraryUnload(module->library);
      module->library = nullptr;
      module->entries.clear();
    }
    return failed;
  };
  // The bundle's fatbin when it has code this device runs (weftc compile
  // --cuda-arch); otherwise NVRTC for this device's architecture.
  auto fatbin = bundle.files.find(plan::kernelFatbinPath(kernel.source));
  std::string fatbinFailed =
      fatbin != bundle.files.end() ? load(fatbin->second) : "no fatbin";
  bool fromFatbin = fatbinFailed.empty();
  if (fatbin != bundle.files.end() && !fromFatbin) {
    ++fatbinMisses_;
    if (options_.rank == 0 && fatbinMisses_ == 1)
      std::fprintf(stderr,
                   "weft-run: cuda: %s: the bundle's %s does not run here "
                   "(%s): NVRTC compiles its source\n",
                   where.c_str(), plan::kernelFatbinPath(kernel.source).c_str(),
                   fatbinFailed.c_str());
  }
  if (fromFatbin) {
    ++fatbinModules_;
  } else {
    if (!compiler_) {
      int major = 0, minor = 0;
      check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                                   device_),
            "cudaDeviceGetAttribute", where);
      check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                                   device_),
            "cudaDeviceGetAttribute", where);
      rtcArch_ = major * 10 + minor;
      compiler_ = std::make_unique<KernelCompiler>(
          options_.kernelCache.empty()    ? defaultKernelCacheDir()
          : options_.kernelCache == "off" ? std::string()
                                          : options_.kernelCache);
    }
    std::string cubin;
    try {
      cubin = compiler_->cubin(source->second, kernel.source, rtcArch_);
    } catch (const Error &error) {
      throw Error(where + ": " + error.what());
    }
    if (std::string failed = load(cubin); !failed.empty())
      throw Error(prefix() + where + ": NVRTC's cubin of " + kernel.source +
                  " does not load: " + failed);
  }
  resolved.module = std::move(module);
}

cudaError_t DeviceBackend::launchGenerated(const ResolvedKernel &kernel,
                                           const std::vector<Operand> &writes,
                                           cudaStream_t stream) {
  // The entries take the launch's reads then writes: fp32 (widened) or
  // i32 pointers, as the registry's signature orders them.
  size_t n = 0;
  for (size_t i = 0; i < call_.reads.size(); ++i)
    generatedArgs_[n++] = call_.reads[i]
                              ? static_cast<void *>(call_.reads[i])
                              : const_cast<int32_t *>(call_.readIndices[i]);
  for (float *write : call_.writes)
    generatedArgs_[n++] = write;
  for (size_t i = 0; i < n; ++i)
    generatedArgAddresses_[i] = &generatedArgs_[i];
  const GeneratedModule &module = *kernel.module;
  for (size_t i = 0; i < module.entries.size(); ++i) {
    const GeneratedLaunch &launch = module.launches[i];
    if (cudaError_t rc = cudaLaunchKernel(
            reinterpret_cast<const void *>(module.entries[i]),
            dim3(unsigned(launch.grid)), dim3(unsigned(launch.block)),
            generatedArgAddresses_.data(), 0, stream))
      return rc;
  }
  if (module.gradientWrite < 0 || lossScale_ == 1)
    return cudaSuccess;
  size_t g = size_t(module.gradientWrite);
  return scale(writes.at(g).elements(), call_.writes[g], lossScale_, stream);
}

void DeviceBackend::runGemm(const Instruction &inst, int64_t stream,
                            const std::vector<Operand> &reads,
                            const std::vector<Operand> &writes) {
  auto it = gemms_.find(&inst);
  if (it == gemms_.end())
    throw Error(prefix() + where(inst, stream) +
                ": gemm was not seen by prepare()");
  const PreparedGemm &g = it->second;
  const GemmPlan &plan = *g.plan;
  void *d = writes[0].data;
  if (g.epilogue) {
    // The descriptor is shared by the gemms of one key: point it at this
    // instruction's bias and aux matrix (read when the call is enqueued or
    // captured).
    auto set = [&](cublasLtMatmulDescAttributes_t attribute, const void *ptr) {
      check(cublasLtMatmulDescSetAttribute(plan.desc, attribute, &ptr,
                                           sizeof ptr),
            "cublasLtMatmulDescSetAttribute", At{inst, stream});
    };
    if (*g.epilogue != GemmEpilogue::DGelu)
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, at(g.bias));
    if (usesAux(*g.epilogue))
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, at(g.aux));
    d = at(g.output);
  }
  const void *alpha = g.f64 ? static_cast<const void *>(&g.alpha64)
                            : static_cast<const void *>(&g.alpha32);
  const void *beta = g.f64 ? static_cast<const void *>(&g.beta64)
                           : static_cast<const void *>(&g.beta32);
  void *workspace = workspacePiece(workspaceLayout_.gemm, stream);
  if (!workspace && plan.workspace > 0)
    throw Error(where(inst, stream) +
                ": internal error: no cuBLASLt workspace on this stream");
  // C is the plan's output (read only with beta != 0, then D is C); D the
  // epilogue's output where it moves it (GeluAuxBias: the activation's).
  check(cublasLtMatmul(lt_, plan.desc, alpha, reads[0].data, plan.a,
                       reads[1].data, plan.b, beta, writes[0].data, plan.c, d,
                       plan.c, &plan.algo, workspace, plan.workspace,
                       streamOf(stream)),
        "cublasLtMatmul", At{inst, stream});
}

void DeviceBackend::runOptimizer(const Instruction &inst, int64_t stream,
                                 const std::vector<Operand> &reads,
                                 const std::vector<Operand> &writes,
                                 const StepContext &context) {
  if (context.step != uploadedStep_ && !capturing_)
    beginStep(context);
  cudaStream_t s = streamOf(stream);
  const At at{inst, stream};
  const Operand &grad = reads[1];
  // One pass: a 16-bit gradient is widened in registers and the weights'
  // low-precision copy (writes[3]) stored beside the update.
  // With the global sum of squares (reads[4]) the kernel derives the clip
  // factor and the overflow skip from it on the device: nothing to decide
  // on the host, so the captured graph holds the whole step.
  bool low = writes.size() == 4;
  check(
      adamwFromDevice(stepDevice_, inst.count, grad.data, storageOf(grad.dtype),
                      writes[0].as<float>(), writes[1].as<float>(),
                      writes[2].as<float>(), low ? writes[3].data : nullptr,
                      low ? storageOf(writes[3].dtype) : FloatStorage::F32,
                      plan::readsGradientNorm(inst) ? reads[4].as<const float>()
                                                    : nullptr,
                      s),
      "adamw", at);
}

void DeviceBackend::refreshHostContext(const StepContext &context) {
  StepContext &h = hostContext_;
  if (h.step != context.step)
    h.step = context.step;
  if (h.lr != context.lr)
    h.lr = context.lr;
  if (h.training != context.training)
    h.training = context.training;
  if (h.lossScale != context.lossScale)
    h.lossScale = context.lossScale;
  if (h.optimizerStep != context.optimizerStep)
    h.optimizerStep = context.optimizerStep;
  if (h.skipUpdate != context.skipUpdate)
    h.skipUpdate = context.skipUpdate;
}

void DeviceBackend::runOnHost(const Instruction &inst, int64_t stream,
                              const std::vector<Operand> &reads,
                              const std::vector<Operand> &writes,
                              const StepContext &context) {
  std::unique_ptr<HostTask> &task = hostTasks_[&inst];
  if (!task) {
    // The first step (eager, before any capture) makes the task.
    task = std::make_unique<HostTask>();
    task->inst = &inst;
    task->wide.resize(size_t(hostInstructions_.at(&inst)));
    task->reads = reads; // the plan's ranges: the same every step
    task->writes = writes;
    task->context = &hostContext_;
  }
  // The skip is decided at clip, after beginStep(): issued eagerly, the task
  // sees it; a captured graph sees each replay's beginStep() values.
  refreshHostContext(context);
  check(cudaLaunchHostFunc(streamOf(stream), runHostTask, task.get()),
        "cudaLaunchHostFunc", At{inst, stream});
}

//===--- Streams, events, steps and graphs -------------------------------===//

void DeviceBackend::recordEvent(int64_t event, int64_t stream) {
  if (event < 0 || size_t(event) >= events_.size())
    throw Error(prefix() + "event " + std::to_string(event) +
                " does not exist");
  check(cudaEventRecord(events_[size_t(event)], streamOf(stream)),
        "cudaEventRecord",
        "stream " + std::to_string(stream) + " event " + std::to_string(event));
}

void DeviceBackend::waitEvent(int64_t event, int64_t stream) {
  if (event < 0 || size_t(event) >= events_.size())
    throw Error(prefix() + "event " + std::to_string(event) +
                " does not exist");
  check(cudaStreamWaitEvent(streamOf(stream), events_[size_t(event)], 0),
        "cudaStreamWaitEvent",
        "stream " + std::to_string(stream) + " event " + std::to_string(event));
}

void DeviceBackend::beginStep(const StepContext &context) {
  if (capturing_)
    throw Error(prefix() + "beginStep() during graph capture (call it before "
                           "beginCapture)");
  if (streams_.empty())
    throw Error(prefix() + "beginStep() before prepare()");
  // The previous upload must have left the pinned slot before it is reused.
  check(cudaEventSynchronize(uploadDone_), "cudaEventSynchronize",
        "step " + std::to_string(context.step));
  if (!hostInstructions_.empty()) {
    // Host tasks of the previous step must be done reading hostContext_.
    synchronize();
    refreshHostContext(context);
  }
  // Dynamic loss scaling changed the scale: the loss kernels take it as a
  // launch argument, so a captured step is captured again.
  if (float(context.lossScale) != lossScale_) {
    lossScale_ = float(context.lossScale);
    dropGraph();
  }
  if (context.training)
    *stepHost_ = adamwStepOf(context, lossScale_);
  std::string at = "step " + std::to_string(context.step);
  check(cudaMemcpyAsync(stepDevice_, stepHost_, sizeof(kernels::AdamWStep),
                        cudaMemcpyHostToDevice, streams_[0]),
        "cudaMemcpyAsync", at);
  // The device times' origin: every stream waits for it (uploadDone_).
  if (stepStartMark_)
    check(cudaEventRecord(stepStartMark_, streams_[0]), "cudaEventRecord", at);
  check(cudaEventRecord(uploadDone_, streams_[0]), "cudaEventRecord", at);
  for (size_t s = 1; s < streams_.size(); ++s)
    check(cudaStreamWaitEvent(streams_[s], uploadDone_, 0),
          "cudaStreamWaitEvent", at);
  uploadedStep_ = context.step;
}

void DeviceBackend::markInstruction(int64_t stream, int64_t mark) {
  if (mark < 0 || size_t(mark) >= marks_.size())
    throw Error(prefix() + "device timing: mark " + std::to_string(mark) +
                " of " + std::to_string(marks_.size()) +
                " (two per instruction a step)");
  check(cudaEventRecord(marks_[size_t(mark)], streamOf(stream)),
        "cudaEventRecord", "device timing mark " + std::to_string(mark));
}

std::vector<double> DeviceBackend::markTimes(int64_t count) {
  std::vector<double> seconds;
  if (!stepStartMark_ || count < 0 || size_t(count) > marks_.size())
    return seconds;
  seconds.reserve(size_t(count));
  for (int64_t m = 0; m < count; ++m) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, stepStartMark_, marks_[size_t(m)]),
          "cudaEventElapsedTime", "device timing mark " + std::to_string(m));
    seconds.push_back(double(ms) * 1e-3);
  }
  return seconds;
}

void DeviceBackend::beginCapture() {
  if (capturing_ || graphExec_)
    throw Error(prefix() + "the step graph is captured once");
  std::string at = "graph capture";
  check(cudaStreamBeginCapture(streams_[0], cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture", at);
  capturing_ = true;
  // Fork: every other stream joins the capture through an event. A failure
  // ends the capture, so that the next step runs (or fails) uncaptured.
  try {
    check(cudaEventRecord(forkEvent_, streams_[0]), "cudaEventRecord", at);
    for (size_t s = 1; s < streams_.size(); ++s)
      check(cudaStreamWaitEvent(streams_[s], forkEvent_, 0),
            "cudaStreamWaitEvent", at);
  } catch (...) {
    discardGraph();
    throw;
  }
}

void DeviceBackend::endCapture() {
  if (!capturing_)
    throw Error(prefix() + "endCapture() without beginCapture()");
  std::string at = "graph capture";
  // Join every stream, then end the capture whatever failed, so that no
  // stream stays in capture mode and no partial graph outlives an error.
  cudaError_t joined = cudaSuccess;
  const char *joinCall = "";
  for (size_t s = 1; s < streams_.size() && joined == cudaSuccess; ++s) {
    joinCall = "cudaEventRecord";
    joined = cudaEventRecord(joinEvents_[s], streams_[s]);
    if (joined == cudaSuccess) {
      joinCall = "cudaStreamWaitEvent";
      joined = cudaStreamWaitEvent(streams_[0], joinEvents_[s], 0);
    }
  }
  cudaGraph_t graph = nullptr;
  cudaError_t ended = cudaStreamEndCapture(streams_[0], &graph);
  capturing_ = false;
  cudaGraphExec_t exec = nullptr;
  cudaError_t instantiated = joined == cudaSuccess && ended == cudaSuccess
                                 ? cudaGraphInstantiate(&exec, graph, 0)
                                 : cudaSuccess;
  if (joined != cudaSuccess || ended != cudaSuccess ||
      instantiated != cudaSuccess) {
    if (graph)
      cudaGraphDestroy(graph);
    check(joined, joinCall, at);
    check(ended, "cudaStreamEndCapture", at);
    check(instantiated, "cudaGraphInstantiate", at);
  }
  graph_ = graph;
  graphExec_ = exec;
}

void DeviceBackend::dropGraph() {
  if (!graphExec_)
    return;
  synchronize(); // no replay of it may still be running
  check(cudaGraphExecDestroy(graphExec_), "cudaGraphExecDestroy", "graph drop");
  graphExec_ = nullptr;
  check(cudaGraphDestroy(graph_), "cudaGraphDestroy", "graph drop");
  graph_ = nullptr;
}

void DeviceBackend::replay() {
  if (!graphExec_)
    throw Error(prefix() + "replay() without a captured step graph");
  check(cudaGraphLaunch(graphExec_, streams_[0]), "cudaGraphLaunch",
        "graph replay");
}

void DeviceBackend::pushRange(const std::string &name) {
#ifdef WEFT_HAVE_NVTX
  nvtxRangePushA(name.c_str());
#else
  (void)name;
#endif
}

void DeviceBackend::popRange() {
#ifdef WEFT_HAVE_NVTX
  nvtxRangePop();
#endif
}

//===--- Communication ---------------------------------------------------===//

void DeviceBackend::checkOneGpuPerRank(int worldSize, MPI_Comm world) {
  struct Record {
    char host[256];
    char uuid[40];
    int ordinal;
  } mine{};
  if (gethostname(mine.host, sizeof mine.host - 1) != 0)
    std::snprintf(mine.host, sizeof mine.host, "?");
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, device_),
        "cudaGetDeviceProperties", "connecting");
  char *out = mine.uuid;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      *out++ = '-';
    out += std::snprintf(
        out, 3, "%02x",
        unsigned(static_cast<unsigned char>(properties.uuid.bytes[i])));
  }
  mine.ordinal = device_;
  std::vector<Record> all(size_t(std::max(worldSize, 1)));
  MPI_Allgather(&mine, int(sizeof mine), MPI_BYTE, all.data(), int(sizeof mine),
                MPI_BYTE, world);
  std::vector<DeviceIdentity> ranks;
  for (const Record &record : all)
    ranks.push_back({std::string(record.host, strnlen(record.host, 256)),
                     "GPU-" + std::string(record.uuid), record.ordinal});
  std::string problem = sharedDeviceProblem(ranks);
  if (!problem.empty())
    throw Error(prefix() + problem);
}

void DeviceBackend::connect(
    const plan::Bundle &bundle, int rank, int worldSize,
    const std::function<void(void *, size_t)> &broadcastId) {
  options_.rank = rank;
  check(cudaSetDevice(device_), "cudaSetDevice", "connecting");
  comms_ = NcclComms::create(bundle, rank, worldSize, broadcastId);
}

void DeviceBackend::communicate(const Instruction &inst, int64_t stream,
                                const std::vector<Operand> &reads,
                                const std::vector<Operand> &writes,
                                const std::string &at) {
  if (!comms_)
    throw Error(prefix() + at + ": " +
                std::string(plan::toString(inst.opcode)) +
                " before connect() (no NCCL communicators)");
  try {
    comms_->issue(inst, reads, writes, streamNames_[size_t(stream)],
                  streamOf(stream), at);
  } catch (...) {
    abortAfterFailure();
    throw;
  }
}

void DeviceBackend::beginBucket() {
  if (comms_)
    comms_->groupStart();
}

void DeviceBackend::endBucket() {
  if (comms_)
    comms_->groupEnd();
}

void DeviceBackend::abortCommunication() { abortAfterFailure(); }

} // namespace

std::unique_ptr<CudaBackend>
makeCudaBackend(const CudaBackendOptions &options) {
  auto backend = std::make_unique<DeviceBackend>(options);
  backend->open();
  return backend;
}

} // namespace weft::exec::cuda
