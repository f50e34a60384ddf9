//===- EmbeddingKernels.cuh - Deterministic embedding backward -*- CUDA -*-===//
//
// The embedding gradient without atomics, in the CPU kernel's order: every
// table row adds its tokens' output gradients one after the other, in token
// order, in fp32 from the widened row, and is rounded once (storage type
// Rows.cuh). So a bf16/f16 step gives what the CPU backend gives, bit for bit,
// on every run (the fp32 kernel scatters with atomicAdd: another order per
// run).
//
//  1. sortTokens (one block): a stable counting sort of the token indices by
//     id: a histogram, its exclusive scan (`starts`, V + 1 entries) and a
//     scatter chunk by chunk in which each token's place among the equal ids
//     before it is counted, not raced for;
//  2. tokenRows: one warp per table row, its lanes over the columns, adding
//     the row's tokens in sorted (= token) order;
//  3. positionRows: one thread per (position, column), adding the batch's
//     tokens at that position in order.
//
// Scratch: embeddingBackwardScratchInts(V, N) ints. Ids outside [0, V) add
// nothing. In a header so that WarpEmulationTests can run it on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_EMBEDDINGKERNELS_CUH
#define WEFT_KERNELS_CUDA_EMBEDDINGKERNELS_CUH

#include "Rows.cuh"

#include <cstdint>

namespace weft::kernels::gpu::embedding {

/// Threads of the sorting block.
constexpr int kSortThreads = 1024;

/// Scratch ints of one backward: starts (V + 1), the per-id cursor (V) and
/// the sorted token indices (N).
inline std::int64_t scratchInts(std::int64_t vocab, std::int64_t tokens) {
  return 2 * vocab + 1 + tokens;
}

/// Step 1, one block of kSortThreads: `order` holds the token indices sorted
/// by id, stably; tokens of id v are order[starts[v] .. starts[v + 1]).
__global__ void __launch_bounds__(kSortThreads)
    sortTokens(std::int64_t tokens, std::int64_t vocab, const std::int32_t *ids,
               std::int32_t *starts, std::int32_t *cursor,
               std::int32_t *order) {
  __shared__ std::int32_t chunk[kSortThreads];
  __shared__ std::int32_t total;
  const int tid = int(threadIdx.x), threads = int(blockDim.x);
  for (std::int64_t v = tid; v <= vocab; v += threads) {
    starts[v] = 0;
    if (v < vocab)
      cursor[v] = 0;
  }
  __syncthreads();
  for (std::int64_t t = tid; t < tokens; t += threads)
    if (ids[t] >= 0 && ids[t] < vocab)
      atomicAdd(&starts[ids[t]], 1); // integer counts: order-independent
  __syncthreads();
  // Exclusive scan of the counts, a chunk of `threads` ids at a time
  // (Hillis-Steele within the chunk).
  if (tid == 0)
    total = 0;
  for (std::int64_t base = 0; base < vocab; base += threads) {
    std::int64_t v = base + tid;
    std::int32_t count = v < vocab ? starts[v] : 0;
    chunk[tid] = count;
    __syncthreads();
    for (int offset = 1; offset < threads; offset *= 2) {
      std::int32_t add = tid >= offset ? chunk[tid - offset] : 0;
      __syncthreads();
      chunk[tid] += add;
      __syncthreads();
    }
    if (v < vocab)
      starts[v] = total + chunk[tid] - count;
    __syncthreads();
    if (tid == threads - 1)
      total += chunk[tid];
    __syncthreads();
  }
  if (tid == 0)
    starts[vocab] = total;
  // Stable scatter: a token's place is its id's start, the tokens of that id
  // in earlier chunks (cursor) and those before it in this chunk.
  for (std::int64_t base = 0; base < tokens; base += threads) {
    std::int64_t t = base + tid;
    std::int32_t id = t < tokens ? ids[t] : -1;
    if (id >= vocab)
      id = -1;
    chunk[tid] = id;
    __syncthreads();
    int rank = 0;
    bool last = id >= 0;
    if (id >= 0) {
      for (int j = 0; j < tid; ++j)
        rank += chunk[j] == id;
      for (int j = tid + 1; j < threads && last; ++j)
        last = chunk[j] != id;
      order[starts[id] + cursor[id] + rank] = std::int32_t(t);
    }
    __syncthreads(); // every cursor read before the last one moves it
    if (last)
      cursor[id] += rank + 1;
    __syncthreads();
  }
}

/// Step 2: dTable[v, :] += the rows of dOut of v's tokens, in token order; a
/// warp per table row (rows without tokens return at once).
template <typename S>
__global__ void tokenRows(S s, std::int64_t vocab, std::int64_t hidden,
                          const std::int32_t *starts, const std::int32_t *order,
                          const typename S::Elem *dOut,
                          typename S::Elem *dTable) {
  std::int64_t row =
      (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / detail::kWarpSize;
  int lane = int(threadIdx.x) % detail::kWarpSize;
  if (row >= vocab)
    return;
  std::int32_t begin = starts[row], end = starts[row + 1];
  if (begin == end)
    return;
  for (std::int64_t c = lane; c < hidden; c += detail::kWarpSize) {
    float acc = s.load(dTable, row * hidden + c);
    for (std::int32_t k = begin; k < end; ++k)
      acc += s.load(dOut, std::int64_t(order[k]) * hidden + c);
    s.store(dTable, row * hidden + c, acc);
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
