//===- CudaKernels.h - Launch wrappers of the CUDA backend ------*- C++ -*-===//
//
// fp32 kernels over device buffers with the layouts and semantics of the CPU
// kernels of the same name (CpuKernels.h); they run the same WEFT_HD row and
// element functions, one GPU thread per element or row, or for the norms, the
// bias gradient and the cross-entropy rows their per-element math with a row
// or column split over a warp or block (docs/kernels.md). Every wrapper is
// asynchronous on `stream` and returns the launch status (cudaGetLastError),
// so configuration errors surface at the call; execution errors surface at
// the next synchronization as usual. Empty inputs launch nothing.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDAKERNELS_H
#define WEFT_KERNELS_CUDAKERNELS_H

#include "weft/kernels/Activations.h"
#include "weft/kernels/Attention.h"
#include "weft/kernels/Optimizer.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace weft::kernels::gpu {

using std::int64_t;

cudaError_t biasAdd(int64_t rows, int64_t width, const float *bias, float *y,
                    cudaStream_t stream);
cudaError_t biasGrad(int64_t rows, int64_t width, const float *dy, float *dBias,
                     cudaStream_t stream);
cudaError_t residualAdd(int64_t n, const float *a, const float *b, float *out,
                        cudaStream_t stream);
cudaError_t activationForward(Activation act, int64_t n, const float *x,
                              float *y, cudaStream_t stream);
cudaError_t activationBackward(Activation act, int64_t n, const float *x,
                               const float *dy, float *dx, cudaStream_t stream);
cudaError_t gatedForward(Activation act, int64_t n, const float *gate,
                         const float *up, float *out, cudaStream_t stream);
cudaError_t gatedBackward(Activation act, int64_t n, const float *gate,
                          const float *up, const float *dOut, float *dGate,
                          float *dUp, cudaStream_t stream);

cudaError_t layerNormForward(int64_t rows, int64_t width, const float *x,
                             const float *gamma, const float *beta, float eps,
                             float *y, float *mean, float *rstd,
                             cudaStream_t stream);
/// With `scratch` (normBackwardScratchFloats floats) one pass over x and dy
/// writes dx and per-group partial sums, which a column sum adds into dGamma
/// and dBeta; without, the parameter gradients' column sums, then dx (two
/// passes). The same results up to the parameter gradients' summation order.
cudaError_t layerNormBackward(int64_t rows, int64_t width, const float *x,
                              const float *gamma, const float *mean,
                              const float *rstd, const float *dy, float *dx,
                              float *dGamma, float *dBeta, cudaStream_t stream,
                              float *scratch = nullptr);
cudaError_t rmsNormForward(int64_t rows, int64_t width, const float *x,
                           const float *gamma, float eps, float *y, float *rstd,
                           cudaStream_t stream);
cudaError_t rmsNormBackward(int64_t rows, int64_t width, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dx, float *dGamma,
                            cudaStream_t stream, float *scratch = nullptr);
/// The scratch floats of the one-pass norm backward (0: rows this wide run
/// the two-pass kernels).
int64_t normBackwardScratchFloats(int64_t rows, int64_t width);
/// The fused norms (residual_layer_norm_forward and the others, the plan's
/// weft-fuse-residual-norms): a residual add, sum = a + b (sum may alias a
/// or b), and the norm over it in one pass: residualAdd then the norm on
/// `sum`, bit for bit.
cudaError_t residualLayerNormForward(int64_t rows, int64_t width,
                                     const float *a, const float *b, float *sum,
                                     const float *gamma, const float *beta,
                                     float eps, float *y, float *mean,
                                     float *rstd, cudaStream_t stream);
cudaError_t residualRmsNormForward(int64_t rows, int64_t width, const float *a,
                                   const float *b, float *sum,
                                   const float *gamma, float eps, float *y,
                                   float *rstd, cudaStream_t stream);
