//===- Launch.cuh - Launch helpers shared by the CUDA kernels ---*- CUDA
//-*-===//

#ifndef WEFT_KERNELS_CUDA_LAUNCH_CUH
#define WEFT_KERNELS_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::kernels::gpu::detail {

constexpr int kBlockSize = 256;

/// Index of this thread in a 1-D launch.
__device__ inline std::int64_t globalIndex() {
  return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// Sum of `value` over the kBlockSize threads of the block, returned to every
/// thread.
/// Every thread of the block must call it; it may be called again right away.
template <typename T> __device__ T blockSum(T value) {
  __shared__ T partial[kBlockSize];
  partial[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kBlockSize / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  T total = partial[0];
  __syncthreads(); // No thread may refill `partial` before all have read it.
  return total;
}

/// Launches `kernel` with one thread per item (threads past `items` return
/// early) and reports the launch status.
template <typename... Params, typename... Args>
cudaError_t launch(std::int64_t items, cudaStream_t stream,
                   void (*kernel)(Params...), Args... args) {
  if (items == 0)
    return cudaSuccess;
  auto blocks = static_cast<unsigned>((items + kBlockSize - 1) / kBlockSize);
  kernel<<<blocks, kBlockSize, 0, stream>>>(args...);
  return cudaGetLastError();
}

} // namespace weft::kernels::gpu::detail

#endif // WEFT_KERNELS_CUDA_LAUNCH_CUH
