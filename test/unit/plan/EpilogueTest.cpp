//===- EpilogueTest.cpp - What a gemm's epilogue stands for ---------------===//

#include "weft/plan/Epilogue.h"

#include <gtest/gtest.h>

using namespace weft::plan;

namespace {

/// A gemm whose operands are told apart by their buffer ids: reads 10, 11
/// [, 12 = C], then the epilogue's 13; writes 20, then the epilogue's 21.
Instruction fused(GemmEpilogue epilogue, double beta) {
  Instruction gemm;
  gemm.opcode = Opcode::Gemm;
  gemm.dtype = DType::BF16;
  gemm.phase = "bwd L0";
  gemm.gemm.beta = beta;
  gemm.epilogue = epilogue;
  EpilogueShape shape = epilogueShape(epilogue);
  gemm.reads = {{10, 0, 64}, {11, 0, 64}};
  if (beta != 0)
    gemm.reads.push_back({20, 0, 64}); // C is D
  for (size_t i = 0; i < shape.reads; ++i)
    gemm.reads.push_back({13, 0, 16});
  gemm.writes = {{20, 0, 64}};
  for (size_t i = 0; i < shape.writes; ++i)
    gemm.writes.push_back({21, 0, 16});
  for (size_t i = 0; i < shape.kernels.size(); ++i)
    gemm.epilogueKernels.push_back(int64_t(5 + i));
  return gemm;
}

std::vector<int64_t> buffers(const std::vector<BufferRange> &ranges) {
  std::vector<int64_t> ids;
  for (const BufferRange &range : ranges)
    ids.push_back(range.buffer);
  return ids;
}

TEST(Epilogue, StepsAreTheFoldedKernelsOnTheGemmsOperands) {
  using Ids = std::vector<int64_t>;
  for (double beta : {0.0, 1.0}) {
    SCOPED_TRACE(beta);
    // bias_add(D, bias -> D).
    Instruction bias = fused(GemmEpilogue::Bias, beta);
    std::vector<EpilogueStep> steps = epilogueSteps(bias);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0].inst.opcode, Opcode::Kernel);
    EXPECT_EQ(steps[0].inst.kernel, 5);
    EXPECT_EQ(steps[0].inst.phase, "bwd L0");
    EXPECT_EQ(buffers(steps[0].inst.reads), (Ids{20, 13}));
    EXPECT_EQ(buffers(steps[0].inst.writes), (Ids{20}));
    EXPECT_TRUE(steps[0].reads[0].write);
    EXPECT_EQ(steps[0].reads[1].index, beta != 0 ? 3u : 2u);

    // bias_add(D, bias -> D), then activation_forward(D -> activation).
    steps = epilogueSteps(fused(GemmEpilogue::GeluBias, beta));
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[1].inst.kernel, 6);
    EXPECT_EQ(buffers(steps[1].inst.reads), (Ids{20}));
    EXPECT_EQ(buffers(steps[1].inst.writes), (Ids{21}));

    // activation_backward(x, D -> D).
    steps = epilogueSteps(fused(GemmEpilogue::DGelu, beta));
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(buffers(steps[0].inst.reads), (Ids{13, 20}));
    EXPECT_EQ(buffers(steps[0].inst.writes), (Ids{20}));

    // The gradient zeroed (the epilogue writes it, the kernel adds), then
    // bias_grad(A -> gradient).
    steps = epilogueSteps(fused(GemmEpilogue::BiasGrad, beta));
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[0].inst.opcode, Opcode::Fill);
    EXPECT_EQ(steps[0].inst.value, 0);
    EXPECT_EQ(steps[0].inst.dtype, DType::BF16);
    EXPECT_EQ(buffers(steps[0].inst.writes), (Ids{21}));
    EXPECT_EQ(buffers(steps[1].inst.reads), (Ids{10}));
    EXPECT_EQ(buffers(steps[1].inst.writes), (Ids{21}));
  }
  EXPECT_TRUE(epilogueSteps(fused(GemmEpilogue::None, 0)).empty());
}

TEST(Epilogue, ShapesFollowTheKinds) {
  EXPECT_EQ(productReads(fused(GemmEpilogue::Bias, 0)), 2u);
  EXPECT_EQ(productReads(fused(GemmEpilogue::Bias, 1)), 3u);
  EpilogueShape geluBias = epilogueShape(GemmEpilogue::GeluBias);
  EXPECT_EQ(geluBias.reads, 1u);
  EXPECT_EQ(geluBias.writes, 1u);
  EXPECT_TRUE(geluBias.needsBetaZero);
  EXPECT_EQ(geluBias.kernels,
            (std::vector<std::string_view>{"bias_add", "activation_forward"}));
  EXPECT_FALSE(epilogueShape(GemmEpilogue::BiasGrad).needsBetaZero);
  EXPECT_EQ(epilogueShape(GemmEpilogue::BiasGrad).writes, 1u);
  EXPECT_EQ(toString(GemmEpilogue::DGelu), "dgelu");
  EXPECT_EQ(parseGemmEpilogue("bias_grad"), GemmEpilogue::BiasGrad);
  EXPECT_FALSE(parseGemmEpilogue("gelu").has_value());
}

} // namespace
