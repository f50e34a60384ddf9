//===- CpuKernels.h - Kernels of the CPU backend ----------------*- C++ -*-===//
//
// Plain functions over raw row-major buffers, instantiated for float and
// double. They loop over the single-source row/element functions of the
// topic headers (the CUDA backend launches the same functions per thread).
//
// Conventions:
//  * Activation gradients (dx, dq, dLogits, ...) are overwritten; parameter
//    gradients (dGamma, dBeta, dBias, embedding tables) are accumulated (+=)
//    so micro-batches add up; the caller zeroes them once per step.
//  * Outputs may alias inputs only where stated.
//  * Weights are stored [in, out], so a linear layer is y = x @ W (+ b):
//    gemm(false, false, tokens, out, in, 1, x, in, W, out, 0, y, out).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CPUKERNELS_H
#define WEFT_KERNELS_CPUKERNELS_H

#include "weft/kernels/Activations.h"
#include "weft/kernels/Attention.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/Optimizer.h"

#include <cstdint>

namespace weft::kernels::cpu {

using std::int64_t;

/// C = alpha * op(A) * op(B) + beta * C with row-major A (M x K after op),
/// B (K x N after op) and C (M x N), through OpenBLAS.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc);
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          double alpha, const double *a, int64_t lda, const double *b,
          int64_t ldb, double beta, double *c, int64_t ldc);

//===--- Element-wise ----------------------------------------------------===//

/// y[r, c] += bias[c] for a [rows, width] tensor.
template <typename T>
void biasAdd(int64_t rows, int64_t width, const T *bias, T *y);
/// dBias[c] += sum_r dy[r, c].
template <typename T>
void biasGrad(int64_t rows, int64_t width, const T *dy, T *dBias);
/// out = a + b (out may alias a or b). Its backward is the identity.
template <typename T>
void residualAdd(int64_t n, const T *a, const T *b, T *out);

/// y = act(x); y may alias x.
template <typename T>
void activationForward(Activation act, int64_t n, const T *x, T *y);
/// dx = dy * act'(x); dx may alias dy.
template <typename T>
void activationBackward(Activation act, int64_t n, const T *x, const T *dy,
                        T *dx);
/// out = act(gate) * up (SwiGLU with Activation::SiLU).
template <typename T>
void gatedForward(Activation act, int64_t n, const T *gate, const T *up,
                  T *out);
template <typename T>
void gatedBackward(Activation act, int64_t n, const T *gate, const T *up,
                   const T *dOut, T *dGate, T *dUp);

//===--- Normalization (rows x width, statistics saved per row) ----------===//

/// beta may be null (no bias). Saves mean[rows] and rstd[rows].
template <typename T>
void layerNormForward(int64_t rows, int64_t width, const T *x, const T *gamma,
                      const T *beta, T eps, T *y, T *mean, T *rstd);
/// dBeta may be null.
template <typename T>
void layerNormBackward(int64_t rows, int64_t width, const T *x, const T *gamma,
                       const T *mean, const T *rstd, const T *dy, T *dx,
                       T *dGamma, T *dBeta);
/// layerNormBackward's parameter gradients, and instead of dx the residual
/// add of it, sum = round(dx) + addend (dx not stored; `round`, nullable,
/// gives dx as its storage would hold it). sum may be dy here, and addend
/// too, but the CUDA two-pass path writes dx into sum before it reads the
/// addend, so plans may not (the registry's in-place pairs).
template <typename T>
void layerNormBackwardAdd(int64_t rows, int64_t width, const T *x,
                          const T *gamma, const T *mean, const T *rstd,
                          const T *dy, const T *addend, T *sum, T *dGamma,
                          T *dBeta, T (*round)(T));
template <typename T>
void rmsNormForward(int64_t rows, int64_t width, const T *x, const T *gamma,
                    T eps, T *y, T *rstd);
template <typename T>
void rmsNormBackward(int64_t rows, int64_t width, const T *x, const T *gamma,
                     const T *rstd, const T *dy, T *dx, T *dGamma);
/// rmsNormBackward with the residual add of dx (as layerNormBackwardAdd).
template <typename T>
void rmsNormBackwardAdd(int64_t rows, int64_t width, const T *x, const T *gamma,
                        const T *rstd, const T *dy, const T *addend, T *sum,
                        T *dGamma, T (*round)(T));

//===--- Embedding ([batch, seq] ids -> [batch, seq, hidden]) ------------===//

/// out = wte[id] + wpe[pos] + tokenType[0] with pos = (t % seq) +
/// positionOffset; wpe and tokenType may be null. Ids must be in range.
template <typename T>
void embeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                      const std::int32_t *ids, const T *wte, const T *wpe,
                      const T *tokenType, int64_t positionOffset, T *out);
/// Scatter-adds dOut into dWte, dWpe and dTokenType (the latter two may be
/// null).
template <typename T>
void embeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                       const std::int32_t *ids, const T *dOut,
                       int64_t positionOffset, T *dWte, T *dWpe, T *dTokenType);

