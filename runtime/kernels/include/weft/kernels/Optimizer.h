//===- Optimizer.h - AdamW step, gradient norm and overflow checks -*- C++ -*-//
//
// AdamW as in torch.optim.AdamW: decoupled weight decay applied to the fp32
// master weight before the Adam update, bias-corrected moments, eps added to
// the corrected sqrt(v). The per-step scalars are computed once on the host.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_OPTIMIZER_H
#define WEFT_KERNELS_OPTIMIZER_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

struct AdamWConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
};

/// Scalars of step `step` (1-based): every element of every tensor uses them.
struct AdamWStep {
  double lr, beta1, beta2, eps, weightDecay;
  double stepSize;      ///< lr / (1 - beta1^step)
  double sqrtBiasCorr2; ///< sqrt(1 - beta2^step)
  /// Multiplies every gradient first: 1 / lossScale times the clip factor.
  double gradScale;
  /// A step that reads the global sum of squares of the gradients (the clip
  /// folded into the update, clippedGradScale) derives gradScale from it:
  /// the step's loss scale, the clip limit on the true norm (0: none) and
  /// whether a sum that is not finite skips the update (dynamic loss
  /// scaling).
  double lossScale = 1;
  double maxNorm = 0;
  bool skipNonFinite = false;
};

inline AdamWStep makeAdamWStep(const AdamWConfig &c, std::int64_t step,
                               double gradScale = 1.0) {
  double bc1 = 1.0 - std::pow(c.beta1, double(step));
  double bc2 = 1.0 - std::pow(c.beta2, double(step));
  return AdamWStep{c.lr,          c.beta1,    c.beta2,        c.eps,
                   c.weightDecay, c.lr / bc1, std::sqrt(bc2), gradScale};
}

/// The gradient factor of a step given the global sum of squares of its
/// (loss-scaled) gradients: 1 / lossScale, times maxNorm / norm where the
/// true norm sqrt(sum) / lossScale exceeds maxNorm (`clip`'s rule, applied
/// inside the update instead of in a pass over the gradients). False where
/// the step must leave weights and moments alone: skipNonFinite and a sum
/// that is inf or NaN (an overflow under dynamic loss scaling).
WEFT_HD inline bool clippedGradScale(const AdamWStep &s, float sumOfSquares,
                                     double &scale) {
  if (s.skipNonFinite && !math::isFinite(sumOfSquares))
    return false;
  double norm = math::sqrt(double(sumOfSquares)) / s.lossScale;
  scale = 1.0 / s.lossScale;
  if (s.maxNorm > 0 && norm > s.maxNorm)
    scale *= s.maxNorm / norm;
  return true;
}

template <typename T>
WEFT_HD inline void adamwElement(const AdamWStep &s, T grad, T &param, T &m,
                                 T &v) {
  T g = grad * T(s.gradScale);
  param *= T(1) - T(s.lr * s.weightDecay);
  m = T(s.beta1) * m + T(1 - s.beta1) * g;
  v = T(s.beta2) * v + T(1 - s.beta2) * g * g;
  T denom = math::sqrt(v) / T(s.sqrtBiasCorr2) + T(s.eps);
  param -= T(s.stepSize) * m / denom;
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_OPTIMIZER_H
