//===- EmbeddingKernels.cuh - Deterministic embedding backward -*- CUDA -*-===//
//
// The embedding gradient without atomics, in the CPU kernel's order: every
// table row adds its tokens' output gradients one after the other, in token
// order, in fp32 from the widened row, and is rounded once (storage type
// Rows.cuh). So a bf16/f16 step gives what the CPU backend gives, bit for bit,
// on every run (the fp32 kernel scatters with atomicAdd: another order per
// run).
//
//  1. sortChunks: a block per chunk of kChunk tokens sorts the chunk's keys
//     (id << 32 | token index) in shared memory (bitonic), so each id's tokens
//     are a run of ascending token indices in every chunk, and counts the
//     tokens of each id (integer atomics: order-independent);
//  2. tokenRows: a warp per (table row with tokens, 256 columns): its lanes
//     find the row's run in 32 chunks at a time (binary search), then add the
//     runs chunk by chunk, i.e. in token order, 8 columns per lane;
//  3. positionRows: one thread per (position, column), adding the batch's
//     tokens at that position in order.
//
// Scratch: scratchInts(V, N) ints. Ids outside [0, V) add nothing. In a header
// so that WarpEmulationTests can run it on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_EMBEDDINGKERNELS_CUH
#define WEFT_KERNELS_CUDA_EMBEDDINGKERNELS_CUH

#include "Rows.cuh"

#include <cstdint>

