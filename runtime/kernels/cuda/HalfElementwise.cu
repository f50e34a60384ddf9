//===- HalfElementwise.cu - Launches of the 16-bit element-wise kernels ---===//

#include "EmbeddingKernels.cuh"
#include "HalfElementwise.cuh"
#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {
using detail::halfStorage;
using detail::in;
using detail::out;

namespace {

/// Threads of a mapped kernel (half::kPerThread elements each).
int64_t threadsFor(int64_t n) {
  return (n + half::kPerThread - 1) / half::kPerThread;
}

} // namespace

cudaError_t halfBiasAdd(HalfType type, int64_t rows, int64_t width,
                        const void *x, const void *bias, void *y,
                        cudaStream_t stream) {
  return detail::launch(threadsFor(rows * width), stream, half::biasAdd,
                        halfStorage(type), rows * width, width, in(x), in(bias),
                        out(y));
}

cudaError_t halfResidualAdd(HalfType type, int64_t n, const void *a,
                            const void *b, void *sum, cudaStream_t stream) {
  return detail::launch(threadsFor(n), stream, half::residualAdd,
                        halfStorage(type), n, in(a), in(b), out(sum));
}

cudaError_t halfActivationForward(HalfType type, Activation act, int64_t n,
                                  const void *x, void *y, cudaStream_t stream) {
  return detail::launch(threadsFor(n), stream, half::activationForward,
                        halfStorage(type), act, n, in(x), out(y));
}

cudaError_t halfActivationBackward(HalfType type, Activation act, int64_t n,
                                   const void *x, const void *dy, void *dx,
                                   cudaStream_t stream) {
  return detail::launch(threadsFor(n), stream, half::activationBackward,
                        halfStorage(type), act, n, in(x), in(dy), out(dx));
}

cudaError_t halfGatedForward(HalfType type, Activation act, int64_t n,
                             const void *gate, const void *up, void *result,
                             cudaStream_t stream) {
  return detail::launch(threadsFor(n), stream, half::gatedForward,
                        halfStorage(type), act, n, in(gate), in(up),
                        out(result));
}

cudaError_t halfGatedBackward(HalfType type, Activation act, int64_t n,
                              const void *gate, const void *up,
                              const void *dOut, void *dGate, void *dUp,
                              cudaStream_t stream) {
  return detail::launch(threadsFor(n), stream, half::gatedBackward,
                        halfStorage(type), act, n, in(gate), in(up), in(dOut),
                        out(dGate), out(dUp));
}

cudaError_t halfEmbeddingForward(HalfType type, int64_t batch, int64_t seq,
                                 int64_t hidden, const std::int32_t *ids,
                                 const void *wte, const void *wpe, void *result,
                                 cudaStream_t stream) {
  int64_t n = batch * seq * hidden;
  return detail::launch(n, stream, half::embeddingForward, halfStorage(type), n,
                        seq, hidden, ids, in(wte), in(wpe), out(result));
}

int64_t embeddingBackwardScratchInts(int64_t vocab, int64_t tokens) {
  return embedding::scratchInts(vocab, tokens);
}

cudaError_t halfVocabEmbeddingForward(HalfType type, int64_t batch, int64_t seq,
                                      int64_t hidden, int64_t vocabStart,
                                      int64_t shardRows,
                                      const std::int32_t *ids,
                                      const void *table, void *result,
                                      cudaStream_t stream) {
  int64_t n = batch * seq * hidden;
  return detail::launch(n, stream, half::vocabEmbeddingForward,
                        halfStorage(type), n, hidden, vocabStart, shardRows,
                        ids, in(table), out(result));
}

cudaError_t halfPositionEmbeddingForward(HalfType type, int64_t batch,
                                         int64_t seq, int64_t hidden,
                                         const void *x, const void *wpe,
                                         void *result, cudaStream_t stream) {
  int64_t n = batch * seq * hidden;
  return detail::launch(n, stream, half::positionEmbeddingForward,
                        halfStorage(type), n, seq, hidden, in(x), in(wpe),
                        out(result));
}

cudaError_t halfPositionEmbeddingBackward(HalfType type, int64_t batch,
                                          int64_t seq, int64_t hidden,
                                          const void *dOut, void *dWpe,
                                          cudaStream_t stream) {
  return detail::launch(
      seq * hidden, stream, embedding::positionRows<storage::Half16>,
      halfStorage(type), batch, seq, hidden, in(dOut), out(dWpe));
}

cudaError_t halfVocabEmbeddingBackward(HalfType type, int64_t batch,
                                       int64_t seq, int64_t hidden,
                                       int64_t vocabStart, int64_t shardRows,
                                       const std::int32_t *ids,
                                       const void *dOut, void *dTable,
                                       std::int32_t *scratch,
                                       cudaStream_t stream) {
  int64_t tokens = batch * seq;
  if (tokens == 0)
    return cudaSuccess;
  embedding::Scratch layout = embedding::scratchLayout(scratch, tokens);
  if (cudaError_t rc = cudaMemsetAsync(
          layout.counts, 0, size_t(shardRows) * sizeof(std::int32_t), stream))
    return rc;
  embedding::sortChunks<<<unsigned(embedding::chunks(tokens)),
                          embedding::kChunk, 0, stream>>>(
      tokens, shardRows, vocabStart, ids, layout.sorted, layout.counts);
  if (cudaError_t rc = cudaGetLastError())
    return rc;
  embedding::tokenRows<<<embedding::tokenRowBlocks(shardRows, hidden),
                         detail::kBlockSize, 0, stream>>>(
      halfStorage(type), tokens, shardRows, hidden, layout.counts,
      layout.sorted, in(dOut), out(dTable));
  return cudaGetLastError();
}

cudaError_t halfEmbeddingBackward(HalfType type, int64_t batch, int64_t seq,
                                  int64_t hidden, int64_t vocab,
                                  const std::int32_t *ids, const void *dOut,
                                  void *dWte, void *dWpe, std::int32_t *scratch,
                                  cudaStream_t stream) {
  cudaError_t rc = halfVocabEmbeddingBackward(
      type, batch, seq, hidden, 0, vocab, ids, dOut, dWte, scratch, stream);
  if (rc != cudaSuccess || !dWpe)
    return rc;
  return halfPositionEmbeddingBackward(type, batch, seq, hidden, dOut, dWpe,
                                       stream);
}

cudaError_t halfRotary(HalfType type, int64_t batch, int64_t seq, int64_t heads,
                       int64_t headDim, int64_t positionOffset, float theta,
                       bool inverse, const void *x, void *y,
                       cudaStream_t stream) {
  int64_t pairs = batch * seq * heads * (headDim / 2);
  return detail::launch(pairs, stream, half::rotary, halfStorage(type), pairs,
                        seq, heads, headDim, positionOffset, theta, inverse,
                        in(x), out(y));
}

} // namespace weft::kernels::gpu
