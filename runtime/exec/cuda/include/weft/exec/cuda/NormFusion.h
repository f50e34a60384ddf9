//===- NormFusion.h - Kernels run inside a neighbouring norm ----*- C++ -*-===//
//
// Host-only, so the matching is tested without a GPU. A residual_add right
// before the norm over its sum runs inside the norm's launch on 16-bit
// operands, and the backward's residual_add of a norm's input gradient inside
// the norm backward's (CudaBackendOptions::halfKernels). (The GEMM epilogues
// are the compiler's: weft-fuse-gemm-epilogues, weft/plan/Epilogue.h.)
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_NORMFUSION_H
#define WEFT_EXEC_CUDA_NORMFUSION_H

#include "weft/plan/Bundle.h"

#include <vector>

namespace weft::exec::cuda {

/// A residual_add directly followed on its stream by a layer_norm_forward or
/// rms_norm_forward over its output.
struct ResidualNorm {
  const plan::Instruction *add = nullptr, *norm = nullptr;
  bool layerNorm = false; // else RMSNorm
};
std::vector<ResidualNorm> findResidualNorms(const plan::Bundle &bundle,
                                            const plan::Program &program);

/// A layer_norm_backward or rms_norm_backward directly followed on its stream
/// by a residual_add of its input gradient (writes[0], exactly one of the
/// add's two reads) and another gradient, reads[addend].
struct NormBackwardAdd {
  const plan::Instruction *norm = nullptr, *add = nullptr;
  bool layerNorm = false; // else RMSNorm
  int addend = 0;
  /// dx is an arena range no instruction but the add (and the norm, where dx
  /// is over dy) reads: the fused launch need not store it.
  bool dxUnread = false;
};
std::vector<NormBackwardAdd> findNormBackwardAdds(const plan::Bundle &bundle,
                                                  const plan::Program &program);

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_NORMFUSION_H
