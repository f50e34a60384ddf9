//===- Runtime.h - The runtime's public C++ API -----------------*- C++ -*-===//
//
// What a training program (weft-run is one) needs on each rank:
//
//   auto rt = weft::exec::Runtime::open("bundle", options);  // collective
//   rt->runSteps(100);
//   rt->offload(StateGroup::OptimizerStates, HostMemoryKind::Pinned);
//   ... the device memory is free for something else ...
//   rt->reload(StateGroup::OptimizerStates);                  // bit-exact
//   rt->saveCheckpoint("ck");   rt->saveWeights("ck");        // collective
//
// Every failure is a weft::exec::Error with a one-line message. Collective
// calls (open, step, the checkpoint calls) must be made by every rank in the
// same order; offload, reload and where are local to the rank. After a step
// throws, peers may be blocked in a collective: abort the job (MPI_Abort).
// docs/runtime.md ("API", "Offload") is the specification; Session.h is the
// full executor interface underneath (tracing, buffers, split steps).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_RUNTIME_H
#define WEFT_EXEC_RUNTIME_H

#include "weft/exec/Session.h"
#include "weft/exec/StateGroups.h"

#include <mpi.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace weft::exec {

class Runtime {
public:
  /// Opens `bundleDir` on this rank (options.bundleDir is ignored): loads and
  /// verifies the bundle, checks world size, kernels and data on every rank,
  /// agrees on the outcome (one all-reduce), then allocates the regions and
  /// initializes the parameters, or loads options.resumeDir's newest
  /// checkpoint. Collective over `comm`. Set options.dataPath when the plan
  /// loads data (load_batch).
  static std::unique_ptr<Runtime> open(const std::string &bundleDir,
                                       Options options = {},
                                       MPI_Comm comm = MPI_COMM_WORLD);

  /// One optimizer step (collective). Throws Error if a state group is
  /// offloaded (reload it first) or the step fails.
  StepStats step();
  /// Up to `count` steps; stops after a step whose loss is not finite (the
  /// loss is all-reduced, so every rank stops at the same step).
  std::vector<StepStats> runSteps(int64_t count);
  int64_t completedSteps() const { return session_->completedSteps(); }

  /// Collective. D/step-<N> with every persistent byte (docs/runtime.md,
  /// "Checkpoints"); offloaded groups are written from their host copies.
  CheckpointStats saveCheckpoint(const std::string &dir);
  /// Collective. D/weights-<N>: the Params group only (the working weights
  /// in their storage dtype), same protocol; weft-export reads it.
  CheckpointStats saveWeights(const std::string &dir);
  /// Collective. Replaces the state with the newest complete checkpoint in
  /// `dir` (or the checkpoint directory `dir`); training continues from its
  /// step.
  CheckpointStats loadCheckpoint(const std::string &dir);
  /// The checkpoint open() resumed from, if any.
  const std::optional<CheckpointStats> &resumed() const {
    return session_->resumed();
  }

  /// Local. Waits for this rank's in-flight communication, copies `group`
  /// to host memory of `kind` and releases its device bytes (the arena is
  /// released without a copy). A no-op for an offloaded group.
  OffloadReport offload(StateGroup group,
                        HostMemoryKind kind = HostMemoryKind::Pinned);
  /// Local. Restores `group` bit for bit; a no-op for a resident group. The
  /// host buffer stays allocated for the next offload of the group.
  OffloadReport reload(StateGroup group);
  /// Local. Frees the host buffers reload() kept; returns their bytes.
  int64_t releaseHostBuffers() { return session_->releaseHostBuffers(); }
  /// Several groups, in order.
  std::vector<OffloadReport> offload(const std::vector<StateGroup> &groups,
                                     HostMemoryKind kind);
  std::vector<OffloadReport> reload(const std::vector<StateGroup> &groups);
  Residency where(StateGroup group) const { return session_->where(group); }
  /// The group's buffers and byte ranges on this rank.
  const StateGroupLayout &layout(StateGroup group) const {
    return session_->layout(group);
  }
  /// Device memory this rank's regions occupy now.
  int64_t deviceBytesInUse() const { return session_->deviceBytesInUse(); }

  int rank() const { return session_->rank(); }
  int worldSize() const { return session_->worldSize(); }
  /// The executor underneath (trace, buffers, beginStep/finishStep).
  Session &session() { return *session_; }
  const Session &session() const { return *session_; }

private:
  explicit Runtime(std::unique_ptr<Session> session)
      : session_(std::move(session)) {}
  std::unique_ptr<Session> session_;
};

} // namespace weft::exec

#endif // WEFT_EXEC_RUNTIME_H
