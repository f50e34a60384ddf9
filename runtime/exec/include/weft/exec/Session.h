//===- Session.h - One rank's replay of a plan bundle -----------*- C++ -*-===//
//
// A Session is what weft-run drives on every rank: open() loads the bundle,
// validates it (content hash, format version, plan verifier, world size,
// kernel ABI, data file) on every rank before any communication, agrees on
// the outcome across ranks, builds the communicators, allocates the rank's
// regions (persistent, arena, host) and initializes the parameters; runStep()
// replays the rank's program once (one optimizer step). docs/runtime.md is the
// specification.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_SESSION_H
#define WEFT_EXEC_SESSION_H

#include "weft/exec/Backend.h"
#include "weft/exec/Checkpoint.h"
#include "weft/exec/StateGroups.h"
#include "weft/plan/Bundle.h"
#include "weft/plan/Verifier.h"

#include <mpi.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft::exec {

struct Options {
  std::string bundleDir;
  std::string dataPath;
  std::string backend = "cpu";
  uint64_t seed = 0; // parameter initialization
  /// A communication operation that makes no progress for this long is a
  /// fatal error naming the rank, stream, instruction, phase and group.
  double watchdogSeconds = 600;
  /// Run the plan verifier at open. Only fault-injection tests turn it off
  /// (to reach the watchdog with a plan that deadlocks).
  bool verifyPlan = true;
  /// Record the begin/end time of every instruction (see trace()).
  bool trace = false;
  /// With trace, time each instruction on the device (CUDA: timing events
  /// before and after it on its stream) instead of on the host, so that a
  /// trace shows the kernels' own durations and the streams' overlap
  /// (weft-run --device-times). Eagerly issued steps only: it turns graph
  /// capture off. A backend without device timing refuses it at open.
  bool deviceTimes = false;
  /// Resume from the newest complete checkpoint in this directory instead of
  /// initializing the parameters (empty: start at step 0).
  std::string resumeDir;
  /// Backends that can (CUDA): capture the whole step as a graph after one
  /// eager warm-up step and replay it (weft-run --no-graph turns it off).
  bool graph = true;
  /// Backends that can (CUDA): give bf16/f16 operands to the kernels that
  /// take them directly (tensor-core attention) instead of widening them to
  /// fp32 (weft-run --half-kernels). Off until those kernels have run on a
  /// GPU (docs/kernels.md).
  bool halfKernels = false;
  /// Backends that can (CUDA): run the 16-bit attention kernels on cuDNN's
  /// fused attention where libcudnn is there and takes their shape
  /// (weft-run --cudnn-attention, which implies --half-kernels). Off until
  /// checked on a GPU.
  bool cudnnAttention = false;
  /// Backends that can (CUDA): run the bundle's generated kernels instead of
  /// the library ones (weft-run --generated-kernels; docs/kernels.md,
  /// "Loading generated kernels"), NVRTC's cubins cached in `kernelCache`
  /// (empty: the default directory; "off": none).
  bool generatedKernels = false;
  std::string kernelCache;
  /// Backends that can (CUDA): time cuBLASLt's candidate algorithms of every
  /// GEMM shape at load and keep the fastest (weft-run --gemm-autotune).
  bool gemmAutotune = false;
  /// Checkpoint retention: after each save, rank 0 keeps the newest this
  /// many full checkpoints (D/step-<N>) and weights snapshots (D/weights-<N>)
  /// up to the one just saved and removes the older ones and their kind's
  /// leftovers (pruneCheckpoints; weft-run --keep-checkpoints/--keep-weights).
  /// 0: keep everything.
  int64_t keepCheckpoints = 0, keepWeights = 0;
  /// Resume even when the data file is not the one the checkpoint recorded
  /// (weft-run --resume-any-data): the data position then counts sequences
  /// of the new file, so the batches differ from an uninterrupted run's.
  bool resumeAnyData = false;
};

