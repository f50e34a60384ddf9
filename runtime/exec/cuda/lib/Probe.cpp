//===- Probe.cpp - Is there a usable CUDA device? -------------------------===//

#include "weft/exec/cuda/Probe.h"

#include <cuda_runtime_api.h>

namespace weft::exec::cuda {

std::string cudaDeviceProblem() {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky-free error for later calls
    return "no CUDA device: cudaGetDeviceCount: " +
           std::string(cudaGetErrorString(rc)) + " (" +
           std::string(cudaGetErrorName(rc)) + ")";
  }
  if (count == 0)
    return "no CUDA device: cudaGetDeviceCount found 0 devices";
  return {};
}

int cudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

} // namespace weft::exec::cuda
