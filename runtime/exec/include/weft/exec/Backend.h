//===- Backend.h - Where a rank's memory lives and compute runs -*- C++ -*-===//
//
// The executor (Session) owns scheduling, data, checkpoints and offload; a
// Backend owns device memory, the compute opcodes, events, the plan's
// communication and step begin/end. Session never dereferences a region
// address unless the backend says the regions are host memory
// (hostAddressable()); everything else goes through the copies below. Each
// rank allocates its regions, sized by the plan (persistent, arena, and the
// host region of optimizer-offload plans), once at open; Backend::prepare sees
// the whole program up front so it can check the kernel ABI and size every
// workspace, and nothing is allocated in steady state.
//
// The CPU backend (makeCpuBackend) executes synchronously on host memory and
// communicates with non-blocking MPI; the CUDA backend
// (weft/exec/cuda/CudaBackend.h) enqueues on one cudaStream per plan stream,
// records plan events as cudaEvents, communicates with NCCL and may capture
// a whole step as a CUDA graph. docs/runtime.md ("Backend" under "API") is
// the contract.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_BACKEND_H
#define WEFT_EXEC_BACKEND_H

#include "weft/plan/Bundle.h"

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weft::exec {

/// One byte range of a buffer, resolved to memory.
struct Operand {
  std::byte *data = nullptr;
  int64_t bytes = 0;
  plan::DType dtype = plan::DType::F32; // the buffer's dtype

  template <typename T> T *as() const { return reinterpret_cast<T *>(data); }
  int64_t elements() const { return bytes / plan::elementBytes(dtype); }
  bool operator==(const Operand &other) const {
    return data == other.data && bytes == other.bytes && dtype == other.dtype;
  }
};

/// Places the fp32 copies of a kernel's bf16/f16 operands one after another
/// in a backend's workspace. Operands with the same range (an in-place
/// kernel) share one copy, as an fp32 operand shares its buffer, and as
/// checkKernelOperands counts the workspace. `placed` is the caller's
/// vector, reused from call to call (no allocation in steady state).
class WidenedCopies {
public:
  WidenedCopies(float *workspace,
                std::vector<std::pair<Operand, float *>> &placed)
      : next_(workspace), placed_(placed) {
    placed_.clear();
  }
  /// The copy of `operand`, and whether it is new (the caller fills it).
  std::pair<float *, bool> place(const Operand &operand) {
    for (const auto &[seen, copy] : placed_)
      if (seen == operand)
        return {copy, false};
    float *copy = next_;
    next_ += operand.elements();
    placed_.push_back({operand, copy});
    return {copy, true};
  }

private:
  float *next_;
  std::vector<std::pair<Operand, float *>> &placed_;
};

/// The members of communication instruction `inst` issued with operands
/// `reads` (docs/plan-format.md, "Collective members"): one per read for
/// all_reduce, reduce_scatter and all_gather, one for broadcast, send and recv.
inline size_t operandMembers(const plan::Instruction &inst,
                             const std::vector<Operand> &reads) {
  return plan::hasMembers(inst.opcode) ? reads.size() : 1;
}
/// Member `member`'s per-rank element count: `count` when the instruction
/// has one member, otherwise from the member's operand (reduce_scatter: its
/// write, otherwise its read) in `inst.dtype` elements.
inline int64_t operandMemberElements(const plan::Instruction &inst,
                                     const std::vector<Operand> &reads,
                                     const std::vector<Operand> &writes,
                                     size_t member) {
  if (operandMembers(inst, reads) == 1)
    return inst.count;
  const Operand &side = inst.opcode == plan::Opcode::ReduceScatter
                            ? writes[member]
                            : reads[member];
  return side.bytes / plan::elementBytes(inst.dtype);
}

/// Host memory that offloaded state is copied to.
enum class HostMemoryKind {
  Pageable, // ordinary heap memory (malloc)
  Pinned,   // page-locked (mmap + mlock; the CUDA backend registers it:
            // cudaHostRegister, so its copies are direct DMA)
};
std::string_view toString(HostMemoryKind kind); // "pageable", "pinned"

/// One host allocation for offloaded state; frees itself.
class HostBuffer {
public:
  HostBuffer() = default;
  /// Throws Error naming the size and the reason (e.g. RLIMIT_MEMLOCK).
  HostBuffer(int64_t bytes, HostMemoryKind kind);
  ~HostBuffer();
  HostBuffer(HostBuffer &&other) noexcept;
  HostBuffer &operator=(HostBuffer &&other) noexcept;
  HostBuffer(const HostBuffer &) = delete;
  HostBuffer &operator=(const HostBuffer &) = delete;

  std::byte *data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  HostMemoryKind kind() const { return kind_; }
  /// Called with data() before the memory is freed (a backend's
  /// unregisterHostMemory).
  void onRelease(std::function<void(std::byte *)> release) {
    release_ = std::move(release);
  }

private:
  void reset();
  std::byte *data_ = nullptr;
  int64_t bytes_ = 0;
  size_t mapped_ = 0; // pinned: the mmap length
  HostMemoryKind kind_ = HostMemoryKind::Pageable;
  std::function<void(std::byte *)> release_;
};

/// What an instruction needs to know about the step it runs in.
struct StepContext {
  int64_t step = 1; // 1-based training step (data position, LR schedule)
  double lr = 0;    // from the schedule
  const plan::TrainingInfo *training = nullptr;
  /// The loss scale of this step: the loss kernels seed the backward with
  /// it, clip and the optimizer divide it out (training.loss_scale; the
  /// current value under dynamic scaling, a power of two).
  double lossScale = 1;
  /// 1-based count of the AdamW updates applied, this one included (bias
  /// correction): equals `step` unless dynamic loss scaling skipped steps.
  int64_t optimizerStep = 1;
  /// Set during the step when the global gradient sum of squares is not
  /// finite under dynamic loss scaling: clip and optimizer_step do nothing.
  bool skipUpdate = false;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  //===--- Memory --------------------------------------------------------===//

  /// Allocates a region of `bytes` (once per region and rank, at open). The
  /// persistent region is zeroed; the arena's contents are unspecified (NaN
  /// bytes on both backends). The address is opaque to the executor unless
  /// hostAddressable(). Region::Host is the rank's host memory (CPU: like
  /// persistent; CUDA: pinned, cudaHostAlloc), zeroed, always host-addressable
  /// and never counted in deviceBytesInUse(); instructions reach it in stream
  /// order (copy, fill, optimizer_step on host operands), so the executor
  /// reads or writes it directly only after synchronize().
  virtual std::byte *allocateRegion(plan::Region region, int64_t bytes) = 0;
  /// Whether region addresses are host memory the executor may read and
  /// write directly (CPU: the zero-copy paths for load_batch, parameter
  /// initialization and checkpoints). Otherwise every access goes through
  /// the copies below.
  virtual bool hostAddressable() const { return false; }

  /// Device memory for offload (docs/runtime.md, "Offload"). decommit makes
  /// [data, data + bytes) of a region unusable until recommit and releases
  /// what it can: on the CPU every whole page inside is returned to the OS
  /// (madvise DONTNEED) and protected (PROT_NONE), so a stray access faults,
  /// and the bytes of partial pages at the edges are filled with NaN (0xff).
  /// Returns the bytes released; on an error the range stays usable (its
  /// contents unspecified). recommit makes a decommitted range usable again;
  /// its contents are then unspecified (the caller restores or poisons them).
  virtual int64_t decommit(std::byte *data, int64_t bytes) = 0;
  virtual void recommit(std::byte *data, int64_t bytes) = 0;
  /// Fills [data, data + bytes) of a region with 0xff bytes (NaN), as the
  /// arena starts. Synchronous.
  virtual void poison(std::byte *data, int64_t bytes) = 0;
  /// Synchronous copies between a region and any host memory, ordered after
  /// all work issued so far (CPU: memcpy; CUDA: synchronize + cudaMemcpy).
  /// Not allowed while a step is being captured.
  virtual void copyToHost(std::byte *host, const std::byte *device,
                          int64_t bytes) = 0;
  virtual void copyToDevice(std::byte *device, const std::byte *host,
                            int64_t bytes) = 0;
  /// Host memory owned by the backend for per-step transfers (load_batch
  /// tokens in, step statistics out): page-locked on a device, so the async
  /// copies below and a captured graph may use it. Call at open only; freed
  /// with the backend.
  virtual std::byte *stagingBuffer(int64_t bytes) = 0;
  /// Copies ordered on plan stream `stream` after its earlier work; `host`
  /// is a stagingBuffer(). A captured step re-reads (or re-writes) the host
  /// bytes at every replay. The host side of copyToHostAsync is valid after
  /// synchronize(). CPU: memcpy at once.
  virtual void copyToDeviceAsync(std::byte *device, const std::byte *host,
                                 int64_t bytes, int64_t stream) = 0;
  virtual void copyToHostAsync(std::byte *host, const std::byte *device,
                               int64_t bytes, int64_t stream) = 0;
  /// Registers pinned host memory (a HostBuffer's) with the device for
  /// direct DMA (CUDA: cudaHostRegister); whether it did (CPU: nothing to
  /// do). unregisterHostMemory undoes it before the memory is freed.
  virtual bool registerHostMemory(std::byte *host, int64_t bytes) {
    (void)host, (void)bytes;
    return false;
  }
  virtual void unregisterHostMemory(std::byte *host) { (void)host; }
  /// Bytes of the regions currently backed by device memory.
  virtual int64_t deviceBytesInUse() const = 0;
  /// Device bytes allocated beyond the plan's regions at prepare() (kernel
  /// scratch, half-precision operands widened to fp32, GEMM workspaces): what
  /// the plan's memory does not count yet. 0 on the CPU.
  virtual int64_t workspaceBytes() const { return 0; }
  /// Device memory allocated since the backend opened the device, however
  /// allocated (regions, workspace, libraries' buffers; not the driver's
  /// context, which exists before): what to compare with the plan. -1 where
  /// not measured (CPU).
  virtual int64_t deviceBytesAllocated() const { return -1; }

  //===--- Instructions --------------------------------------------------===//

  /// Checks every compute instruction of `program` against what this
  /// backend implements (kernel names, operand dtypes and sizes) and sizes
  /// the workspaces. Throws Error naming the instruction. `program` must
  /// outlive the backend (communicate() and execute() receive its
  /// instructions).
  virtual void prepare(const plan::Bundle &bundle,
                       const plan::Program &program) = 0;

  /// Runs one compute instruction: kernel, gemm, copy, fill,
  /// optimizer_step, grad_norm or clip. `stream` is the program's stream
  /// index. The CPU runs it to completion; a device backend enqueues it.
  /// Operands of host-region buffers are host pointers: copy moves bytes
  /// between host and device either way; fill, and an optimizer_step or
  /// clip whose operands are all host buffers, run on the host in stream
  /// order (CUDA:
  /// cudaLaunchHostFunc, reading the step's values from a copy of `context`
  /// the backend refreshes at beginStep() and at issue, when they run).
  virtual void execute(const plan::Instruction &inst, int64_t stream,
                       const std::vector<Operand> &reads,
                       const std::vector<Operand> &writes,
                       const StepContext &context) = 0;

  /// record_event / wait_event of the plan on `stream` (CPU: nothing: the
  /// executor's scheduler orders the streams; CUDA: cudaEventRecord /
  /// cudaStreamWaitEvent).
  virtual void recordEvent(int64_t event, int64_t stream) {
    (void)event, (void)stream;
  }
  virtual void waitEvent(int64_t event, int64_t stream) {
    (void)event, (void)stream;
  }

  //===--- Communication -------------------------------------------------===//

  /// Builds the communicators of the plan's collectives and transfers for
  /// world rank `rank` (after prepare()). Collective over `world`: every
  /// rank calls it in the same order. CPU: one MPI_Comm_split per (group
  /// family, stream name), one MPI_Comm_dup per p2p stream; CUDA: NCCL
  /// communicators, the unique id broadcast over `world`.
  virtual void connect(const plan::Bundle &bundle, int rank, int worldSize,
                       MPI_Comm world) = 0;
  /// Starts a collective or send/recv instruction of the prepared program
  /// on `stream`, every member of a multi-member all_reduce, reduce_scatter
  /// or all_gather (CPU: one MPI call each; CUDA: one NCCL call each in one
  /// ncclGroupStart/End); at most one instruction per stream is outstanding
  /// (see communicationDone). `where` names the instruction in errors.
  virtual void communicate(const plan::Instruction &inst, int64_t stream,
                           const std::vector<Operand> &reads,
                           const std::vector<Operand> &writes,
                           const std::string &where) = 0;
  /// Whether the operation communicate() started on `stream` is complete as
  /// far as the stream's next instruction is concerned (CPU: MPI_Testall over
  /// its members' requests; CUDA: at once, since the device stream orders
  /// it). Never blocks.
  virtual bool communicationDone(int64_t stream) = 0;
  /// Whether runs of consecutive communication instructions of a stream
  /// (communicationBuckets) must be issued together between beginBucket()
  /// and endBucket() (CUDA: ncclGroupStart/End); such a backend must report
  /// communicationDone() at once. The CPU issues them one by one, each
  /// completing before the next.
  virtual bool coalescesCommunication() const { return false; }
  virtual void beginBucket() {}
  virtual void endBucket() {}
  /// Tears down communication after a failure (CUDA: ncclCommAbort).
  virtual void abortCommunication() {}

  //===--- Steps ---------------------------------------------------------===//

  /// Before the first instruction of every step (CUDA: uploads the
  /// optimizer scalars the kernels read from device memory).
  virtual void beginStep(const StepContext &context) { (void)context; }
  /// Waits until everything issued has completed (CUDA: every stream).
  virtual void synchronize() {}
  /// Whole-step graphs: when graphEnabled(), the executor issues step 1
  /// eagerly, captures step 2 (beginCapture() after beginStep(), then every
  /// instruction, endCapture(), replay()) and afterwards only refills its
  /// staging buffers and calls replay().
  virtual bool graphEnabled() const { return false; }
  virtual bool hasGraph() const { return false; }
  virtual void beginCapture() {}
  virtual void endCapture() {}
  virtual void replay() {}
  /// Device timing (Options::deviceTimes): whether the backend can time
  /// instructions on the device. The executor then, in an eagerly issued
  /// step, enqueues mark 0, 1, 2, ... on an instruction's stream right before
  /// and right after issuing it (markInstruction), and once synchronize()
  /// has returned reads the marks' times (markTimes: seconds after the
  /// step's start, one per mark, empty when they are not available).
  virtual bool timesInstructions() const { return false; }
  virtual void markInstruction(int64_t stream, int64_t mark) {
    (void)stream;
    (void)mark;
  }
  virtual std::vector<double> markTimes(int64_t count) {
    (void)count;
    return {};
  }
  /// How the backend runs `inst` where that is not as itself, for traces
  /// and profiles (CUDA: "epilogue as kernels", "cuDNN"); empty otherwise.
  /// Valid after prepare().
  virtual std::string_view
  instructionNote(const plan::Instruction &inst) const {
    (void)inst;
    return {};
  }
  /// A named range per plan phase for profilers (CUDA: NVTX).
  virtual void pushRange(const std::string &name) { (void)name; }
  virtual void popRange() {}
};

/// The channels a backend's communicators carry, from the whole bundle (so
/// every rank derives the same lists, in the same order, and creates its
/// communicators collectively in that order): each (group family, stream
/// name) of a collective, and each stream name of a send or receive. A plan
/// orders the communication of one stream; different streams are
/// independent, so each gets a communicator of its own (the CPU backend's
/// MPI communicators, the CUDA backend's NCCL ones, which run one
/// communicator's operations in issue order).
struct CommunicationChannels {
  std::set<std::pair<int64_t, std::string>> collectives;
  std::set<std::string> pointToPoint;
};
CommunicationChannels communicationChannels(const plan::Bundle &bundle);

/// The host backend: OpenBLAS GEMM and the CPU kernel library, fp32, bf16 and
/// f16 storage (bf16 and f16 computed in fp32), non-blocking MPI
/// communication. With `hostAddressable` false ("cpu-staged") it says its
/// regions are not host memory, so the executor takes the paths it takes
/// for a device (staged batches, copied parameters, checkpoints streamed
/// through copies): they are tested without a GPU, with the same results.
std::unique_ptr<Backend> makeCpuBackend(bool hostAddressable = true);

} // namespace weft::exec

#endif // WEFT_EXEC_BACKEND_H