namespace weft::kernels::gpu::embedding {

/// Tokens per sorted chunk (the threads of a sortChunks block).
constexpr int kChunk = 1024;
/// Columns per lane of a tokenRows warp, and per warp.
constexpr int kColumnsPerLane = 8;
constexpr int kColumnsPerWarp = kColumnsPerLane * detail::kWarpSize;
/// The key of no token (padding, ids out of range): after every real one.
constexpr std::uint64_t kNoToken = ~std::uint64_t(0);

__host__ __device__ inline std::int64_t chunks(std::int64_t tokens) {
  return (tokens + kChunk - 1) / kChunk;
}
/// Scratch ints of one backward: the sorted chunks' keys (2 ints each, first;
/// one int more to align them to 8 bytes) and the count of each id.
inline std::int64_t scratchInts(std::int64_t vocab, std::int64_t tokens) {
  return 1 + 2 * chunks(tokens) * kChunk + vocab;
}
/// Where the keys and counts lie in scratchInts ints at `scratch` (4-byte
/// aligned: one int is skipped when the keys would not be 8-byte aligned).
struct Scratch {
  std::uint64_t *sorted;
  std::int32_t *counts;
};
inline Scratch scratchLayout(std::int32_t *scratch, std::int64_t tokens) {
  if (reinterpret_cast<std::uintptr_t>(scratch) % 8)
    ++scratch;
  return {reinterpret_cast<std::uint64_t *>(scratch),
          scratch + 2 * chunks(tokens) * kChunk};
}
/// The blocks of detail::kBlockSize threads a tokenRows launch over `rows`
/// table rows `hidden` wide takes (a warp per row and kColumnsPerWarp
/// columns).
inline unsigned tokenRowBlocks(std::int64_t rows, std::int64_t hidden) {
  std::int64_t columnBlocks = (hidden + kColumnsPerWarp - 1) / kColumnsPerWarp;
  std::int64_t warpsPerBlock = detail::kBlockSize / detail::kWarpSize;
  return unsigned((rows * columnBlocks + warpsPerBlock - 1) / warpsPerBlock);
}

/// Step 1, chunks(tokens) blocks of kChunk threads, `counts` zeroed: sorted
/// holds each chunk's keys in ascending order; counts[v] the tokens of id
/// firstId + v (a vocabulary shard's rows: ids outside it add nothing).
__global__ void __launch_bounds__(kChunk)
    sortChunks(std::int64_t tokens, std::int64_t vocab, std::int64_t firstId,
               const std::int32_t *ids, std::uint64_t *sorted,
               std::int32_t *counts) {
  __shared__ std::uint64_t keys[kChunk];
  const int tid = int(threadIdx.x);
  const std::int64_t t = std::int64_t(blockIdx.x) * kChunk + tid;
  std::int64_t id = t < tokens ? std::int64_t(ids[t]) - firstId : -1;
  bool valid = id >= 0 && id < vocab;
  if (valid)
    atomicAdd(&counts[id], 1);
  keys[tid] = valid ? std::uint64_t(id) << 32 | std::uint64_t(t) : kNoToken;
  __syncthreads();
  for (int k = 2; k <= kChunk; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      int partner = tid ^ j;
      if (partner > tid) {
        std::uint64_t a = keys[tid], b = keys[partner];
        if ((a > b) == ((tid & k) == 0)) {
          keys[tid] = b;
          keys[partner] = a;
        }
      }
      __syncthreads();
    }
  sorted[t] = keys[tid];
}

/// The first index in sorted[0, kChunk) whose key is at least `key`.
__device__ inline int lowerBound(const std::uint64_t *sorted,
                                 std::uint64_t key) {
  int lo = 0, hi = kChunk;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (sorted[mid] < key)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/// Step 2: dTable[v, :] += the rows of dOut of v's tokens, in token order; a
/// warp per (row, kColumnsPerWarp columns): vocab * columnBlocks warps, rows
/// without tokens returning at once.
template <typename S>
__global__ void
tokenRows(S s, std::int64_t tokens, std::int64_t vocab, std::int64_t hidden,
          const std::int32_t *counts, const std::uint64_t *sorted,
          const typename S::Elem *dOut, typename S::Elem *dTable) {
  const std::int64_t warp =
      (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / detail::kWarpSize;
  const int lane = int(threadIdx.x) % detail::kWarpSize;
  const std::int64_t columnBlocks =
      (hidden + kColumnsPerWarp - 1) / kColumnsPerWarp;
  const std::int64_t row = warp / columnBlocks;
  if (row >= vocab || counts[row] == 0)
    return;
  const std::int64_t first = (warp % columnBlocks) * kColumnsPerWarp + lane;
  float acc[kColumnsPerLane];
#pragma unroll
  for (int i = 0; i < kColumnsPerLane; ++i) {
    std::int64_t c = first + i * detail::kWarpSize;
    acc[i] = c < hidden ? s.load(dTable, row * hidden + c) : 0.0f;
  }
  const std::uint64_t key = std::uint64_t(row) << 32;
  const std::uint64_t next = std::uint64_t(row + 1) << 32;
  const std::int64_t numChunks = chunks(tokens);
  for (std::int64_t base = 0; base < numChunks; base += detail::kWarpSize) {
    // Lane k finds the row's run in chunk base + k.
    int lo = 0, hi = 0;
    if (base + lane < numChunks) {
      const std::uint64_t *chunk = sorted + (base + lane) * kChunk;
      lo = lowerBound(chunk, key);
      hi = lowerBound(chunk, next);
    }
    for (int k = 0; k < detail::kWarpSize && base + k < numChunks; ++k) {
      int begin = __shfl_sync(0xffffffffu, lo, k);
      int end = __shfl_sync(0xffffffffu, hi, k);
      const std::uint64_t *chunk = sorted + (base + k) * kChunk;
      for (int j = begin; j < end; ++j) {
        std::int64_t t = std::int64_t(chunk[j] & 0xffffffffu);
#pragma unroll
        for (int i = 0; i < kColumnsPerLane; ++i) {
          std::int64_t c = first + i * detail::kWarpSize;
          if (c < hidden)
            acc[i] += s.load(dOut, t * hidden + c);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kColumnsPerLane; ++i) {
    std::int64_t c = first + i * detail::kWarpSize;
    if (c < hidden)
      s.store(dTable, row * hidden + c, acc[i]);
  }
}

/// Step 3: dPositions[p, :] += dOut[b * seq + p, :] for b = 0 .. batch - 1 in
/// order, one thread per (p, column) of the first `seq` rows.
template <typename S>
__global__ void positionRows(S s, std::int64_t batch, std::int64_t seq,
                             std::int64_t hidden, const typename S::Elem *dOut,
                             typename S::Elem *dPositions) {
  std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= seq * hidden)
    return;
  float acc = s.load(dPositions, i);
  for (std::int64_t b = 0; b < batch; ++b)
    acc += s.load(dOut, b * seq * hidden + i);
  s.store(dPositions, i, acc);
}

} // namespace weft::kernels::gpu::embedding

#endif // WEFT_KERNELS_CUDA_EMBEDDINGKERNELS_CUH
