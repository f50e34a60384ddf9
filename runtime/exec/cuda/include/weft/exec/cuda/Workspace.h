//===- Workspace.h - The CUDA backend's workspace allocation ----*- C++ -*-===//
//
// Host-only, so the layout is tested without a GPU. Beside the plan's regions
// the backend allocates, once at prepare(), per plan stream: kernel scratch
// (the largest any kernel of the stream needs: its own scratch, cuDNN's
// workspace, operands widened to fp32), a cuBLASLt workspace where the
// stream runs gemms, and an accumulator (grad_norm's double sum, then the
// partial sums of its up to 1024 blocks); then the step scalars.
// Sizing each stream by its own instructions keeps streams that only
// communicate (DP, TP, ZeRO) from reserving the compute stream's scratch.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_WORKSPACE_H
#define WEFT_EXEC_CUDA_WORKSPACE_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace weft::exec::cuda {

/// What the instructions of one plan stream need.
struct StreamWorkspaceNeeds {
  int64_t scratchFloats = 0;
  bool gemms = false;
};

/// A stream's accumulator: the double sum in its first 256 bytes, then one
/// double per block of the sum of squares (StepKernels.cuh's kSumBlocks).
constexpr size_t kAccumulatorPartials = 256 / sizeof(double);
constexpr size_t kAccumulatorBytes = 256 + 1024 * sizeof(double);

/// Byte offsets from the allocation's start, every piece 256-byte aligned.
struct WorkspaceLayout {
  static constexpr size_t kNone = ~size_t(0);
  std::vector<size_t> scratch;     // kNone: the stream needs no scratch
  std::vector<size_t> gemm;        // kNone: the stream runs no gemm
  std::vector<size_t> accumulator; // kAccumulatorBytes each
  size_t stepScalars = 0;          // 256 bytes
  size_t totalBytes = 0;
};

/// The layout for `needs` (one entry per plan stream) with
/// `gemmWorkspaceBytes` of cuBLASLt workspace per stream that runs gemms.
WorkspaceLayout layoutWorkspace(const std::vector<StreamWorkspaceNeeds> &needs,
                                int64_t gemmWorkspaceBytes);

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_WORKSPACE_H
