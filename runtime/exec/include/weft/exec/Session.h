//===- Session.h - One rank's replay of a plan bundle -----------*- C++ -*-===//
//
// A Session is what weft-run drives on every rank: open() loads the bundle,
// validates it (content hash, format version, plan verifier, world size,
// kernel ABI, data file) on every rank before any communication, agrees on
// the outcome across ranks, builds the communicators, allocates the rank's
// two regions and initializes the parameters; runStep() replays the rank's
// program once (one optimizer step). docs/runtime.md is the specification.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_SESSION_H
#define WEFT_EXEC_SESSION_H

#include "weft/exec/Backend.h"
#include "weft/plan/Bundle.h"

#include <mpi.h>

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
  /// Resume from the newest complete checkpoint in this directory instead of
  /// initializing the parameters (empty: start at step 0).
  std::string resumeDir;
};

/// One checkpoint saved or loaded by this rank.
struct CheckpointStats {
  std::string dir;    // D/step-<N>
  int64_t step = 0;   // optimizer steps completed at the checkpoint
  int64_t bytes = 0;  // this rank's file
  double seconds = 0; // wall time on this rank, including the agreements
};

struct StepStats {
  int64_t step = 0; // 1-based optimizer step just completed
  double loss = 0;  // mean over the ranks holding a 'loss' buffer; NaN if none
  double gradNorm =
      0;         // sqrt of the sum a clip instruction read; NaN if none ran
  double lr = 0; // the schedule's learning rate for this step
  double stepTimeS = 0;      // wall time of the step on this rank
  double tokensPerS = 0;     // global batch tokens / step time
  bool lossReported = false; // some rank holds a 'loss' buffer
};

struct TraceEvent {
  int32_t stream = 0;
  int32_t instruction = 0;
  int64_t step = 0;
  double beginS = 0; // seconds since the session opened
  double endS = 0;
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

  /// Collective: writes checkpoint D/step-<completedSteps()> (each rank its
  /// persistent region; rank 0 the manifest, the rename and the COMPLETE
  /// marker). Throws the same Error on every rank if any rank failed; the
  /// earlier checkpoints in `dir` stay intact.
  CheckpointStats saveCheckpoint(const std::string &dir);
  /// The checkpoint this session resumed from, if any.
  const std::optional<CheckpointStats> &resumed() const { return resumed_; }

  int64_t completedSteps() const { return completedSteps_; }
  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }
  const plan::Bundle &bundle() const { return bundle_; }
  const plan::RankProgram &rankProgram() const { return rankProgram_; }
  const Backend &backend() const { return *backend_; }
  /// The memory of program buffer `id` on this rank.
  Operand buffer(int64_t id) const;
  /// Instructions executed so far (only with Options::trace).
  const std::vector<TraceEvent> &trace() const { return trace_; }

private:
  struct Prepared;
  struct Comms;
  Session();
  void setUp(MPI_Comm world);
  void validateLocally();
  void resumeLocally();
  /// Agrees on `failure` (empty: success) over `comm`; throws the lowest
  /// failing rank's message on every rank.
  void agree(const std::string &failure, MPI_Comm comm) const;
  void buildCommunicators();
  void initializeParameters();
  void prepareInstructions();
  void issue(size_t stream, size_t index, const StepContext &context);
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
  std::vector<std::vector<Prepared>> prepared_; // [stream][instruction]
  std::vector<size_t> next_;                    // per stream: next instruction
  std::vector<MPI_Request> requests_;           // per stream: pending comm
  std::vector<char> recorded_;                  // per event, this step
  int64_t lossBuffer_ = -1;
  double clipSum_ = 0;
  bool clipRan_ = false;
  int64_t completedSteps_ = 0;
  std::string bundleHash_;
  std::optional<CheckpointStats> resumed_;
  double openTime_ = 0;
  std::vector<TraceEvent> trace_;
  std::vector<double> issuedAt_; // per stream: when the pending op began
};

} // namespace weft::exec

#endif // WEFT_EXEC_SESSION_H
