//===- Launch.cuh - Launch helpers of the CUDA kernels ---------*- CUDA -*-===//
//
// Element-wise kernels run one thread per item (`launch`). Row and column
// kernels (Rows.cuh) launch with `launchRows` and `launchColumns`, whose
// geometry (rowGrid, columnGrid) the warp emulator tests use too.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_LAUNCH_CUH
#define WEFT_KERNELS_CUDA_LAUNCH_CUH

#include "Rows.cuh"
#include "weft/kernels/CudaKernels.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::kernels::gpu::detail {

/// The 16-bit launch wrappers' operands: the storage type of `type`, and
/// their untyped pointers as 16-bit words.
inline storage::Half16 halfStorage(HalfType type) {
  return {type == HalfType::BF16};
}
inline const std::uint16_t *in(const void *p) {
  return static_cast<const std::uint16_t *>(p);
}
inline std::uint16_t *out(void *p) { return static_cast<std::uint16_t *>(p); }

/// Index of this thread in a 1-D launch.
__device__ inline std::int64_t globalIndex() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// Launches `kernel` with one thread per item (threads past `items` return
/// early) and reports the launch status.
template <typename... Params, typename... Args>
cudaError_t launch(std::int64_t items, cudaStream_t stream,
                   void (*kernel)(Params...), Args... args) {
  if (items == 0)
    return cudaSuccess;
  auto blocks = static_cast<unsigned>((items + kBlockSize - 1) / kBlockSize);
  kernel<<<blocks, kBlockSize, 0, stream>>>(args...);
  return cudaGetLastError();
}

/// launchRows with the grid given.
template <typename... Params, typename... Args>
cudaError_t launchRowGrid(const Grid &grid, cudaStream_t stream,
                          void (*warpKernel)(Params...),
                          void (*blockKernel)(Params...), Args... args) {
  if (grid.blocks == 0)
    return cudaSuccess;
  (grid.wide ? blockKernel
             : warpKernel)<<<unsigned(grid.blocks), grid.threads, 0, stream>>>(
      args...);
  return cudaGetLastError();
}

/// Launches the row kernel `warpKernel` (instantiated for RowGroup<32>) or,
/// for rows wider than kWideRow, `blockKernel` (RowGroup<kWideGroup>) with
/// one group per row up to the grid cap (rowGrid).
template <int kWideGroup = kBlockSize, typename... Params, typename... Args>
cudaError_t launchRows(std::int64_t rows, std::int64_t width,
                       cudaStream_t stream, void (*warpKernel)(Params...),
                       void (*blockKernel)(Params...), Args... args) {
  return launchRowGrid(rowGrid(rows, width, kWideGroup), stream, warpKernel,
                       blockKernel, args...);
}

/// Launches a columnSums kernel, whose first parameter is the tile, over
/// `width` columns (columnGrid).
template <typename... Params, typename... Args>
cudaError_t launchColumns(std::int64_t rows, std::int64_t width,
                          cudaStream_t stream, void (*kernel)(int, Params...),
                          Args... args) {
  Grid grid = columnGrid(rows, width);
  if (grid.blocks == 0)
    return cudaSuccess;
  kernel<<<unsigned(grid.blocks), grid.threads, 0, stream>>>(columnTile(width),
                                                             args...);
  return cudaGetLastError();
}

} // namespace weft::kernels::gpu::detail

#endif // WEFT_KERNELS_CUDA_LAUNCH_CUH
