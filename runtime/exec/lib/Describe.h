//===- Describe.h - Naming instructions in messages -------------*- C++ -*-===//
#ifndef WEFT_EXEC_LIB_DESCRIBE_H
#define WEFT_EXEC_LIB_DESCRIBE_H

#include "weft/plan/Bundle.h"

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

} // namespace weft::exec

#endif // WEFT_EXEC_LIB_DESCRIBE_H
