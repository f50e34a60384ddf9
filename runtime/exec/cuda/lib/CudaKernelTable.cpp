//===- CudaKernelTable.cpp - Kernel names -> CUDA launches ----------------===//
//
// The CUDA side of the kernel registry (runtime/exec/lib/KernelRegistry.cpp):
// the same names, constants, defaults and operand order. Signatures and
// constant checks come from the CPU registry itself (findKernel), so the two
// cannot drift; this table only says how to launch each entry on a stream.
// A CPU entry without a CUDA entry is a load-time error naming the kernel
// (cudaKernelMissing).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "weft/exec/Error.h"
#include "weft/exec/OperandChecks.h"
#include "weft/exec/cuda/CudaBackend.h"
#include "weft/exec/cuda/GeneratedKernels.h"
#include "weft/kernels/CudaKernels.h"

#include <algorithm>
#include <cmath>

namespace weft::exec::cuda {

namespace gpu = weft::kernels::gpu;
using kernels::Activation;

kernels::AttentionDims attentionDims(const KernelConstants &c) {
  kernels::AttentionDims dims;
  dims.batch = c.at("batch");
  dims.seq = c.at("seq");
  dims.heads = c.at("heads");
  dims.kvHeads = c.at("kv_heads");
  dims.headDim = c.at("head_dim");
  dims.causal = c.at("causal") != 0;
  dims.scale = 1.0 / std::sqrt(double(dims.headDim));
  return dims;
}

namespace {

int64_t none(const KernelConstants &) { return 0; }

/// The epsilon constant of a CudaKernelCall or CudaHalfCall.
template <typename Call> float eps(const Call &k) {
  return float(k.c("eps_nano") * 1e-9);
}
/// The activation constant of a CudaKernelCall or CudaHalfCall.
template <typename Call> Activation act(const Call &k) {
  return Activation(k.c("act"));
}

cudaError_t copyIfDistinct(float *dst, const float *src, int64_t n,
                           cudaStream_t stream) {
  if (dst == src || n == 0)
    return cudaSuccess;
  return cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float),
                         cudaMemcpyDeviceToDevice, stream);
}

//===--- Element-wise ----------------------------------------------------===//

cudaError_t biasAddRun(const CudaKernelCall &k) {
  int64_t rows = k.c("rows"), width = k.c("width");
  if (cudaError_t rc =
          copyIfDistinct(k.writes[0], k.reads[0], rows * width, k.stream))
    return rc;
  return gpu::biasAdd(rows, width, k.reads[1], k.writes[0], k.stream);
}
cudaError_t biasGradRun(const CudaKernelCall &k) {
  return gpu::biasGrad(k.c("rows"), k.c("width"), k.reads[0], k.writes[0],
                       k.stream);
}
cudaError_t residualAddRun(const CudaKernelCall &k) {
  return gpu::residualAdd(k.c("n"), k.reads[0], k.reads[1], k.writes[0],
                          k.stream);
}
cudaError_t activationForwardRun(const CudaKernelCall &k) {
  return gpu::activationForward(act(k), k.c("n"), k.reads[0], k.writes[0],
                                k.stream);
}
cudaError_t activationBackwardRun(const CudaKernelCall &k) {
  return gpu::activationBackward(act(k), k.c("n"), k.reads[0], k.reads[1],
                                 k.writes[0], k.stream);
}
cudaError_t gatedForwardRun(const CudaKernelCall &k) {
  return gpu::gatedForward(act(k), k.c("n"), k.reads[0], k.reads[1],
                           k.writes[0], k.stream);
}
cudaError_t gatedBackwardRun(const CudaKernelCall &k) {
  return gpu::gatedBackward(act(k), k.c("n"), k.reads[0], k.reads[1],
                            k.reads[2], k.writes[0], k.writes[1], k.stream);
}

// The same kernels on 16-bit storage (bit-identical to widening).
bool always(const KernelConstants &) { return true; }
cudaError_t biasAddHalf(const CudaHalfCall &k) {
  return gpu::halfBiasAdd(k.type, k.c("rows"), k.c("width"), k.reads[0],
                          k.reads[1], k.writes[0], k.stream);
}
cudaError_t biasGradHalf(const CudaHalfCall &k) {
  return gpu::halfBiasGrad(k.type, k.c("rows"), k.c("width"), k.reads[0],
                           k.writes[0], k.stream);
}
cudaError_t residualAddHalf(const CudaHalfCall &k) {
  return gpu::halfResidualAdd(k.type, k.c("n"), k.reads[0], k.reads[1],
                              k.writes[0], k.stream);
}
cudaError_t activationForwardHalf(const CudaHalfCall &k) {
  return gpu::halfActivationForward(k.type, act(k), k.c("n"), k.reads[0],
                                    k.writes[0], k.stream);
}
cudaError_t activationBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfActivationBackward(k.type, act(k), k.c("n"), k.reads[0],
                                     k.reads[1], k.writes[0], k.stream);
}
cudaError_t gatedForwardHalf(const CudaHalfCall &k) {
  return gpu::halfGatedForward(k.type, act(k), k.c("n"), k.reads[0], k.reads[1],
                               k.writes[0], k.stream);
}
cudaError_t gatedBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfGatedBackward(k.type, act(k), k.c("n"), k.reads[0],
                                k.reads[1], k.reads[2], k.writes[0],
                                k.writes[1], k.stream);
}

