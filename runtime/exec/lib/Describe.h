//===- Describe.h - Naming and walking a program's instructions -*- C++ -*-===//
#ifndef WEFT_EXEC_LIB_DESCRIBE_H
#define WEFT_EXEC_LIB_DESCRIBE_H

#include "weft/plan/Bundle.h"
#include "weft/plan/Epilogue.h"

#include <algorithm>
#include <string>
#include <vector>

namespace weft::exec {

/// "stream 0 'compute' instruction 3 (fwd L0)", as the verifier names them.
inline std::string describeInstruction(const plan::Program &program,
                                       size_t stream, size_t index) {
  const plan::Stream &s = program.streams[stream];
  std::string text = "stream " + std::to_string(stream) + " '" + s.name +
                     "' instruction " + std::to_string(index);
  const std::string &phase = s.instructions[index].phase;
  if (!phase.empty())
    text += " (" + phase + ")";
  return text;
}

/// Calls `visit(inst, stream, where)` for every instruction of `program` in
/// stream order, `stream` its stream's index, `where` = prefix + "role R " +
/// describeInstruction(...); returns
/// the most operands (reads + writes) one instruction has, which sizes the
/// backends' per-call operand vectors.
template <typename Visit>
size_t forEachInstruction(const plan::Program &program,
                          const std::string &prefix, Visit &&visit) {
  size_t maxOperands = 0;
  for (size_t s = 0; s < program.streams.size(); ++s)
    for (size_t i = 0; i < program.streams[s].instructions.size(); ++i) {
      const plan::Instruction &inst = program.streams[s].instructions[i];
      maxOperands =
          std::max(maxOperands, inst.reads.size() + inst.writes.size());
      visit(inst, s,
            prefix + "role " + std::to_string(program.role) + " " +
                describeInstruction(program, s, i));
    }
  return maxOperands;
}

/// The steps a backend runs for `gemm`'s epilogue after the plain gemm
/// (plan::epilogueSteps), each passed to `prepare(step, where)` first, where
/// names the gemm and its epilogue.
template <typename Prepare>
std::vector<plan::EpilogueStep>
prepareEpilogueSteps(const plan::Instruction &gemm, const std::string &where,
                     Prepare &&prepare) {
  std::vector<plan::EpilogueStep> steps = plan::epilogueSteps(gemm);
  std::string what = where + " (its " +
                     std::string(plan::toString(gemm.epilogue)) + " epilogue)";
  for (const plan::EpilogueStep &step : steps)
    prepare(step.inst, what);
  return steps;
}

/// A step's operands (a backend's Operand type), picked from the fused
/// gemm's `reads` and `writes` into `stepReads` and `stepWrites` (cleared
/// first; reused, so a step does not allocate once they have grown).
template <typename Operand>
void epilogueOperands(const plan::EpilogueStep &step,
                      const std::vector<Operand> &reads,
                      const std::vector<Operand> &writes,
                      std::vector<Operand> &stepReads,
                      std::vector<Operand> &stepWrites) {
  auto pick = [&](const plan::GemmOperand &ref) -> const Operand & {
    return ref.write ? writes[ref.index] : reads[ref.index];
  };
  stepReads.clear();
  stepWrites.clear();
  for (const plan::GemmOperand &ref : step.reads)
    stepReads.push_back(pick(ref));
  for (const plan::GemmOperand &ref : step.writes)
    stepWrites.push_back(pick(ref));
}

} // namespace weft::exec

#endif // WEFT_EXEC_LIB_DESCRIBE_H
