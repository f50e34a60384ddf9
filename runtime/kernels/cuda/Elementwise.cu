//===- Elementwise.cu - Point-wise, bias, embedding and rotary kernels ----===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Embedding.h"
#include "weft/kernels/Rotary.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

namespace {

__global__ void biasAddKernel(int64_t n, int64_t width, const float *bias,
                              float *y) {
  int64_t i = globalIndex();
  if (i < n)
    y[i] += bias[i % width];
}

__global__ void residualAddKernel(int64_t n, const float *a, const float *b,
                                  float *out) {
  int64_t i = globalIndex();
  if (i < n)
    out[i] = a[i] + b[i];
}

__global__ void activationForwardKernel(Activation act, int64_t n,
                                        const float *x, float *y) {
  int64_t i = globalIndex();
  if (i < n)
    y[i] = activate(act, x[i]);
}

__global__ void activationBackwardKernel(Activation act, int64_t n,
                                         const float *x, const float *dy,
                                         float *dx) {
  int64_t i = globalIndex();
  if (i < n)
    dx[i] = dy[i] * activateDerivative(act, x[i]);
}

__global__ void gatedForwardKernel(Activation act, int64_t n, const float *gate,
                                   const float *up, float *out) {
  int64_t i = globalIndex();
  if (i < n)
    out[i] = gatedActivate(act, gate[i], up[i]);
}

__global__ void gatedBackwardKernel(Activation act, int64_t n,
                                    const float *gate, const float *up,
                                    const float *dOut, float *dGate,
                                    float *dUp) {
  int64_t i = globalIndex();
  if (i < n)
    gatedActivateBackward(act, gate[i], up[i], dOut[i], dGate[i], dUp[i]);
}

__global__ void embeddingForwardKernel(int64_t tokens, int64_t seq,
                                       int64_t hidden, const int32_t *ids,
                                       const float *wte, const float *wpe,
                                       const float *tokenType,
                                       int64_t positionOffset, float *out) {
  int64_t t = globalIndex();
  if (t >= tokens)
    return;
  const float *pos = wpe ? wpe + (t % seq + positionOffset) * hidden : nullptr;
  embeddingRowForward(hidden, wte + int64_t(ids[t]) * hidden, pos, tokenType,
                      out + t * hidden);
}

__global__ void embeddingBackwardKernel(int64_t tokens, int64_t seq,
                                        int64_t hidden, const int32_t *ids,
                                        const float *dOut,
                                        int64_t positionOffset, float *dWte,
                                        float *dWpe, float *dTokenType) {
  int64_t t = globalIndex();
  if (t >= tokens)
    return;
  float *dPos = dWpe ? dWpe + (t % seq + positionOffset) * hidden : nullptr;
  embeddingRowBackward(hidden, dOut + t * hidden,
                       dWte + int64_t(ids[t]) * hidden, dPos, dTokenType);
}

__global__ void vocabEmbeddingForwardKernel(int64_t tokens, int64_t hidden,
                                            int64_t vocabStart,
                                            int64_t shardRows,
                                            const int32_t *ids,
                                            const float *table, float *out) {
  int64_t t = globalIndex();
  if (t < tokens)
    vocabEmbeddingRowForward(hidden, vocabStart, shardRows, table, ids[t],
                             out + t * hidden);
}

__global__ void vocabEmbeddingBackwardKernel(int64_t tokens, int64_t hidden,
                                             int64_t vocabStart,
                                             int64_t shardRows,
                                             const int32_t *ids,
                                             const float *dOut, float *dTable) {
  int64_t t = globalIndex();
  if (t < tokens)
    vocabEmbeddingRowBackward(hidden, vocabStart, shardRows, ids[t],
                              dOut + t * hidden, dTable);
}

__global__ void positionEmbeddingForwardKernel(int64_t tokens, int64_t seq,
                                               int64_t hidden,
                                               int64_t positionOffset,
                                               const float *x, const float *wpe,
                                               float *out) {
  int64_t t = globalIndex();
  if (t < tokens)
    positionEmbeddingRowForward(hidden, x + t * hidden,
                                wpe + (t % seq + positionOffset) * hidden,
                                out + t * hidden);
}

/// One thread per (token, column): atomics on the shared position rows.
__global__ void positionEmbeddingBackwardKernel(int64_t n, int64_t seq,
                                                int64_t hidden,
                                                int64_t positionOffset,
                                                const float *dOut,
                                                float *dWpe) {
  int64_t i = globalIndex();
  if (i >= n)
    return;
  int64_t t = i / hidden, column = i % hidden;
  accumulate(&dWpe[(t % seq + positionOffset) * hidden + column], dOut[i]);
}

/// One thread per (token, head) row.
__global__ void rotaryKernel(int64_t rows, int64_t seq, int64_t heads,
                             int64_t headDim, int64_t positionOffset,
                             float theta, bool inverse, const float *x,
                             float *y) {
  int64_t row = globalIndex();
  if (row >= rows)
    return;
  int64_t pos = (row / heads) % seq + positionOffset;
  rotaryRow(headDim, pos, theta, inverse, x + row * headDim, y + row * headDim);
}

} // namespace

