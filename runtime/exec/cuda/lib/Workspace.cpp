//===- Workspace.cpp - The CUDA backend's one workspace allocation --------===//

#include "weft/exec/cuda/Workspace.h"

namespace weft::exec::cuda {

WorkspaceLayout layoutWorkspace(const std::vector<StreamWorkspaceNeeds> &needs,
                                int64_t gemmWorkspaceBytes) {
  auto aligned = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  WorkspaceLayout layout;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    size_t offset = at;
    at += aligned(bytes);
    return offset;
  };
  for (const StreamWorkspaceNeeds &stream : needs) {
    layout.scratch.push_back(
        stream.scratchFloats > 0
            ? take(size_t(stream.scratchFloats) * sizeof(float))
            : WorkspaceLayout::kNone);
    layout.gemm.push_back(stream.gemms && gemmWorkspaceBytes > 0
                              ? take(size_t(gemmWorkspaceBytes))
                              : WorkspaceLayout::kNone);
    layout.accumulator.push_back(take(kAccumulatorBytes));
  }
  layout.stepScalars = take(256);
  layout.totalBytes = at;
  return layout;
}

} // namespace weft::exec::cuda
