//===- Attention.h - Multi-head attention rows (causal/bidirectional, GQA)
//-===//
//
// Layouts (row-major, what the QKV projection of [batch, seq, hidden] gives):
//   q, out, dq:  [batch, seq, heads,   headDim]
//   k, v, dk, dv:[batch, seq, kvHeads, headDim]
//   lse, delta:  [batch, heads, seq]
// Query head h reads key/value head h / (heads / kvHeads) (grouped-query
// attention; kvHeads == heads is ordinary multi-head attention).
//
// The forward pass streams over keys with an online softmax, so it needs no
// [seq, seq] scratch, and saves the log-sum-exp of each score row. The
// backward pass is split into a query-row pass (dq and delta = dOut . out)
// and a key-row pass (dk, dv) so each output row has a single writer: a host
// loop and a CUDA thread per row run the same functions without atomics.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_ATTENTION_H
#define WEFT_KERNELS_ATTENTION_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

struct AttentionDims {
  std::int64_t batch, seq, heads, kvHeads, headDim;
  bool causal;
  double scale; ///< Usually 1 / sqrt(headDim).

  WEFT_HD std::int64_t groupSize() const { return heads / kvHeads; }
  WEFT_HD std::int64_t qRow(std::int64_t b, std::int64_t i,
                            std::int64_t h) const {
    return ((b * seq + i) * heads + h) * headDim;
  }
  WEFT_HD std::int64_t kvRow(std::int64_t b, std::int64_t j,
                             std::int64_t g) const {
    return ((b * seq + j) * kvHeads + g) * headDim;
  }
  WEFT_HD std::int64_t statIndex(std::int64_t b, std::int64_t h,
                                 std::int64_t i) const {
    return (b * heads + h) * seq + i;
  }
  /// Keys visible to query i, i.e. j in [0, numKeys(i)).
  WEFT_HD std::int64_t numKeys(std::int64_t i) const {
    return causal ? i + 1 : seq;
  }
};

/// Output row for query (b, i, h); returns its log-sum-exp.
template <typename T>
WEFT_HD inline T attentionRowForward(const AttentionDims &d, const T *q,
                                     const T *k, const T *v, std::int64_t b,
                                     std::int64_t i, std::int64_t h, T *out) {
  const T scale = T(d.scale);
  const std::int64_t g = h / d.groupSize();
  const T *qi = q + d.qRow(b, i, h);
  T *oi = out + d.qRow(b, i, h);
  for (std::int64_t c = 0; c < d.headDim; ++c)
    oi[c] = 0;
  T runningMax = -math::infinity<T>(), denom = 0;
  for (std::int64_t j = 0, n = d.numKeys(i); j < n; ++j) {
    T s = scale * dot(d.headDim, qi, k + d.kvRow(b, j, g));
    if (s > runningMax) {
      // Rescale what was accumulated against the old maximum.
      T correction = math::exp(runningMax - s);
      denom *= correction;
      for (std::int64_t c = 0; c < d.headDim; ++c)
        oi[c] *= correction;
      runningMax = s;
    }
    T p = math::exp(s - runningMax);
    denom += p;
    const T *vj = v + d.kvRow(b, j, g);
    for (std::int64_t c = 0; c < d.headDim; ++c)
      oi[c] += p * vj[c];
  }
  for (std::int64_t c = 0; c < d.headDim; ++c)
    oi[c] /= denom;
  return runningMax + math::log(denom);
}

/// dq for query (b, i, h) and delta = dOut . out for that row, with
/// dS_ij = P_ij (dOut_i . v_j - delta_i) and dq_i = scale * sum_j dS_ij k_j.
template <typename T>
WEFT_HD inline void
attentionQueryRowBackward(const AttentionDims &d, const T *q, const T *k,
                          const T *v, const T *out, const T *lse, const T *dOut,
                          std::int64_t b, std::int64_t i, std::int64_t h, T *dq,
                          T *delta) {
  const T scale = T(d.scale);
  const std::int64_t g = h / d.groupSize(), row = d.qRow(b, i, h);
  const T *qi = q + row, *doi = dOut + row;
  T *dqi = dq + row;
  const T rowLse = lse[d.statIndex(b, h, i)];
  const T rowDelta = dot(d.headDim, doi, out + row);
  delta[d.statIndex(b, h, i)] = rowDelta;
  for (std::int64_t c = 0; c < d.headDim; ++c)
    dqi[c] = 0;
  for (std::int64_t j = 0, n = d.numKeys(i); j < n; ++j) {
    const T *kj = k + d.kvRow(b, j, g);
    T p = math::exp(scale * dot(d.headDim, qi, kj) - rowLse);
    T dS = p * (dot(d.headDim, doi, v + d.kvRow(b, j, g)) - rowDelta);
    for (std::int64_t c = 0; c < d.headDim; ++c)
      dqi[c] += scale * dS * kj[c];
  }
}

/// dk and dv for key (b, j, kv head g): sums over every query head of the
/// group and every query that sees key j. Needs `delta` from the query pass.
template <typename T>
WEFT_HD inline void
attentionKeyRowBackward(const AttentionDims &d, const T *q, const T *k,
                        const T *v, const T *lse, const T *delta, const T *dOut,
                        std::int64_t b, std::int64_t j, std::int64_t g, T *dk,
                        T *dv) {
  const T scale = T(d.scale);
  const std::int64_t row = d.kvRow(b, j, g);
  const T *kj = k + row, *vj = v + row;
  T *dkj = dk + row, *dvj = dv + row;
  for (std::int64_t c = 0; c < d.headDim; ++c)
    dkj[c] = dvj[c] = 0;
  for (std::int64_t h = g * d.groupSize(); h < (g + 1) * d.groupSize(); ++h) {
    for (std::int64_t i = d.causal ? j : 0; i < d.seq; ++i) {
      const T *qi = q + d.qRow(b, i, h), *doi = dOut + d.qRow(b, i, h);
      const std::int64_t stat = d.statIndex(b, h, i);
      T p = math::exp(scale * dot(d.headDim, qi, kj) - lse[stat]);
      T dS = p * (dot(d.headDim, doi, vj) - delta[stat]);
      for (std::int64_t c = 0; c < d.headDim; ++c) {
        dvj[c] += p * doi[c];
        dkj[c] += scale * dS * qi[c];
      }
    }
  }
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_ATTENTION_H
