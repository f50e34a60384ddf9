//===- NormKernels.cuh - Norm and bias-gradient kernels --------*- CUDA -*-===//
//
// The forward pass and the input gradient give each row to a warp (a block
// for rows wider than detail::kWideRow) whose lanes read consecutive columns
// and combine the row sums with shuffles; a warp's forward keeps its row in
// registers across the passes. The per-element math is that of the row
// functions in weft/kernels/Norms.h (only the summation order differs).
// Parameter gradients (dGamma, dBeta, dBias) are column sums
// (detail::columnSums): one writer per element, a fixed order, no atomics.
//
// Every kernel takes its float operands through a storage type S
// (storage::F32 or storage::Half16, Rows.cuh); statistics (mean, rstd) stay
// fp32. Parameter gradients accumulate: g = round(g + column sum). In a
// header so that WarpEmulationTests runs them on the CPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_NORMKERNELS_CUH
#define WEFT_KERNELS_CUDA_NORMKERNELS_CUH

#include "Rows.cuh"

namespace weft::kernels::gpu::norm {

using detail::columnSums;
using detail::GroupRow;
using detail::kColumnBlockSize;
using detail::SumOp;

/// A warp per row (its row cached), or a block per wide row (streamed).
using WarpRows = detail::RowGroup<detail::kWarpSize>;
using BlockRows = detail::RowGroup<detail::kBlockSize>;

/// layerNormRowStats and layerNormRowForward over the group's rows: the mean,
/// then the biased variance in a second pass (no E[x^2] - E[x]^2
/// cancellation), then y. `beta` is nullable.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    layerNormForward(S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const typename S::Elem *gamma,
                     const typename S::Elem *beta, float eps,
                     typename S::Elem *y, float *mean, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    GroupRow<G, S> xr(s, x + r * width, width);
    typename S::Elem *yr = y + r * width;
    float sum = 0;
    xr.forEach([&](std::int64_t, float v) { sum += v; });
    float rowMean = G::reduce(sum, SumOp()) / float(width);
    float sumSq = 0;
    xr.forEach([&](std::int64_t, float v) {
      float d = v - rowMean;
      sumSq += d * d;
    });
    float rowRstd =
        1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
    xr.forEach([&](std::int64_t c, float v) {
      float o = (v - rowMean) * rowRstd * s.load(gamma, c);
      s.store(yr, c, beta ? o + s.load(beta, c) : o);
    });
    if (G::lane() == 0) {
      mean[r] = rowMean;
      rstd[r] = rowRstd;
    }
  }
}

/// dGamma += sum_r dy xhat, dBeta (nullable) += sum_r dy.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    layerNormParamGrad(int tile, S s, std::int64_t rows, std::int64_t width,
                       const typename S::Elem *x, const float *mean,
                       const float *rstd, const typename S::Elem *dy,
                       typename S::Elem *dGamma, typename S::Elem *dBeta) {
  columnSums<2>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[2]) {
        float d = s.load(dy, r * width + c);
        sum[0] += d * (s.load(x, r * width + c) - mean[r]) * rstd[r];
        sum[1] += d;
      },
      [=](std::int64_t c, const float(&total)[2]) {
        s.store(dGamma, c, s.load(dGamma, c) + total[0]);
        if (dBeta)
          s.store(dBeta, c, s.load(dBeta, c) + total[1]);
      });
}

/// layerNormRowBackward. dx may alias dy: every thread reads dy[c] before it
/// writes dx[c], and the other columns' dy are only read before the row
/// reduction, which all of the group's threads finish before any writes.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    layerNormInputGrad(S s, std::int64_t rows, std::int64_t width,
                       const typename S::Elem *x, const typename S::Elem *gamma,
                       const float *mean, const float *rstd,
                       const typename S::Elem *dy, typename S::Elem *dx) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx + r * width;
    float rowMean = mean[r], rowRstd = rstd[r];
    float sumG = 0, sumGXhat = 0;
    for (std::int64_t c = G::lane(); c < width; c += G::kSize) {
      float g = s.load(dyr, c) * s.load(gamma, c);
      sumG += g;
      sumGXhat += g * (s.load(xr, c) - rowMean) * rowRstd;
    }
    float meanG = G::reduce(sumG, SumOp()) / float(width);
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (std::int64_t c = G::lane(); c < width; c += G::kSize) {
      float xhat = (s.load(xr, c) - rowMean) * rowRstd;
      s.store(dxr, c,
              rowRstd * (s.load(dyr, c) * s.load(gamma, c) - meanG -
                         xhat * meanGXhat));
    }
  }
}

/// rmsNormRowRstd and rmsNormRowForward.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormForward(S s, std::int64_t rows, std::int64_t width,
                   const typename S::Elem *x, const typename S::Elem *gamma,
                   float eps, typename S::Elem *y, float *rstd) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    GroupRow<G, S> xr(s, x + r * width, width);
    typename S::Elem *yr = y + r * width;
    float sumSq = 0;
    xr.forEach([&](std::int64_t, float v) { sumSq += v * v; });
    float rowRstd =
        1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
    xr.forEach([&](std::int64_t c, float v) {
      s.store(yr, c, v * rowRstd * s.load(gamma, c));
    });
    if (G::lane() == 0)
      rstd[r] = rowRstd;
  }
}

/// dGamma += sum_r dy x rstd.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    rmsNormParamGrad(int tile, S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const float *rstd,
                     const typename S::Elem *dy, typename S::Elem *dGamma) {
  columnSums<1>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[1]) {
        sum[0] +=
            s.load(dy, r * width + c) * s.load(x, r * width + c) * rstd[r];
      },
      [=](std::int64_t c, const float(&total)[1]) {
        s.store(dGamma, c, s.load(dGamma, c) + total[0]);
      });
}

/// rmsNormRowBackward; dx may alias dy as in layerNormInputGrad.
template <typename G, typename S>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormInputGrad(S s, std::int64_t rows, std::int64_t width,
                     const typename S::Elem *x, const typename S::Elem *gamma,
                     const float *rstd, const typename S::Elem *dy,
                     typename S::Elem *dx) {
  for (std::int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const typename S::Elem *xr = x + r * width, *dyr = dy + r * width;
    typename S::Elem *dxr = dx + r * width;
    float rowRstd = rstd[r];
    float sumGXhat = 0;
    for (std::int64_t c = G::lane(); c < width; c += G::kSize)
      sumGXhat += s.load(dyr, c) * s.load(gamma, c) * s.load(xr, c) * rowRstd;
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (std::int64_t c = G::lane(); c < width; c += G::kSize)
      s.store(dxr, c,
              rowRstd * (s.load(dyr, c) * s.load(gamma, c) -
                         s.load(xr, c) * rowRstd * meanGXhat));
  }
}

/// dBias += sum_r dy.
template <typename S>
__global__ void __launch_bounds__(kColumnBlockSize)
    biasGrad(int tile, S s, std::int64_t rows, std::int64_t width,
             const typename S::Elem *dy, typename S::Elem *dBias) {
  columnSums<1>(
      rows, width, tile,
      [=](std::int64_t r, std::int64_t c, float(&sum)[1]) {
        sum[0] += s.load(dy, r * width + c);
      },
      [=](std::int64_t c, const float(&total)[1]) {
        s.store(dBias, c, s.load(dBias, c) + total[0]);
      });
}

} // namespace weft::kernels::gpu::norm

#endif // WEFT_KERNELS_CUDA_NORMKERNELS_CUH
