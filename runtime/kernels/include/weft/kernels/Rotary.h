//===- Rotary.h - Rotary position embedding (HF LLaMA convention) -*- C++ -*-=//
//
// One row is one head vector of `headDim` (even) elements at position `pos`.
// Element i pairs with element i + headDim/2 ("rotate_half"), and the pair is
// rotated by pos * theta^(-2i/headDim), exactly as transformers'
// apply_rotary_pos_emb with LlamaRotaryEmbedding (no scaling).
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_ROTARY_H
#define WEFT_KERNELS_ROTARY_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

/// cos and sin of the rotation angle of pair `i` at position `pos`.
template <typename T>
WEFT_HD inline void rotaryAngle(std::int64_t pos, std::int64_t i,
                                std::int64_t headDim, T theta, T &c, T &s) {
  T invFreq = math::pow(theta, -T(2 * i) / T(headDim));
  T angle = T(pos) * invFreq;
  c = math::cos(angle);
  s = math::sin(angle);
}

/// y = rotate(x); `y` may alias `x`. With `inverse` the rotation is
/// transposed, which is the backward pass (dx = R^T dy).
template <typename T>
WEFT_HD inline void rotaryRow(std::int64_t headDim, std::int64_t pos, T theta,
                              bool inverse, const T *x, T *y) {
  std::int64_t half = headDim / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    T c, s;
    rotaryAngle(pos, i, headDim, theta, c, s);
    if (inverse)
      s = -s;
    T x0 = x[i], x1 = x[i + half];
    y[i] = x0 * c - x1 * s;
    y[i + half] = x1 * c + x0 * s;
  }
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_ROTARY_H
