//===- HalfElementwise.cuh - Element-wise kernels on 16-bit storage ------===//
//
// bias_add, residual_add, the activations and the embedding lookup for
// bf16/f16 models, reading and writing 16-bit storage directly instead of
// through fp32 scratch (one pass over each operand instead of three). Each
// element is widened, computed in fp32 by the same functions the fp32 kernels
// call, and rounded with the same conversion the backend's narrowing uses
// (Common.h), so the results are the ones the widening path gives, bit for bit.
// In a header so that WarpEmulationTests can run them on the CPU
// (WEFT_WARP_EMULATION).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_HALFELEMENTWISE_CUH
#define WEFT_KERNELS_CUDA_HALFELEMENTWISE_CUH

#include "Rows.cuh"
#include "weft/kernels/Activations.h"

#include <cstdint>

namespace weft::kernels::gpu::half {

using storage::Half16;

__device__ inline std::int64_t elementIndex() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// y = x + bias[column] (y may alias x).
__global__ void biasAdd(Half16 h, std::int64_t n, std::int64_t width,
                        const std::uint16_t *x, const std::uint16_t *bias,
                        std::uint16_t *y) {
  std::int64_t i = elementIndex();
  if (i < n)
    h.store(y, i, h.load(x, i) + h.load(bias, i % width));
}

__global__ void residualAdd(Half16 h, std::int64_t n, const std::uint16_t *a,
                            const std::uint16_t *b, std::uint16_t *out) {
  std::int64_t i = elementIndex();
  if (i < n)
    h.store(out, i, h.load(a, i) + h.load(b, i));
}

__global__ void activationForward(Half16 h, Activation act, std::int64_t n,
                                  const std::uint16_t *x, std::uint16_t *y) {
  std::int64_t i = elementIndex();
  if (i < n)
    h.store(y, i, activate(act, h.load(x, i)));
}

__global__ void activationBackward(Half16 h, Activation act, std::int64_t n,
                                   const std::uint16_t *x,
                                   const std::uint16_t *dy, std::uint16_t *dx) {
  std::int64_t i = elementIndex();
  if (i < n)
    h.store(dx, i, h.load(dy, i) * activateDerivative(act, h.load(x, i)));
}

__global__ void gatedForward(Half16 h, Activation act, std::int64_t n,
                             const std::uint16_t *gate, const std::uint16_t *up,
                             std::uint16_t *out) {
  std::int64_t i = elementIndex();
  if (i < n)
    h.store(out, i, gatedActivate(act, h.load(gate, i), h.load(up, i)));
}

__global__ void gatedBackward(Half16 h, Activation act, std::int64_t n,
                              const std::uint16_t *gate,
                              const std::uint16_t *up,
                              const std::uint16_t *dOut, std::uint16_t *dGate,
                              std::uint16_t *dUp) {
  std::int64_t i = elementIndex();
  if (i >= n)
    return;
  float g, u;
  gatedActivateBackward(act, h.load(gate, i), h.load(up, i), h.load(dOut, i), g,
                        u);
  h.store(dGate, i, g);
  h.store(dUp, i, u);
}

/// embeddingRowForward for one element: out[t, c] = wte[ids[t], c] (+ wpe[t
/// % seq, c], nullable), n = tokens * hidden. Ids must be in range.
__global__ void embeddingForward(Half16 h, std::int64_t n, std::int64_t seq,
                                 std::int64_t hidden, const std::int32_t *ids,
                                 const std::uint16_t *wte,
                                 const std::uint16_t *wpe, std::uint16_t *out) {
  std::int64_t i = elementIndex();
  if (i >= n)
    return;
  std::int64_t t = i / hidden, c = i % hidden;
  float v = h.load(wte, std::int64_t(ids[t]) * hidden + c);
  if (wpe)
    v += h.load(wpe, (t % seq) * hidden + c);
  h.store(out, i, v);
}

} // namespace weft::kernels::gpu::half

#endif // WEFT_KERNELS_CUDA_HALFELEMENTWISE_CUH
