//===- Epilogue.h - What a gemm's epilogue stands for -----------*- C++ -*-===//
//
// weft-fuse-gemm-epilogues folds the kernels right after a gemm into it (a
// cuBLASLt epilogue on a GPU). The fused gemm keeps the product's operands
// first (A, B[, C]; D), appends the epilogue's, and names the folded kernels
// (Instruction::epilogueKernels). A backend without the epilogue (the CPU
// backend; the CUDA backend where cuBLASLt refuses a shape) runs the plain
// gemm and then these steps, which give the unfused plan's bits (cuBLASLt's
// epilogue rounds once, from fp32: a rounding fewer per folded kernel).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_EPILOGUE_H
#define WEFT_PLAN_EPILOGUE_H

#include "weft/plan/Bundle.h"

#include <string_view>
#include <vector>

namespace weft::plan {

/// The operands and kernels an epilogue adds to its gemm.
struct EpilogueShape {
  size_t reads = 0;  // after A, B[, C]: the bias (Bias, GeluBias) or the
                     // activation's input (DGelu)
  size_t writes = 0; // after D: the activation (GeluBias), the bias
                     // gradient (BiasGrad)
  /// The registry names of the folded kernels, in order.
  std::vector<std::string_view> kernels;
  bool needsBetaZero = false; // GeluBias, DGelu
};
EpilogueShape epilogueShape(GemmEpilogue epilogue);

/// How many of a gemm's reads are the product's: A, B, and C when beta != 0.
size_t productReads(const Instruction &gemm);

/// An operand of the fused gemm: writes[index] or reads[index].
struct GemmOperand {
  bool write = false;
  size_t index = 0;
};

/// One instruction an epilogue stands for. Its operands are operands of the
/// fused gemm (`inst` holds their ranges too).
struct EpilogueStep {
  Instruction inst; // a kernel, or the fill that zeroes the bias gradient
  std::vector<GemmOperand> reads, writes;
};

/// What runs after the product (the gemm's A, B[, C] and D, the operands a
/// backend's plain gemm reads) on the same stream to give the fused gemm's
/// result: Bias: bias_add(D, bias -> D); GeluBias: that, then
/// activation_forward(D -> act); DGelu: activation_backward(x, D -> D);
/// BiasGrad: a fill of 0 over the gradient, then bias_grad(A -> gradient)
/// (the epilogue writes the gradient, bias_grad accumulates). Empty without
/// an epilogue.
std::vector<EpilogueStep> epilogueSteps(const Instruction &gemm);

} // namespace weft::plan

#endif // WEFT_PLAN_EPILOGUE_H
