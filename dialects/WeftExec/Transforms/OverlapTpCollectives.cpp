//===- OverlapTpCollectives.cpp - TP collectives on their own stream ------===//
//
// Moves every tensor-parallel collective from `compute` to a `tp` stream,
// ordered against compute by events, so independent compute overlaps it.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTOVERLAPTPCOLLECTIVES
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

void overlapTpCollectives(ProgramOp program) {
  StreamOp compute = findStream(program, "compute");
  if (!compute)
    return;
  SmallVector<Operation *> collectives;
  for (Operation &op : compute.getBody().front())
    if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp>(op) &&
        groupKindOf(&op) == GroupKind::tp)
      collectives.push_back(&op);
  if (collectives.empty())
    return;
  EventCounter events(program);
  Location loc = program.getLoc();
  auto stream = OpBuilder::atBlockEnd(
      &getOrCreateStream(program, "tp").getBody().front());
  for (Operation *collective : collectives) {
    // An instruction the collective stays ordered with: one that writes its
    // input, or reads or writes its output.
    auto touches = [&](Operation *op) {
      return overlaps(op, "writes", collective, "reads") ||
             overlaps(op, "reads", collective, "writes") ||
             overlaps(op, "writes", collective, "writes");
    };
    // The last instruction it follows: one it touches, or a wait (which may
    // stand for another stream's write of its input). A record before it
    // may be passed: whoever waits for that record was never ordered after
    // the collective, and still is not (DP gradient buckets record events
    // between a layer's input-gradient GEMMs and its weight-gradient GEMMs,
    // which would otherwise keep the collective from overlapping them).
    Operation *after = collective->getPrevNode();
    while (after && !touches(after) && !isa<WaitEventOp>(after))
      after = after->getPrevNode();
    // The first instruction to follow it: one it touches, or an event (a
    // record may order another stream's access to its buffers after it; a
    // wait, conservatively, too).
    Operation *before = collective->getNextNode();
    while (before && !touches(before) &&
           !isa<WaitEventOp, RecordEventOp>(before))
      before = before->getNextNode();
    if (after) {
      int64_t ready = recordAfter(after, events);
      WaitEventOp::create(stream, loc, ready, ArrayAttr(), ArrayAttr(),
                          phaseOf(collective));
    }
    collective->moveBefore(stream.getInsertionBlock(),
                           stream.getInsertionPoint());
    int64_t done = events.next();
    RecordEventOp::create(stream, loc, done, ArrayAttr(), ArrayAttr(),
                          phaseOf(collective));
    if (before)
      waitBefore(before, done, phaseOf(before));
  }
}

struct WeftOverlapTpCollectivesPass
    : mlir::weftx::impl::WeftOverlapTpCollectivesBase<
          WeftOverlapTpCollectivesPass> {
  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      overlapTpCollectives(program);
  }
};

} // namespace