//===--- Normalization ---------------------------------------------------===//

cudaError_t layerNormForwardRun(const CudaKernelCall &k) {
  const float *beta = k.c("bias") ? k.reads[2] : nullptr;
  return gpu::layerNormForward(k.c("rows"), k.c("width"), k.reads[0],
                               k.reads[1], beta, eps(k), k.writes[0],
                               k.writes[1], k.writes[2], k.stream);
}
cudaError_t layerNormBackwardRun(const CudaKernelCall &k) {
  float *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  return gpu::layerNormBackward(k.c("rows"), k.c("width"), k.reads[0],
                                k.reads[1], k.reads[2], k.reads[3], k.reads[4],
                                k.writes[0], k.writes[1], dBeta, k.stream);
}
cudaError_t rmsNormForwardRun(const CudaKernelCall &k) {
  return gpu::rmsNormForward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                             eps(k), k.writes[0], k.writes[1], k.stream);
}
cudaError_t rmsNormBackwardRun(const CudaKernelCall &k) {
  return gpu::rmsNormBackward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                              k.reads[2], k.reads[3], k.writes[0], k.writes[1],
                              k.stream);
}

// 16-bit x, gamma, beta, y, dy, dx and parameter gradients; fp32 statistics.
float *f32(void *p) { return static_cast<float *>(p); }
cudaError_t layerNormForwardHalf(const CudaHalfCall &k) {
  const void *beta = k.c("bias") ? k.reads[2] : nullptr;
  return gpu::halfLayerNormForward(
      k.type, k.c("rows"), k.c("width"), k.reads[0], k.reads[1], beta, eps(k),
      k.writes[0], f32(k.writes[1]), f32(k.writes[2]), k.stream);
}
/// The 16-bit norm backwards run in one pass (the fp32 ones keep the two
/// passes checked on a GPU until this one is).
int64_t normBackwardScratch(const KernelConstants &c) {
  return gpu::normBackwardScratchFloats(c.at("rows"), c.at("width"));
}
cudaError_t layerNormBackwardHalf(const CudaHalfCall &k) {
  void *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  return gpu::halfLayerNormBackward(k.type, k.c("rows"), k.c("width"),
                                    k.reads[0], k.reads[1], f32(k.reads[2]),
                                    f32(k.reads[3]), k.reads[4], k.writes[0],
                                    k.writes[1], dBeta, k.stream, k.scratch);
}
cudaError_t rmsNormForwardHalf(const CudaHalfCall &k) {
  return gpu::halfRmsNormForward(k.type, k.c("rows"), k.c("width"), k.reads[0],
                                 k.reads[1], eps(k), k.writes[0],
                                 f32(k.writes[1]), k.stream);
}
cudaError_t rmsNormBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfRmsNormBackward(k.type, k.c("rows"), k.c("width"), k.reads[0],
                                  k.reads[1], f32(k.reads[2]), k.reads[3],
                                  k.writes[0], k.writes[1], k.stream,
                                  k.scratch);
}

