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

} // namespace weft::kernels

#endif // WEFT_KERNELS_EMBEDDING_H