/// Vocabulary-parallel token lookup: this shard holds rows [vocabStart,
/// vocabStart + shardRows) of the token table; tokens outside them yield zeros
/// (the shards' outputs sum to the full lookup).
template <typename T>
void vocabEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                           int64_t vocabStart, int64_t shardRows,
                           const std::int32_t *ids, const T *table, T *out);
/// Scatter-adds dOut into dTable for the tokens this shard owns.
template <typename T>
void vocabEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                            int64_t vocabStart, int64_t shardRows,
                            const std::int32_t *ids, const T *dOut, T *dTable);
/// out = x + wpe[pos], pos = (t % seq) + positionOffset; out may alias x.
template <typename T>
void positionEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                              int64_t positionOffset, const T *x, const T *wpe,
                              T *out);
/// dWpe[pos] += dOut[t] (the input gradient is dOut itself).
template <typename T>
void positionEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                               int64_t positionOffset, const T *dOut, T *dWpe);

//===--- Rotary embedding on [batch, seq, heads, headDim] ----------------===//

/// Position of token (b, s) is s + positionOffset. y may alias x.
template <typename T>
void rotaryForward(int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                   int64_t positionOffset, T theta, const T *x, T *y);
/// dx may alias dy.
template <typename T>
void rotaryBackward(int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                    int64_t positionOffset, T theta, const T *dy, T *dx);

//===--- Attention (layouts in Attention.h) ------------------------------===//

/// Writes out and lse ([batch, heads, seq] log-sum-exp of each score row).
template <typename T>
void attentionForward(const AttentionDims &dims, const T *q, const T *k,
                      const T *v, T *out, T *lse);
template <typename T>
void attentionBackward(const AttentionDims &dims, const T *q, const T *k,
                       const T *v, const T *out, const T *lse, const T *dOut,
                       T *dq, T *dk, T *dv);

//===--- Softmax cross-entropy over [rows, vocab] logits -----------------===//

/// Number of targets that are not kIgnoreIndex.
int64_t countValidTargets(int64_t rows, const std::int32_t *targets);

/// Mean loss over non-ignored targets (0 when there are none). When dLogits
/// is non-null it receives d(mean loss)/d(logits) (zero rows for ignored
/// targets); dLogits may alias logits. lse (nullable) receives each row's
/// log-sum-exp. Rows are `vocab` apart; with validColumns >= 0 only that many
/// columns are words, the rest padding (aligned rows for the LM head's
/// GEMMs): never read, zero gradient.
template <typename T>
T crossEntropyForwardBackward(int64_t rows, int64_t vocab, const T *logits,
                              const std::int32_t *targets, T *dLogits,
                              T *lse = nullptr, int64_t validColumns = -1);

/// Vocab-parallel phase 1: localMax[r] = max of this shard's logits
/// ([rows, vocabLocal]). Combine with an all-reduce MAX.
///
/// In all three phases only the first `validColumns` columns of each row are
/// real words (-1: all); the rest pad the vocabulary to a multiple of the
/// shard count and count as -inf: they add nothing to the sums and get a zero
/// gradient.
template <typename T>
void crossEntropyShardMax(int64_t rows, int64_t vocabLocal, const T *logits,
                          T *localMax, int64_t validColumns = -1);
/// Phase 2: sum of exp(logit - globalMax) over the shard and the target logit
/// if the shard owns it (else 0). Combine both with an all-reduce SUM.
template <typename T>
void crossEntropyShardSums(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                           const T *logits, const std::int32_t *targets,
                           const T *globalMax, T *sumExp, T *targetLogit,
                           int64_t validColumns = -1);
/// Phase 3: the mean loss (identical on every shard) and, when dLogits is
/// non-null, this shard's gradient.
template <typename T>
T crossEntropyShardFinish(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                          const T *logits, const std::int32_t *targets,
                          const T *globalMax, const T *globalSumExp,
                          const T *globalTargetLogit, T *dLogits,
                          int64_t validColumns = -1);

//===--- Optimizer -------------------------------------------------------===//

/// One AdamW step over n master weights (see Optimizer.h).
template <typename T>
void adamwStep(const AdamWStep &step, int64_t n, const T *grad, T *param, T *m,
               T *v);
/// sum x[i]^2 accumulated in double: this rank's part of the squared global
/// gradient norm.
template <typename T> double sumOfSquares(int64_t n, const T *x);
/// True if any element is inf or NaN (loss-scale overflow).
template <typename T> bool hasNonFinite(int64_t n, const T *x);

//===--- bf16 and f16 storage --------------------------------------------===//

void toBf16(int64_t n, const float *x, BF16 *y);
void fromBf16(int64_t n, const BF16 *x, float *y);
void toF16(int64_t n, const float *x, F16 *y);
void fromF16(int64_t n, const F16 *x, float *y);

} // namespace weft::kernels::cpu

#endif // WEFT_KERNELS_CPUKERNELS_H