/// A norm's backward and the residual add of its input gradient, sum = dx +
/// addend, without storing dx: the backward then residualAdd, bit for bit.
/// One pass with `scratch` (normBackwardScratchFloats) where rows fit it;
/// otherwise the two-pass backward writes dx into `sum` and an add follows
/// (sum must not alias addend).
cudaError_t layerNormBackwardAdd(int64_t rows, int64_t width, const float *x,
                                 const float *gamma, const float *mean,
                                 const float *rstd, const float *dy,
                                 const float *addend, float *sum, float *dGamma,
                                 float *dBeta, cudaStream_t stream,
                                 float *scratch);
cudaError_t rmsNormBackwardAdd(int64_t rows, int64_t width, const float *x,
                               const float *gamma, const float *rstd,
                               const float *dy, const float *addend, float *sum,
                               float *dGamma, cudaStream_t stream,
                               float *scratch);

cudaError_t embeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                             const std::int32_t *ids, const float *wte,
                             const float *wpe, const float *tokenType,
                             int64_t positionOffset, float *out,
                             cudaStream_t stream);
cudaError_t embeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                              const std::int32_t *ids, const float *dOut,
                              int64_t positionOffset, float *dWte, float *dWpe,
                              float *dTokenType, cudaStream_t stream);
/// Vocabulary-parallel lookup: this shard holds table rows [vocabStart,
/// vocabStart + shardRows); tokens it does not own give zero rows.
cudaError_t vocabEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                                  int64_t vocabStart, int64_t shardRows,
                                  const std::int32_t *ids, const float *table,
                                  float *out, cudaStream_t stream);
/// dTable += the rows of the tokens this shard owns (atomic scatter-add).
cudaError_t vocabEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                                   int64_t vocabStart, int64_t shardRows,
                                   const std::int32_t *ids, const float *dOut,
                                   float *dTable, cudaStream_t stream);
/// out = x + wpe[t % seq + positionOffset] per token (out may alias x).
cudaError_t positionEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                                     int64_t positionOffset, const float *x,
                                     const float *wpe, float *out,
                                     cudaStream_t stream);
/// dWpe[t % seq + positionOffset] += dOut per token (atomic).
cudaError_t positionEmbeddingBackward(int64_t batch, int64_t seq,
                                      int64_t hidden, int64_t positionOffset,
                                      const float *dOut, float *dWpe,
                                      cudaStream_t stream);
cudaError_t rotaryForward(int64_t batch, int64_t seq, int64_t heads,
                          int64_t headDim, int64_t positionOffset, float theta,
                          const float *x, float *y, cudaStream_t stream);
cudaError_t rotaryBackward(int64_t batch, int64_t seq, int64_t heads,
                           int64_t headDim, int64_t positionOffset, float theta,
                           const float *dy, float *dx, cudaStream_t stream);

cudaError_t attentionForward(const AttentionDims &dims, const float *q,
                             const float *k, const float *v, float *out,
                             float *lse, cudaStream_t stream);
/// `delta` is a [batch, heads, seq] workspace.
cudaError_t attentionBackward(const AttentionDims &dims, const float *q,
                              const float *k, const float *v, const float *out,
                              const float *lse, const float *dOut, float *dq,
                              float *dk, float *dv, float *delta,
                              cudaStream_t stream);

/// The 16-bit storage types of the tensor-core kernels.
enum class HalfType { BF16, F16 };

/// Whether the tensor-core attention kernels take these dims (head dim 16,
/// 32, 64 or 128).
bool halfAttentionSupported(const AttentionDims &dims);
/// Attention on 16-bit storage (`type`) with tensor cores: q, k, v, out,
/// dOut, dq, dk and dv are `type`, lse and delta fp32; otherwise as
/// attentionForward/Backward (P and dS are rounded to `type` before their
/// products, so results are close to, not equal to, the fp32 kernels').
cudaError_t halfAttentionForward(HalfType type, const AttentionDims &dims,
                                 const void *q, const void *k, const void *v,
                                 void *out, float *lse, cudaStream_t stream);
