//===- Norms.h - LayerNorm and RMSNorm over one row -------------*- C++ -*-===//
//
// Rows are contiguous vectors of `width` elements. The forward pass saves
// per-row statistics (mean and reciprocal standard deviation for LayerNorm,
// reciprocal RMS for RMSNorm) so the backward pass does not recompute them.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_NORMS_H
#define WEFT_KERNELS_NORMS_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

/// Mean and 1/sqrt(var + eps) of one row, with the biased variance computed
/// in two passes (no cancellation from E[x^2] - E[x]^2).
template <typename T>
WEFT_HD inline void layerNormRowStats(std::int64_t width, const T *x, T eps,
                                      T &mean, T &rstd) {
  T sum = 0;
  for (std::int64_t i = 0; i < width; ++i)
    sum += x[i];
  mean = sum / T(width);
  T sumSq = 0;
  for (std::int64_t i = 0; i < width; ++i) {
    T d = x[i] - mean;
    sumSq += d * d;
  }
  rstd = T(1) / math::sqrt(sumSq / T(width) + eps);
}

/// y = (x - mean) * rstd * gamma + beta; `beta` may be null (no bias).
template <typename T>
WEFT_HD inline void layerNormRowForward(std::int64_t width, const T *x,
                                        const T *gamma, const T *beta, T mean,
                                        T rstd, T *y) {
  for (std::int64_t i = 0; i < width; ++i) {
    T v = (x[i] - mean) * rstd * gamma[i];
    y[i] = beta ? v + beta[i] : v;
  }
}

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
template <typename T>
WEFT_HD inline void layerNormRowBackward(std::int64_t width, const T *x,
                                         const T *gamma, T mean, T rstd,
                                         const T *dy, T *dx) {
  T sumG = 0, sumGXhat = 0;
  for (std::int64_t i = 0; i < width; ++i) {
    T g = dy[i] * gamma[i];
    sumG += g;
    sumGXhat += g * (x[i] - mean) * rstd;
  }
  T meanG = sumG / T(width), meanGXhat = sumGXhat / T(width);
  for (std::int64_t i = 0; i < width; ++i) {
    T xhat = (x[i] - mean) * rstd;
    dx[i] = rstd * (dy[i] * gamma[i] - meanG - xhat * meanGXhat);
  }
}

/// 1/sqrt(mean(x^2) + eps) of one row.
template <typename T>
WEFT_HD inline T rmsNormRowRstd(std::int64_t width, const T *x, T eps) {
  return T(1) / math::sqrt(dot(width, x, x) / T(width) + eps);
}

/// y = x * rstd * gamma.
template <typename T>
WEFT_HD inline void rmsNormRowForward(std::int64_t width, const T *x,
                                      const T *gamma, T rstd, T *y) {
  for (std::int64_t i = 0; i < width; ++i)
    y[i] = x[i] * rstd * gamma[i];
}

/// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma, xhat = x*rstd.
template <typename T>
WEFT_HD inline void rmsNormRowBackward(std::int64_t width, const T *x,
                                       const T *gamma, T rstd, const T *dy,
                                       T *dx) {
  T sumGXhat = 0;
  for (std::int64_t i = 0; i < width; ++i)
    sumGXhat += dy[i] * gamma[i] * x[i] * rstd;
  T meanGXhat = sumGXhat / T(width);
  for (std::int64_t i = 0; i < width; ++i)
    dx[i] = rstd * (dy[i] * gamma[i] - x[i] * rstd * meanGXhat);
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_NORMS_H