// The fused norms (weft-fuse-residual-norms). The fp32 backward keeps the
// two passes (then an add), as the plain one does. Where the sum is a
// 16-bit operand the fp32 path widened, the CPU backend's KernelCall rounds
// what the fused kernel keeps in registers (the forward's sum before the
// norm, the backward's dx before the add): here the add, a rounding, then
// the plain kernel.
bool roundsTheSum(const CudaKernelCall &k) {
  return k.writeStorage.size() > 0 && k.writeStorage[0] != FloatStorage::F32;
}
/// sum = a + b, rounded as stored: the norm's x.
cudaError_t roundedResidualSum(const CudaKernelCall &k) {
  int64_t n = k.c("rows") * k.c("width");
  cudaError_t rc =
      gpu::residualAdd(n, k.reads[0], k.reads[1], k.writes[0], k.stream);
  return rc ? rc : roundToStorage(n, k.writes[0], k.writeStorage[0], k.stream);
}
/// sum = round(sum) + addend, sum holding dx.
cudaError_t addToRoundedGradient(const CudaKernelCall &k, const float *addend) {
  int64_t n = k.c("rows") * k.c("width");
  cudaError_t rc = roundToStorage(n, k.writes[0], k.writeStorage[0], k.stream);
  return rc ? rc
            : gpu::residualAdd(n, k.writes[0], addend, k.writes[0], k.stream);
}
cudaError_t residualLayerNormForwardRun(const CudaKernelCall &k) {
  const float *beta = k.c("bias") ? k.reads[3] : nullptr;
  if (roundsTheSum(k)) {
    cudaError_t rc = roundedResidualSum(k);
    return rc ? rc
              : gpu::layerNormForward(k.c("rows"), k.c("width"), k.writes[0],
                                      k.reads[2], beta, eps(k), k.writes[1],
                                      k.writes[2], k.writes[3], k.stream);
  }
  return gpu::residualLayerNormForward(k.c("rows"), k.c("width"), k.reads[0],
                                       k.reads[1], k.writes[0], k.reads[2],
                                       beta, eps(k), k.writes[1], k.writes[2],
                                       k.writes[3], k.stream);
}
cudaError_t residualRmsNormForwardRun(const CudaKernelCall &k) {
  if (roundsTheSum(k)) {
    cudaError_t rc = roundedResidualSum(k);
    return rc ? rc
              : gpu::rmsNormForward(k.c("rows"), k.c("width"), k.writes[0],
                                    k.reads[2], eps(k), k.writes[1],
                                    k.writes[2], k.stream);
  }
  return gpu::residualRmsNormForward(
      k.c("rows"), k.c("width"), k.reads[0], k.reads[1], k.writes[0],
      k.reads[2], eps(k), k.writes[1], k.writes[2], k.stream);
}
cudaError_t layerNormBackwardAddRun(const CudaKernelCall &k) {
  float *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  if (roundsTheSum(k)) {
    cudaError_t rc = gpu::layerNormBackward(
        k.c("rows"), k.c("width"), k.reads[0], k.reads[1], k.reads[2],
        k.reads[3], k.reads[4], k.writes[0], k.writes[1], dBeta, k.stream);
    return rc ? rc : addToRoundedGradient(k, k.reads[5]);
  }
  return gpu::layerNormBackwardAdd(k.c("rows"), k.c("width"), k.reads[0],
                                   k.reads[1], k.reads[2], k.reads[3],
                                   k.reads[4], k.reads[5], k.writes[0],
                                   k.writes[1], dBeta, k.stream, nullptr);
}
cudaError_t rmsNormBackwardAddRun(const CudaKernelCall &k) {
  if (roundsTheSum(k)) {
    cudaError_t rc = gpu::rmsNormBackward(k.c("rows"), k.c("width"), k.reads[0],
                                          k.reads[1], k.reads[2], k.reads[3],
                                          k.writes[0], k.writes[1], k.stream);
    return rc ? rc : addToRoundedGradient(k, k.reads[4]);
  }
  return gpu::rmsNormBackwardAdd(k.c("rows"), k.c("width"), k.reads[0],
                                 k.reads[1], k.reads[2], k.reads[3], k.reads[4],
                                 k.writes[0], k.writes[1], k.stream, nullptr);
}
cudaError_t residualLayerNormForwardHalf(const CudaHalfCall &k) {
  const void *beta = k.c("bias") ? k.reads[3] : nullptr;
  return gpu::halfResidualLayerNormForward(
      k.type, k.c("rows"), k.c("width"), k.reads[0], k.reads[1], k.writes[0],
      k.reads[2], beta, eps(k), k.writes[1], f32(k.writes[2]), f32(k.writes[3]),
      k.stream);
}
cudaError_t residualRmsNormForwardHalf(const CudaHalfCall &k) {
  return gpu::halfResidualRmsNormForward(
      k.type, k.c("rows"), k.c("width"), k.reads[0], k.reads[1], k.writes[0],
      k.reads[2], eps(k), k.writes[1], f32(k.writes[2]), k.stream);
}
cudaError_t layerNormBackwardAddHalf(const CudaHalfCall &k) {
  void *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  return gpu::halfLayerNormBackwardAdd(
      k.type, k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
      f32(k.reads[2]), f32(k.reads[3]), k.reads[4], k.reads[5], k.writes[0],
      k.writes[1], dBeta, k.stream, k.scratch);
}
cudaError_t rmsNormBackwardAddHalf(const CudaHalfCall &k) {
  return gpu::halfRmsNormBackwardAdd(k.type, k.c("rows"), k.c("width"),
                                     k.reads[0], k.reads[1], f32(k.reads[2]),
                                     k.reads[3], k.reads[4], k.writes[0],
                                     k.writes[1], k.stream, k.scratch);
}

//===--- Embedding and rotary --------------------------------------------===//