cudaError_t halfAttentionBackward(HalfType type, const AttentionDims &dims,
                                  const void *q, const void *k, const void *v,
                                  const void *out, const float *lse,
                                  const void *dOut, void *dq, void *dk,
                                  void *dv, float *delta, cudaStream_t stream);

/// The element-wise kernels on 16-bit storage (`type` for every operand):
/// widen, the fp32 kernel's math, round as the backend's narrowing does, so
/// the results equal the widening path's bit for bit without its fp32
/// scratch and its two extra passes. `y`/`sum` may alias an input.
cudaError_t halfBiasAdd(HalfType type, int64_t rows, int64_t width,
                        const void *x, const void *bias, void *y,
                        cudaStream_t stream);
cudaError_t halfResidualAdd(HalfType type, int64_t n, const void *a,
                            const void *b, void *sum, cudaStream_t stream);
cudaError_t halfActivationForward(HalfType type, Activation act, int64_t n,
                                  const void *x, void *y, cudaStream_t stream);
cudaError_t halfActivationBackward(HalfType type, Activation act, int64_t n,
                                   const void *x, const void *dy, void *dx,
                                   cudaStream_t stream);
cudaError_t halfGatedForward(HalfType type, Activation act, int64_t n,
                             const void *gate, const void *up, void *result,
                             cudaStream_t stream);
cudaError_t halfGatedBackward(HalfType type, Activation act, int64_t n,
                              const void *gate, const void *up,
                              const void *dOut, void *dGate, void *dUp,
                              cudaStream_t stream);

/// The embedding lookup on 16-bit tables and output (`wpe` nullable), as
/// embeddingForward without token types or a position offset.
cudaError_t halfEmbeddingForward(HalfType type, int64_t batch, int64_t seq,
                                 int64_t hidden, const std::int32_t *ids,
                                 const void *wte, const void *wpe, void *result,
                                 cudaStream_t stream);

/// The tensor-parallel lookups on 16-bit storage, one thread per element:
/// vocabEmbeddingForward (zeros for tokens outside the shard's rows) and
/// positionEmbeddingForward (out may alias x).
cudaError_t halfVocabEmbeddingForward(HalfType type, int64_t batch, int64_t seq,
                                      int64_t hidden, int64_t vocabStart,
                                      int64_t shardRows,
                                      const std::int32_t *ids,
                                      const void *table, void *result,
                                      cudaStream_t stream);
cudaError_t halfPositionEmbeddingForward(HalfType type, int64_t batch,
                                         int64_t seq, int64_t hidden,
                                         const void *x, const void *wpe,
                                         void *result, cudaStream_t stream);
/// Their backwards, deterministic as halfEmbeddingBackward (whose two halves
/// they are): the shard's rows from the tokens it owns (`scratch`:
/// embeddingBackwardScratchInts(shardRows, batch * seq) ints), and the
/// position rows summed over the batch in order.
cudaError_t halfVocabEmbeddingBackward(
    HalfType type, int64_t batch, int64_t seq, int64_t hidden,
    int64_t vocabStart, int64_t shardRows, const std::int32_t *ids,
    const void *dOut, void *dTable, std::int32_t *scratch, cudaStream_t stream);
cudaError_t halfPositionEmbeddingBackward(HalfType type, int64_t batch,
                                          int64_t seq, int64_t hidden,
                                          const void *dOut, void *dWpe,
                                          cudaStream_t stream);

/// Device ints of scratch halfEmbeddingBackward needs.
std::int64_t embeddingBackwardScratchInts(std::int64_t vocab,
                                          std::int64_t tokens);
/// embeddingBackward on 16-bit dOut and tables (`dWpe` nullable), without
/// atomics: each table row adds its tokens in token order, as the CPU kernel
/// does, so the result is the CPU backend's bit for bit (EmbeddingKernels.cuh).
/// Ids outside [0, vocab) add nothing. `scratch`:
/// embeddingBackwardScratchInts ints.
cudaError_t halfEmbeddingBackward(HalfType type, int64_t batch, int64_t seq,
                                  int64_t hidden, int64_t vocab,
                                  const std::int32_t *ids, const void *dOut,
                                  void *dWte, void *dWpe, std::int32_t *scratch,
                                  cudaStream_t stream);

