//===- Probe.h - Is there a usable CUDA device? -----------------*- C++ -*-===//
//
// Plain C++ (no CUDA headers): WeftRuntime calls it for `--backend cuda`
// without depending on the CUDA backend itself.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_PROBE_H
#define WEFT_EXEC_CUDA_PROBE_H

#include <string>

namespace weft::exec::cuda {

/// Empty when at least one CUDA device is usable; otherwise one line
/// starting "no CUDA device: " with the CUDA runtime's reason, e.g.
/// "no CUDA device: cudaGetDeviceCount: no CUDA-capable device is detected".
std::string cudaDeviceProblem();

/// Number of usable devices (0 when cudaDeviceProblem() is not empty).
int cudaDeviceCount();

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_PROBE_H
