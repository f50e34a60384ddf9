//===- Loss.h - Softmax cross-entropy rows ----------------------*- C++ -*-===//
//
// One row is the logits of one token over (a shard of) the vocabulary. The
// loss of a row with target t is lse(row) - row[t]; its gradient is
// softmax(row) - onehot(t), scaled by 1 / (number of non-ignored labels) for
// the mean. The vocab-parallel form splits lse into phases whose partial
// results combine across tensor-parallel ranks with all-reduces:
//   1. local max             -> all-reduce MAX -> global max m
//   2. local sum exp(x - m), local target logit (0 off-shard)
//                            -> all-reduce SUM
//   3. loss = log(sum) + m - target logit; local gradient from m and sum.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_LOSS_H
#define WEFT_KERNELS_LOSS_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

/// The real (not padding) columns of rows `vocab` wide: validColumns, at
/// most vocab; -1 (any negative) means all of them.
WEFT_HD inline std::int64_t validColumnsOf(std::int64_t vocab,
                                           std::int64_t validColumns) {
  return validColumns < 0 || validColumns > vocab ? vocab : validColumns;
}

template <typename T> WEFT_HD inline T rowMax(std::int64_t n, const T *x) {
  T m = -math::infinity<T>();
  for (std::int64_t i = 0; i < n; ++i)
    m = math::max(m, x[i]);
  return m;
}

/// sum_i exp(x[i] - shift).
template <typename T>
WEFT_HD inline T rowSumExp(std::int64_t n, const T *x, T shift) {
  T sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    sum += math::exp(x[i] - shift);
  return sum;
}

template <typename T> WEFT_HD inline T logSumExp(std::int64_t n, const T *x) {
  T m = rowMax(n, x);
  return m + math::log(rowSumExp(n, x, m));
}

/// Gradient of one logit: (softmax - onehot) * scale, softmax = exp(x - lse).
template <typename T>
WEFT_HD inline T crossEntropyLogitGrad(T logit, T lse, bool isTarget, T scale) {
  return (math::exp(logit - lse) - (isTarget ? T(1) : T(0))) * scale;
}

/// Logit of `target` if it falls in this shard's [vocabStart, vocabStart + n)
/// range, else 0 (so the shards' values sum to the target logit).
template <typename T>
WEFT_HD inline T shardTargetLogit(std::int64_t n, std::int64_t vocabStart,
                                  const T *x, std::int32_t target) {
  std::int64_t local = std::int64_t(target) - vocabStart;
  return (local >= 0 && local < n) ? x[local] : T(0);
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_LOSS_H