/// One checkpoint saved or loaded by this rank.
struct CheckpointStats {
  std::string dir;    // D/step-<N>
  int64_t step = 0;   // optimizer steps completed at the checkpoint
  int64_t bytes = 0;  // this rank's file
  double seconds = 0; // wall time on this rank, including the agreements
  /// Rank 0, with retention: the checkpoints the save made obsolete and
  /// removed, and those it could not remove ("path: reason").
  std::vector<std::string> removed, notRemoved;
};

struct StepStats {
  int64_t step = 0; // 1-based optimizer step just completed
  double loss = 0;  // mean over the ranks holding a 'loss' buffer; NaN if none
  /// The global gradient norm before clipping: sqrt of the sum of squares
  /// the step's optimizer_step (or a clip) read over the loss scale; NaN if
  /// nothing read it or the step was skipped.
  double gradNorm = 0;
  double lr = 0;        // the schedule's learning rate for this step
  double stepTimeS = 0; // wall time of the step on this rank
  /// Host time until every instruction was issued (on the CPU backend, run;
  /// with a captured graph: staging, scalars and the launch), and host time
  /// after the device finished (the loss read and the statistics
  /// all-reduces): what the host adds to a step around the device's work.
  double issueTimeS = 0, finishTimeS = 0;
  double tokensPerS = 0;     // global batch tokens / step time
  bool lossReported = false; // some rank holds a 'loss' buffer
  /// Model FLOP rate (no recompute) per rank and model FLOP utilization
  /// against the plan's cluster peak; 0 when the bundle records no
  /// prediction or cluster (see modelFlopsPerStep()).
  double modelTflopsPerRank = 0;
  double mfu = 0;
  int64_t memoryBytes = 0; // the most device bytes in use on any rank
  double lossScale = 1;    // the loss scale this step ran with
  /// Dynamic loss scaling found the gradients not finite: no update was
  /// applied and the scale was backed off (gradNorm is then NaN).
  bool skipped = false;
};

/// Where a state group's bytes are.
enum class Residency {
  Device,   // in the rank's region (the only place a step can use it)
  Pageable, // copied to pageable host memory; device bytes released
  Pinned,   // copied to pinned host memory; device bytes released
  Released, // dropped without a copy (the arena: dead between steps)
  Host,     // in the plan's host region (optimizer offload): never moved
};
std::string_view toString(Residency residency);

/// One offload or reload of one state group on this rank.
struct OffloadReport {
  StateGroup group = StateGroup::Other;
  bool reload = false; // false: offload
  Residency before = Residency::Device, after = Residency::Device;
  int64_t bytesMoved = 0;  // copied between device and host
  int64_t groupBytes = 0;  // the group's bytes in its region
  double seconds = 0;      // wall time, including the drain
  double copySeconds = 0;  // of which the copy itself
  int64_t drained = 0;     // in-flight operations completed first
  bool hostReused = false; // offload: the previous host buffer reused
  int64_t deviceBytesBefore = 0, deviceBytesAfter = 0; // Backend's count
};

struct TraceEvent {
  int32_t stream = 0;
  int32_t instruction = 0;
  int64_t step = 0;
  double beginS = 0; // seconds since the session opened
  double endS = 0;
  /// Its place among the instructions the host issued this step (0, 1, ...):
  /// the submission order, communication in the plan's one order
  /// (plan::communicationOrder).
  int64_t issue = -1;
};

/// Learning rate of 1-based step `step`: linear warmup over warmup_steps to
/// lr, cosine decay to min_lr at step decay_steps, min_lr afterwards.
double learningRate(const plan::TrainingInfo &training, int64_t step);

/// Initial value of element `index` (row-major, of the global tensor) of
/// `param` for `seed`. Counter-based, so any shard of any plan initializes
/// its elements identically.
double initialValue(uint64_t seed, const plan::Parameter &param, int64_t index);

