//===- Verifier.h - Symbolic execution of every rank of a plan --*- C++ -*-===//
//
// verify() runs the checks of docs/plan-format.md, "Verifier": structure,
// collective and point-to-point matching, deadlock freedom, event pairing,
// initialization (read before write, read after release), cross-stream races
// and arena overlap of simultaneously live buffers. Checks that depend only on
// a program run once per role; matching and deadlock run over all ranks.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_VERIFIER_H
#define WEFT_PLAN_VERIFIER_H

#include "weft/plan/Bundle.h"

#include <string>
#include <vector>

namespace weft::plan {

enum class CheckKind {
  Structure,
  Matching, // collectives and send/recv agree across ranks
  Deadlock, // some stream can never proceed
  Event,    // wait_event without record_event
  Init,     // read before write, read after release
  Race,     // unordered cross-stream accesses
  Memory,   // overlap of live buffers, buffer outside its region
  /// Operands against the kernel signatures and opcode rules of the runtime
  /// (exec::operandProblems): reported by weft-inspect verify, never by
  /// verify() below, which knows no kernel signatures.
  Operands,
};

std::string_view toString(CheckKind kind);

struct Diagnostic {
  CheckKind kind;
  std::string message; // one line, names rank/role, stream, instruction, phase
};

struct VerifyResult {
  std::vector<Diagnostic> diagnostics;

  bool ok() const { return diagnostics.empty(); }
  /// Throw Error with the first diagnostic's message if there is one.
  void throwIfFailed() const;
};

/// Verify `bundle`. Structural errors stop verification (the other checks
/// assume valid references); otherwise every check runs and reports all it
/// finds.
VerifyResult verify(const Bundle &bundle);

/// For every instruction of `program` ([stream][index]), how many
/// instructions of each stream have finished before it starts: those before
/// it on its stream, and through each wait_event what its record_event's
/// stream had run before the record (transitively): the happens-before
/// order the verifier's race check uses, as a table. Empty when an event is
/// recorded twice or a wait is never satisfied (no order is known then).
std::vector<std::vector<std::vector<int64_t>>>
completedBefore(const Program &program);

} // namespace weft::plan

#endif // WEFT_PLAN_VERIFIER_H
