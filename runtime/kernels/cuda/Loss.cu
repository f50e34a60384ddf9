//===- Loss.cu - Fused softmax cross-entropy launches ---------------------===//
//
// The kernels are in LossKernels.cuh: the fp32 forms here on storage::F32,
// the 16-bit forms on storage::Half16.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "LossKernels.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {
using detail::halfStorage;
using detail::in;
using detail::kBlockSize;
using detail::launch;
using detail::launchRows;
using detail::out;
using loss::BlockRows;
using loss::kLseBlockSize;
using loss::LseBlockRows;
using loss::WarpRows;

namespace {

template <typename Term>
cudaError_t meanLoss(int64_t rows, const std::int32_t *targets, Term term,
                     int *validCount, float *loss, cudaStream_t stream) {
  loss::meanLoss<<<1, kBlockSize, 0, stream>>>(rows, targets, term, validCount,
                                               loss);
  return cudaGetLastError();
}

template <typename S>
cudaError_t shardMaxOn(S s, int64_t rows, int64_t vocabLocal,
                       const typename S::Elem *logits, float *localMax,
                       int64_t validColumns, cudaStream_t stream) {
  return launchRows(rows, validColumns, stream, loss::shardMax<WarpRows, S>,
                    loss::shardMax<BlockRows, S>, s, rows, vocabLocal,
                    validColumns, logits, localMax);
}

template <typename S>
cudaError_t shardSumsOn(S s, int64_t rows, int64_t vocabLocal,
                        int64_t vocabStart, const typename S::Elem *logits,
                        const std::int32_t *targets, const float *globalMax,
                        float *sumExp, float *targetLogit, int64_t validColumns,
                        cudaStream_t stream) {
  return launchRows(rows, validColumns, stream, loss::shardSums<WarpRows, S>,
                    loss::shardSums<BlockRows, S>, s, rows, vocabLocal,
                    vocabStart, validColumns, logits, targets, globalMax,
                    sumExp, targetLogit);
}

template <typename S>
cudaError_t
shardFinishOn(S s, int64_t rows, int64_t vocabLocal, int64_t vocabStart,
              const typename S::Elem *logits, const std::int32_t *targets,
              const float *globalMax, const float *globalSumExp,
              const float *globalTargetLogit, float factor, float *lse,
              int *validCount, float *lossOut, typename S::Elem *dLogits,
              int64_t validColumns, cudaStream_t stream) {
  cudaError_t err =
      launch(rows, stream, loss::shardLse, rows, globalMax, globalSumExp, lse);
  if (err != cudaSuccess)
    return err;
  err = meanLoss(rows, targets, loss::TargetLogitTerm{lse, globalTargetLogit},
                 validCount, lossOut, stream);
  if (err != cudaSuccess || !dLogits)
    return err;
  return launch(rows * vocabLocal, stream, loss::logitGrad<S>, s, rows,
                vocabLocal, vocabStart, validColumns, logits, targets,
                static_cast<const float *>(lse),
                static_cast<const int *>(validCount), factor, dLogits);
}

} // namespace

//===--- fp32 -------------------------------------------------------------===//

cudaError_t crossEntropyForwardBackward(int64_t rows, int64_t vocab,
                                        const float *logits,
                                        const int32_t *targets, float *lse,
                                        int *validCount, float *loss,
                                        float *dLogits, cudaStream_t stream,
                                        int64_t validColumns) {
  storage::F32 s;
  int64_t valid = validColumnsOf(vocab, validColumns);
  cudaError_t err = launchRows<kLseBlockSize>(
      rows, valid, stream, loss::rowLse<WarpRows, storage::F32>,
      loss::rowLse<LseBlockRows, storage::F32>, s, rows, vocab, valid, logits,
      lse);
  if (err != cudaSuccess)
    return err;
  err = meanLoss(rows, targets, loss::FullLogitsTerm{lse, logits, vocab},
                 validCount, loss, stream);
  if (err != cudaSuccess || !dLogits)
    return err;
  return launch(rows * vocab, stream, loss::logitGrad<storage::F32>, s, rows,
                vocab, int64_t(0), valid, logits, targets,
                static_cast<const float *>(lse),
                static_cast<const int *>(validCount), 1.0f, dLogits);
}

