//===- Loss.cu - Fused softmax cross-entropy ------------------------------===//
//
// Row reductions (log-sum-exp, shard max, shard sum of exponentials) give each
// row to a warp, or a block for rows wider than detail::kWideRow (any real
// vocabulary), whose lanes read consecutive logits and combine with shuffles.
// They compute what rowMax / rowSumExp / logSumExp / shardTargetLogit in
// weft/kernels/Loss.h do (the max, then the sum of exp(x - max)), in a
// different summation order. The gradient is one thread per logit, the mean
// loss a single-block reduction.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Loss.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::kBlockSize;
using detail::kWarpSize;
using detail::launch;
using detail::launchRows;
using detail::MaxOp;
using detail::RowGroup;
using detail::SumOp;

namespace {

/// A warp per row up to detail::kWideRow columns, else a block.
using WarpRows = RowGroup<kWarpSize>;
using BlockRows = RowGroup<kBlockSize>;
/// log-sum-exp reads its rows twice: big blocks keep few rows in flight, so
/// the second pass, run backwards, still finds the end of a (GPT-sized,
/// 200 KB) row in L2.
constexpr int kLseBlockSize = 1024;
using LseBlockRows = RowGroup<kLseBlockSize>;

/// rowMax over a group's row: each thread's columns, then the group.
template <typename G>
__device__ float groupRowMax(int64_t n, const float *row) {
  float m = -math::infinity<float>();
#pragma unroll 4
  for (int64_t c = G::lane(); c < n; c += G::kSize)
    m = math::max(m, row[c]);
  return G::reduce(m, MaxOp());
}

/// rowSumExp over a group's row, each thread's columns in increasing order
/// or, with `backwards`, in decreasing order.
template <typename G>
__device__ float groupRowSumExp(int64_t n, const float *row, float shift,
                                bool backwards = false) {
  float sum = 0;
  if (!backwards) {
#pragma unroll 4
    for (int64_t c = G::lane(); c < n; c += G::kSize)
      sum += math::exp(row[c] - shift);
  } else if (G::lane() < n) {
    int64_t last = G::lane() + (n - 1 - G::lane()) / G::kSize * G::kSize;
#pragma unroll 4
    for (int64_t c = last; c >= 0; c -= G::kSize)
      sum += math::exp(row[c] - shift);
  }
  return G::reduce(sum, SumOp());
}

/// logSumExp: the max, then the sum of exp(x - max) in a second pass.
template <typename G>
__global__ void __launch_bounds__(G::kThreads)
    rowLseKernel(int64_t rows, int64_t vocab, const float *logits, float *lse) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const float *row = logits + r * vocab;
    float m = groupRowMax<G>(vocab, row);
    float sum = groupRowSumExp<G>(vocab, row, m, /*backwards=*/true);
    if (G::lane() == 0)
      lse[r] = m + math::log(sum);
  }
}

/// Single block: *loss = the mean of lse - target logit over the rows whose
/// target is not ignored, *validCount their number. The target logit is
/// targetLogit[r] (the all-reduced value of the vocabulary-parallel form) or,
/// when targetLogit is null, read from the full [rows, vocab] logits.
__global__ void meanLossKernel(int64_t rows, const int32_t *targets,
                               const float *lse, const float *targetLogit,
                               const float *logits, int64_t vocab,
                               int *validCount, float *loss) {
  float sum = 0;
  int count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kBlockSize) {
    if (targets[r] == kIgnoreIndex)
      continue;
    sum += lse[r] -
           (targetLogit ? targetLogit[r] : logits[r * vocab + targets[r]]);
    ++count;
  }
  float totalLoss = detail::blockReduce(sum, SumOp());
  int totalCount = detail::blockReduce(count, SumOp());
  if (threadIdx.x == 0) {
    *validCount = totalCount;
    *loss = totalCount ? totalLoss / float(totalCount) : 0.0f;
  }
}

__global__ void crossEntropyGradKernel(int64_t rows, int64_t vocab,
                                       const float *logits,
                                       const int32_t *targets, const float *lse,
                                       const int *validCount, float *dLogits) {
  int64_t i = globalIndex();
  if (i >= rows * vocab)
    return;
  int64_t r = i / vocab, c = i % vocab;
  int32_t target = targets[r];
  // validCount > 0 whenever a row is valid.
  dLogits[i] = target == kIgnoreIndex
                   ? 0.0f
                   : crossEntropyLogitGrad(logits[i], lse[r], c == target,
                                           1.0f / float(*validCount));
}

//===--- Vocabulary-parallel phases (one shard of the vocabulary) ---------===//

