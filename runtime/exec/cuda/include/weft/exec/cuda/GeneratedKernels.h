//===- GeneratedKernels.h - Loading generated kernels -----------*- C++ -*-===//
//
// The bundle's generated kernel sources (kernels/<name>.cu, one per kernel of
// the plan, specialized to its constants) as device code: a fatbin that
// `weftc compile --cuda-arch` put beside the source (kernels/<name>.fatbin),
// or a cubin NVRTC compiles at load for the device's architecture, kept in an
// on-disk cache keyed by everything that went into it. The source's
// `// weft-launch:` lines say which entries to launch, in order, and with
// which grid and block. docs/kernels.md ("Loading generated kernels").
//
// Everything here but the device loading is host-only: NVRTC needs no GPU.
// The launch lines are parsed by weft/exec/KernelLaunches.h.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_GENERATEDKERNELS_H
#define WEFT_EXEC_CUDA_GENERATEDKERNELS_H

#include "weft/exec/KernelLaunches.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::exec::cuda {

/// "major.minor" of the NVRTC library this process loaded.
std::string nvrtcVersion();

/// Where compiled kernels are cached unless told otherwise:
/// $WEFT_KERNEL_CACHE ("off" or empty: no cache), else
/// $XDG_CACHE_HOME/weft/kernels, else $HOME/.cache/weft/kernels, else none.
std::string defaultKernelCacheDir();

/// Compiles generated kernel sources to cubins with NVRTC, through an on-disk
/// cache. A cache entry is `<key>.cubin` with key = SHA-256 of the NVRTC
/// version, the architecture, the options, the embedded kernel headers and
/// the source; its first line holds the SHA-256 of the cubin after it, so a
/// truncated or corrupt entry is noticed (warned about, recompiled and
/// replaced) instead of loaded. Entries are written atomically (a temporary
/// file renamed into place), so concurrent ranks can share a cache. A cache
/// that cannot be written is warned about once and compilation goes on.
class KernelCompiler {
public:
  /// `cacheDir` empty: no cache.
  explicit KernelCompiler(std::string cacheDir);

  /// The cubin of `source` (named `path` in diagnostics) for sm_<arch>
  /// (e.g. 90). Throws Error naming `path` and NVRTC's first error line.
  std::string cubin(std::string_view source, const std::string &path, int arch);

  const std::string &cacheDir() const { return cacheDir_; }
  int compiled() const { return compiled_; }   // NVRTC runs
  int cacheHits() const { return cacheHits_; } // entries reused
  /// The warnings so far (a corrupt entry, an unwritable cache), in order.
  const std::vector<std::string> &warnings() const { return warnings_; }

private:
  std::string cacheDir_;
  int compiled_ = 0, cacheHits_ = 0;
  bool cacheUnwritable_ = false; // warned once; entries are still read
  std::vector<std::string> warnings_;
};

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_GENERATEDKERNELS_H
