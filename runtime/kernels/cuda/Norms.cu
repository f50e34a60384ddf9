//===- Norms.cu - LayerNorm and RMSNorm kernels ---------------------------===//
//
// The forward pass and the input gradient give each row to a warp (a block
// for rows wider than detail::kWideRow) whose lanes read consecutive columns
// and combine the row sums with shuffles; a warp's forward keeps its row in
// registers across the passes. The per-element math is that of the row
// functions in weft/kernels/Norms.h (only the summation order differs).
// Parameter gradients are column sums (detail::columnSums): one writer per
// dGamma/dBeta element, a fixed order, no atomics.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Norms.h"

namespace weft::kernels::gpu {
using detail::CachedRow;
using detail::columnSums;
using detail::kBlockSize;
using detail::kColumnBlockSize;
using detail::kWarpSize;
using detail::launchColumns;
using detail::launchRows;
using detail::RowGroup;
using detail::StreamedRow;
using detail::SumOp;

namespace {

/// A warp per row (its row cached), or a block per wide row (streamed).
using WarpRows = RowGroup<kWarpSize>;
using BlockRows = RowGroup<kBlockSize>;
using BlockRow = StreamedRow<kBlockSize>;

/// layerNormRowStats and layerNormRowForward over the group's rows: the mean,
/// then the biased variance in a second pass (no E[x^2] - E[x]^2
/// cancellation), then y.
template <typename G, typename Row>
__global__ void __launch_bounds__(G::kThreads)
    layerNormForwardKernel(int64_t rows, int64_t width, const float *x,
                           const float *gamma, const float *beta, float eps,
                           float *y, float *mean, float *rstd) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    Row xr(x + r * width, width);
    float *yr = y + r * width;
    float sum = 0;
    xr.forEach([&](int64_t, float v) { sum += v; });
    float rowMean = G::reduce(sum, SumOp()) / float(width);
    float sumSq = 0;
    xr.forEach([&](int64_t, float v) {
      float d = v - rowMean;
      sumSq += d * d;
    });
    float rowRstd =
        1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
    xr.forEach([&](int64_t c, float v) {
      float o = (v - rowMean) * rowRstd * gamma[c];
      yr[c] = beta ? o + beta[c] : o;
    });
    if (G::lane() == 0) {
      mean[r] = rowMean;
      rstd[r] = rowRstd;
    }
  }
}

__global__ void __launch_bounds__(kColumnBlockSize)
    layerNormParamGradKernel(int tile, int64_t rows, int64_t width,
                             const float *x, const float *mean,
                             const float *rstd, const float *dy, float *dGamma,
                             float *dBeta) {
  columnSums<2>(
      rows, width, tile,
      [=](int64_t r, int64_t c, float(&sum)[2]) {
        float d = dy[r * width + c];
        sum[0] += d * (x[r * width + c] - mean[r]) * rstd[r];
        sum[1] += d;
      },
      [=](int64_t c, const float(&total)[2]) {
        dGamma[c] += total[0];
        if (dBeta)
          dBeta[c] += total[1];
      });
}

/// layerNormRowBackward. dx may alias dy: every thread reads dy[c] before it
/// writes dx[c], and the other columns' dy are only read before the row
/// reduction, which all of the group's threads finish before any writes.
template <typename G>
__global__ void __launch_bounds__(G::kThreads)
    layerNormInputGradKernel(int64_t rows, int64_t width, const float *x,
                             const float *gamma, const float *mean,
                             const float *rstd, const float *dy, float *dx) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const float *xr = x + r * width, *dyr = dy + r * width;
    float *dxr = dx + r * width;
    float rowMean = mean[r], rowRstd = rstd[r];
    float sumG = 0, sumGXhat = 0;
    for (int64_t c = G::lane(); c < width; c += G::kSize) {
      float g = dyr[c] * gamma[c];
      sumG += g;
      sumGXhat += g * (xr[c] - rowMean) * rowRstd;
    }
    float meanG = G::reduce(sumG, SumOp()) / float(width);
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (int64_t c = G::lane(); c < width; c += G::kSize) {
      float xhat = (xr[c] - rowMean) * rowRstd;
      dxr[c] = rowRstd * (dyr[c] * gamma[c] - meanG - xhat * meanGXhat);
    }
  }
}