cudaError_t embeddingForwardRun(const CudaKernelCall &k) {
  const float *wpe = k.c("positions") ? k.reads[2] : nullptr;
  return gpu::embeddingForward(k.c("batch"), k.c("seq"), k.c("hidden"),
                               k.readIndices[0], k.reads[1], wpe, nullptr, 0,
                               k.writes[0], k.stream);
}
const std::int32_t *ids(const void *p) {
  return static_cast<const std::int32_t *>(p);
}
cudaError_t embeddingForwardHalf(const CudaHalfCall &k) {
  const void *wpe = k.c("positions") ? k.reads[2] : nullptr;
  return gpu::halfEmbeddingForward(k.type, k.c("batch"), k.c("seq"),
                                   k.c("hidden"), ids(k.reads[0]), k.reads[1],
                                   wpe, k.writes[0], k.stream);
}
cudaError_t embeddingBackwardRun(const CudaKernelCall &k) {
  float *dWpe = k.c("positions") ? k.writes[1] : nullptr;
  return gpu::embeddingBackward(k.c("batch"), k.c("seq"), k.c("hidden"),
                                k.readIndices[0], k.reads[1], 0, k.writes[0],
                                dWpe, nullptr, k.stream);
}
// The 16-bit backward sorts the tokens by id in its scratch (no atomics:
// the CPU backend's sums, bit for bit).
int64_t embeddingBackwardScratch(const KernelConstants &c) {
  return gpu::embeddingBackwardScratchInts(c.at("vocab"),
                                           c.at("batch") * c.at("seq"));
}
cudaError_t embeddingBackwardHalf(const CudaHalfCall &k) {
  void *dWpe = k.c("positions") ? k.writes[1] : nullptr;
  return gpu::halfEmbeddingBackward(
      k.type, k.c("batch"), k.c("seq"), k.c("hidden"), k.c("vocab"),
      ids(k.reads[0]), k.reads[1], k.writes[0], dWpe,
      reinterpret_cast<std::int32_t *>(k.scratch), k.stream);
}
// The tensor-parallel lookups on 16-bit storage; the vocabulary shard's
// backward sorts its tokens as embedding_backward does.
cudaError_t vocabEmbeddingForwardHalf(const CudaHalfCall &k) {
  return gpu::halfVocabEmbeddingForward(
      k.type, k.c("batch"), k.c("seq"), k.c("hidden"), k.c("vocab_start"),
      k.c("vocab_local"), ids(k.reads[0]), k.reads[1], k.writes[0], k.stream);
}
int64_t vocabEmbeddingBackwardScratch(const KernelConstants &c) {
  return gpu::embeddingBackwardScratchInts(c.at("vocab_local"),
                                           c.at("batch") * c.at("seq"));
}
cudaError_t vocabEmbeddingBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfVocabEmbeddingBackward(
      k.type, k.c("batch"), k.c("seq"), k.c("hidden"), k.c("vocab_start"),
      k.c("vocab_local"), ids(k.reads[0]), k.reads[1], k.writes[0],
      reinterpret_cast<std::int32_t *>(k.scratch), k.stream);
}
cudaError_t positionEmbeddingForwardHalf(const CudaHalfCall &k) {
  return gpu::halfPositionEmbeddingForward(k.type, k.c("batch"), k.c("seq"),
                                           k.c("hidden"), k.reads[0],
                                           k.reads[1], k.writes[0], k.stream);
}
cudaError_t positionEmbeddingBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfPositionEmbeddingBackward(k.type, k.c("batch"), k.c("seq"),
                                            k.c("hidden"), k.reads[0],
                                            k.writes[0], k.stream);
}
cudaError_t vocabEmbeddingForwardRun(const CudaKernelCall &k) {
  return gpu::vocabEmbeddingForward(
      k.c("batch"), k.c("seq"), k.c("hidden"), k.c("vocab_start"),
      k.c("vocab_local"), k.readIndices[0], k.reads[1], k.writes[0], k.stream);
}
cudaError_t vocabEmbeddingBackwardRun(const CudaKernelCall &k) {
  return gpu::vocabEmbeddingBackward(
      k.c("batch"), k.c("seq"), k.c("hidden"), k.c("vocab_start"),
      k.c("vocab_local"), k.readIndices[0], k.reads[1], k.writes[0], k.stream);
}
cudaError_t positionEmbeddingForwardRun(const CudaKernelCall &k) {
  return gpu::positionEmbeddingForward(k.c("batch"), k.c("seq"), k.c("hidden"),
                                       0, k.reads[0], k.reads[1], k.writes[0],
                                       k.stream);
}
cudaError_t positionEmbeddingBackwardRun(const CudaKernelCall &k) {
  return gpu::positionEmbeddingBackward(k.c("batch"), k.c("seq"), k.c("hidden"),
                                        0, k.reads[0], k.writes[0], k.stream);
}
cudaError_t rotaryForwardRun(const CudaKernelCall &k) {
  return gpu::rotaryForward(k.c("batch"), k.c("seq"), k.c("heads"),
                            k.c("head_dim"), 0, float(k.c("theta")), k.reads[0],
                            k.writes[0], k.stream);
}
template <bool kInverse> cudaError_t rotaryHalf(const CudaHalfCall &k) {
  return gpu::halfRotary(k.type, k.c("batch"), k.c("seq"), k.c("heads"),
                         k.c("head_dim"), 0, float(k.c("theta")), kInverse,
                         k.reads[0], k.writes[0], k.stream);
}
cudaError_t rotaryBackwardRun(const CudaKernelCall &k) {
  return gpu::rotaryBackward(k.c("batch"), k.c("seq"), k.c("heads"),
                             k.c("head_dim"), 0, float(k.c("theta")),
                             k.reads[0], k.writes[0], k.stream);
}

