//===- GemmEpilogue.h - Bias adds folded into cuBLASLt GEMMs ----*- C++ -*-===//
//
// Host-only, so the matching is tested without a GPU. A linear layer's plan
// is a gemm writing y followed by a bias_add over y in place; cuBLASLt's BIAS
// epilogue does both in one call (D = alpha op(A) op(B) + beta C + bias,
// broadcast over the columns of the column-major D): one pass over y fewer
// and one rounding of the sum instead of two. The CUDA backend runs such a
// gemm with the epilogue and skips the bias_add
// (CudaBackendOptions::gemmEpilogues).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_GEMMEPILOGUE_H
#define WEFT_EXEC_CUDA_GEMMEPILOGUE_H

#include "weft/plan/Bundle.h"

#include <vector>

namespace weft::exec::cuda {

/// A bias_add folded into the gemm right before it.
struct BiasEpilogue {
  const plan::Instruction *gemm = nullptr;
  const plan::Instruction *biasAdd = nullptr;
  plan::BufferRange bias; // bias_add's reads[1]: one element per row of D
};

/// The gemm + bias_add pairs of `program` the BIAS epilogue computes exactly:
/// the bias_add is the next instruction of the gemm's stream (so no other
/// stream can observe y in between: that would need an event recorded
/// between them), reads and writes the gemm's output range in place, its
/// width is the gemm's m and its rows the gemm's n with D packed (ldc == m),
/// and y and the bias have the gemm's dtype (bf16, f16 or f32).
std::vector<BiasEpilogue> findBiasEpilogues(const plan::Bundle &bundle,
                                            const plan::Program &program);

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_GEMMEPILOGUE_H
