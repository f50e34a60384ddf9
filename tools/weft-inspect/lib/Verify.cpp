//===- Verify.cpp - The plan verifier plus the runtime's operand checks ---===//
#include "weft/inspect/Verify.h"

#include "weft/exec/OperandChecks.h"

#include <algorithm>

namespace weft::inspect {

plan::VerifyResult verifyBundle(const plan::Bundle &bundle) {
  plan::VerifyResult result = plan::verify(bundle);
  // The operand checks index buffers and kernels without bounds checks.
  if (std::any_of(result.diagnostics.begin(), result.diagnostics.end(),
                  [](const plan::Diagnostic &diagnostic) {
                    return diagnostic.kind == plan::CheckKind::Structure;
                  }))
    return result;
  auto report = [&](std::vector<std::string> problems) {
    for (std::string &problem : problems)
      result.diagnostics.push_back(
          {plan::CheckKind::Operands, std::move(problem)});
  };
  report(exec::kernelProblems(bundle));
  for (const plan::Program &program : bundle.programs)
    report(exec::operandProblems(bundle, program));
  return result;
}

} // namespace weft::inspect
