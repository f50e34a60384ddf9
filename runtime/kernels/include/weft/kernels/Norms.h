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

/// The identity: what a norm's input gradient needs when fp32 stores it.
struct NoRounding {
  template <typename T> WEFT_HD T operator()(T v) const { return v; }
};

/// One row's terms of the LayerNorm input gradient.
template <typename T> struct LayerNormRowGrad {
  T mean, rstd, meanG, meanGXhat;

  /// dx of element x given dy and gamma there.
  WEFT_HD T at(T x, T gamma, T dy) const {
    T xhat = (x - mean) * rstd;
    return rstd * (dy * gamma - meanG - xhat * meanGXhat);
  }
};

/// mean(g) and mean(g * xhat) of one row, g = dy * gamma.
template <typename T>
WEFT_HD inline LayerNormRowGrad<T>
layerNormRowGrad(std::int64_t width, const T *x, const T *gamma, T mean, T rstd,
                 const T *dy) {
  T sumG = 0, sumGXhat = 0;
  for (std::int64_t i = 0; i < width; ++i) {
    T g = dy[i] * gamma[i];
    sumG += g;
    sumGXhat += g * (x[i] - mean) * rstd;
  }
  return {mean, rstd, sumG / T(width), sumGXhat / T(width)};
}

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
/// dx may be dy.
template <typename T>
WEFT_HD inline void layerNormRowBackward(std::int64_t width, const T *x,
                                         const T *gamma, T mean, T rstd,
                                         const T *dy, T *dx) {
  LayerNormRowGrad<T> grad = layerNormRowGrad(width, x, gamma, mean, rstd, dy);
  for (std::int64_t i = 0; i < width; ++i)
    dx[i] = grad.at(x[i], gamma[i], dy[i]);
}

/// layerNormRowBackward, then the residual add of its dx: sum = round(dx) +
/// addend, `round` giving dx as its storage would hold it (a 16-bit
/// rounding, or NoRounding), without storing dx. sum may be dy or addend
/// here (the CUDA two-pass path allows only dy).
template <typename T, typename Round = NoRounding>
WEFT_HD inline void layerNormRowBackwardAdd(std::int64_t width, const T *x,
                                            const T *gamma, T mean, T rstd,
                                            const T *dy, const T *addend,
                                            T *sum, Round round = {}) {
  LayerNormRowGrad<T> grad = layerNormRowGrad(width, x, gamma, mean, rstd, dy);
  for (std::int64_t i = 0; i < width; ++i)
    sum[i] = round(grad.at(x[i], gamma[i], dy[i])) + addend[i];
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

/// One row's terms of the RMSNorm input gradient.
template <typename T> struct RmsNormRowGrad {
  T rstd, meanGXhat;

  /// dx of element x given dy and gamma there.
  WEFT_HD T at(T x, T gamma, T dy) const {
    return rstd * (dy * gamma - x * rstd * meanGXhat);
  }
};

/// mean(g * xhat) of one row, g = dy * gamma, xhat = x * rstd.
template <typename T>
WEFT_HD inline RmsNormRowGrad<T> rmsNormRowGrad(std::int64_t width, const T *x,
                                                const T *gamma, T rstd,
                                                const T *dy) {
  T sumGXhat = 0;
  for (std::int64_t i = 0; i < width; ++i)
    sumGXhat += dy[i] * gamma[i] * x[i] * rstd;
  return {rstd, sumGXhat / T(width)};
}

/// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * gamma, xhat = x*rstd.
/// dx may be dy.
template <typename T>
WEFT_HD inline void rmsNormRowBackward(std::int64_t width, const T *x,
                                       const T *gamma, T rstd, const T *dy,
                                       T *dx) {
  RmsNormRowGrad<T> grad = rmsNormRowGrad(width, x, gamma, rstd, dy);
  for (std::int64_t i = 0; i < width; ++i)
    dx[i] = grad.at(x[i], gamma[i], dy[i]);
}

/// rmsNormRowBackward, then sum = round(dx) + addend (as
/// layerNormRowBackwardAdd). sum may be dy or addend here (as there).
template <typename T, typename Round = NoRounding>
WEFT_HD inline void
rmsNormRowBackwardAdd(std::int64_t width, const T *x, const T *gamma, T rstd,
                      const T *dy, const T *addend, T *sum, Round round = {}) {
  RmsNormRowGrad<T> grad = rmsNormRowGrad(width, x, gamma, rstd, dy);
  for (std::int64_t i = 0; i < width; ++i)
    sum[i] = round(grad.at(x[i], gamma[i], dy[i])) + addend[i];
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_NORMS_H
