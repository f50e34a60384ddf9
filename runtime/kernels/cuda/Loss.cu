//===- Loss.cu - Fused softmax cross-entropy ------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Loss.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::kBlockSize;
using detail::launch;

namespace {

__global__ void rowLseKernel(int64_t rows, int64_t vocab, const float *logits,
                             float *lse) {
  int64_t r = globalIndex();
  if (r < rows)
    lse[r] = logSumExp(vocab, logits + r * vocab);
}

/// Single block: the mean loss and the number of non-ignored targets.
__global__ void meanLossKernel(int64_t rows, int64_t vocab, const float *logits,
                               const int32_t *targets, const float *lse,
                               int *validCount, float *loss) {
  float sum = 0;
  int count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += kBlockSize) {
    if (targets[r] == kIgnoreIndex)
      continue;
    sum += lse[r] - logits[r * vocab + targets[r]];
    ++count;
  }
  float totalLoss = detail::blockSum(sum);
  int totalCount = detail::blockSum(count);
  if (threadIdx.x == 0) {
    *validCount = totalCount;
    *loss = totalCount ? totalLoss / float(totalCount) : 0.0f;
  }
}

__global__ void crossEntropyGradKernel(int64_t rows, int64_t vocab,
                                       const float *logits,
                                       const int32_t *targets, const float *lse,
                                       const int *validCount, float *dLogits) {
  int64_t i = globalIndex();
  if (i >= rows * vocab)
    return;
  int64_t r = i / vocab, c = i % vocab;
  int32_t target = targets[r];
  // validCount > 0 whenever a row is valid.
  dLogits[i] = target == kIgnoreIndex
                   ? 0.0f
                   : crossEntropyLogitGrad(logits[i], lse[r], c == target,
                                           1.0f / float(*validCount));
}

} // namespace

cudaError_t crossEntropyForwardBackward(int64_t rows, int64_t vocab,
                                        const float *logits,
                                        const int32_t *targets, float *lse,
                                        int *validCount, float *loss,
                                        float *dLogits, cudaStream_t stream) {
  cudaError_t err =
      launch(rows, stream, rowLseKernel, rows, vocab, logits, lse);
  if (err != cudaSuccess)
    return err;
  meanLossKernel<<<1, kBlockSize, 0, stream>>>(rows, vocab, logits, targets,
                                               lse, validCount, loss);
  if ((err = cudaGetLastError()) != cudaSuccess || !dLogits)
    return err;
  return launch(rows * vocab, stream, crossEntropyGradKernel, rows, vocab,
                logits, targets, lse, validCount, dLogits);
}

} // namespace weft::kernels::gpu
