//===- Norms.cu - LayerNorm, RMSNorm and bias-gradient launches -----------===//
//
// The kernels are in NormKernels.cuh; here they are launched on fp32
// operands (storage::F32) and, for bf16/f16 models, on 16-bit storage
// (storage::Half16) with the same grid and the same arithmetic, so the
// 16-bit launches give the widening path's results bit for bit.
//
//===----------------------------------------------------------------------===//

#include "Launch.cuh"
#include "NormKernels.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {
using detail::halfStorage;
using detail::in;
using detail::launchColumns;
using detail::launchRows;
using detail::out;
using norm::BlockRows;
using norm::WarpRows;

namespace {

template <typename S>
cudaError_t
layerNormForwardOn(S s, int64_t rows, int64_t width, const typename S::Elem *x,
                   const typename S::Elem *gamma, const typename S::Elem *beta,
                   float eps, typename S::Elem *y, float *mean, float *rstd,
                   cudaStream_t stream) {
  return launchRows(rows, width, stream, norm::layerNormForward<WarpRows, S>,
                    norm::layerNormForward<BlockRows, S>, s, rows, width, x,
                    gamma, beta, eps, y, mean, rstd);
}

/// The one-pass backward (its partial sums in `scratch`), then the partial
/// sums' column sums into dGamma and dBeta (nullable).
template <typename S, typename... Params, typename... Args>
cudaError_t onePass(S s, int64_t rows, int64_t width, float *scratch,
                    typename S::Elem *dGamma, typename S::Elem *dBeta,
                    cudaStream_t stream, void (*warpKernel)(Params...),
                    void (*blockKernel)(Params...), Args... args) {
  cudaError_t err = detail::launchRowGrid(
      norm::onePassGrid(rows, width), stream, warpKernel, blockKernel, args...);
  if (err != cudaSuccess)
    return err;
  int64_t groups = norm::onePassGrid(rows, width).blocks;
  return launchColumns(groups, width, stream, norm::normGradSums<S>, s, groups,
                       width, static_cast<const float *>(scratch), dGamma,
                       dBeta);
}

/// The backward; with `sum` (one-pass only) also sum = dx + addend.
template <typename S>
cudaError_t layerNormBackwardOn(
    S s, int64_t rows, int64_t width, const typename S::Elem *x,
    const typename S::Elem *gamma, const float *mean, const float *rstd,
    const typename S::Elem *dy, typename S::Elem *dx, typename S::Elem *dGamma,
    typename S::Elem *dBeta, float *scratch, cudaStream_t stream,
    const typename S::Elem *addend = nullptr, typename S::Elem *sum = nullptr) {
  if (scratch && norm::onePassFits(width))
    return onePass(s, rows, width, scratch, dGamma, dBeta, stream,
                   norm::layerNormBackwardOnePass<WarpRows, S>,
                   norm::layerNormBackwardOnePass<BlockRows, S>, s, rows, width,
                   x, gamma, mean, rstd, dy, dx, scratch, addend, sum);
  // Parameter gradients first: dx may alias dy.
  cudaError_t err =
      launchColumns(rows, width, stream, norm::layerNormParamGrad<S>, s, rows,
                    width, x, mean, rstd, dy, dGamma, dBeta);
  if (err != cudaSuccess)
    return err;
  return launchRows(rows, width, stream, norm::layerNormInputGrad<WarpRows, S>,
                    norm::layerNormInputGrad<BlockRows, S>, s, rows, width, x,
                    gamma, mean, rstd, dy, dx);
}

template <typename S>
cudaError_t
rmsNormForwardOn(S s, int64_t rows, int64_t width, const typename S::Elem *x,
                 const typename S::Elem *gamma, float eps, typename S::Elem *y,
                 float *rstd, cudaStream_t stream) {
  return launchRows(rows, width, stream, norm::rmsNormForward<WarpRows, S>,
                    norm::rmsNormForward<BlockRows, S>, s, rows, width, x,
                    gamma, eps, y, rstd);
}

/// The backward; with `sum` (one-pass only) also sum = dx + addend.
template <typename S>
cudaError_t
rmsNormBackwardOn(S s, int64_t rows, int64_t width, const typename S::Elem *x,
                  const typename S::Elem *gamma, const float *rstd,
                  const typename S::Elem *dy, typename S::Elem *dx,
                  typename S::Elem *dGamma, float *scratch, cudaStream_t stream,
                  const typename S::Elem *addend = nullptr,
                  typename S::Elem *sum = nullptr) {
  if (scratch && norm::onePassFits(width))
    return onePass(s, rows, width, scratch, dGamma,
                   static_cast<typename S::Elem *>(nullptr), stream,
                   norm::rmsNormBackwardOnePass<WarpRows, S>,
                   norm::rmsNormBackwardOnePass<BlockRows, S>, s, rows, width,
                   x, gamma, rstd, dy, dx, scratch, addend, sum);
  // Parameter gradient first: dx may alias dy.
  cudaError_t err =
      launchColumns(rows, width, stream, norm::rmsNormParamGrad<S>, s, rows,
                    width, x, rstd, dy, dGamma);
  if (err != cudaSuccess)
    return err;
  return launchRows(rows, width, stream, norm::rmsNormInputGrad<WarpRows, S>,
                    norm::rmsNormInputGrad<BlockRows, S>, s, rows, width, x,
                    gamma, rstd, dy, dx);
}

template <typename S>
cudaError_t residualLayerNormForwardOn(
    S s, int64_t rows, int64_t width, const typename S::Elem *a,
    const typename S::Elem *b, typename S::Elem *sum,
    const typename S::Elem *gamma, const typename S::Elem *beta, float eps,
    typename S::Elem *y, float *mean, float *rstd, cudaStream_t stream) {
  return launchRows(rows, width, stream,
                    norm::residualLayerNormForward<WarpRows, S>,
                    norm::residualLayerNormForward<BlockRows, S>, s, rows,
                    width, a, b, sum, gamma, beta, eps, y, mean, rstd);
}

template <typename S>
cudaError_t
residualRmsNormForwardOn(S s, int64_t rows, int64_t width,
                         const typename S::Elem *a, const typename S::Elem *b,
                         typename S::Elem *sum, const typename S::Elem *gamma,
                         float eps, typename S::Elem *y, float *rstd,
                         cudaStream_t stream) {
  return launchRows(rows, width, stream,
                    norm::residualRmsNormForward<WarpRows, S>,
                    norm::residualRmsNormForward<BlockRows, S>, s, rows, width,
                    a, b, sum, gamma, eps, y, rstd);
}

/// Whether the norm backward with its residual add runs in one pass; if
/// not, dx goes into `sum` and an add (sum += addend) follows.
bool backwardAddInOnePass(const float *scratch, int64_t width) {
  return scratch && norm::onePassFits(width);
}

} // namespace

