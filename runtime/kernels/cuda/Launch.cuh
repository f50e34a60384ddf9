//===- Launch.cuh - Launch helpers shared by the CUDA kernels ---*- CUDA
//-*-===//
//
// Element-wise kernels run one thread per item (`launch`). Row kernels (norms,
// cross-entropy rows) give each row to a group of threads, a warp or for wide
// rows a whole block, whose lanes read consecutive columns and combine their
// partial results with shuffles (`launchRows`, `RowGroup`, `CachedRow`,
// `StreamedRow`). Column sums (parameter gradients) give each block a tile of
// columns and split the rows over its threads, then reduce in shared memory
// in a fixed order, so every output has one writer, no atomics are needed and
// the result is the same on every run (`launchColumns`, `columnSums`).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_LAUNCH_CUH
#define WEFT_KERNELS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::kernels::gpu::detail {

constexpr int kBlockSize = 256;

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

//===--- Row and column reductions ----------------------------------------===//

constexpr int kWarpSize = 32;

/// Grid cap of the row and column launches (they stride over the rest): far
/// more blocks than any GPU holds at once, far below the grid limit.
constexpr std::int64_t kMaxBlocks = std::int64_t(1) << 16;

/// Rows wider than this get a whole block instead of a warp: a warp's lanes
/// then hold at most 32 columns each (a CachedRow).
constexpr std::int64_t kWideRow = 1024;

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};

/// The comparison of math::max (Common.h), which the CPU row functions use.
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

/// `op` over the 32 lanes of the warp, returned to every lane. All lanes must
/// call it (the rows of a warp are warp-uniform).
template <typename T, typename Op> __device__ T warpReduce(T value, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  // Lanes may differ when `op` is not commutative (MaxOp with a NaN): use
  // lane 0's value everywhere.
  return __shfl_sync(0xffffffffu, value, 0);
}

/// `op` over a 1-D block (a multiple of 32 threads), returned to every thread
/// in a fixed combination order. Every thread must call it; it may be called
/// again right away.
template <typename T, typename Op> __device__ T blockReduce(T value, Op op) {
  __shared__ T partial[kWarpSize];
  value = warpReduce(value, op);
  if (threadIdx.x % kWarpSize == 0)
    partial[threadIdx.x / kWarpSize] = value;
  __syncthreads();
  T total = partial[0];
  for (unsigned w = 1; w < blockDim.x / kWarpSize; ++w)
    total = op(total, partial[w]);
  __syncthreads(); // No thread may refill `partial` before all have read it.
  return total;
}

/// The threads that share one row in a launchRows launch: a warp (kGroup =
/// 32, kBlockSize / 32 rows per block) or a whole block of kGroup threads (a
/// multiple of 32). Rows are group-uniform, so the groups' reductions see all
/// their threads.
template <int kGroup> struct RowGroup {
  static_assert(kGroup % kWarpSize == 0 && kGroup <= 1024,
                "a row belongs to a warp or to a whole block");
  static constexpr int kSize = kGroup;
  /// Threads per block, and rows per block.
  static constexpr int kThreads = kGroup == kWarpSize ? kBlockSize : kGroup;
  static constexpr int kPerBlock = kThreads / kGroup;

  /// This thread's first column of the row (the column stride is kSize).
  __device__ static int lane() { return threadIdx.x % kGroup; }
  /// This group's first row, and the row stride (the grid may be capped).
  __device__ static std::int64_t firstRow() {
    return std::int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kGroup;
  }
  __device__ static std::int64_t rowStride() {
    return std::int64_t(gridDim.x) * kPerBlock;
  }
  template <typename T, typename Op> __device__ static T reduce(T v, Op op) {
    if constexpr (kGroup == kWarpSize)
      return warpReduce(v, op);
    else
      return blockReduce(v, op);
  }
};

/// A group's row read from memory on every pass: lane() visits columns
/// lane(), lane() + kGroup, ... (consecutive lanes, consecutive addresses).
template <int kGroup> class StreamedRow {
public:
  __device__ StreamedRow(const float *row, std::int64_t width)
      : row(row), width(width) {}
  /// Calls f(c, row[c]) for this thread's columns c.
  template <typename F> __device__ void forEach(F f) const {
    for (std::int64_t c = RowGroup<kGroup>::lane(); c < width; c += kGroup)
      f(c, row[c]);
  }

private:
  const float *row;
  std::int64_t width;
};

/// A warp's row of at most 32 * kWarpSize columns, loaded into registers once
/// (all loads in flight together) and reused by every pass. The loops unroll
/// fully, so `value` never leaves registers.
class CachedRow {
public:
  static constexpr int kPerLane = 32;
  static_assert(kWideRow <= kPerLane * kWarpSize, "warp rows must fit");

