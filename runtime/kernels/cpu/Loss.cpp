//===- Loss.cpp - Softmax cross-entropy, fused and vocab-parallel ---------===//

#include "weft/kernels/Loss.h"
#include "weft/kernels/CpuKernels.h"

#include <vector>

namespace weft::kernels::cpu {

int64_t countValidTargets(int64_t rows, const std::int32_t *targets) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r)
    count += targets[r] != kIgnoreIndex;
  return count;
}

/// Shared tail of the fused and the sharded forms: given each row's global
/// log-sum-exp and target logit, the mean loss and this shard's gradient
/// (zero on padding columns).
template <typename T>
static T finishCrossEntropy(int64_t rows, int64_t vocabLocal,
                            int64_t vocabStart, const T *logits,
                            const std::int32_t *targets, const T *rowLse,
                            const T *targetLogit, T *dLogits,
                            int64_t validColumns) {
  int64_t count = countValidTargets(rows, targets);
  T scale = count ? T(1) / T(count) : T(0);
  T total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    bool valid = targets[r] != kIgnoreIndex;
    if (valid)
      total += rowLse[r] - targetLogit[r];
    if (!dLogits)
      continue;
    const T *row = logits + r * vocabLocal;
    T *dRow = dLogits + r * vocabLocal;
    int64_t localTarget = int64_t(targets[r]) - vocabStart;
    for (int64_t c = 0; c < vocabLocal; ++c)
      dRow[c] = valid && c < validColumns
                    ? crossEntropyLogitGrad(row[c], rowLse[r], c == localTarget,
                                            scale)
                    : T(0);
  }
  return total * scale;
}

template <typename T>
T crossEntropyForwardBackward(int64_t rows, int64_t vocab, const T *logits,
                              const std::int32_t *targets, T *dLogits, T *lse,
                              int64_t validColumns) {
  int64_t valid = validColumnsOf(vocab, validColumns);
  std::vector<T> rowLse(rows), targetLogit(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = logits + r * vocab;
    rowLse[r] = logSumExp(valid, row);
    targetLogit[r] = shardTargetLogit(valid, 0, row, targets[r]);
    if (lse)
      lse[r] = rowLse[r];
  }
  return finishCrossEntropy(rows, vocab, 0, logits, targets, rowLse.data(),
                            targetLogit.data(), dLogits, valid);
}

template <typename T>
void crossEntropyShardMax(int64_t rows, int64_t vocabLocal, const T *logits,
                          T *localMax, int64_t validColumns) {
  int64_t valid = validColumnsOf(vocabLocal, validColumns);
  for (int64_t r = 0; r < rows; ++r)
    localMax[r] = rowMax(valid, logits + r * vocabLocal);
}

template <typename T>
void crossEntropyShardSums(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                           const T *logits, const std::int32_t *targets,
                           const T *globalMax, T *sumExp, T *targetLogit,
                           int64_t validColumns) {
  int64_t valid = validColumnsOf(vocabLocal, validColumns);
  for (int64_t r = 0; r < rows; ++r) {
    const T *row = logits + r * vocabLocal;
    sumExp[r] = rowSumExp(valid, row, globalMax[r]);
    targetLogit[r] = shardTargetLogit(valid, vocabStart, row, targets[r]);
  }
}

template <typename T>
T crossEntropyShardFinish(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                          const T *logits, const std::int32_t *targets,
                          const T *globalMax, const T *globalSumExp,
                          const T *globalTargetLogit, T *dLogits,
                          int64_t validColumns) {
  std::vector<T> rowLse(rows);
  for (int64_t r = 0; r < rows; ++r)
    rowLse[r] = globalMax[r] + math::log(globalSumExp[r]);
  return finishCrossEntropy(rows, vocabLocal, vocabStart, logits, targets,
                            rowLse.data(), globalTargetLogit, dLogits,
                            validColumnsOf(vocabLocal, validColumns));
}

#define WEFT_INSTANTIATE(T)                                                    \
  template T crossEntropyForwardBackward<T>(                                   \
      int64_t, int64_t, const T *, const std::int32_t *, T *, T *, int64_t);   \
  template void crossEntropyShardMax<T>(int64_t, int64_t, const T *, T *,      \
                                        int64_t);                              \
  template void crossEntropyShardSums<T>(int64_t, int64_t, int64_t, const T *, \
                                         const std::int32_t *, const T *, T *, \
                                         T *, int64_t);                        \
  template T crossEntropyShardFinish<T>(int64_t, int64_t, int64_t, const T *,  \
                                        const std::int32_t *, const T *,       \
                                        const T *, const T *, T *, int64_t);

WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(double)

} // namespace weft::kernels::cpu
