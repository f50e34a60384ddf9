//===- GemmEpilogue.cpp - Bias adds folded into cuBLASLt GEMMs ------------===//

#include "weft/exec/cuda/GemmEpilogue.h"

#include <string_view>

namespace weft::exec::cuda {

namespace {

using plan::DType;
using plan::Instruction;
using plan::Opcode;

/// The constant `name` of a kernel instruction, or -1.
int64_t constantOf(const plan::Kernel &kernel, const char *name) {
  auto it = kernel.constants.find(name);
  return it == kernel.constants.end() ? -1 : it->second;
}

bool folds(const plan::Bundle &bundle, const plan::Program &program,
           const Instruction &gemm, const Instruction &next) {
  if (gemm.opcode != Opcode::Gemm || next.opcode != Opcode::Kernel ||
      next.kernel < 0 || size_t(next.kernel) >= bundle.kernels.size())
    return false;
  if (gemm.dtype != DType::BF16 && gemm.dtype != DType::F16 &&
      gemm.dtype != DType::F32)
    return false;
  const plan::Kernel &kernel = bundle.kernels[size_t(next.kernel)];
  std::string_view name = kernel.name;
  if (name.substr(0, name.find('.')) != "bias_add")
    return false;
  if (gemm.writes.size() != 1 || next.reads.size() != 2 ||
      next.writes.size() != 1)
    return false;
  const plan::BufferRange &y = gemm.writes[0];
  if (!(next.reads[0] == y) || !(next.writes[0] == y))
    return false;
  const plan::GemmParams &g = gemm.gemm;
  if (g.ldc != g.m || constantOf(kernel, "width") != g.m ||
      constantOf(kernel, "rows") != g.n)
    return false;
  auto dtypeOf = [&](const plan::BufferRange &range) {
    return program.buffers[size_t(range.buffer)].dtype;
  };
  const plan::BufferRange &bias = next.reads[1];
  return dtypeOf(y) == gemm.dtype && dtypeOf(bias) == gemm.dtype &&
         bias.bytes == g.m * plan::elementBytes(gemm.dtype);
}

} // namespace

std::vector<BiasEpilogue> findBiasEpilogues(const plan::Bundle &bundle,
                                            const plan::Program &program) {
  std::vector<BiasEpilogue> found;
  for (const plan::Stream &stream : program.streams)
    for (size_t i = 0; i + 1 < stream.instructions.size(); ++i) {
      const Instruction &gemm = stream.instructions[i],
                        &next = stream.instructions[i + 1];
      if (folds(bundle, program, gemm, next))
        found.push_back({&gemm, &next, next.reads[1]});
    }
  return found;
}

} // namespace weft::exec::cuda
