//===- Loss.cu - Fused softmax cross-entropy ------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Loss.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::kBlockSize;
using detail::launch;

namespace {

__global__ void rowLseKernel(int64_t rows, int64_t vocab, const float *logits,
                             float *lse) {
  int64_t r = globalIndex();
  if (r < rows)
    lse[r] = logSumExp(vocab, logits + r * vocab);
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
  float totalLoss = detail::blockSum(sum);
  int totalCount = detail::blockSum(count);
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

__global__ void shardMaxKernel(int64_t rows, int64_t vocabLocal,
                               int64_t validColumns, const float *logits,
                               float *localMax) {
  int64_t r = globalIndex();
  if (r < rows)
    localMax[r] = rowMax(validColumns, logits + r * vocabLocal);
}

__global__ void shardSumsKernel(int64_t rows, int64_t vocabLocal,
                                int64_t vocabStart, int64_t validColumns,
                                const float *logits, const int32_t *targets,
                                const float *globalMax, float *sumExp,
                                float *targetLogit) {
  int64_t r = globalIndex();
  if (r >= rows)
    return;
  const float *row = logits + r * vocabLocal;
  sumExp[r] = rowSumExp(validColumns, row, globalMax[r]);
  targetLogit[r] = shardTargetLogit(validColumns, vocabStart, row, targets[r]);
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
  cudaError_t err =
      launch(rows, stream, rowLseKernel, rows, vocab, logits, lse);
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
  return launch(rows, stream, shardMaxKernel, rows, vocabLocal, validColumns,
                logits, localMax);
}

cudaError_t crossEntropyShardSums(int64_t rows, int64_t vocabLocal,
                                  int64_t vocabStart, const float *logits,
                                  const std::int32_t *targets,
                                  const float *globalMax, float *sumExp,
                                  float *targetLogit, int64_t validColumns,
                                  cudaStream_t stream) {
  return launch(rows, stream, shardSumsKernel, rows, vocabLocal, vocabStart,
                validColumns, logits, targets, globalMax, sumExp, targetLogit);
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
