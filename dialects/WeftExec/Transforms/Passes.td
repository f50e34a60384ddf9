//===- Passes.td - Weft execution dialect passes -----------*- tablegen -*-===//
#ifndef WEFTEXEC_TRANSFORMS_PASSES_TD
#define WEFTEXEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def WeftPlanMemory : Pass<"weft-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Place every weftx.buffer: liveness-based arena offsets and a "
                "packed persistent region";
  let description = [{
    For each `weftx.program`, assigns `offset` to every buffer and sets the
    program's `arena` and `persistent` sizes (existing offsets are
    replanned).

    Persistent buffers are packed in declaration order, each at the next
    multiple of its alignment.

    Arena buffers share bytes when their lifetimes are disjoint. Two buffers
    may overlap only if every access of one happens before every access of
    the other, where *happens before* is program order within a stream plus
    `record_event` -> `wait_event` edges between streams (vector clocks, the
    relation the plan verifier uses). An instruction that touches both
    buffers orders neither, so they conflict. This is conservative: two
    streams' instructions that no event chain orders are assumed to run at
    the same time. Buffers are placed largest first (ties: first access,
    then declaration order) at the best-fitting aligned gap among the
    already placed buffers they conflict with; a buffer that no instruction
    accesses conflicts with nothing and is placed at offset 0.

    The planned peak of a role is `arena + persistent`; with `report` the
    pass prints, per program, the arena size, the live lower bound (the most
    bytes live at once in one interleaving of the streams that respects the
    events), the persistent size, the planned peak and, when the module has
    a `weftx.prediction`, the predicted peak.
  }];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "Print the planned memory of every program to stdout">,
  ];
}

#endif // WEFTEXEC_TRANSFORMS_PASSES_TD
