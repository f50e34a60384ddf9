//===- Norms.cu - LayerNorm and RMSNorm kernels ---------------------------===//
//
// One thread per row runs the shared row functions; parameter gradients use
// one thread per column so each dGamma/dBeta element has a single writer.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Norms.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

namespace {

__global__ void layerNormForwardKernel(int64_t rows, int64_t width,
                                       const float *x, const float *gamma,
                                       const float *beta, float eps, float *y,
                                       float *mean, float *rstd) {
  int64_t r = globalIndex();
  if (r >= rows)
    return;
  const float *xr = x + r * width;
  float rowMean, rowRstd;
  layerNormRowStats(width, xr, eps, rowMean, rowRstd);
  layerNormRowForward(width, xr, gamma, beta, rowMean, rowRstd, y + r * width);
  mean[r] = rowMean;
  rstd[r] = rowRstd;
}

__global__ void layerNormParamGradKernel(int64_t rows, int64_t width,
                                         const float *x, const float *mean,
                                         const float *rstd, const float *dy,
                                         float *dGamma, float *dBeta) {
  int64_t c = globalIndex();
  if (c >= width)
    return;
  float sumGamma = 0, sumBeta = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float d = dy[r * width + c];
    sumGamma += d * (x[r * width + c] - mean[r]) * rstd[r];
    sumBeta += d;
  }
  dGamma[c] += sumGamma;
  if (dBeta)
    dBeta[c] += sumBeta;
}

__global__ void layerNormInputGradKernel(int64_t rows, int64_t width,
                                         const float *x, const float *gamma,
                                         const float *mean, const float *rstd,
                                         const float *dy, float *dx) {
  int64_t r = globalIndex();
  if (r < rows)
    layerNormRowBackward(width, x + r * width, gamma, mean[r], rstd[r],
                         dy + r * width, dx + r * width);
}

__global__ void rmsNormForwardKernel(int64_t rows, int64_t width,
                                     const float *x, const float *gamma,
                                     float eps, float *y, float *rstd) {
  int64_t r = globalIndex();
  if (r >= rows)
    return;
  const float *xr = x + r * width;
  float rowRstd = rmsNormRowRstd(width, xr, eps);
  rmsNormRowForward(width, xr, gamma, rowRstd, y + r * width);
  rstd[r] = rowRstd;
}

__global__ void rmsNormParamGradKernel(int64_t rows, int64_t width,
                                       const float *x, const float *rstd,
                                       const float *dy, float *dGamma) {
  int64_t c = globalIndex();
  if (c >= width)
    return;
  float sum = 0;
  for (int64_t r = 0; r < rows; ++r)
    sum += dy[r * width + c] * x[r * width + c] * rstd[r];
  dGamma[c] += sum;
}

__global__ void rmsNormInputGradKernel(int64_t rows, int64_t width,
                                       const float *x, const float *gamma,
                                       const float *rstd, const float *dy,
                                       float *dx) {
  int64_t r = globalIndex();
  if (r < rows)
    rmsNormRowBackward(width, x + r * width, gamma, rstd[r], dy + r * width,
                       dx + r * width);
}

} // namespace

cudaError_t layerNormForward(int64_t rows, int64_t width, const float *x,
                             const float *gamma, const float *beta, float eps,
                             float *y, float *mean, float *rstd,
                             cudaStream_t stream) {
  return launch(rows, stream, layerNormForwardKernel, rows, width, x, gamma,
                beta, eps, y, mean, rstd);
}

cudaError_t layerNormBackward(int64_t rows, int64_t width, const float *x,
                              const float *gamma, const float *mean,
                              const float *rstd, const float *dy, float *dx,
                              float *dGamma, float *dBeta,
                              cudaStream_t stream) {
  // Parameter gradients first: dx may alias dy.
  cudaError_t err = launch(width, stream, layerNormParamGradKernel, rows, width,
                           x, mean, rstd, dy, dGamma, dBeta);
  if (err != cudaSuccess)
    return err;
  return launch(rows, stream, layerNormInputGradKernel, rows, width, x, gamma,
                mean, rstd, dy, dx);
}

cudaError_t rmsNormForward(int64_t rows, int64_t width, const float *x,
                           const float *gamma, float eps, float *y, float *rstd,
                           cudaStream_t stream) {
  return launch(rows, stream, rmsNormForwardKernel, rows, width, x, gamma, eps,
                y, rstd);
}

cudaError_t rmsNormBackward(int64_t rows, int64_t width, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dx, float *dGamma,
                            cudaStream_t stream) {
  cudaError_t err = launch(width, stream, rmsNormParamGradKernel, rows, width,
                           x, rstd, dy, dGamma);
  if (err != cudaSuccess)
    return err;
  return launch(rows, stream, rmsNormInputGradKernel, rows, width, x, gamma,
                rstd, dy, dx);
}

} // namespace weft::kernels::gpu
