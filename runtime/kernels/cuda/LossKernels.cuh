//===- LossKernels.cuh - Softmax cross-entropy kernels ---------*- CUDA -*-===//
//
// Row reductions (log-sum-exp, shard max, shard sum of exponentials) give each
// row to a warp, or a block for rows wider than detail::kWideRow (any real
// vocabulary), whose lanes read consecutive logits and combine with shuffles.
// They compute what rowMax / rowSumExp / logSumExp / shardTargetLogit in
// weft/kernels/Loss.h do (the max, then the sum of exp(x - max)), in a
// different summation order. The mean loss is a single-block reduction.
//
// Two forms of the full-vocabulary loss:
//  - fp32 (crossEntropyForwardBackward): rowLse, meanLoss, then the gradient
//    one thread per logit;
//  - 16-bit storage (halfCrossEntropy): validTargets, then lossRows, which
//    per row reads the target logit, reduces, and writes the row's loss term
//    and its gradient (times the loss scale) over the logits in place, then
//    meanLoss over the terms. The same expressions in the same order as the
//    fp32 form on widened logits, so the same bits after rounding.
// Float operands go through a storage type S (Rows.cuh). In a header so
// that WarpEmulationTests runs them on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_LOSSKERNELS_CUH
#define WEFT_KERNELS_CUDA_LOSSKERNELS_CUH

#include "Rows.cuh"
#include "weft/kernels/Loss.h"

namespace weft::kernels::gpu::loss {

using detail::MaxOp;
using detail::SumOp;

/// A warp per row up to detail::kWideRow columns, else a block.
using WarpRows = detail::RowGroup<detail::kWarpSize>;
using BlockRows = detail::RowGroup<detail::kBlockSize>;
/// log-sum-exp reads its rows twice: big blocks keep few rows in flight, so
/// the second pass, run backwards, still finds the end of a (GPT-sized,
/// 200 KB) row in L2.
constexpr int kLseBlockSize = 1024;
using LseBlockRows = detail::RowGroup<kLseBlockSize>;

/// rowMax over a group's row: each thread's columns, then the group.
template <typename G, typename S>
__device__ float groupRowMax(S s, std::int64_t n, const typename S::Elem *row) {
  float m = -math::infinity<float>();
#pragma unroll 4
  for (std::int64_t c = G::lane(); c < n; c += G::kSize)
    m = math::max(m, s.load(row, c));
  return G::reduce(m, MaxOp());
}

/// rowSumExp over a group's row, each thread's columns in increasing order
/// or, with `backwards`, in decreasing order.
template <typename G, typename S>
__device__ float groupRowSumExp(S s, std::int64_t n,
                                const typename S::Elem *row, float shift,
                                bool backwards = false) {
  float sum = 0;
  if (!backwards) {
#pragma unroll 4
    for (std::int64_t c = G::lane(); c < n; c += G::kSize)
      sum += math::exp(s.load(row, c) - shift);
  } else if (G::lane() < n) {
    std::int64_t last = G::lane() + (n - 1 - G::lane()) / G::kSize * G::kSize;
#pragma unroll 4
    for (std::int64_t c = last; c >= 0; c -= G::kSize)
      sum += math::exp(s.load(row, c) - shift);
  }
  return G::reduce(sum, SumOp());
}

/// logSumExp over the first validColumns of rows `vocab` apart: the max,
/// then the sum of exp(x - max) in a second pass.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rowLse(S s, std::int64_t rows, std::int64_t vocab,
           std::int64_t validColumns, const typename S::Elem *logits,
           float *lse) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *row = logits + r * vocab;
    float m = groupRowMax<G>(s, validColumns, row);
    float sum = groupRowSumExp<G>(s, validColumns, row, m, /*backwards=*/true);
    if (G::lane() == 0)
      lse[r] = m + math::log(sum);
  }
}

/// The loss terms meanLoss averages: lse - target logit, from the full fp32
/// logits, from the all-reduced target logit of the vocabulary-parallel
/// form, or as lossRows stored them.
struct FullLogitsTerm {
  const float *lse, *logits;
  std::int64_t vocab;
  __device__ float operator()(std::int64_t r, std::int32_t target) const {
    return lse[r] - logits[r * vocab + target];
  }
};
struct TargetLogitTerm {
  const float *lse, *targetLogit;
  __device__ float operator()(std::int64_t r, std::int32_t) const {
    return lse[r] - targetLogit[r];
  }
};
struct StoredTerm {
  const float *term;
  __device__ float operator()(std::int64_t r, std::int32_t) const {
    return term[r];
  }
};

/// Single block of detail::kBlockSize threads: *loss = the mean of term(r)
/// over the rows whose target is not ignored, *validCount their number.
template <typename Term>
__global__ void meanLoss(std::int64_t rows, const std::int32_t *targets,
                         Term term, int *validCount, float *loss) {
  float sum = 0;
  int count = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += detail::kBlockSize) {
    if (targets[r] == kIgnoreIndex)
      continue;
    sum += term(r, targets[r]);
    ++count;
  }
  float totalLoss = detail::blockReduce(sum, SumOp());
  int totalCount = detail::blockReduce(count, SumOp());
  if (threadIdx.x == 0) {
    *validCount = totalCount;
    *loss = totalCount ? totalLoss / float(totalCount) : 0.0f;
  }
}