cudaError_t crossEntropyShardMax(int64_t rows, int64_t vocabLocal,
                                 const float *logits, float *localMax,
                                 int64_t validColumns, cudaStream_t stream) {
  return shardMaxOn(storage::F32(), rows, vocabLocal, logits, localMax,
                    validColumns, stream);
}

cudaError_t crossEntropyShardSums(int64_t rows, int64_t vocabLocal,
                                  int64_t vocabStart, const float *logits,
                                  const std::int32_t *targets,
                                  const float *globalMax, float *sumExp,
                                  float *targetLogit, int64_t validColumns,
                                  cudaStream_t stream) {
  return shardSumsOn(storage::F32(), rows, vocabLocal, vocabStart, logits,
                     targets, globalMax, sumExp, targetLogit, validColumns,
                     stream);
}

cudaError_t
crossEntropyShardFinish(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                        const float *logits, const std::int32_t *targets,
                        const float *globalMax, const float *globalSumExp,
                        const float *globalTargetLogit, float *lse,
                        int *validCount, float *loss, float *dLogits,
                        int64_t validColumns, cudaStream_t stream) {
  return shardFinishOn(storage::F32(), rows, vocabLocal, vocabStart, logits,
                       targets, globalMax, globalSumExp, globalTargetLogit,
                       1.0f, lse, validCount, loss, dLogits, validColumns,
                       stream);
}

//===--- 16-bit storage -------------------------------------------------===//

cudaError_t halfCrossEntropy(HalfType type, int64_t rows, int64_t vocab,
                             const void *logits, const std::int32_t *targets,
                             float gradScale, float *term, int *validCount,
                             float *loss, void *dLogits, cudaStream_t stream,
                             int64_t validColumns) {
  loss::validTargets<<<1, kBlockSize, 0, stream>>>(rows, targets, validCount);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return err;
  storage::Half16 s = halfStorage(type);
  int64_t valid = validColumnsOf(vocab, validColumns);
  err = launchRows<kLseBlockSize>(
      rows, valid, stream, loss::lossRows<WarpRows, storage::Half16>,
      loss::lossRows<LseBlockRows, storage::Half16>, s, rows, vocab, valid,
      in(logits), targets, static_cast<const int *>(validCount), gradScale,
      term, out(dLogits));
  if (err != cudaSuccess)
    return err;
  return meanLoss(rows, targets, loss::StoredTerm{term}, validCount, loss,
                  stream);
}

cudaError_t halfCrossEntropyShardMax(HalfType type, int64_t rows,
                                     int64_t vocabLocal, const void *logits,
                                     float *localMax, int64_t validColumns,
                                     cudaStream_t stream) {
  return shardMaxOn(halfStorage(type), rows, vocabLocal, in(logits), localMax,
                    validColumns, stream);
}

cudaError_t halfCrossEntropyShardSums(HalfType type, int64_t rows,
                                      int64_t vocabLocal, int64_t vocabStart,
                                      const void *logits,
                                      const std::int32_t *targets,
                                      const float *globalMax, float *sumExp,
                                      float *targetLogit, int64_t validColumns,
                                      cudaStream_t stream) {
  return shardSumsOn(halfStorage(type), rows, vocabLocal, vocabStart,
                     in(logits), targets, globalMax, sumExp, targetLogit,
                     validColumns, stream);
}

cudaError_t halfCrossEntropyShardFinish(
    HalfType type, int64_t rows, int64_t vocabLocal, int64_t vocabStart,
    const void *logits, const std::int32_t *targets, const float *globalMax,
    const float *globalSumExp, const float *globalTargetLogit, float gradScale,
    float *lse, int *validCount, float *loss, void *dLogits,
    int64_t validColumns, cudaStream_t stream) {
  return shardFinishOn(halfStorage(type), rows, vocabLocal, vocabStart,
                       in(logits), targets, globalMax, globalSumExp,
                       globalTargetLogit, gradScale, lse, validCount, loss,
                       out(dLogits), validColumns, stream);
}

} // namespace weft::kernels::gpu
