//===- Epilogue.cpp - What a gemm's epilogue stands for -------------------===//

#include "weft/plan/Epilogue.h"

using namespace weft::plan;

EpilogueShape weft::plan::epilogueShape(GemmEpilogue epilogue) {
  switch (epilogue) {
  case GemmEpilogue::None:
    return {};
  case GemmEpilogue::Bias:
    return {1, 0, {"bias_add"}, false};
  case GemmEpilogue::GeluBias:
    return {1, 1, {"bias_add", "activation_forward"}, true};
  case GemmEpilogue::DGelu:
    return {1, 0, {"activation_backward"}, true};
  case GemmEpilogue::BiasGrad:
    return {0, 1, {"bias_grad"}, false};
  }
  return {};
}

size_t weft::plan::productReads(const Instruction &gemm) {
  return gemm.gemm.beta != 0 ? 3 : 2;
}

std::vector<EpilogueStep> weft::plan::epilogueSteps(const Instruction &gemm) {
  std::vector<EpilogueStep> steps;
  // The first epilogue read; D; the epilogue's own write.
  GemmOperand extra{false, productReads(gemm)}, d{true, 0}, out{true, 1};
  auto kernel = [&](size_t index, std::vector<GemmOperand> reads,
                    std::vector<GemmOperand> writes) {
    EpilogueStep step;
    step.inst.opcode = Opcode::Kernel;
    step.inst.kernel =
        index < gemm.epilogueKernels.size() ? gemm.epilogueKernels[index] : -1;
    step.inst.phase = gemm.phase;
    step.reads = std::move(reads);
    step.writes = std::move(writes);
    steps.push_back(std::move(step));
  };
  switch (gemm.epilogue) {
  case GemmEpilogue::None:
    return steps;
  case GemmEpilogue::Bias:
    kernel(0, {d, extra}, {d});
    break;
  case GemmEpilogue::GeluBias:
    kernel(0, {d, extra}, {d});
    kernel(1, {d}, {out});
    break;
  case GemmEpilogue::DGelu:
    kernel(0, {extra, d}, {d});
    break;
  case GemmEpilogue::BiasGrad: {
    EpilogueStep zero;
    zero.inst.opcode = Opcode::Fill;
    zero.inst.dtype = gemm.dtype;
    zero.inst.value = 0;
    zero.inst.phase = gemm.phase;
    zero.writes = {out};
    steps.push_back(std::move(zero));
    kernel(0, {{false, 0}}, {out}); // A: the layer's output gradient
    break;
  }
  }
  auto range = [&](const GemmOperand &operand) {
    const std::vector<BufferRange> &list =
        operand.write ? gemm.writes : gemm.reads;
    return operand.index < list.size() ? list[operand.index] : BufferRange{};
  };
  for (EpilogueStep &step : steps) {
    for (const GemmOperand &operand : step.reads)
      step.inst.reads.push_back(range(operand));
    for (const GemmOperand &operand : step.writes)
      step.inst.writes.push_back(range(operand));
  }
  return steps;
}