/// Single block of detail::kBlockSize threads: *validCount = the number of
/// targets that are not ignored (lossRows needs it before meanLoss runs).
__global__ void validTargets(std::int64_t rows, const std::int32_t *targets,
                             int *validCount) {
  int count = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += detail::kBlockSize)
    count += targets[r] != kIgnoreIndex;
  int total = detail::blockReduce(count, SumOp());
  if (threadIdx.x == 0)
    *validCount = total;
}

/// One thread per logit of a [rows, vocab] block of logits whose columns
/// start at word vocabStart and end at validColumns (padding after it):
/// dLogits = crossEntropyLogitGrad * factor, 0 for ignored rows and padding.
/// dLogits may alias logits.
template <typename S>
__global__ void
logitGrad(S s, std::int64_t rows, std::int64_t vocab, std::int64_t vocabStart,
          std::int64_t validColumns, const typename S::Elem *logits,
          const std::int32_t *targets, const float *lse, const int *validCount,
          float factor, typename S::Elem *dLogits) {
  std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * vocab)
    return;
  std::int64_t r = i / vocab, c = i % vocab;
  std::int32_t target = targets[r];
  // validCount > 0 whenever a row is valid.
  float g = target == kIgnoreIndex || c >= validColumns
                ? 0.0f
                : crossEntropyLogitGrad(s.load(logits, i), lse[r],
                                        c == std::int64_t(target) - vocabStart,
                                        1.0f / float(*validCount));
  s.store(dLogits, i, g * factor);
}

/// The fused loss phase on a group's rows (`vocab` apart, the first
/// validColumns real words, the rest padding): the row's loss term (lse -
/// target logit, 0 if ignored) into term[r] and, with dLogits (may alias
/// logits), the row's gradient times `factor` (0 on padding). Each thread
/// reads the target logit before the row's reductions, and the group meets
/// at a barrier before any thread writes a gradient, so aliasing is safe (a
/// warp's reductions are shuffles, which order no memory: without the
/// barrier lane 0's read of the target logit could be moved after another
/// lane's store of its gradient).
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    lossRows(S s, std::int64_t rows, std::int64_t vocab,
             std::int64_t validColumns, const typename S::Elem *logits,
             const std::int32_t *targets, const int *validCount, float factor,
             float *term, typename S::Elem *dLogits) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *row = logits + r * vocab;
    std::int32_t target = targets[r];
    bool valid = target != kIgnoreIndex;
    float targetLogit = valid ? s.load(row, target) : 0.0f;
    float m = groupRowMax<G>(s, validColumns, row);
    float sum = groupRowSumExp<G>(s, validColumns, row, m, /*backwards=*/true);
    float lse = m + math::log(sum);
    if (G::lane() == 0)
      term[r] = valid ? lse - targetLogit : 0.0f;
    if (!dLogits)
      continue;
    G::sync(); // every read of the row before the first gradient's store
    typename S::Elem *dRow = dLogits + r * vocab;
    float scale = valid ? 1.0f / float(*validCount) : 0.0f;
    for (std::int64_t c = G::lane(); c < vocab; c += G::kSize) {
      float g =
          valid && c < validColumns
              ? crossEntropyLogitGrad(s.load(row, c), lse, c == target, scale)
              : 0.0f;
      s.store(dRow, c, g * factor);
    }
  }
}

//===--- Vocabulary-parallel phases (one shard of the vocabulary) ---------===//

template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    shardMax(S s, std::int64_t rows, std::int64_t vocabLocal,
             std::int64_t validColumns, const typename S::Elem *logits,
             float *localMax) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    float m = groupRowMax<G>(s, validColumns, logits + r * vocabLocal);
    if (G::lane() == 0)
      localMax[r] = m;
  }
}

template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    shardSums(S s, std::int64_t rows, std::int64_t vocabLocal,
              std::int64_t vocabStart, std::int64_t validColumns,
              const typename S::Elem *logits, const std::int32_t *targets,
              const float *globalMax, float *sumExp, float *targetLogit) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *row = logits + r * vocabLocal;
    float sum = groupRowSumExp<G>(s, validColumns, row, globalMax[r]);
    if (G::lane() == 0) {
      sumExp[r] = sum;
      // shardTargetLogit, through the storage.
      std::int64_t local = std::int64_t(targets[r]) - vocabStart;
      targetLogit[r] =
          local >= 0 && local < validColumns ? s.load(row, local) : 0.0f;
    }
  }
}

__global__ void shardLse(std::int64_t rows, const float *globalMax,
                         const float *globalSumExp, float *lse) {
  std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows)
    lse[r] = globalMax[r] + math::log(globalSumExp[r]);
}

} // namespace weft::kernels::gpu::loss

#endif // WEFT_KERNELS_CUDA_LOSSKERNELS_CUH
