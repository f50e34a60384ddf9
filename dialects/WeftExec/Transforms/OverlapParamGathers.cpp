//===- OverlapParamGathers.cpp - ZeRO-1/2 gathers under the next forward --===//
//
// Moves the all-gathers that rebuild the working copy after the optimizer
// step to the start of the step on an `allgather` stream, in order of first
// use and coalesced into buckets, so the forward waits only for the bucket
// it is about to read.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTOVERLAPPARAMGATHERS
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

struct Rebuilt {
  Operation *gather;
  RangeAttr slot; // what it writes in `params`
  Operation *firstRead = nullptr;
};

/// Replaces `slots`' gathers, in order, by coalesced all-gathers of at most
/// `bucketLimit` gathered bytes each (at least one member) at `builder`'s
/// point; `afterBucket(first)` runs after each, with the index of its first
/// member.
template <typename AfterBucket>
void coalesceGathers(OpBuilder &builder, ArrayRef<Rebuilt> slots,
                     int64_t bucketLimit, AfterBucket &&afterBucket) {
  auto gather = cast<AllGatherOp>(slots.front().gather);
  Location loc = gather.getLoc();
  StringAttr label = builder.getStringAttr("param gather");
  for (auto [begin, end] : bucketsInOrder(
           slots.size(), [&](size_t i) { return slots[i].slot.getBytes(); },
           bucketLimit)) {
    SmallVector<RangeAttr> reads, writes;
    for (const Rebuilt &rebuilt : slots.slice(begin, end - begin)) {
      reads.push_back(
          cast<RangeAttr>(cast<AllGatherOp>(rebuilt.gather).getReads()[0]));
      writes.push_back(rebuilt.slot);
    }
    createCoalesced<AllGatherOp>(builder, loc, gather.getDtype(),
                                 gather.getGroup(), reads, writes, label);
    afterBucket(begin);
  }
  for (const Rebuilt &rebuilt : slots)
    rebuilt.gather->erase();
}

void overlapParamGathers(ProgramOp program, int64_t bucketLimit) {
  StreamOp compute = findStream(program, "compute");
  if (!compute)
    return;
  Block &block = compute.getBody().front();
  Operation *optimizer = nullptr;
  for (Operation &op : block)
    if (isa<OptimizerStepOp>(op))
      optimizer = &op;
  if (!optimizer)
    return;
  SmallVector<Rebuilt> slots;
  for (Operation *op = optimizer->getNextNode(); op; op = op->getNextNode()) {
    auto gather = dyn_cast<AllGatherOp>(op);
    if (!gather || groupKindOf(op) != GroupKind::dp ||
        gather.getWrites().size() != 1)
      continue;
    auto slot = cast<RangeAttr>(gather.getWrites()[0]);
    if (slot.getBuffer().getValue() == "params")
      slots.push_back({op, slot});
  }
  if (slots.empty())
    return;
  // ZeRO-3 (gathers of its own on `allgather`) keeps its few post-step
  // gathers on `compute`, coalesced right before the last of them (after
  // every write of what they read): at the start of the step they would
  // queue ahead of the first layer's prefetch.
  if (findStream(program, "allgather")) {
    OpBuilder builder(slots.back().gather);
    coalesceGathers(builder, slots, bucketLimit, [](size_t) {});
    return;
  }

  // The first compute instruction that reads each slot (the gathers come
  // after all of them, at the end of the step).
  SmallVector<RangeAttr> written;
  for (const Rebuilt &rebuilt : slots)
    written.push_back(rebuilt.slot);
  Block::iterator firstGather = slots.front().gather->getIterator();
  SmallVector<Operation *> readers = firstTouching(
      written, "reads", llvm::make_range(block.begin(), firstGather));
  for (auto [rebuilt, reader] : llvm::zip(slots, readers))
    rebuilt.firstRead = reader;
  DenseMap<Operation *, size_t> position;
  for (Operation &op : llvm::make_range(block.begin(), firstGather))
    position[&op] = position.size();
  // What the gathers read: one range of the shard buffer covering every
  // gather's source (its writers wait for the gathers, below).
  auto source =
      cast<RangeAttr>(cast<AllGatherOp>(slots.front().gather).getReads()[0]);
  int64_t sourceBegin = source.getOffset(), sourceEnd = source.getEnd();
  for (const Rebuilt &rebuilt : slots) {
    auto read =
        cast<RangeAttr>(cast<AllGatherOp>(rebuilt.gather).getReads()[0]);
    if (read.getBuffer() != source.getBuffer()) {
      rebuilt.gather->emitWarning("weft-overlap-param-gathers: gathers read "
                                  "more than one buffer; left in place");
      return;
    }
    sourceBegin = std::min(sourceBegin, read.getOffset());
    sourceEnd = std::max(sourceEnd, read.getEnd());
  }
  RangeAttr sources = RangeAttr::get(program.getContext(), source.getBuffer(),
                                     sourceBegin, sourceEnd - sourceBegin);
  // In order of first use (slots no instruction reads last).
  llvm::stable_sort(slots, [&](const Rebuilt &a, const Rebuilt &b) {
    size_t pa = a.firstRead ? position[a.firstRead] : position.size();
    size_t pb = b.firstRead ? position[b.firstRead] : position.size();
    return pa < pb;
  });
  EventCounter events(program);
  Location loc = program.getLoc();
  StreamOp stream = getOrCreateStream(program, "allgather");
  auto side = OpBuilder::atBlockEnd(&stream.getBody().front());
  StringAttr label = side.getStringAttr("param gather");
  // Buckets of at most `bucketLimit` gathered bytes in order of first use,
  // each one coalesced all_gather (a launch per bucket, not per slot) that
  // `compute` waits for before its first member's first reader.
  coalesceGathers(side, slots, bucketLimit, [&](size_t first) {
    if (Operation *reader = slots[first].firstRead) {
      int64_t ready = events.next();
      RecordEventOp::create(side, loc, ready, ArrayAttr(), ArrayAttr(), label);
      waitBefore(reader, ready, phaseOf(reader));
    }
  });
  // The step overwrites the shards the gathers read (the optimizer step, or
  // the copies that bring back offloaded weights, on whatever stream they
  // run): not before they are done.
  int64_t done = events.next();
  RecordEventOp::create(side, loc, done, ArrayAttr(), ArrayAttr(), label);
  for (auto other : program.getBody().front().getOps<StreamOp>()) {
    if (other == stream)
      continue;
    for (Operation &op : other.getBody().front())
      if (touches(&op, "writes", sources)) {
        waitBefore(&op, done, phaseOf(&op));
        break;
      }
  }
}

struct WeftOverlapParamGathersPass
    : mlir::weftx::impl::WeftOverlapParamGathersBase<
          WeftOverlapParamGathersPass> {
  void runOnOperation() override {
    int64_t limit = bucketBytesOf(getOperation());
    for (auto program : getOperation().getOps<ProgramOp>())
      overlapParamGathers(program, limit);
  }
};

} // namespace