//===--- Attention -------------------------------------------------------===//

cudaError_t attentionForwardRun(const CudaKernelCall &k) {
  return gpu::attentionForward(attentionDims(*k.constants), k.reads[0],
                               k.reads[1], k.reads[2], k.writes[0], k.writes[1],
                               k.stream);
}
bool halfAttention(const KernelConstants &c) {
  return gpu::halfAttentionSupported(attentionDims(c));
}
cudaError_t attentionForwardHalf(const CudaHalfCall &k) {
  return gpu::halfAttentionForward(
      k.type, attentionDims(*k.constants), k.reads[0], k.reads[1], k.reads[2],
      k.writes[0], static_cast<float *>(k.writes[1]), k.stream);
}
int64_t attentionBackwardScratch(const KernelConstants &c) {
  return c.at("batch") * c.at("heads") * c.at("seq"); // delta
}
cudaError_t attentionBackwardRun(const CudaKernelCall &k) {
  return gpu::attentionBackward(attentionDims(*k.constants), k.reads[0],
                                k.reads[1], k.reads[2], k.reads[3], k.reads[4],
                                k.reads[5], k.writes[0], k.writes[1],
                                k.writes[2], k.scratch, k.stream);
}
cudaError_t attentionBackwardHalf(const CudaHalfCall &k) {
  return gpu::halfAttentionBackward(
      k.type, attentionDims(*k.constants), k.reads[0], k.reads[1], k.reads[2],
      k.reads[3], static_cast<const float *>(k.reads[4]), k.reads[5],
      k.writes[0], k.writes[1], k.writes[2], k.scratch, k.stream);
}

//===--- Loss ------------------------------------------------------------===//

// The vocabulary-parallel phases: columns at or past `vocab` of the shard
// starting at word vocab_start are padding (as validColumns in the CPU
// registry).
template <typename Call> int64_t validColumns(const Call &k) {
  return std::clamp<int64_t>(k.c("vocab") - k.c("vocab_start"), 0,
                             k.c("vocab_local"));
}
cudaError_t crossEntropyShardMaxRun(const CudaKernelCall &k) {
  return gpu::crossEntropyShardMax(k.c("rows"), k.c("vocab_local"), k.reads[0],
                                   k.writes[0], validColumns(k), k.stream);
}
cudaError_t crossEntropyShardSumsRun(const CudaKernelCall &k) {
  return gpu::crossEntropyShardSums(k.c("rows"), k.c("vocab_local"),
                                    k.c("vocab_start"), k.reads[0],
                                    k.readIndices[1], k.reads[2], k.writes[0],
                                    k.writes[1], validColumns(k), k.stream);
}

// Scratch: lse[rows], then the valid-target count (an int) and the mean loss.
int64_t crossEntropyScratch(const KernelConstants &c) {
  return c.at("rows") + 2;
}

/// The loss kernels: `lossKernel(lse, validCount, loss, dLogits)` launches
/// the loss phase into the scratch; then the loss divided by loss_div into
/// writes[0] (added with accumulate) and, with grad, dLogits (writes[1],
/// `gradElements`) scaled by lossScale / grad_div (as the CPU registry).
template <typename LossKernel>
cudaError_t runLoss(const CudaKernelCall &k, int64_t gradElements,
                    LossKernel lossKernel) {
  int64_t rows = k.c("rows");
  float *dLogits = k.c("grad") ? k.writes[1] : nullptr;
  float *lse = k.scratch;
  int *validCount = reinterpret_cast<int *>(k.scratch + rows);
  float *loss = k.scratch + rows + 1;
  if (cudaError_t rc = lossKernel(lse, validCount, loss, dLogits))
    return rc;
  if (cudaError_t rc =
          finishLoss(loss, float(k.c("loss_div")), k.c("accumulate") != 0,
                     k.writes[0], k.stream))
    return rc;
  if (dLogits && (k.c("grad_div") != 1 || k.lossScale != 1))
    return scale(gradElements, dLogits, k.lossScale / float(k.c("grad_div")),
                 k.stream);
  return cudaSuccess;
}