/// rotaryForward (or, with `inverse`, rotaryBackward) on 16-bit storage,
/// one thread per rotated pair; y may alias x.
cudaError_t halfRotary(HalfType type, int64_t batch, int64_t seq, int64_t heads,
                       int64_t headDim, int64_t positionOffset, float theta,
                       bool inverse, const void *x, void *y,
                       cudaStream_t stream);

/// The norms and the bias gradient on 16-bit storage (`type` for x, gamma,
/// beta, y, dy, dx and the parameter gradients; mean and rstd fp32): the fp32
/// kernels' grid and arithmetic on widened values, rounded once per output,
/// so the results equal the widening path's bit for bit. Parameter gradients
/// accumulate (g = round(g + sum)).
cudaError_t halfLayerNormForward(HalfType type, int64_t rows, int64_t width,
                                 const void *x, const void *gamma,
                                 const void *beta, float eps, void *y,
                                 float *mean, float *rstd, cudaStream_t stream);
cudaError_t halfLayerNormBackward(HalfType type, int64_t rows, int64_t width,
                                  const void *x, const void *gamma,
                                  const float *mean, const float *rstd,
                                  const void *dy, void *dx, void *dGamma,
                                  void *dBeta, cudaStream_t stream,
                                  float *scratch = nullptr);
/// The fused norms on 16-bit storage (as their fp32 forms above).
cudaError_t halfResidualLayerNormForward(HalfType type, int64_t rows,
                                         int64_t width, const void *a,
                                         const void *b, void *sum,
                                         const void *gamma, const void *beta,
                                         float eps, void *y, float *mean,
                                         float *rstd, cudaStream_t stream);
cudaError_t halfResidualRmsNormForward(HalfType type, int64_t rows,
                                       int64_t width, const void *a,
                                       const void *b, void *sum,
                                       const void *gamma, float eps, void *y,
                                       float *rstd, cudaStream_t stream);
cudaError_t halfRmsNormForward(HalfType type, int64_t rows, int64_t width,
                               const void *x, const void *gamma, float eps,
                               void *y, float *rstd, cudaStream_t stream);
cudaError_t halfRmsNormBackward(HalfType type, int64_t rows, int64_t width,
                                const void *x, const void *gamma,
                                const float *rstd, const void *dy, void *dx,
                                void *dGamma, cudaStream_t stream,
                                float *scratch = nullptr);
cudaError_t halfLayerNormBackwardAdd(HalfType type, int64_t rows, int64_t width,
                                     const void *x, const void *gamma,
                                     const float *mean, const float *rstd,
                                     const void *dy, const void *addend,
                                     void *sum, void *dGamma, void *dBeta,
                                     cudaStream_t stream, float *scratch);
cudaError_t halfRmsNormBackwardAdd(HalfType type, int64_t rows, int64_t width,
                                   const void *x, const void *gamma,
                                   const float *rstd, const void *dy,
                                   const void *addend, void *sum, void *dGamma,
                                   cudaStream_t stream, float *scratch);
cudaError_t halfBiasGrad(HalfType type, int64_t rows, int64_t width,
                         const void *dy, void *dBias, cudaStream_t stream);

/// Softmax cross-entropy on 16-bit logits in one pass over each row after
/// counting the targets: term[rows] (scratch) receives each row's loss,
/// *validCount and *loss as crossEntropyForwardBackward, and dLogits
/// (nullable, may alias logits) the gradient times gradScale (the loss scale
/// over the micro-batch divisor), rounded once: the widening path's bits
/// (fp32 gradient, scaled, narrowed) without its fp32 copy of the logits.
/// validColumns as in crossEntropyForwardBackward.
cudaError_t halfCrossEntropy(HalfType type, int64_t rows, int64_t vocab,
                             const void *logits, const std::int32_t *targets,
                             float gradScale, float *term, int *validCount,
                             float *loss, void *dLogits, cudaStream_t stream,
                             int64_t validColumns = -1);
