//===- Verifier.h - Symbolic execution of every rank of a plan --*- C++ -*-===//
//
// verify() runs the checks of docs/plan-format.md, "Verifier": structure,
// collective and point-to-point matching, deadlock freedom, the order the
// runtime submits communication in, event pairing,
// initialization (read before write, read after release), cross-stream races
// and arena overlap of simultaneously live buffers. Checks that depend only on
// a program run once per role; matching and deadlock run over all ranks.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLAN_VERIFIER_H
#define WEFT_PLAN_VERIFIER_H

#include "weft/plan/Bundle.h"

#include <string>
#include <utility>
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
  Order,    // ranks submit communication in orders that can wait on each other
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

/// Instruction `index` of stream `stream` of a program.
struct StreamPosition {
  int64_t stream = 0;
  int64_t index = 0;
};

struct VerifyResult {
  std::vector<Diagnostic> diagnostics;
  /// communicationOrder(bundle), which verify() computes on the way: empty
  /// when matching or deadlock failed (or structure).
  std::vector<std::vector<StreamPosition>> communicationOrder;

  bool ok() const { return diagnostics.empty(); }
  /// Throw Error with the first diagnostic's message if there is one.
  void throwIfFailed() const;
};

/// Verify `bundle`. Structural errors stop verification (the other checks
/// assume valid references); otherwise every check runs and reports all it
/// finds.
VerifyResult verify(const Bundle &bundle);

/// The order in which a host that never waits for communication to finish
/// issues `program`'s instructions: the streams visited round-robin in
/// program order, each advanced until a wait_event whose event no earlier
/// instruction of the order recorded. With `communication` (one rank's list
/// from communicationOrder), a communication instruction also waits until
/// every instruction listed before it was issued: exec::Session's order
/// where communication is enqueued, not waited for (the CUDA backend's
/// submission order; on the CPU backend a stream stays on a send or receive
/// until it completes, so only the communication keeps exactly this order).
/// Shorter than the program when some wait is never satisfied.
std::vector<StreamPosition>
hostIssueOrder(const Program &program,
               const std::vector<StreamPosition> *communication = nullptr);

/// [rank]: the rank's communication instructions (positions in its role's
/// program) in the order their operations complete when the verifier runs
/// every rank with rendezvous semantics: one sequence of the whole plan's
/// operations restricted to each rank, so any two ranks have the operations
/// they share in the same order, and each list follows its program (stream
/// order, events). NCCL asks that operations on different communicators be
/// submitted in the same order on every rank (kernels of two communicators
/// running at once can wait on each other); the runtime issues in this
/// order. Empty when the simulation does not complete (a plan verify()
/// refuses for matching or deadlock).
std::vector<std::vector<StreamPosition>>
communicationOrder(const Bundle &bundle);

/// [stream][instruction]: each instruction's place in `order` (one rank's
/// communicationOrder list), -1 for the instructions it does not list.
std::vector<std::vector<int64_t>>
turnsOf(const Program &program, const std::vector<StreamPosition> &order);

/// communicationBuckets(program.streams[stream]), each run cut where `order`
/// (one rank's communicationOrder list; none: uncut) does not list its
/// instructions one after another: the runs a rank launches together.
std::vector<std::pair<size_t, size_t>>
communicationBuckets(const Program &program, size_t stream,
                     const std::vector<StreamPosition> *order);

/// Whether ranks that issue their instructions in `issued` ([rank], as
/// hostIssueOrder lists them), each run of communicationBuckets(..., order)
/// as one launch, can wait on each other when a GPU runs its communication
/// one launch at a time in submission order: "" when they cannot, else a
/// one-line description of a cycle of operations ("communication order:
/// ... rank 0 issues recv at stream 3 'p2p.bwd.s1' instruction 1 before
/// all_reduce at ...; rank 1 issues ..."). verify() checks the order the
/// runtime issues (CheckKind::Order).
std::string
launchOrderCycle(const Bundle &bundle,
                 const std::vector<std::vector<StreamPosition>> &issued,
                 const std::vector<std::vector<StreamPosition>> *order);

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
