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
#include "weft/kernels/Rotary.h"

#include <cstdint>

namespace weft::kernels::gpu::half {

using storage::Half16;

__device__ inline std::int64_t elementIndex() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// Elements per thread of the mapped kernels below: one 16-byte access per
/// operand.
constexpr int kPerThread = 8;

/// The 16-bit operands of a mapped kernel: kIn inputs, kOut outputs.
template <int kIn, int kOut> struct Operands {
  const std::uint16_t *in[kIn];
  std::uint16_t *out[kOut];
};

/// Calls op(x, y) for each of this thread's kPerThread consecutive elements
/// (launch ceil(n / kPerThread) threads): x[kIn] the inputs widened, y[kOut]
/// the results, rounded into the outputs. When every operand is 16-byte
/// aligned there and the run is whole, each operand moves as one 16-byte
/// access; otherwise element by element. The values are the same either
/// way. All of a thread's inputs are read before its outputs are written,
/// so an output may alias an input.
template <int kIn, int kOut, typename Op>
__device__ void mapElements(Half16 h, std::int64_t n,
                            const Operands<kIn, kOut> &ops, Op op) {
  std::int64_t first = elementIndex() * kPerThread;
  if (first >= n)
    return;
  std::uintptr_t addressBits = 0;
  for (int k = 0; k < kIn; ++k)
    addressBits |= reinterpret_cast<std::uintptr_t>(ops.in[k] + first);
  for (int k = 0; k < kOut; ++k)
    addressBits |= reinterpret_cast<std::uintptr_t>(ops.out[k] + first);
  if (first + kPerThread <= n && addressBits % 16 == 0) {
    float x[kPerThread][kIn], y[kPerThread][kOut];
#pragma unroll
    for (int k = 0; k < kIn; ++k) {
      uint4 raw = *reinterpret_cast<const uint4 *>(ops.in[k] + first);
      const auto *bits = reinterpret_cast<const std::uint16_t *>(&raw);
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        x[j][k] = h.widen(bits[j]);
    }
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      op(x[j], y[j]);
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      uint4 raw;
      auto *bits = reinterpret_cast<std::uint16_t *>(&raw);
#pragma unroll
      for (int j = 0; j < kPerThread; ++j)
        bits[j] = h.round(y[j][k]);
      *reinterpret_cast<uint4 *>(ops.out[k] + first) = raw;
    }
    return;
  }
  std::int64_t end = first + kPerThread < n ? first + kPerThread : n;
  for (std::int64_t i = first; i < end; ++i) {
    float x[kIn], y[kOut];
    for (int k = 0; k < kIn; ++k)
      x[k] = h.load(ops.in[k], i);
    op(x, y);
    for (int k = 0; k < kOut; ++k)
      h.store(ops.out[k], i, y[k]);
  }
}

/// y = x + bias[column] (y may alias x), kPerThread consecutive elements
/// per thread (launch ceil(n / kPerThread) threads): one 16-byte access per
/// operand when the run lies in one row and x, y and the bias are 16-byte
/// aligned there, else element by element (the same values).
__global__ void biasAdd(Half16 h, std::int64_t n, std::int64_t width,
                        const std::uint16_t *x, const std::uint16_t *bias,
                        std::uint16_t *y) {
  std::int64_t first = elementIndex() * kPerThread;
  if (first >= n)
    return;
  std::int64_t column = first % width;
  std::uintptr_t addressBits = reinterpret_cast<std::uintptr_t>(x + first) |
                               reinterpret_cast<std::uintptr_t>(y + first) |
                               reinterpret_cast<std::uintptr_t>(bias + column);
  if (first + kPerThread <= n && column + kPerThread <= width &&
      addressBits % 16 == 0) {
    uint4 xs = *reinterpret_cast<const uint4 *>(x + first),
          bs = *reinterpret_cast<const uint4 *>(bias + column), ys;
    const auto *xb = reinterpret_cast<const std::uint16_t *>(&xs),
               *bb = reinterpret_cast<const std::uint16_t *>(&bs);
    auto *yb = reinterpret_cast<std::uint16_t *>(&ys);
#pragma unroll
    for (int j = 0; j < kPerThread; ++j)
      yb[j] = h.round(h.widen(xb[j]) + h.widen(bb[j]));
    *reinterpret_cast<uint4 *>(y + first) = ys;
    return;
  }
  std::int64_t end = first + kPerThread < n ? first + kPerThread : n;
  for (std::int64_t i = first; i < end; ++i)
    h.store(y, i, h.load(x, i) + h.load(bias, i % width));
}