//===--- fp32 ------------------------------------------------------------===//

cudaError_t layerNormForward(int64_t rows, int64_t width, const float *x,
                             const float *gamma, const float *beta, float eps,
                             float *y, float *mean, float *rstd,
                             cudaStream_t stream) {
  return layerNormForwardOn(storage::F32(), rows, width, x, gamma, beta, eps, y,
                            mean, rstd, stream);
}

cudaError_t layerNormBackward(int64_t rows, int64_t width, const float *x,
                              const float *gamma, const float *mean,
                              const float *rstd, const float *dy, float *dx,
                              float *dGamma, float *dBeta, cudaStream_t stream,
                              float *scratch) {
  return layerNormBackwardOn(storage::F32(), rows, width, x, gamma, mean, rstd,
                             dy, dx, dGamma, dBeta, scratch, stream);
}

cudaError_t rmsNormForward(int64_t rows, int64_t width, const float *x,
                           const float *gamma, float eps, float *y, float *rstd,
                           cudaStream_t stream) {
  return rmsNormForwardOn(storage::F32(), rows, width, x, gamma, eps, y, rstd,
                          stream);
}

cudaError_t rmsNormBackward(int64_t rows, int64_t width, const float *x,
                            const float *gamma, const float *rstd,
                            const float *dy, float *dx, float *dGamma,
                            cudaStream_t stream, float *scratch) {
  return rmsNormBackwardOn(storage::F32(), rows, width, x, gamma, rstd, dy, dx,
                           dGamma, scratch, stream);
}