class Session {
public:
  /// Collective over `world`. Throws Error with the same one-line message on
  /// every rank if any rank rejects the bundle, the data or the world size
  /// (prefixed "rank R: " when the first failing rank is not 0).
  static std::unique_ptr<Session> open(const Options &options, MPI_Comm world);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// Replays the program once: optimizer step completedSteps() + 1. Throws
  /// Error on a failure (including the watchdog); the caller must then abort
  /// the job (MPI_Abort), since peers may be blocked in a collective.
  StepStats runStep();

  /// runStep() in two halves: beginStep() issues step completedSteps() + 1
  /// as far as it goes without waiting for peers (communication may be left
  /// in flight) and finishStep() completes it. Between them only drain(),
  /// offload() of persistent groups and reload() may be called. Both throw
  /// Error if a state group the step needs is offloaded.
  void beginStep();
  StepStats finishStep();
  /// Communication operations started and not yet completed.
  int64_t inFlight() const;
  /// Waits until every in-flight operation has completed (the watchdog
  /// applies); returns how many there were.
  int64_t drain();

  /// Offloads `group` (docs/runtime.md, "Offload"): drains in-flight
  /// communication, copies the group's bytes to host memory of `kind` and
  /// decommits them on the device. The arena (Activations) is released
  /// without a copy and only between steps. Offloading an offloaded group,
  /// or an empty one, moves nothing. Throws Error with nothing changed.
  OffloadReport offload(StateGroup group, HostMemoryKind kind);
  /// Brings `group` back into the region, bit for bit (the arena comes back
  /// NaN-filled); a resident group is a no-op. The host buffer is kept for
  /// the group's next offload.
  OffloadReport reload(StateGroup group);
  /// Frees the host buffers kept by reload(); returns their bytes.
  int64_t releaseHostBuffers();
  Residency where(StateGroup group) const;
  const StateGroupLayout &layout(StateGroup group) const;
  /// Backend::deviceBytesInUse() of this rank.
  int64_t deviceBytesInUse() const;
  /// Backend::workspaceBytes() of this rank.
  int64_t workspaceBytes() const;
  /// Backend::deviceBytesAllocated() of this rank.
  int64_t deviceBytesAllocated() const;

  /// Collective: writes D/weights-<completedSteps()>: the working parameters
  /// as weightsSnapshotLayout() selects them (under ZeRO, this rank's shard),
  /// with the protocol, header and checksums of saveCheckpoint (a separate
  /// name, so a resume never picks it). Offloaded bytes are written from
  /// their host copies.
  CheckpointStats saveWeights(const std::string &dir);
  /// Collective: replaces this rank's persistent state with the newest
  /// complete checkpoint in `dir` (or the checkpoint directory `dir` itself
  /// when it holds COMPLETE), with every check of a resume; offloaded groups
  /// are dropped first. On an error every rank throws the same message and
  /// the session refuses to step (its state is unspecified).
  CheckpointStats loadCheckpoint(const std::string &dir);

  /// Collective: writes checkpoint D/step-<completedSteps()> (each rank its
  /// persistent region, then its host region; rank 0 the manifest, the rename
  /// and the COMPLETE marker). Throws the same Error on every rank if any rank
  /// failed; the earlier checkpoints in `dir` stay intact.
  CheckpointStats saveCheckpoint(const std::string &dir);
  /// The checkpoint this session resumed from, if any.
  const std::optional<CheckpointStats> &resumed() const { return resumed_; }

