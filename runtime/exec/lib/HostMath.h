//===- HostMath.h - Element access and clipping in host memory --*- C++ -*-===//
//
// Shared by the CPU backend and the CUDA backend's host tasks (optimizer
// offload clips the gradients in host memory): fp32/bf16/f16 element
// access and the `clip` instruction's arithmetic (docs/runtime.md).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_HOSTMATH_H
#define WEFT_EXEC_HOSTMATH_H

#include "weft/exec/Backend.h"
#include "weft/kernels/Common.h"

#include <cmath>
#include <vector>

namespace weft::exec {

inline float loadFloat(const std::byte *data, plan::DType dtype, int64_t i) {
  if (dtype == plan::DType::BF16)
    return kernels::bf16ToFloat(
        reinterpret_cast<const kernels::BF16 *>(data)[i]);
  if (dtype == plan::DType::F16)
    return kernels::f16ToFloat(reinterpret_cast<const kernels::F16 *>(data)[i]);
  return reinterpret_cast<const float *>(data)[i];
}

inline void storeFloat(std::byte *data, plan::DType dtype, int64_t i,
                       float value) {
  if (dtype == plan::DType::BF16)
    reinterpret_cast<kernels::BF16 *>(data)[i] = kernels::floatToBf16(value);
  else if (dtype == plan::DType::F16)
    reinterpret_cast<kernels::F16 *>(data)[i] = kernels::floatToF16(value);
  else
    reinterpret_cast<float *>(data)[i] = value;
}

/// `clip` on host memory: scales `grads` (of `dtype`) by max_norm / norm
/// when the global norm (the square root of the f32 sum of squares at
/// `sumOfSquares`, unscaled by the step's loss scale) exceeds the
/// training's `grad_clip`; nothing on a step the loss scaler skips.
inline void clipOnHost(const StepContext &context, plan::DType dtype,
                       const float *sumOfSquares,
                       const std::vector<Operand> &grads) {
  double maxNorm = context.training->gradClip;
  double norm = std::sqrt(double(*sumOfSquares)) / context.lossScale;
  if (context.skipUpdate || maxNorm <= 0 || norm <= maxNorm)
    return;
  float scale = float(maxNorm / norm);
  for (const Operand &grad : grads) {
    int64_t n = grad.bytes / plan::elementBytes(dtype);
    for (int64_t i = 0; i < n; ++i)
      storeFloat(grad.data, dtype, i, loadFloat(grad.data, dtype, i) * scale);
  }
}

} // namespace weft::exec

#endif // WEFT_EXEC_HOSTMATH_H