int64_t normBackwardScratchFloats(int64_t rows, int64_t width) {
  return norm::onePassFits(width)
             ? norm::onePassGrid(rows, width).blocks * 2 * width
             : 0;
}

cudaError_t residualLayerNormForward(int64_t rows, int64_t width,
                                     const float *a, const float *b, float *sum,
                                     const float *gamma, const float *beta,
                                     float eps, float *y, float *mean,
                                     float *rstd, cudaStream_t stream) {
  return residualLayerNormForwardOn(storage::F32(), rows, width, a, b, sum,
                                    gamma, beta, eps, y, mean, rstd, stream);
}

cudaError_t residualRmsNormForward(int64_t rows, int64_t width, const float *a,
                                   const float *b, float *sum,
                                   const float *gamma, float eps, float *y,
                                   float *rstd, cudaStream_t stream) {
  return residualRmsNormForwardOn(storage::F32(), rows, width, a, b, sum, gamma,
                                  eps, y, rstd, stream);
}

cudaError_t layerNormBackwardAdd(int64_t rows, int64_t width, const float *x,
                                 const float *gamma, const float *mean,
                                 const float *rstd, const float *dy,
                                 const float *addend, float *sum, float *dGamma,
                                 float *dBeta, cudaStream_t stream,
                                 float *scratch) {
  if (backwardAddInOnePass(scratch, width))
    return layerNormBackwardOn(storage::F32(), rows, width, x, gamma, mean,
                               rstd, dy, static_cast<float *>(nullptr), dGamma,
                               dBeta, scratch, stream, addend, sum);
  cudaError_t err = layerNormBackward(rows, width, x, gamma, mean, rstd, dy,
                                      sum, dGamma, dBeta, stream, nullptr);
  return err ? err : residualAdd(rows * width, sum, addend, sum, stream);
}

cudaError_t rmsNormBackwardAdd(int64_t rows, int64_t width, const float *x,
                               const float *gamma, const float *rstd,
                               const float *dy, const float *addend, float *sum,
                               float *dGamma, cudaStream_t stream,
                               float *scratch) {
  if (backwardAddInOnePass(scratch, width))
    return rmsNormBackwardOn(storage::F32(), rows, width, x, gamma, rstd, dy,
                             static_cast<float *>(nullptr), dGamma, scratch,
                             stream, addend, sum);
  cudaError_t err = rmsNormBackward(rows, width, x, gamma, rstd, dy, sum,
                                    dGamma, stream, nullptr);
  return err ? err : residualAdd(rows * width, sum, addend, sum, stream);
}

cudaError_t biasGrad(int64_t rows, int64_t width, const float *dy, float *dBias,
                     cudaStream_t stream) {
  return launchColumns(rows, width, stream, norm::biasGrad<storage::F32>,
                       storage::F32(), rows, width, dy, dBias);
}

//===--- 16-bit storage -------------------------------------------------===//

cudaError_t halfLayerNormForward(HalfType type, int64_t rows, int64_t width,
                                 const void *x, const void *gamma,
                                 const void *beta, float eps, void *y,
                                 float *mean, float *rstd,
                                 cudaStream_t stream) {
  return layerNormForwardOn(halfStorage(type), rows, width, in(x), in(gamma),
                            in(beta), eps, out(y), mean, rstd, stream);
}

cudaError_t halfLayerNormBackward(HalfType type, int64_t rows, int64_t width,
                                  const void *x, const void *gamma,
                                  const float *mean, const float *rstd,
                                  const void *dy, void *dx, void *dGamma,
                                  void *dBeta, cudaStream_t stream,
                                  float *scratch) {
  return layerNormBackwardOn(halfStorage(type), rows, width, in(x), in(gamma),
                             mean, rstd, in(dy), out(dx), out(dGamma),
                             out(dBeta), scratch, stream);
}