cudaError_t crossEntropyRun(const CudaKernelCall &k) {
  int64_t rows = k.c("rows"), vocab = k.c("vocab");
  return runLoss(k, rows * vocab,
                 [&](float *lse, int *validCount, float *loss, float *dLogits) {
                   return gpu::crossEntropyForwardBackward(
                       rows, vocab, k.reads[0], k.readIndices[1], lse,
                       validCount, loss, dLogits, k.stream,
                       crossEntropyValidColumns(*k.constants));
                 });
}

cudaError_t crossEntropyShardFinishRun(const CudaKernelCall &k) {
  int64_t rows = k.c("rows");
  return runLoss(k, rows * k.c("vocab_local"),
                 [&](float *lse, int *validCount, float *loss, float *dLogits) {
                   return gpu::crossEntropyShardFinish(
                       rows, k.c("vocab_local"), k.c("vocab_start"), k.reads[0],
                       k.readIndices[1], k.reads[2], k.reads[3], k.reads[4],
                       lse, validCount, loss, dLogits, validColumns(k),
                       k.stream);
                 });
}

/// The 16-bit loss kernels fold the gradient's scale (lossScale / grad_div,
/// as runLoss) into their single rounding; the scratch is laid out as
/// runLoss's, its first `rows` floats holding per-row terms.
float gradScale(const CudaHalfCall &k) {
  return k.lossScale / float(k.c("grad_div"));
}
template <typename LossKernel>
cudaError_t runHalfLoss(const CudaHalfCall &k, LossKernel lossKernel) {
  int64_t rows = k.c("rows");
  void *dLogits = k.c("grad") ? k.writes[1] : nullptr;
  int *validCount = reinterpret_cast<int *>(k.scratch + rows);
  float *loss = k.scratch + rows + 1;
  if (cudaError_t rc = lossKernel(k.scratch, validCount, loss, dLogits))
    return rc;
  return finishLoss(loss, float(k.c("loss_div")), k.c("accumulate") != 0,
                    f32(k.writes[0]), k.stream);
}
cudaError_t crossEntropyHalf(const CudaHalfCall &k) {
  return runHalfLoss(
      k, [&](float *term, int *validCount, float *loss, void *dLogits) {
        return gpu::halfCrossEntropy(k.type, k.c("rows"), k.c("vocab"),
                                     k.reads[0], ids(k.reads[1]), gradScale(k),
                                     term, validCount, loss, dLogits, k.stream,
                                     crossEntropyValidColumns(*k.constants));
      });
}
cudaError_t crossEntropyShardMaxHalf(const CudaHalfCall &k) {
  return gpu::halfCrossEntropyShardMax(k.type, k.c("rows"), k.c("vocab_local"),
                                       k.reads[0], f32(k.writes[0]),
                                       validColumns(k), k.stream);
}
cudaError_t crossEntropyShardSumsHalf(const CudaHalfCall &k) {
  return gpu::halfCrossEntropyShardSums(
      k.type, k.c("rows"), k.c("vocab_local"), k.c("vocab_start"), k.reads[0],
      ids(k.reads[1]), f32(k.reads[2]), f32(k.writes[0]), f32(k.writes[1]),
      validColumns(k), k.stream);
}
cudaError_t crossEntropyShardFinishHalf(const CudaHalfCall &k) {
  return runHalfLoss(
      k, [&](float *lse, int *validCount, float *loss, void *dLogits) {
        return gpu::halfCrossEntropyShardFinish(
            k.type, k.c("rows"), k.c("vocab_local"), k.c("vocab_start"),
            k.reads[0], ids(k.reads[1]), f32(k.reads[2]), f32(k.reads[3]),
            f32(k.reads[4]), gradScale(k), lse, validCount, loss, dLogits,
            validColumns(k), k.stream);
      });
}

