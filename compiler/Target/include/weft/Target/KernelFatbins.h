//===- KernelFatbins.h - Generated kernels compiled by nvcc -----*- C++ -*-===//
//
// `weftc compile --cuda-arch`: every generated kernel source of a bundle
// compiled by nvcc into a fatbin side file beside it
// (plan::kernelFatbinPath), which the CUDA backend loads instead of running
// NVRTC at load (docs/kernels.md, "Loading generated kernels"). nvcc sees
// the kernel headers built into the compiler (KernelHeaderText.h), so the
// fatbins match the headers weftc generated the sources against.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TARGET_KERNELFATBINS_H
#define WEFT_TARGET_KERNELFATBINS_H

#include "weft/plan/Bundle.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace weft {

struct KernelFatbinOptions {
  /// Real architectures ("sm_90", "sm_90a"), in the order given; empty: no
  /// fatbins. The last one also gets PTX, which newer GPUs compile at load.
  std::vector<std::string> archs;
  /// nvcc to run; empty: findNvcc("").
  std::string nvcc;
  /// Concurrent nvcc processes; 0: the machine's hardware threads.
  unsigned jobs = 0;
};

/// A comma list of `sm_NN` (optionally with an `a` or `f` suffix) or bare
/// `NN`, NN at least 75, as "sm_NN"; an error names the bad entry.
llvm::Expected<std::vector<std::string>> parseCudaArchs(llvm::StringRef text);

/// `given` when not empty (it must exist), else $CUDA_HOME/bin/nvcc,
/// $CUDA_PATH/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc.
llvm::Expected<std::string> findNvcc(llvm::StringRef given);

/// Adds bundle.files[kernelFatbinPath(source)] for every kernel source of
/// `bundle`. Nothing is added unless every source compiles; an error names
/// the source and nvcc's first error line.
llvm::Error addKernelFatbins(plan::Bundle &bundle,
                             const KernelFatbinOptions &options);

} // namespace weft

#endif // WEFT_TARGET_KERNELFATBINS_H
