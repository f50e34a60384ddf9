//===- GemmEpilogue.h - Kernels run inside a neighbour ----------*- C++ -*-===//
//
// Host-only, so the matching is tested without a GPU. A linear layer's plan
// is a gemm writing y followed by a bias_add over y in place, and in an MLP
// by the activation; its backward is a gemm writing dy followed by the
// activation's backward over dy. cuBLASLt's epilogues do these in the GEMM's
// own call (the columns of the column-major D are the plan's rows):
//   Bias         D = alpha op(A) op(B) + beta C + bias
//   GeluAuxBias  aux = alpha op(A) op(B) + bias, D = gelu(aux)
//   DGelu        D = (alpha op(A) op(B)) * gelu'(aux)
//   BiasGradA    D = alpha op(A) op(B) + beta C, bias = sum over k of A
// (the last: a weight-gradient gemm, whose A is the layer's output gradient
// dy, and the bias_grad over dy right after it).
// cuBLASLt's GELU is the tanh approximation (Activation::GeluTanh, GPT-2's
// "gelu_new"), so only that activation folds. Each saves the folded kernels'
// passes over the output and rounds once. The CUDA backend runs such a gemm
// with the epilogue and skips the folded instructions
// (CudaBackendOptions::gemmEpilogues).
//
// Likewise a residual_add right before the norm over its sum runs inside the
// norm's launch on 16-bit operands (CudaBackendOptions::halfKernels).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_GEMMEPILOGUE_H
#define WEFT_EXEC_CUDA_GEMMEPILOGUE_H

#include "weft/plan/Bundle.h"

#include <vector>

namespace weft::exec::cuda {

enum class EpilogueKind { Bias, GeluAuxBias, DGelu, BiasGradA };

/// A gemm and the instructions right after it on its stream that its
/// epilogue computes.
struct GemmEpilogue {
  EpilogueKind kind = EpilogueKind::Bias;
  const plan::Instruction *gemm = nullptr;
  /// bias_add, then activation_forward (GeluAuxBias); activation_backward
  /// (DGelu); the zero fill of the bias gradient's slot where the plan puts
  /// one between them, then bias_grad (BiasGradA).
  std::vector<const plan::Instruction *> folded;
  plan::BufferRange bias;   // Bias, GeluAuxBias: one element per row of D;
                            // BiasGradA: the bias gradient written
  plan::BufferRange aux;    // GeluAuxBias: the pre-activation it writes (the
                            // gemm's output); DGelu: the activation's input
  plan::BufferRange output; // D: the gemm's output, or the activation's
                            // (GeluAuxBias)
};

/// The folds of `program` the epilogues compute exactly. The folded
/// instructions directly follow the gemm on its stream (so no other stream
/// can observe the output in between: that would need an event recorded
/// between them). A bias_add reads and writes the gemm's output range in
/// place, adds a bias of the gemm's dtype along m, with D packed (ldc == m).
/// A GELU (tanh) activation_forward right after such a bias_add of a gemm
/// with beta 0 reads that range and writes another of its size: both fold
/// (GeluAuxBias). A GELU activation_backward right after a gemm with beta 0
/// reads the gemm's output as dy and writes dx over it (DGelu). The GELU
/// epilogues need m to be a multiple of 8 (the aux matrix's leading dimension).
/// A bias_grad after a gemm (right after it, or past record_events and a
/// zero fill of exactly its slot, which folds too) whose A (not transposed,
/// lda == m) is its input, summing its k rows of m columns into m elements
/// (BiasGradA), folds only where the bias gradient still holds the step's
/// zero fill (the epilogue overwrites, bias_grad accumulates): every write of
/// it on another stream waits for the bias_grad through the plan's events
/// (plan::completedBefore; a data-parallel plan's all-reduce of the
/// gradients), and its last writer before on the stream is a fill of 0
/// covering it.
/// Outputs and bias have the gemm's dtype (bf16, f16 or f32).
std::vector<GemmEpilogue> findGemmEpilogues(const plan::Bundle &bundle,
                                            const plan::Program &program);

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

#endif // WEFT_EXEC_CUDA_GEMMEPILOGUE_H
