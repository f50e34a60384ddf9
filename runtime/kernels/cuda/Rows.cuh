//===- Rows.cuh - Row groups, column sums, storage -------------*- CUDA -*-===//
//
// The device side of the row and column kernels: row kernels (norms,
// cross-entropy rows) give each row to a group of threads, a warp or for wide
// rows a whole block, whose lanes read consecutive columns and combine their
// partial results with shuffles (`RowGroup`, `CachedRow`, `StreamedRow`).
// Column sums (parameter gradients) give each block a tile of columns and
// split the rows over its threads, then reduce in shared memory in a fixed
// order, so every output has one writer, no atomics are needed and the
// result is the same on every run (`columnSums`). The kernels read and write
// their operands through a storage type (`F32`, or `Half16` for bf16/f16
// models: widened on load, rounded on store), so one kernel source serves
// both. `rowGrid`/`columnGrid` are the launch geometry (Launch.cuh launches
// with them).
//
// No host launches here: WarpEmulationTests compiles this header as plain
// C++ (WEFT_WARP_EMULATION) and runs the kernels with the same geometry.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_ROWS_CUH
#define WEFT_KERNELS_CUDA_ROWS_CUH

#include "weft/kernels/Common.h"

#include <cstdint>
#include <type_traits>

namespace weft::kernels::gpu {

//===--- Storage ----------------------------------------------------------===//

namespace storage {

/// fp32 operands, read and written as they are.
struct F32 {
  using Elem = float;
  __device__ float load(const float *x, std::int64_t i) const { return x[i]; }
  __device__ void store(float *x, std::int64_t i, float v) const { x[i] = v; }
  /// What load returns after store(v).
  __device__ float roundTrip(float v) const { return v; }
};

/// bf16 or f16 operands: widened exactly on load, rounded to nearest even on
/// store by the conversion the backend's narrowing uses (Common.h), so a
/// kernel gives on 16-bit storage what the widening path gives, bit for bit.
struct Half16 {
  using Elem = std::uint16_t;
  bool bf16;
  __device__ float widen(std::uint16_t bits) const {
    return bf16 ? bf16ToFloat(BF16{bits}) : f16ToFloat(F16{bits});
  }
  __device__ std::uint16_t round(float v) const {
    return bf16 ? floatToBf16(v).bits : floatToF16(v).bits;
  }
  __device__ float load(const std::uint16_t *x, std::int64_t i) const {
    return widen(x[i]);
  }
  __device__ void store(std::uint16_t *x, std::int64_t i, float v) const {
    x[i] = round(v);
  }
  __device__ float roundTrip(float v) const { return widen(round(v)); }
};

} // namespace storage

namespace detail {

constexpr int kBlockSize = 256;
constexpr int kWarpSize = 32;

/// Grid cap of the row and column launches (they stride over the rest): far
/// more blocks than any GPU holds at once, far below the grid limit.
constexpr std::int64_t kMaxBlocks = std::int64_t(1) << 16;

/// Rows wider than this get a whole block instead of a warp: a warp's lanes
/// then hold at most 32 columns each (a CachedRow).
constexpr std::int64_t kWideRow = 1024;

//===--- Reductions -------------------------------------------------------===//

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

//===--- Row groups -------------------------------------------------------===//

/// The threads that share one row in a row launch: a warp (kGroup = 32,
/// kBlockSize / 32 rows per block) or a whole block of kGroup threads (a
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
  /// A barrier over the group that also orders its memory accesses (a
  /// shuffle synchronizes lanes but orders no loads and stores).
  __device__ static void sync() {
    if constexpr (kGroup == kWarpSize)
      __syncwarp();
    else
      __syncthreads();
  }
};

/// A group's row read from memory on every pass: lane() visits columns
/// lane(), lane() + kGroup, ... (consecutive lanes, consecutive addresses).
template <int kGroup, typename S> class StreamedRow {
public:
  __device__ StreamedRow(S s, const typename S::Elem *row, std::int64_t width)
      : s(s), row(row), width(width) {}
  /// Calls f(c, row[c]) for this thread's columns c.
  template <typename F> __device__ void forEach(F f) const {
    for (std::int64_t c = RowGroup<kGroup>::lane(); c < width; c += kGroup)
      f(c, s.load(row, c));
  }

private:
  S s;
  const typename S::Elem *row;
  std::int64_t width;
};

/// A warp's row of at most 32 * kWarpSize columns, loaded into registers once
/// (all loads in flight together, widened to fp32) and reused by every pass.
/// The loops unroll fully, so `value` never leaves registers.
template <typename S> class CachedRow {
public:
  static constexpr int kPerLane = 32;
  static_assert(kWideRow <= kPerLane * kWarpSize, "warp rows must fit");

  __device__ CachedRow(S s, const typename S::Elem *row, std::int64_t width)
      : CachedRow(width, [&](std::int64_t c) { return s.load(row, c); }) {}
  /// The row as `load(c)` gives it, column by column.
  template <typename Load>
  __device__ CachedRow(std::int64_t width, Load load) : width(width) {
#pragma unroll
    for (int i = 0; i < kPerLane && column(i) < width; ++i)
      value[i] = load(column(i));
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

/// The row of group G: cached in registers for a warp, streamed for a block.
template <typename G, typename S>
using GroupRow = std::conditional_t<G::kSize == kWarpSize, CachedRow<S>,
                                    StreamedRow<G::kSize, S>>;

/// The row `sum` = a + b that a residual add writes, as the kernel after it
/// reads it back: each element rounded to storage and stored once, the row's
/// passes seeing what load() of it would give. A warp keeps it in registers
/// (a CachedRow); a block's threads store their columns, then stream back
/// only those (a StreamedRow).
template <typename G, typename S>
__device__ GroupRow<G, S> sumRow(S s, const typename S::Elem *a,
                                 const typename S::Elem *b,
                                 typename S::Elem *sum, std::int64_t width) {
  auto add = [&](std::int64_t c) {
    float v = s.roundTrip(s.load(a, c) + s.load(b, c));
    s.store(sum, c, v);
    return v;
  };
  if constexpr (G::kSize == kWarpSize) {
    return CachedRow<S>(width, add);
  } else {
    for (std::int64_t c = G::lane(); c < width; c += G::kSize)
      add(c);
    return StreamedRow<G::kSize, S>(s, sum, width);
  }
}

//===--- Column sums ------------------------------------------------------===//

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
/// the same result on every run. Launch with columnGrid.
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

//===--- Launch geometry (host) -------------------------------------------===//

/// A 1-D launch; no blocks means nothing to launch.
struct Grid {
  std::int64_t blocks = 0;
  int threads = 0;
  bool wide = false; // a row launch's block-per-row kernel
};

/// One group per row up to the grid cap (`maxBlocks`; the groups stride over
/// the rest): a warp per row (kBlockSize / 32 rows per block) or, for rows
/// wider than kWideRow, a block of kWideGroup threads per row.
inline Grid rowGrid(std::int64_t rows, std::int64_t width,
                    int wideGroup = kBlockSize,
                    std::int64_t maxBlocks = kMaxBlocks) {
  if (rows == 0)
    return {};
  bool wide = width > kWideRow;
  std::int64_t perBlock = wide ? 1 : kBlockSize / kWarpSize;
  std::int64_t blocks = (rows + perBlock - 1) / perBlock;
  return {blocks < maxBlocks ? blocks : maxBlocks,
          wide ? wideGroup : kBlockSize, wide};
}

/// One block of kColumnBlockSize threads per columnTile(width) columns up to
/// the grid cap; nothing when there are no rows (the sums would add zero) or
/// no columns.
inline Grid columnGrid(std::int64_t rows, std::int64_t width) {
  if (rows == 0 || width == 0)
    return {};
  int tile = columnTile(width);
  std::int64_t blocks = (width + tile - 1) / tile;
  return {blocks < kMaxBlocks ? blocks : kMaxBlocks, kColumnBlockSize};
}

} // namespace detail
} // namespace weft::kernels::gpu

#endif // WEFT_KERNELS_CUDA_ROWS_CUH