cudaError_t biasAdd(int64_t rows, int64_t width, const float *bias, float *y,
                    cudaStream_t stream) {
  return launch(rows * width, stream, biasAddKernel, rows * width, width, bias,
                y);
}

cudaError_t residualAdd(int64_t n, const float *a, const float *b, float *out,
                        cudaStream_t stream) {
  return launch(n, stream, residualAddKernel, n, a, b, out);
}

cudaError_t activationForward(Activation act, int64_t n, const float *x,
                              float *y, cudaStream_t stream) {
  return launch(n, stream, activationForwardKernel, act, n, x, y);
}

cudaError_t activationBackward(Activation act, int64_t n, const float *x,
                               const float *dy, float *dx,
                               cudaStream_t stream) {
  return launch(n, stream, activationBackwardKernel, act, n, x, dy, dx);
}

cudaError_t gatedForward(Activation act, int64_t n, const float *gate,
                         const float *up, float *out, cudaStream_t stream) {
  return launch(n, stream, gatedForwardKernel, act, n, gate, up, out);
}

cudaError_t gatedBackward(Activation act, int64_t n, const float *gate,
                          const float *up, const float *dOut, float *dGate,
                          float *dUp, cudaStream_t stream) {
  return launch(n, stream, gatedBackwardKernel, act, n, gate, up, dOut, dGate,
                dUp);
}

cudaError_t embeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                             const int32_t *ids, const float *wte,
                             const float *wpe, const float *tokenType,
                             int64_t positionOffset, float *out,
                             cudaStream_t stream) {
  return launch(batch * seq, stream, embeddingForwardKernel, batch * seq, seq,
                hidden, ids, wte, wpe, tokenType, positionOffset, out);
}

cudaError_t vocabEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                                  int64_t vocabStart, int64_t shardRows,
                                  const std::int32_t *ids, const float *table,
                                  float *out, cudaStream_t stream) {
  return launch(batch * seq, stream, vocabEmbeddingForwardKernel, batch * seq,
                hidden, vocabStart, shardRows, ids, table, out);
}

cudaError_t vocabEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                                   int64_t vocabStart, int64_t shardRows,
                                   const std::int32_t *ids, const float *dOut,
                                   float *dTable, cudaStream_t stream) {
  return launch(batch * seq, stream, vocabEmbeddingBackwardKernel, batch * seq,
                hidden, vocabStart, shardRows, ids, dOut, dTable);
}

cudaError_t positionEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                                     int64_t positionOffset, const float *x,
                                     const float *wpe, float *out,
                                     cudaStream_t stream) {
  return launch(batch * seq, stream, positionEmbeddingForwardKernel,
                batch * seq, seq, hidden, positionOffset, x, wpe, out);
}

cudaError_t positionEmbeddingBackward(int64_t batch, int64_t seq,
                                      int64_t hidden, int64_t positionOffset,
                                      const float *dOut, float *dWpe,
                                      cudaStream_t stream) {
  int64_t n = batch * seq * hidden;
  return launch(n, stream, positionEmbeddingBackwardKernel, n, seq, hidden,
                positionOffset, dOut, dWpe);
}

cudaError_t embeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                              const int32_t *ids, const float *dOut,
                              int64_t positionOffset, float *dWte, float *dWpe,
                              float *dTokenType, cudaStream_t stream) {
  return launch(batch * seq, stream, embeddingBackwardKernel, batch * seq, seq,
                hidden, ids, dOut, positionOffset, dWte, dWpe, dTokenType);
}

cudaError_t rotaryForward(int64_t batch, int64_t seq, int64_t heads,
                          int64_t headDim, int64_t positionOffset, float theta,
                          const float *x, float *y, cudaStream_t stream) {
  return launch(batch * seq * heads, stream, rotaryKernel, batch * seq * heads,
                seq, heads, headDim, positionOffset, theta, false, x, y);
}

cudaError_t rotaryBackward(int64_t batch, int64_t seq, int64_t heads,
                           int64_t headDim, int64_t positionOffset, float theta,
                           const float *dy, float *dx, cudaStream_t stream) {
  return launch(batch * seq * heads, stream, rotaryKernel, batch * seq * heads,
                seq, heads, headDim, positionOffset, theta, true, dy, dx);
}

} // namespace weft::kernels::gpu