__global__ void residualAdd(Half16 h, std::int64_t n, const std::uint16_t *a,
                            const std::uint16_t *b, std::uint16_t *out) {
  mapElements(h, n, Operands<2, 1>{{a, b}, {out}},
              [](const float(&x)[2], float(&y)[1]) { y[0] = x[0] + x[1]; });
}

__global__ void activationForward(Half16 h, Activation act, std::int64_t n,
                                  const std::uint16_t *x, std::uint16_t *y) {
  mapElements(h, n, Operands<1, 1>{{x}, {y}},
              [act](const float(&in)[1], float(&out)[1]) {
                out[0] = activate(act, in[0]);
              });
}

/// dx = dy * act'(x) (dx may alias dy).
__global__ void activationBackward(Half16 h, Activation act, std::int64_t n,
                                   const std::uint16_t *x,
                                   const std::uint16_t *dy, std::uint16_t *dx) {
  mapElements(h, n, Operands<2, 1>{{x, dy}, {dx}},
              [act](const float(&in)[2], float(&out)[1]) {
                out[0] = in[1] * activateDerivative(act, in[0]);
              });
}

__global__ void gatedForward(Half16 h, Activation act, std::int64_t n,
                             const std::uint16_t *gate, const std::uint16_t *up,
                             std::uint16_t *out) {
  mapElements(h, n, Operands<2, 1>{{gate, up}, {out}},
              [act](const float(&in)[2], float(&result)[1]) {
                result[0] = gatedActivate(act, in[0], in[1]);
              });
}

__global__ void gatedBackward(Half16 h, Activation act, std::int64_t n,
                              const std::uint16_t *gate,
                              const std::uint16_t *up,
                              const std::uint16_t *dOut, std::uint16_t *dGate,
                              std::uint16_t *dUp) {
  mapElements(h, n, Operands<3, 2>{{gate, up, dOut}, {dGate, dUp}},
              [act](const float(&in)[3], float(&out)[2]) {
                gatedActivateBackward(act, in[0], in[1], in[2], out[0], out[1]);
              });
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

/// vocabEmbeddingRowForward for one element: out[t, c] = table[ids[t] -
/// vocabStart, c] for a token of the shard's rows, else 0.
__global__ void
vocabEmbeddingForward(Half16 h, std::int64_t n, std::int64_t hidden,
                      std::int64_t vocabStart, std::int64_t shardRows,
                      const std::int32_t *ids, const std::uint16_t *table,
                      std::uint16_t *out) {
  std::int64_t i = elementIndex();
  if (i >= n)
    return;
  std::int64_t t = i / hidden, c = i % hidden;
  std::int64_t local = std::int64_t(ids[t]) - vocabStart;
  bool owned = local >= 0 && local < shardRows;
  h.store(out, i, owned ? h.load(table, local * hidden + c) : 0.0f);
}

/// positionEmbeddingRowForward for one element: out[t, c] = x[t, c] +
/// wpe[t % seq, c] (out may alias x).
__global__ void positionEmbeddingForward(Half16 h, std::int64_t n,
                                         std::int64_t seq, std::int64_t hidden,
                                         const std::uint16_t *x,
                                         const std::uint16_t *wpe,
                                         std::uint16_t *out) {
  std::int64_t i = elementIndex();
  if (i >= n)
    return;
  std::int64_t t = i / hidden, c = i % hidden;
  h.store(out, i, h.load(x, i) + h.load(wpe, (t % seq) * hidden + c));
}

/// rotaryRow for one pair (i, i + headDim / 2) of one head vector: `pairs` =
/// batch * seq * heads * headDim / 2 threads; `inverse` rotates back (the
/// backward). y may alias x.
__global__ void rotary(Half16 h, std::int64_t pairs, std::int64_t seq,
                       std::int64_t heads, std::int64_t headDim,
                       std::int64_t positionOffset, float theta, bool inverse,
                       const std::uint16_t *x, std::uint16_t *y) {
  std::int64_t t = elementIndex();
  if (t >= pairs)
    return;
  std::int64_t half = headDim / 2, row = t / half, i = t % half;
  std::int64_t pos = (row / heads) % seq + positionOffset;
  float c, s;
  rotaryAngle(pos, i, headDim, theta, c, s);
  if (inverse)
    s = -s;
  std::int64_t at = row * headDim + i;
  float x0 = h.load(x, at), x1 = h.load(x, at + half);
  h.store(y, at, x0 * c - x1 * s);
  h.store(y, at + half, x1 * c + x0 * s);
}

} // namespace weft::kernels::gpu::half

#endif // WEFT_KERNELS_CUDA_HALFELEMENTWISE_CUH