  int64_t completedSteps() const { return completedSteps_; }
  /// The model FLOPs of one step (the planner's count, no recompute): the
  /// prediction's mfu x step time x world x the cluster's peak per device
  /// (config.cluster.gpu.peak_tflops[precision]); 0 when any is missing.
  double modelFlopsPerStep() const { return modelFlopsPerStep_; }
  /// The cluster's peak FLOP/s per device for the plan's precision, or 0.
  double peakFlopsPerRank() const { return peakFlopsPerRank_; }
  /// The loss scaler's state after completedSteps() (static plans: the
  /// fixed scale, no good steps, every step applied).
  LossScaleState lossScaleState() const { return scaler_; }
  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }
  const plan::Bundle &bundle() const { return bundle_; }
  const plan::RankProgram &rankProgram() const { return rankProgram_; }
  const Backend &backend() const { return *backend_; }
  Backend &backend() { return *backend_; }
  /// The memory of program buffer `id` on this rank: a device address unless
  /// backend().hostAddressable() (read it with Backend::copyToHost), but
  /// always host memory for a host-region buffer (valid after
  /// Backend::synchronize()); on the CPU an offloaded group's pages are
  /// protected: touching them faults.
  Operand buffer(int64_t id) const;
  /// Copies `bytes` of program buffer `id` from `offset` to host memory
  /// (through the backend; waits for the device).
  void readBuffer(int64_t id, int64_t offset, void *host, int64_t bytes) const;
  /// Instructions executed so far (only with Options::trace).
  const std::vector<TraceEvent> &trace() const { return trace_; }