/// rmsNormRowRstd and rmsNormRowForward.
template <typename G, typename Row>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormForwardKernel(int64_t rows, int64_t width, const float *x,
                         const float *gamma, float eps, float *y, float *rstd) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    Row xr(x + r * width, width);
    float *yr = y + r * width;
    float sumSq = 0;
    xr.forEach([&](int64_t, float v) { sumSq += v * v; });
    float rowRstd =
        1.0f / math::sqrt(G::reduce(sumSq, SumOp()) / float(width) + eps);
    xr.forEach([&](int64_t c, float v) { yr[c] = v * rowRstd * gamma[c]; });
    if (G::lane() == 0)
      rstd[r] = rowRstd;
  }
}

__global__ void __launch_bounds__(kColumnBlockSize)
    rmsNormParamGradKernel(int tile, int64_t rows, int64_t width,
                           const float *x, const float *rstd, const float *dy,
                           float *dGamma) {
  columnSums<1>(
      rows, width, tile,
      [=](int64_t r, int64_t c, float(&sum)[1]) {
        sum[0] += dy[r * width + c] * x[r * width + c] * rstd[r];
      },
      [=](int64_t c, const float(&total)[1]) { dGamma[c] += total[0]; });
}

/// rmsNormRowBackward; dx may alias dy as in layerNormInputGradKernel.
template <typename G>
__global__ void __launch_bounds__(G::kThreads)
    rmsNormInputGradKernel(int64_t rows, int64_t width, const float *x,
                           const float *gamma, const float *rstd,
                           const float *dy, float *dx) {
  for (int64_t r = G::firstRow(); r < rows; r += G::rowStride()) {
    const float *xr = x + r * width, *dyr = dy + r * width;
    float *dxr = dx + r * width;
    float rowRstd = rstd[r];
    float sumGXhat = 0;
    for (int64_t c = G::lane(); c < width; c += G::kSize)
      sumGXhat += dyr[c] * gamma[c] * xr[c] * rowRstd;
    float meanGXhat = G::reduce(sumGXhat, SumOp()) / float(width);
    for (int64_t c = G::lane(); c < width; c += G::kSize)
      dxr[c] = rowRstd * (dyr[c] * gamma[c] - xr[c] * rowRstd * meanGXhat);
  }
}

} // namespace

cudaError_t layerNormForward(int64_t rows, int64_t width, const float *x,
                             const float *gamma, const float *beta, float eps,
                             float *y, float *mean, float *rstd,
                             cudaStream_t stream) {
  return launchRows(rows, width, stream,
                    layerNormForwardKernel<WarpRows, CachedRow>,
                    layerNormForwardKernel<BlockRows, BlockRow>, rows, width, x,
                    gamma, beta, eps, y, mean, rstd);
}

cudaError_t layerNormBackward(int64_t rows, int64_t width, const float *x,
                              const float *gamma, const float *mean,
                              const float *rstd, const float *dy, float *dx,
                              float *dGamma, float *dBeta,
                              cudaStream_t stream) {
  // Parameter gradients first: dx may alias dy.
  cudaError_t err =
      launchColumns(rows, width, stream, layerNormParamGradKernel, rows, width,
                    x, mean, rstd, dy, dGamma, dBeta);
  if (err != cudaSuccess)
    return err;
  return launchRows(rows, width, stream, layerNormInputGradKernel<WarpRows>,
                    layerNormInputGradKernel<BlockRows>, rows, width, x, gamma,
                    mean, rstd, dy, dx);
}

cudaError_t rmsNormForward(int64_t rows, int64_t width, const float *x,
                           const float *gamma, float eps, float *y, float *rstd,
                           cudaStream_t stream) {
  return launchRows(rows, width, stream,
                    rmsNormForwardKernel<WarpRows, CachedRow>,
                    rmsNormForwardKernel<BlockRows, BlockRow>, rows, width, x,
                    gamma, eps, y, rstd);
}

cudaError_t rmsNormBackward(int64_t rows, int64_t width, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dx, float *dGamma,
                            cudaStream_t stream) {
  // Parameter gradient first: dx may alias dy.
  cudaError_t err = launchColumns(rows, width, stream, rmsNormParamGradKernel,
                                  rows, width, x, rstd, dy, dGamma);
  if (err != cudaSuccess)
    return err;
  return launchRows(rows, width, stream, rmsNormInputGradKernel<WarpRows>,
                    rmsNormInputGradKernel<BlockRows>, rows, width, x, gamma,
                    rstd, dy, dx);
}

} // namespace weft::kernels::gpu