  __device__ CachedRow(const float *row, std::int64_t width) : width(width) {
#pragma unroll
    for (int i = 0; i < kPerLane && column(i) < width; ++i)
      value[i] = row[column(i)];
  }
  /// Calls f(c, row[c]) for this lane's columns c; narrow rows stop early.
  template <typename F> __device__ void forEach(F f) const {
#pragma unroll
    for (int i = 0; i < kPerLane && column(i) < width; ++i)
      f(column(i), value[i]);
  }

private:
  __device__ static std::int64_t column(int i) {
    return threadIdx.x % kWarpSize + std::int64_t(i) * kWarpSize;
  }
  float value[kPerLane];
  std::int64_t width;
};

/// Launches the row kernel `warpKernel` (instantiated for RowGroup<32>) or,
/// for rows wider than kWideRow, `blockKernel` (RowGroup<kWideGroup>) with
/// one group per row up to the grid cap.
template <int kWideGroup = kBlockSize, typename... Params, typename... Args>
cudaError_t launchRows(std::int64_t rows, std::int64_t width,
                       cudaStream_t stream, void (*warpKernel)(Params...),
                       void (*blockKernel)(Params...), Args... args) {
  if (rows == 0)
    return cudaSuccess;
  bool wide = width > kWideRow;
  std::int64_t perBlock = wide ? 1 : RowGroup<kWarpSize>::kPerBlock;
  std::int64_t blocks = (rows + perBlock - 1) / perBlock;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  if (wide)
    blockKernel<<<unsigned(blocks), kWideGroup, 0, stream>>>(args...);
  else
    warpKernel<<<unsigned(blocks), kBlockSize, 0, stream>>>(args...);
  return cudaGetLastError();
}

/// Column sums: a block of kColumnBlockSize threads owns `tile` adjacent
/// columns (threadIdx.x % tile) and spreads the rows over its
/// kColumnBlockSize / tile row groups. There is one block per tile, so for
/// GPT-sized widths (768) the blocks are few and large: the row groups keep
/// enough loads in flight.
constexpr int kColumnBlockSize = 1024;
constexpr std::int64_t kMinColumnBlocks = 64;

/// The columns per block: the widest power of two up to 32 (a warp reading
/// whole 128-byte lines of one row) that still leaves kMinColumnBlocks
/// blocks, down to one column per block for narrow matrices.
inline int columnTile(std::int64_t width) {
  int tile = kWarpSize;
  while (tile > 1 && (width + tile - 1) / tile < kMinColumnBlocks)
    tile /= 2;
  return tile;
}

/// Sums N per-(row, column) terms over all rows for each column of the
/// block's tiles: `addRow(r, c, sum)` adds row r's terms of column c into
/// sum[0..N), and `store(c, total)` receives the column totals, once per
/// column, from a single thread. Each thread sums its row group's rows in
/// order, then the row groups combine pairwise in a fixed tree: no atomics,
/// the same result on every run. Launch with launchColumns.
template <int N, typename AddRow, typename Store>
__device__ void columnSums(std::int64_t rows, std::int64_t width, int tile,
                           AddRow addRow, Store store) {
  __shared__ float partial[N][kColumnBlockSize];
  int column = threadIdx.x % tile, group = threadIdx.x / tile;
  int groups = kColumnBlockSize / tile;
  for (std::int64_t first = std::int64_t(blockIdx.x) * tile; first < width;
       first += std::int64_t(gridDim.x) * tile) {
    std::int64_t c = first + column;
    float sum[N] = {};
    if (c < width) {
#pragma unroll 4
      for (std::int64_t r = group; r < rows; r += groups)
        addRow(r, c, sum);
    }
#pragma unroll
    for (int k = 0; k < N; ++k)
      partial[k][threadIdx.x] = sum[k];
    __syncthreads();
    // Thread t adds in the partial of t + stride, a multiple of `tile`: the
    // same column.
    for (int stride = kColumnBlockSize / 2; stride >= tile; stride /= 2) {
      if (int(threadIdx.x) < stride) {
#pragma unroll
        for (int k = 0; k < N; ++k)
          partial[k][threadIdx.x] += partial[k][threadIdx.x + stride];
      }
      __syncthreads();
    }
    if (group == 0 && c < width) {
      float total[N];
#pragma unroll
      for (int k = 0; k < N; ++k)
        total[k] = partial[k][column];
      store(c, total);
    }
    __syncthreads(); // The next tile refills `partial`.
  }
}

/// Launches a columnSums kernel, whose first parameter is the tile, over
/// `width` columns; nothing when there are no rows (the sums would add zero)
/// or no columns.
template <typename... Params, typename... Args>
cudaError_t launchColumns(std::int64_t rows, std::int64_t width,
                          cudaStream_t stream, void (*kernel)(int, Params...),
                          Args... args) {
  if (rows == 0 || width == 0)
    return cudaSuccess;
  int tile = columnTile(width);
  std::int64_t blocks = (width + tile - 1) / tile;
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  kernel<<<unsigned(blocks), kColumnBlockSize, 0, stream>>>(tile, args...);
  return cudaGetLastError();
}

} // namespace weft::kernels::gpu::detail

#endif // WEFT_KERNELS_CUDA_LAUNCH_CUH
