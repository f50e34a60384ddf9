//===- KernelLaunches.h - A generated source's launch lines -----*- C++ -*-===//
//
// A generated kernel source (kernels/<name>.cu of a bundle) says which of its
// entries to launch, in order, and with which grid and block, in
// `// weft-launch:` lines (docs/kernels.md). The CUDA backend launches them;
// weft-inspect verify checks they are the plan kernel's own. Host-only.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_KERNELLAUNCHES_H
#define WEFT_EXEC_KERNELLAUNCHES_H

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weft::exec {

/// One `extern "C" __global__` entry of a generated kernel and its launch.
struct GeneratedLaunch {
  std::string entry;
  int64_t grid = 0, block = 0;
};

/// The `// weft-launch: <entry> grid <G> block <B>` lines of a generated
/// source, in order. Throws Error naming `path` and the line when one is
/// malformed or the source has none, and, given the plan's `kernelName`,
/// when an entry is not one of that kernel's (`weft_<name>_<phase>`, the
/// name's other characters than letters and digits as '_'): a plan whose
/// kernel names another kernel's source would launch it on the wrong
/// operands.
std::vector<GeneratedLaunch> parseLaunches(std::string_view source,
                                           const std::string &path,
                                           std::string_view kernelName = {});

} // namespace weft::exec

#endif // WEFT_EXEC_KERNELLAUNCHES_H
