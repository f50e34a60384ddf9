//===- Runtime.cpp - The runtime's public C++ API -------------------------===//

#include "weft/exec/Runtime.h"
#include "weft/exec/Error.h"
#ifdef WEFT_WITH_CUDA
#include "weft/exec/cuda/Probe.h"
#endif

#include <cmath>

namespace weft::exec {

std::unique_ptr<Runtime> Runtime::open(const std::string &bundleDir,
                                       Options options, MPI_Comm comm) {
  options.bundleDir = bundleDir;
  if (options.backend == "cuda") {
    // The same answer on every rank, before any communication.
#ifdef WEFT_WITH_CUDA
    // Session::open creates the backend (makeCudaBackend) and agrees on
    // any failure; this answers a machine without a GPU at once.
    std::string problem = cuda::cudaDeviceProblem();
    if (!problem.empty())
      throw Error(problem);
#else
    throw Error("the cuda backend is not available: built without CUDA (no "
                "nvcc at configure time)");
#endif
  }
  return std::unique_ptr<Runtime>(new Runtime(Session::open(options, comm)));
}

StepStats Runtime::step() { return session_->runStep(); }

std::vector<StepStats> Runtime::runSteps(int64_t count) {
  std::vector<StepStats> stats;
  for (int64_t i = 0; i < count; ++i) {
    stats.push_back(session_->runStep());
    if (stats.back().lossReported && !std::isfinite(stats.back().loss))
      break;
  }
  return stats;
}

CheckpointStats Runtime::saveCheckpoint(const std::string &dir) {
  return session_->saveCheckpoint(dir);
}

CheckpointStats Runtime::saveWeights(const std::string &dir) {
  return session_->saveWeights(dir);
}

CheckpointStats Runtime::loadCheckpoint(const std::string &dir) {
  return session_->loadCheckpoint(dir);
}

OffloadReport Runtime::offload(StateGroup group, HostMemoryKind kind) {
  return session_->offload(group, kind);
}

OffloadReport Runtime::reload(StateGroup group) {
  return session_->reload(group);
}

std::vector<OffloadReport>
Runtime::offload(const std::vector<StateGroup> &groups, HostMemoryKind kind) {
  std::vector<OffloadReport> reports;
  for (StateGroup group : groups)
    reports.push_back(session_->offload(group, kind));
  return reports;
}

std::vector<OffloadReport>
Runtime::reload(const std::vector<StateGroup> &groups) {
  std::vector<OffloadReport> reports;
  for (StateGroup group : groups)
    reports.push_back(session_->reload(group));
  return reports;
}

} // namespace weft::exec