private:
  struct Prepared;
  struct Comms;
  Session();
  void setUp(MPI_Comm world);
  void validateLocally();
  void resumeLocally();
  /// The token file this rank reads (data_ must be set).
  DataIdentity dataIdentity() const;
  /// The persistent and host regions, allocated once (before a resume reads
  /// into them).
  void allocateStateRegions();
  /// A full checkpoint's payload: the persistent region, then the host
  /// region.
  int64_t fullPayloadBytes() const;
  CheckpointStats readCheckpointLocally(const std::string &dir,
                                        int *payloadTouched = nullptr);
  bool advance(bool untilDone);
  /// After a failure inside a step: the backend's communication torn down
  /// (CUDA: ncclCommAbort, so that no enqueued collective waits for a peer
  /// forever and the peers' own watchdogs see it), the open range closed.
  /// The step stays in progress: the session cannot run another.
  void abortStep() noexcept;
  /// beginStep()'s work once the step is in progress: stage the batches,
  /// then replay, capture or run the step eagerly up to its first wait.
  void issueStep();
  /// The runtime's private communicator (statistics, checkpoint agreement).
  MPI_Comm statsComm() const;
  void requireResident(const char *what) const;
  /// The persistent bytes [offset, offset + bytes) as pieces in device or
  /// host memory (offloaded groups), in order.
  std::vector<std::pair<const std::byte *, int64_t>>
  persistentPieces(int64_t offset, int64_t bytes) const;
  CheckpointStats commitCheckpoint(
      const std::string &dir, const std::string &name,
      const std::vector<std::pair<const std::byte *, int64_t>> &payload,
      bool weightsOnly);
  /// Agrees on `failure` (empty: success) over `comm`; throws the lowest
  /// failing rank's message on every rank.
  void agree(const std::string &failure, MPI_Comm comm) const;
  void buildCommunicators();
  void initializeParameters();
  void prepareInstructions();
  void issue(size_t stream, size_t index, const StepContext &context);
  /// Has the step's gradient sum of squares (plan range `range`, resolved
  /// as `operand`, on plan stream `stream`) read after synchronize().
  void readNormSum(const plan::BufferRange &range, const Operand &operand,
                   size_t stream);
  /// Reads every load_batch of the step into its staging buffer (backends
  /// that are not host-addressable: the copies, or a replayed graph, read
  /// them from there).
  void stageBatches(const StepContext &context);
  /// The persistent region as device memory the checkpoint files stream
  /// through chunk by chunk; null when the backend is host-addressable
  /// (they read and write the region in place).
  const DeviceMemory *deviceMemory();
  [[noreturn]] void stalled(double waitedS) const;

  Options options_;
  MPI_Comm world_ = MPI_COMM_NULL;
  int rank_ = 0;
  int worldSize_ = 1;
  plan::Bundle bundle_;
  plan::RankProgram rankProgram_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<class DataLoader> data_;
  std::unique_ptr<Comms> comms_;
  std::byte *persistent_ = nullptr;
  std::byte *arena_ = nullptr;
  std::byte *host_ = nullptr; // the host region (host memory), if any
  std::vector<std::vector<Prepared>> prepared_; // [stream][instruction]
  std::vector<size_t> next_;                    // per stream: next instruction
  std::vector<char> pending_;  // per stream: communication in flight
  std::vector<char> recorded_; // per event, this step
  int64_t nextTurn_ = 0;       // communication issued this step
  /// Every rank's plan::communicationOrder, from the verifier, until
  /// prepareInstructions() has taken this rank's turns.
  std::vector<std::vector<plan::StreamPosition>> communicationOrder_;
  int64_t lossBuffer_ = -1;
  /// The loss's last writer (stream, index) and the staging float its value
  /// is copied into right after it, so finishStep() reads it without
  /// another synchronize and a blocking copy; -1 and null where the loss is
  /// read with readBuffer() (written on several streams, last by a
  /// communication, or none).
  int64_t lossStream_ = -1, lossWriter_ = -1;
  float *lossHost_ = nullptr;
  /// Staging: the gradients' global sum of squares the step's clip, or its
  /// first optimizer_step that reads it, read (valid after synchronize()).
  float *normSum_ = nullptr;
  /// Where the step's sum is read after synchronize(): normSum_, or the
  /// plan's host-region sum itself (an offloaded optimizer's).
  const float *normSource_ = nullptr;
  bool normRead_ = false;
  bool normCaptured_ = false; // the captured step reads it
  int64_t eagerSteps_ = 0;    // steps issued instruction by instruction
  DeviceMemory deviceMemory_; // see deviceMemory()
  const std::string *openRange_ = nullptr; // the phase of the open range
  int64_t completedSteps_ = 0;
  LossScaleState scaler_;
  double modelFlopsPerStep_ = 0, peakFlopsPerRank_ = 0;
  std::string bundleHash_;
  std::optional<CheckpointStats> resumed_;
  double openTime_ = 0;
  std::vector<TraceEvent> trace_;
  std::vector<double> issuedAt_; // per stream: when the pending op began
  /// With trace: [stream][instruction], its place in this step's issue order.
  std::vector<std::vector<int64_t>> issuedAs_;
  int64_t issuedThisStep_ = 0;
  /// Device timing (Options::deviceTimes): whether this step is marked, the
  /// marks enqueued so far, each trace event's (begin, end) marks (-1: host
  /// times), the marks of each stream's pending operation, and the first
  /// trace event of the step.
  bool marking_ = false;
  int64_t marks_ = 0;
  std::vector<std::pair<int64_t, int64_t>> traceMarks_;
  std::vector<std::pair<int64_t, int64_t>> issuedMarks_;
  size_t stepTraceBegin_ = 0;
  /// Enqueues the next mark on `stream` when marking (else -1).
  int64_t mark(size_t stream);
  /// Appends a trace event of instruction `index` of `stream` issued at
  /// `issued` with device marks `marks`.
  void traceInstruction(size_t stream, size_t index, double issued,
                        std::pair<int64_t, int64_t> marks);
  struct GroupState {
    Residency where = Residency::Device;
    HostBuffer host; // the offloaded bytes, ranges packed in offset order
  };
  std::array<StateGroupLayout, kNumStateGroups> layout_;
  StateGroupLayout weightsLayout_; // what saveWeights() writes
  /// By rank, who writes its weights snapshot (weightsSnapshotWriters).
  std::vector<int64_t> weightsWriters_;
  std::array<GroupState, kNumStateGroups> groups_;
  bool stepInProgress_ = false;
  StepContext stepContext_;
  double stepStart_ = 0;
  /// Host time when the backend's beginStep() returned: where the device
  /// times of the step's marks start (its first mark follows the staging).
  double markOrigin_ = 0;
  std::string stateLost_; // why the state is unusable (a failed load)
};

} // namespace weft::exec

#endif // WEFT_EXEC_SESSION_H
