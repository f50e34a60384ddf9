//===- Optimizer.cu - AdamW, squared norm and overflow check --------------===//

#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {
using detail::globalIndex;
using detail::launch;

namespace {

__global__ void adamwKernel(AdamWStep step, int64_t n, const float *grad,
                            float *param, float *m, float *v) {
  int64_t i = globalIndex();
  if (i < n)
    adamwElement(step, grad[i], param[i], m[i], v[i]);
}

__global__ void sumOfSquaresKernel(int64_t n, const float *x, double *result) {
  int64_t i = globalIndex();
  double value = i < n ? double(x[i]) * double(x[i]) : 0.0;
  double blockTotal = detail::blockReduce(value, detail::SumOp());
  if (threadIdx.x == 0)
    atomicAdd(result, blockTotal);
}

__global__ void nonFiniteKernel(int64_t n, const float *x, int *flag) {
  int64_t i = globalIndex();
  // Racing threads all store the same value, so plain stores suffice.
  if (i < n && !math::isFinite(x[i]))
    *flag = 1;
}

} // namespace

cudaError_t adamwStep(const AdamWStep &step, int64_t n, const float *grad,
                      float *param, float *m, float *v, cudaStream_t stream) {
  return launch(n, stream, adamwKernel, step, n, grad, param, m, v);
}

cudaError_t sumOfSquares(int64_t n, const float *x, double *result,
                         cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(result, 0, sizeof(double), stream);
  if (err != cudaSuccess)
    return err;
  return launch(n, stream, sumOfSquaresKernel, n, x, result);
}

cudaError_t hasNonFinite(int64_t n, const float *x, int *flag,
                         cudaStream_t stream) {
  cudaError_t err = cudaMemsetAsync(flag, 0, sizeof(int), stream);
  if (err != cudaSuccess)
    return err;
  return launch(n, stream, nonFiniteKernel, n, x, flag);
}

} // namespace weft::kernels::gpu
