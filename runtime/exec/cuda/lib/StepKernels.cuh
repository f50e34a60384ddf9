//===- StepKernels.cuh - The CUDA backend's optimizer-phase kernels -------===//
//
// The sum of squares, the clip and the one-pass AdamW of Helpers.cu, in a
// header so that WeftWarpEmulationTests run them on the CPU
// (WEFT_WARP_EMULATION): the gradients' sum of squares, and the overflow skip
// and the clip factor an optimizer_step derives from it on the device, are
// checked on every machine.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_STEPKERNELS_CUH
#define WEFT_EXEC_CUDA_STEPKERNELS_CUH

#include "FloatStorage.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/Optimizer.h"

#include <cstdint>

namespace weft::exec::cuda::steps {

constexpr int kBlock = 256;

__device__ inline std::int64_t index1d() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline float load(const void *x, std::int64_t i,
                             FloatStorage storage) {
  const auto *bits = static_cast<const std::uint16_t *>(x);
  switch (storage) {
  case FloatStorage::BF16:
    return kernels::bf16ToFloat(kernels::BF16{bits[i]});
  case FloatStorage::F16:
    return kernels::f16ToFloat(kernels::F16{bits[i]});
  default:
    return static_cast<const float *>(x)[i];
  }
}

__device__ inline void store(void *x, std::int64_t i, FloatStorage storage,
                             float value) {
  switch (storage) {
  case FloatStorage::BF16:
    static_cast<std::uint16_t *>(x)[i] = kernels::floatToBf16(value).bits;
    break;
  case FloatStorage::F16:
    static_cast<std::uint16_t *>(x)[i] = kernels::floatToF16(value).bits;
    break;
  default:
    static_cast<float *>(x)[i] = value;
    break;
  }
}

/// grad_norm's sum of squares in a fixed order, so that a clipped step is
/// the same on every run: at most kSumBlocks blocks stride over x, each
/// writes its block's sum (a fixed tree) into partials[block], then one
/// block adds partials[0..blocks) in a fixed tree to *acc. No atomics.
constexpr int kSumBlocks = 1024;

__device__ inline double blockSum(double value) {
  __shared__ double partial[kBlock];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return partial[0];
}

__global__ void sumSquaresKernel(std::int64_t n, const void *x,
                                 FloatStorage storage, double *partials) {
  double sum = 0;
  for (std::int64_t i = index1d(); i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    double v = double(load(x, i, storage));
    sum += v * v;
  }
  double total = blockSum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = total;
}

/// One block: *acc += the sum of partials[0..blocks).
__global__ void addPartialsKernel(int blocks, const double *partials,
                                  double *acc) {
  double sum = 0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x)
    sum += partials[b];
  double total = blockSum(sum);
  if (threadIdx.x == 0)
    *acc += total;
}

/// `clip` (plans compiled before 2026-12-01): x *= maxNorm / sqrt(*sumSq)
/// where that norm exceeds maxNorm > 0.
__global__ void clipKernel(std::int64_t n, void *x, FloatStorage storage,
                           const float *sumSq, float maxNorm) {
  std::int64_t i = index1d();
  if (i >= n)
    return;
  float norm = sqrtf(*sumSq);
  if (maxNorm <= 0 || !(norm > maxNorm))
    return;
  float factor = maxNorm / norm;
  store(x, i, storage, load(x, i, storage) * factor);
}

/// Blocks of adamwKernel at most: each thread strides over the elements, so
/// a block's prologue (the clip factor, one dependent read of the step and
/// the sum of squares, and a barrier) is paid once per block, not once per
/// 256 elements, where it would keep the kernel well below HBM bandwidth.
constexpr int kAdamWBlocks = 4096;

/// One pass: the gradient widened in registers, AdamW, the weights' 16-bit
/// copy rounded from the updated fp32 weight (what widening, adamwElement
/// and a separate narrowing pass give, bit for bit). Given the global sum of
/// squares (`sumSq`), the clip factor and the overflow skip come from it
/// (kernels::clippedGradScale): computed once per block, by its first
/// thread, as the CPU backend computes them once per instruction. Any grid
/// covers the elements (a grid-stride loop).
__global__ void adamwKernel(const kernels::AdamWStep *step, std::int64_t n,
                            const void *grad, FloatStorage gradStorage,
                            float *param, float *m, float *v, void *low,
                            FloatStorage lowStorage, const float *sumSq) {
  __shared__ double gradScale;
  __shared__ int apply;
  if (threadIdx.x == 0) {
    double scale = step->gradScale;
    apply = !sumSq || kernels::clippedGradScale(*step, *sumSq, scale);
    gradScale = scale;
  }
  __syncthreads();
  if (!apply)
    return;
  kernels::AdamWStep s = *step;
  s.gradScale = gradScale;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = index1d(); i < n; i += stride) {
    float p = param[i], mi = m[i], vi = v[i];
    kernels::adamwElement(s, load(grad, i, gradStorage), p, mi, vi);
    param[i] = p;
    m[i] = mi;
    v[i] = vi;
    if (low)
      store(low, i, lowStorage, p);
  }
}

} // namespace weft::exec::cuda::steps

#endif // WEFT_EXEC_CUDA_STEPKERNELS_CUH