std::vector<CudaKernelEntry> buildTable() {
  std::vector<CudaKernelEntry> table = {
      {"activation_backward", none, activationBackwardRun, 0b11, 0b1, always,
       activationBackwardHalf},
      {"activation_forward", none, activationForwardRun, 0b1, 0b1, always,
       activationForwardHalf},
      // q k v out dOut (not lse) in, dq dk dv out; q k v in, out (not lse)
      // out.
      {"attention_backward", attentionBackwardScratch, attentionBackwardRun,
       0b101111, 0b111, halfAttention, attentionBackwardHalf},
      {"attention_forward", none, attentionForwardRun, 0b111, 0b01,
       halfAttention, attentionForwardHalf},
      {"bias_add", none, biasAddRun, 0b11, 0b1, always, biasAddHalf},
      {"bias_grad", none, biasGradRun, 0b1, 0b1, always, biasGradHalf},
      // logits (targets) in; (loss) dLogits out.
      {"cross_entropy", crossEntropyScratch, crossEntropyRun, 0b01, 0b10,
       always, crossEntropyHalf},
      {"cross_entropy_shard_finish", crossEntropyScratch,
       crossEntropyShardFinishRun, 0b00001, 0b10, always,
       crossEntropyShardFinishHalf},
      {"cross_entropy_shard_max", none, crossEntropyShardMaxRun, 0b1, 0b0,
       always, crossEntropyShardMaxHalf},
      {"cross_entropy_shard_sums", none, crossEntropyShardSumsRun, 0b001, 0b00,
       always, crossEntropyShardSumsHalf},
      // ids dOut in; dWte [dWpe] out.
      {"embedding_backward", embeddingBackwardScratch, embeddingBackwardRun,
       0b10, 0b11, always, embeddingBackwardHalf, true},
      // (ids) wte [wpe] in.
      {"embedding_forward", none, embeddingForwardRun, 0b110, 0b1, always,
       embeddingForwardHalf},
      {"gated_backward", none, gatedBackwardRun, 0b111, 0b11, always,
       gatedBackwardHalf},
      {"gated_forward", none, gatedForwardRun, 0b11, 0b1, always,
       gatedForwardHalf},
      // x gamma (mean rstd) dy in; dx dGamma [dBeta] out.
      {"layer_norm_backward", normBackwardScratch, layerNormBackwardRun,
       0b10011, 0b111, always, layerNormBackwardHalf, true},
      // ... addend in; sum dGamma [dBeta] out.
      {"layer_norm_backward_add", normBackwardScratch, layerNormBackwardAddRun,
       0b110011, 0b111, always, layerNormBackwardAddHalf, true},
      // dOut in; dWpe out. x wpe in; out out.
      {"position_embedding_backward", none, positionEmbeddingBackwardRun, 0b1,
       0b1, always, positionEmbeddingBackwardHalf},
      {"position_embedding_forward", none, positionEmbeddingForwardRun, 0b11,
       0b1, always, positionEmbeddingForwardHalf},
      // x gamma [beta] in; y (mean rstd) out.
      {"layer_norm_forward", none, layerNormForwardRun, 0b111, 0b001, always,
       layerNormForwardHalf},
      {"residual_add", none, residualAddRun, 0b11, 0b1, always,
       residualAddHalf},
      // a b gamma [beta] in; sum y (mean rstd) out.
      {"residual_layer_norm_forward", none, residualLayerNormForwardRun, 0b1111,
       0b0011, always, residualLayerNormForwardHalf},
      // a b gamma in; sum y (rstd) out.
      {"residual_rms_norm_forward", none, residualRmsNormForwardRun, 0b111,
       0b011, always, residualRmsNormForwardHalf},
      // x gamma (rstd) dy in; dx dGamma out.
      {"rms_norm_backward", normBackwardScratch, rmsNormBackwardRun, 0b1011,
       0b11, always, rmsNormBackwardHalf, true},
      {"rms_norm_backward_add", normBackwardScratch, rmsNormBackwardAddRun,
       0b11011, 0b11, always, rmsNormBackwardAddHalf, true},
      // x gamma in; y (rstd) out.
      {"rms_norm_forward", none, rmsNormForwardRun, 0b11, 0b01, always,
       rmsNormForwardHalf},
      {"rotary_backward", none, rotaryBackwardRun, 0b1, 0b1, always,
       rotaryHalf<true>},
      {"rotary_forward", none, rotaryForwardRun, 0b1, 0b1, always,
       rotaryHalf<false>},
      // ids dOut in; dTable out. ids table in; out out.
      {"vocab_embedding_backward", vocabEmbeddingBackwardScratch,
       vocabEmbeddingBackwardRun, 0b10, 0b1, always, vocabEmbeddingBackwardHalf,
       true},
      {"vocab_embedding_forward", none, vocabEmbeddingForwardRun, 0b10, 0b1,
       always, vocabEmbeddingForwardHalf},
  };
  std::sort(table.begin(), table.end(),
            [](const CudaKernelEntry &a, const CudaKernelEntry &b) {
              return a.name < b.name;
            });
  return table;
}

} // namespace

const std::vector<CudaKernelEntry> &cudaKernelTable() {
  static const std::vector<CudaKernelEntry> table = buildTable();
  return table;
}

