//===- Helpers.cu - Small kernels of the CUDA backend ---------------------===//
//
// Conversions, fills, reductions and the graph-safe optimizer step: what the
// CPU backend does inline around the kernel library.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "StepKernels.cuh"
#include "weft/exec/cuda/Workspace.h"
#include "weft/kernels/Common.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace weft::exec::cuda {

namespace {

using steps::index1d;
using steps::kBlock;
using steps::load;
using steps::store;

unsigned blocksFor(int64_t n) { return unsigned((n + kBlock - 1) / kBlock); }

__global__ void halfToF32Kernel(int64_t n, const std::uint16_t *in,
                                FloatStorage half, float *out) {
  int64_t i = index1d();
  if (i < n)
    out[i] = load(in, i, half);
}

__global__ void f32ToHalfKernel(int64_t n, const float *in, FloatStorage half,
                                std::uint16_t *out) {
  int64_t i = index1d();
  if (i < n)
    store(out, i, half, in[i]);
}

__global__ void roundKernel(int64_t n, float *x, FloatStorage half) {
  int64_t i = index1d();
  if (i < n) {
    std::uint16_t bits;
    store(&bits, 0, half, x[i]);
    x[i] = load(&bits, 0, half);
  }
}

__global__ void noiseKernel(int64_t words, std::uint16_t *dst) {
  int64_t i = index1d();
  if (i < words) {
    // A 32-bit hash of the index: random sign and low mantissa bits, the
    // exponent of 1.0 in f16 (2^-7 in bf16; as the high half of an f32 or
    // f64 a small normal number).
    std::uint32_t h = std::uint32_t(i) * 0x9e3779b1u;
    h ^= h >> 15;
    h *= 0x85ebca77u;
    h ^= h >> 13;
    dst[i] = std::uint16_t((h & 0x8000u) | 0x3c00u | (h & 0x03ffu));
  }
}

template <typename T> __global__ void fillKernel(int64_t n, T *dst, T value) {
  int64_t i = index1d();
  if (i < n)
    dst[i] = value;
}

__global__ void scaleKernel(int64_t n, float *x, float factor) {
  int64_t i = index1d();
  if (i < n)
    x[i] *= factor;
}

__global__ void finishLossKernel(const float *loss, float divisor,
                                 bool accumulate, float *out) {
  float part = *loss / divisor;
  *out = accumulate ? *out + part : part;
}

__global__ void doubleToFloatKernel(const double *in, float *out) {
  *out = float(*in);
}

} // namespace

cudaError_t halfToF32(int64_t n, const std::uint16_t *in, FloatStorage half,
                      float *out, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  halfToF32Kernel<<<blocksFor(n), kBlock, 0, stream>>>(n, in, half, out);
  return cudaGetLastError();
}

cudaError_t f32ToHalf(int64_t n, const float *in, FloatStorage half,
                      std::uint16_t *out, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  f32ToHalfKernel<<<blocksFor(n), kBlock, 0, stream>>>(n, in, half, out);
  return cudaGetLastError();
}

cudaError_t roundToStorage(int64_t n, float *x, FloatStorage storage,
                           cudaStream_t stream) {
  if (n == 0 || storage == FloatStorage::F32)
    return cudaSuccess;
  roundKernel<<<blocksFor(n), kBlock, 0, stream>>>(n, x, storage);
  return cudaGetLastError();
}

cudaError_t fillNoise(void *dst, size_t bytes, cudaStream_t stream) {
  int64_t words = int64_t(bytes / 2);
  if (words == 0)
    return cudaSuccess;
  noiseKernel<<<blocksFor(words), kBlock, 0, stream>>>(
      words, static_cast<std::uint16_t *>(dst));
  return cudaGetLastError();
}

cudaError_t fillPattern(void *dst, int64_t n, int elementBytes,
                        std::uint64_t pattern, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  switch (elementBytes) {
  case 1:
    fillKernel<<<blocksFor(n), kBlock, 0, stream>>>(
        n, static_cast<std::uint8_t *>(dst), std::uint8_t(pattern));
    break;
  case 2:
    fillKernel<<<blocksFor(n), kBlock, 0, stream>>>(
        n, static_cast<std::uint16_t *>(dst), std::uint16_t(pattern));
    break;
  case 4:
    fillKernel<<<blocksFor(n), kBlock, 0, stream>>>(
        n, static_cast<std::uint32_t *>(dst), std::uint32_t(pattern));
    break;
  case 8:
    fillKernel<<<blocksFor(n), kBlock, 0, stream>>>(
        n, static_cast<unsigned long long *>(dst),
        static_cast<unsigned long long>(pattern));
    break;
  default:
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t scale(int64_t n, float *x, float factor, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  scaleKernel<<<blocksFor(n), kBlock, 0, stream>>>(n, x, factor);
  return cudaGetLastError();
}

cudaError_t finishLoss(const float *loss, float divisor, bool accumulate,
                       float *out, cudaStream_t stream) {
  finishLossKernel<<<1, 1, 0, stream>>>(loss, divisor, accumulate, out);
  return cudaGetLastError();
}

cudaError_t sumSquaresAccumulate(int64_t n, const void *x, FloatStorage storage,
                                 double *acc, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  unsigned blocks = blocksFor(n);
  if (blocks > unsigned(steps::kSumBlocks))
    blocks = steps::kSumBlocks; // grid-stride loop
  double *partials = acc + kAccumulatorPartials;
  steps::sumSquaresKernel<<<blocks, kBlock, 0, stream>>>(n, x, storage,
                                                         partials);
  steps::addPartialsKernel<<<1, kBlock, 0, stream>>>(int(blocks), partials,
                                                     acc);
  return cudaGetLastError();
}

cudaError_t doubleToFloat(const double *in, float *out, cudaStream_t stream) {
  doubleToFloatKernel<<<1, 1, 0, stream>>>(in, out);
  return cudaGetLastError();
}

cudaError_t clipByNorm(int64_t n, void *x, FloatStorage storage,
                       const float *sumSq, float maxNorm, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  steps::clipKernel<<<blocksFor(n), kBlock, 0, stream>>>(n, x, storage, sumSq,
                                                         maxNorm);
  return cudaGetLastError();
}

cudaError_t adamwFromDevice(const kernels::AdamWStep *step, int64_t n,
                            const void *grad, FloatStorage gradStorage,
                            float *param, float *m, float *v, void *low,
                            FloatStorage lowStorage, const float *sumSq,
                            cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  unsigned blocks = std::min(blocksFor(n), unsigned(steps::kAdamWBlocks));
  steps::adamwKernel<<<blocks, kBlock, 0, stream>>>(
      step, n, grad, gradStorage, param, m, v, low, lowStorage, sumSq);
  return cudaGetLastError();
}

} // namespace weft::exec::cuda
