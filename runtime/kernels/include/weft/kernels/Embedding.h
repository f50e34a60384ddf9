//===- Embedding.h - Token + learned position embeddings --------*- C++ -*-===//
//
// Token t of a [batch, seq] id tensor sits at position (t % seq) + offset
// (the offset is the sequence-parallel or pipelined-chunk start). Its hidden
// row is wte[id] + wpe[position] (+ row 0 of the token-type table, BERT-style
// models with a single segment). Missing tables are null pointers.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_EMBEDDING_H
#define WEFT_KERNELS_EMBEDDING_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

template <typename T>
WEFT_HD inline void embeddingRowForward(std::int64_t hidden, const T *tokenRow,
                                        const T *positionRow,
                                        const T *tokenTypeRow, T *out) {
  for (std::int64_t i = 0; i < hidden; ++i) {
    T v = tokenRow[i];
    if (positionRow)
      v += positionRow[i];
    if (tokenTypeRow)
      v += tokenTypeRow[i];
    out[i] = v;
  }
}

/// Scatter-adds dOut into the table rows that produced it (atomically on the
/// device: several tokens can share a row).
template <typename T>
WEFT_HD inline void embeddingRowBackward(std::int64_t hidden, const T *dOut,
                                         T *dTokenRow, T *dPositionRow,
                                         T *dTokenTypeRow) {
  for (std::int64_t i = 0; i < hidden; ++i) {
    accumulate(&dTokenRow[i], dOut[i]);
    if (dPositionRow)
      accumulate(&dPositionRow[i], dOut[i]);
    if (dTokenTypeRow)
      accumulate(&dTokenTypeRow[i], dOut[i]);
  }
}

/// Vocabulary-parallel lookup of one token: this shard holds rows
/// [vocabStart, vocabStart + shardRows) of the (padded) token table; a token it
/// owns yields its row, any other token zeros, so the shards' outputs sum to
/// the full lookup.
template <typename T>
WEFT_HD inline void
vocabEmbeddingRowForward(std::int64_t hidden, std::int64_t vocabStart,
                         std::int64_t shardRows, const T *table,
                         std::int32_t id, T *out) {
  std::int64_t local = std::int64_t(id) - vocabStart;
  bool owned = local >= 0 && local < shardRows;
  for (std::int64_t i = 0; i < hidden; ++i)
    out[i] = owned ? table[local * hidden + i] : T(0);
}

/// Scatter-adds dOut into the shard's row of `id` when the shard owns it.
template <typename T>
WEFT_HD inline void
vocabEmbeddingRowBackward(std::int64_t hidden, std::int64_t vocabStart,
                          std::int64_t shardRows, std::int32_t id,
                          const T *dOut, T *dTable) {
  std::int64_t local = std::int64_t(id) - vocabStart;
  if (local < 0 || local >= shardRows)
    return;
  for (std::int64_t i = 0; i < hidden; ++i)
    accumulate(&dTable[local * hidden + i], dOut[i]);
}

/// out = x + positionRow: the position rows added after a vocabulary-parallel
/// lookup has been reduced (out may alias x).
template <typename T>
WEFT_HD inline void positionEmbeddingRowForward(std::int64_t hidden, const T *x,
                                                const T *positionRow, T *out) {
  for (std::int64_t i = 0; i < hidden; ++i)
    out[i] = x[i] + positionRow[i];
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_EMBEDDING_H
