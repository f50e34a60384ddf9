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
};

inline AdamWStep makeAdamWStep(const AdamWConfig &c, std::int64_t step,
                               double gradScale = 1.0) {
  double bc1 = 1.0 - std::pow(c.beta1, double(step));
  double bc2 = 1.0 - std::pow(c.beta2, double(step));
  return AdamWStep{c.lr,          c.beta1,    c.beta2,        c.eps,
                   c.weightDecay, c.lr / bc1, std::sqrt(bc2), gradScale};
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