template <typename G>
__global__ void __launch_bounds__(G::kThreads)
    shardMaxKernel(int64_t rows, int64_t vocabLocal, int64_t validColumns,
                   const float *logits, float *localMax) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    float m = groupRowMax<G>(validColumns, logits + r * vocabLocal);
    if (G::lane() == 0)
      localMax[r] = m;
  }
}

template <typename G>
__global__ void __launch_bounds__(G::kThreads)
    shardSumsKernel(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                    int64_t validColumns, const float *logits,
                    const int32_t *targets, const float *globalMax,
                    float *sumExp, float *targetLogit) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const float *row = logits + r * vocabLocal;
    float sum = groupRowSumExp<G>(validColumns, row, globalMax[r]);
    if (G::lane() == 0) {
      sumExp[r] = sum;
      targetLogit[r] =
          shardTargetLogit(validColumns, vocabStart, row, targets[r]);
    }
  }
}

__global__ void shardLseKernel(int64_t rows, const float *globalMax,
                               const float *globalSumExp, float *lse) {
  int64_t r = globalIndex();
  if (r < rows)
    lse[r] = globalMax[r] + math::log(globalSumExp[r]);
}

__global__ void shardGradKernel(int64_t rows, int64_t vocabLocal,
                                int64_t vocabStart, int64_t validColumns,
                                const float *logits, const int32_t *targets,
                                const float *lse, const int *validCount,
                                float *dLogits) {
  int64_t i = globalIndex();
  if (i >= rows * vocabLocal)
    return;
  int64_t r = i / vocabLocal, c = i % vocabLocal;
  int32_t target = targets[r];
  dLogits[i] = target == kIgnoreIndex || c >= validColumns
                   ? 0.0f
                   : crossEntropyLogitGrad(logits[i], lse[r],
                                           c == int64_t(target) - vocabStart,
                                           1.0f / float(*validCount));
}

} // namespace

cudaError_t crossEntropyForwardBackward(int64_t rows, int64_t vocab,
                                        const float *logits,
                                        const int32_t *targets, float *lse,
                                        int *validCount, float *loss,
                                        float *dLogits, cudaStream_t stream) {
  cudaError_t err = launchRows<kLseBlockSize>(
      rows, vocab, stream, rowLseKernel<WarpRows>, rowLseKernel<LseBlockRows>,
      rows, vocab, logits, lse);
  if (err != cudaSuccess)
    return err;
  meanLossKernel<<<1, kBlockSize, 0, stream>>>(rows, targets, lse, nullptr,
                                               logits, vocab, validCount, loss);
  if ((err = cudaGetLastError()) != cudaSuccess || !dLogits)
    return err;
  return launch(rows * vocab, stream, crossEntropyGradKernel, rows, vocab,
                logits, targets, lse, validCount, dLogits);
}

cudaError_t crossEntropyShardMax(int64_t rows, int64_t vocabLocal,
                                 const float *logits, float *localMax,
                                 int64_t validColumns, cudaStream_t stream) {
  return launchRows(rows, validColumns, stream, shardMaxKernel<WarpRows>,
                    shardMaxKernel<BlockRows>, rows, vocabLocal, validColumns,
                    logits, localMax);
}

cudaError_t crossEntropyShardSums(int64_t rows, int64_t vocabLocal,
                                  int64_t vocabStart, const float *logits,
                                  const std::int32_t *targets,
                                  const float *globalMax, float *sumExp,
                                  float *targetLogit, int64_t validColumns,
                                  cudaStream_t stream) {
  return launchRows(rows, validColumns, stream, shardSumsKernel<WarpRows>,
                    shardSumsKernel<BlockRows>, rows, vocabLocal, vocabStart,
                    validColumns, logits, targets, globalMax, sumExp,
                    targetLogit);
}

cudaError_t
crossEntropyShardFinish(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                        const float *logits, const std::int32_t *targets,
                        const float *globalMax, const float *globalSumExp,
                        const float *globalTargetLogit, float *lse,
                        int *validCount, float *loss, float *dLogits,
                        int64_t validColumns, cudaStream_t stream) {
  cudaError_t err =
      launch(rows, stream, shardLseKernel, rows, globalMax, globalSumExp, lse);
  if (err != cudaSuccess)
    return err;
  meanLossKernel<<<1, kBlockSize, 0, stream>>>(
      rows, targets, lse, globalTargetLogit, nullptr, 0, validCount, loss);
  if ((err = cudaGetLastError()) != cudaSuccess || !dLogits)
    return err;
  return launch(rows * vocabLocal, stream, shardGradKernel, rows, vocabLocal,
                vocabStart, validColumns, logits, targets, lse, validCount,
                dLogits);
}

} // namespace weft::kernels::gpu
