//===- KernelHeaderText.h - The kernel headers, built in --------*- C++ -*-===//
//
// The device-portable kernel headers that generated kernel sources include
// (weft-generate-kernels, docs/kernels.md), as text compiled into the
// library: NVRTC (the CUDA backend, at load) and weftc's nvcc (the bundle's
// fatbins) compile generated kernels from these, so neither needs the source
// tree at run time, and the kernel cache keys on exactly what was compiled.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_KERNELS_KERNELHEADERTEXT_H
#define WEFT_KERNELS_KERNELHEADERTEXT_H

#include <string_view>
#include <vector>

namespace weft::kernels {

/// Both views are of string literals, so data() is NUL-terminated (NVRTC
/// takes C strings).
struct EmbeddedHeader {
  std::string_view path; // as included: "weft/kernels/Norms.h"
  std::string_view text;
};

/// Every header a generated kernel source may include, in path order.
const std::vector<EmbeddedHeader> &kernelHeaders();

} // namespace weft::kernels

#endif // WEFT_KERNELS_KERNELHEADERTEXT_H