/// The vocabulary-parallel phases on a 16-bit logits shard (gradient times
/// gradScale, as halfCrossEntropy).
cudaError_t halfCrossEntropyShardMax(HalfType type, int64_t rows,
                                     int64_t vocabLocal, const void *logits,
                                     float *localMax, int64_t validColumns,
                                     cudaStream_t stream);
cudaError_t halfCrossEntropyShardSums(HalfType type, int64_t rows,
                                      int64_t vocabLocal, int64_t vocabStart,
                                      const void *logits,
                                      const std::int32_t *targets,
                                      const float *globalMax, float *sumExp,
                                      float *targetLogit, int64_t validColumns,
                                      cudaStream_t stream);
cudaError_t halfCrossEntropyShardFinish(
    HalfType type, int64_t rows, int64_t vocabLocal, int64_t vocabStart,
    const void *logits, const std::int32_t *targets, const float *globalMax,
    const float *globalSumExp, const float *globalTargetLogit, float gradScale,
    float *lse, int *validCount, float *loss, void *dLogits,
    int64_t validColumns, cudaStream_t stream);

/// Fused softmax cross-entropy: lse[rows] receives each row's log-sum-exp,
/// *validCount the number of non-ignored targets, *loss their mean loss, and
/// dLogits (nullable, may alias logits) d(mean loss)/d(logits). Rows are
/// `vocab` apart; with validColumns >= 0 only that many columns are words
/// and the rest padding (never read; zero gradient), as in the
/// vocabulary-parallel phases.
cudaError_t crossEntropyForwardBackward(int64_t rows, int64_t vocab,
                                        const float *logits,
                                        const std::int32_t *targets, float *lse,
                                        int *validCount, float *loss,
                                        float *dLogits, cudaStream_t stream,
                                        int64_t validColumns = -1);

/// The vocabulary-parallel cross-entropy phases (weft/kernels/Loss.h) on a
/// [rows, vocabLocal] logits shard whose first `validColumns` columns are
/// real words starting at word vocabStart (the rest pad the vocabulary).
cudaError_t crossEntropyShardMax(int64_t rows, int64_t vocabLocal,
                                 const float *logits, float *localMax,
                                 int64_t validColumns, cudaStream_t stream);
cudaError_t crossEntropyShardSums(int64_t rows, int64_t vocabLocal,
                                  int64_t vocabStart, const float *logits,
                                  const std::int32_t *targets,
                                  const float *globalMax, float *sumExp,
                                  float *targetLogit, int64_t validColumns,
                                  cudaStream_t stream);
/// From the all-reduced max, sum of exponentials and target logit: lse[rows]
/// and *validCount as in crossEntropyForwardBackward, *loss the mean loss,
/// and dLogits (nullable) this shard's gradient (zero on padding columns).
cudaError_t
crossEntropyShardFinish(int64_t rows, int64_t vocabLocal, int64_t vocabStart,
                        const float *logits, const std::int32_t *targets,
                        const float *globalMax, const float *globalSumExp,
                        const float *globalTargetLogit, float *lse,
                        int *validCount, float *loss, float *dLogits,
                        int64_t validColumns, cudaStream_t stream);

cudaError_t adamwStep(const AdamWStep &step, int64_t n, const float *grad,
                      float *param, float *m, float *v, cudaStream_t stream);
/// *result = sum x[i]^2, accumulated in double.
cudaError_t sumOfSquares(int64_t n, const float *x, double *result,
                         cudaStream_t stream);
/// *flag = 1 if any element is inf or NaN, else 0.
cudaError_t hasNonFinite(int64_t n, const float *x, int *flag,
                         cudaStream_t stream);

} // namespace weft::kernels::gpu

#endif // WEFT_KERNELS_CUDAKERNELS_H