cudaError_t halfLayerNormBackwardAdd(HalfType type, int64_t rows, int64_t width,
                                     const void *x, const void *gamma,
                                     const float *mean, const float *rstd,
                                     const void *dy, const void *addend,
                                     void *sum, void *dGamma, void *dBeta,
                                     cudaStream_t stream, float *scratch) {
  if (backwardAddInOnePass(scratch, width))
    return layerNormBackwardOn(
        halfStorage(type), rows, width, in(x), in(gamma), mean, rstd, in(dy),
        static_cast<storage::Half16::Elem *>(nullptr), out(dGamma), out(dBeta),
        scratch, stream, in(addend), out(sum));
  cudaError_t err = halfLayerNormBackward(type, rows, width, x, gamma, mean,
                                          rstd, dy, sum, dGamma, dBeta, stream);
  return err ? err
             : halfResidualAdd(type, rows * width, sum, addend, sum, stream);
}

cudaError_t halfRmsNormBackwardAdd(HalfType type, int64_t rows, int64_t width,
                                   const void *x, const void *gamma,
                                   const float *rstd, const void *dy,
                                   const void *addend, void *sum, void *dGamma,
                                   cudaStream_t stream, float *scratch) {
  if (backwardAddInOnePass(scratch, width))
    return rmsNormBackwardOn(
        halfStorage(type), rows, width, in(x), in(gamma), rstd, in(dy),
        static_cast<storage::Half16::Elem *>(nullptr), out(dGamma), scratch,
        stream, in(addend), out(sum));
  cudaError_t err = halfRmsNormBackward(type, rows, width, x, gamma, rstd, dy,
                                        sum, dGamma, stream);
  return err ? err
             : halfResidualAdd(type, rows * width, sum, addend, sum, stream);
}

cudaError_t halfResidualLayerNormForward(HalfType type, int64_t rows,
                                         int64_t width, const void *a,
                                         const void *b, void *sum,
                                         const void *gamma, const void *beta,
                                         float eps, void *y, float *mean,
                                         float *rstd, cudaStream_t stream) {
  return residualLayerNormForwardOn(halfStorage(type), rows, width, in(a),
                                    in(b), out(sum), in(gamma), in(beta), eps,
                                    out(y), mean, rstd, stream);
}

cudaError_t halfResidualRmsNormForward(HalfType type, int64_t rows,
                                       int64_t width, const void *a,
                                       const void *b, void *sum,
                                       const void *gamma, float eps, void *y,
                                       float *rstd, cudaStream_t stream) {
  return residualRmsNormForwardOn(halfStorage(type), rows, width, in(a), in(b),
                                  out(sum), in(gamma), eps, out(y), rstd,
                                  stream);
}

cudaError_t halfRmsNormForward(HalfType type, int64_t rows, int64_t width,
                               const void *x, const void *gamma, float eps,
                               void *y, float *rstd, cudaStream_t stream) {
  return rmsNormForwardOn(halfStorage(type), rows, width, in(x), in(gamma), eps,
                          out(y), rstd, stream);
}

cudaError_t halfRmsNormBackward(HalfType type, int64_t rows, int64_t width,
                                const void *x, const void *gamma,
                                const float *rstd, const void *dy, void *dx,
                                void *dGamma, cudaStream_t stream,
                                float *scratch) {
  return rmsNormBackwardOn(halfStorage(type), rows, width, in(x), in(gamma),
                           rstd, in(dy), out(dx), out(dGamma), scratch, stream);
}

cudaError_t halfBiasGrad(HalfType type, int64_t rows, int64_t width,
                         const void *dy, void *dBias, cudaStream_t stream) {
  return launchColumns(rows, width, stream, norm::biasGrad<storage::Half16>,
                       halfStorage(type), rows, width, in(dy), out(dBias));
}

} // namespace weft::kernels::gpu