const CudaKernelEntry *findCudaKernel(std::string_view name) {
  name = plan::registryName(name);
  const std::vector<CudaKernelEntry> &table = cudaKernelTable();
  auto it =
      std::lower_bound(table.begin(), table.end(), name,
                       [](const CudaKernelEntry &entry, std::string_view key) {
                         return entry.name < key;
                       });
  return it != table.end() && it->name == name ? &*it : nullptr;
}

std::optional<gpu::HalfType> halfPath(const CudaKernelEntry &entry,
                                      const KernelConstants &constants,
                                      const std::vector<plan::DType> &reads,
                                      const std::vector<plan::DType> &writes) {
  if (!entry.runHalf || !entry.halfSupported(constants))
    return std::nullopt;
  std::optional<plan::DType> half;
  auto fits = [&](const std::vector<plan::DType> &types, std::uint32_t mask) {
    for (size_t i = 0; i < types.size(); ++i) {
      bool wanted = (mask >> i) & 1;
      if (!wanted) {
        if (types[i] != plan::DType::F32 && types[i] != plan::DType::I32)
          return false;
        continue;
      }
      if (types[i] != plan::DType::BF16 && types[i] != plan::DType::F16)
        return false;
      if (half && *half != types[i])
        return false;
      half = types[i];
    }
    return true;
  };
  if (!fits(reads, entry.halfReads) || !fits(writes, entry.halfWrites) || !half)
    return std::nullopt;
  return *half == plan::DType::BF16 ? gpu::HalfType::BF16 : gpu::HalfType::F16;
}

std::vector<plan::DType>
operandTypes(const plan::Program &program,
             const std::vector<plan::BufferRange> &ranges) {
  std::vector<plan::DType> types;
  for (const plan::BufferRange &range : ranges)
    types.push_back(program.buffers[size_t(range.buffer)].dtype);
  return types;
}

bool takesHalfOperands(std::string_view name, const KernelConstants &constants,
                       const std::vector<plan::DType> &reads,
                       const std::vector<plan::DType> &writes) {
  const CudaKernelEntry *entry = findCudaKernel(name);
  return entry && halfPath(*entry, constants, reads, writes).has_value();
}

std::vector<KernelDispatch> kernelDispatch(const plan::Bundle &bundle,
                                           const plan::Program &program) {
  std::vector<KernelDispatch> out;
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions) {
      if (inst.opcode != plan::Opcode::Kernel)
        continue;
      KernelDispatch d;
      d.inst = &inst;
      d.kernel = bundle.kernels.at(size_t(inst.kernel)).name;
      const CudaKernelEntry *entry = findCudaKernel(d.kernel);
      const KernelSpec *spec = findKernel(plan::registryName(d.kernel));
      std::vector<plan::DType> reads = operandTypes(program, inst.reads),
                               writes = operandTypes(program, inst.writes);
      bool sixteen = std::any_of(reads.begin(), reads.end(), isHalfFloat) ||
                     std::any_of(writes.begin(), writes.end(), isHalfFloat);
      if (!spec)
        d.path = KernelPath::Missing;
      else if (!entry)
        d.path = generatedSourceProblem(bundle,
                                        bundle.kernels.at(size_t(inst.kernel)))
                         .empty()
                     ? KernelPath::Generated
                     : KernelPath::Missing;
      else if (!sixteen)
        d.path = KernelPath::Fp32;
      else
        d.path =
            halfPath(*entry,
                     resolveConstants(
                         *spec, bundle.kernels[size_t(inst.kernel)].constants,
                         d.kernel),
                     reads, writes)
                ? KernelPath::Half
                : KernelPath::Widened;
      out.push_back(std::move(d));
    }
  return out;
}

std::string generatedSourceProblem(const plan::Bundle &bundle,
                                   const plan::Kernel &kernel) {
  auto source = bundle.files.find(kernel.source);
  if (source == bundle.files.end())
    return "the bundle has no generated source for it";
  try {
    parseLaunches(source->second, kernel.source, kernel.name);
    return {};
  } catch (const Error &error) {
    return "its generated source cannot be launched: " +
           std::string(error.what());
  }
}

std::vector<std::string_view> cudaKernelNames() {
  std::vector<std::string_view> names;
  for (const CudaKernelEntry &entry : cudaKernelTable())
    names.push_back(entry.name);
  return names;
}

std::string cudaKernelMissing(std::string_view name) {
  if (findCudaKernel(name))
    return {};
  std::string base(plan::registryName(name));
  if (!findKernel(base))
    return "kernel '" + std::string(name) +
           "' is in neither the CPU registry nor the CUDA kernel table";
  return "kernel '" + std::string(name) +
         "' has no CUDA implementation yet (CPU registry only; "
         "docs/runtime.md, \"CUDA backend\")";
}

} // namespace weft::exec::cuda
