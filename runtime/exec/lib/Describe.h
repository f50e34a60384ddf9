//===- Describe.h - Naming instructions in messages -------------*- C++ -*-===//
#ifndef WEFT_EXEC_LIB_DESCRIBE_H
#define WEFT_EXEC_LIB_DESCRIBE_H

#include "weft/plan/Bundle.h"

#include <algorithm>
#include <string>

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

} // namespace weft::exec

#endif // WEFT_EXEC_LIB_DESCRIBE_H
