//===- Verify.h - What weft-inspect verify checks ---------------*- C++ -*-===//
//
// The plan verifier (plan::verify) knows the plan format, not the kernels:
// a launch whose operands do not fit its kernel's signature, or a kernel
// write over one of its reads, verifies and is refused by weft-run when it
// prepares. verifyBundle adds those runtime checks so that a plan verify
// accepts is one weft-run opens.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_VERIFY_H
#define WEFT_INSPECT_VERIFY_H

#include "weft/plan/Verifier.h"

namespace weft::inspect {

/// plan::verify, then (when the structure is sound) the kernel and operand
/// checks a backend makes at prepare (exec::kernelProblems, and
/// exec::operandProblems for every role), reported as CheckKind::Operands.
plan::VerifyResult verifyBundle(const plan::Bundle &bundle);

} // namespace weft::inspect

#endif // WEFT_INSPECT_VERIFY_H
