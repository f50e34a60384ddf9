//===- OverlapGradSync.cpp - DP gradient sync overlapped with backward ----===//
//
// Moves the data-parallel gradient collectives that weft-schedule emits as
// one run on `compute` to a side stream in buckets, each behind the last
// write of its slots: ZeRO-0's all-reduces merged over contiguous slots,
// ZeRO-1's reduce-scatters as the members of one coalesced reduce-scatter.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <optional>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTOVERLAPGRADSYNC
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

/// A DP gradient collective: an in-place all-reduce or a reduce-scatter over
/// a `dp` family that reads `grads`.
bool isGradientSync(Operation &op) {
  if (!isa<AllReduceOp, ReduceScatterOp>(op) ||
      groupKindOf(&op) != GroupKind::dp)
    return false;
  auto reads = cast<InstructionOpInterface>(op).getReads();
  if (reads.size() != 1 ||
      cast<RangeAttr>(reads[0]).getBuffer().getValue() != "grads")
    return false;
  return !isa<AllReduceOp>(op) ||
         cast<InstructionOpInterface>(op).getWrites() == reads;
}

LogicalResult overlapGradSync(ProgramOp program, int64_t bucketLimit) {
  StreamOp compute = findStream(program, "compute");
  if (!compute)
    return success();
  Block &block = compute.getBody().front();
  SmallVector<Operation *> syncs;
  for (Operation &op : block)
    if (isGradientSync(op))
      syncs.push_back(&op);
  if (syncs.empty())
    return success();
  for (auto [prev, next] : llvm::zip(syncs, llvm::drop_begin(syncs)))
    if (prev->getNextNode() != next)
      return next->emitError("weft-overlap-grad-sync: the gradient sync "
                             "collectives of program @")
             << program.getSymName() << " are not one contiguous run";
  bool scatter = isa<ReduceScatterOp>(syncs.front());
  if (llvm::any_of(syncs, [&](Operation *op) {
        return isa<ReduceScatterOp>(op) != scatter;
      }))
    return syncs.front()->emitError("weft-overlap-grad-sync: program @")
           << program.getSymName()
           << " mixes gradient all-reduces and reduce-scatters";

  // The last instruction before the run that writes each slot.
  DenseMap<Operation *, size_t> position;
  for (Operation &op : block)
    position[&op] = position.size();
  struct Ready {
    Operation *writer;
    size_t slot; // index in the run
  };
  SmallVector<RangeAttr> grads;
  for (Operation *sync : syncs)
    grads.push_back(
        cast<RangeAttr>(cast<InstructionOpInterface>(sync).getReads()[0]));
  SmallVector<Operation *> writers = firstTouching(
      grads, "writes",
      llvm::make_range(std::next(syncs.front()->getReverseIterator()),
                       block.rend()));
  SmallVector<Ready> ready;
  for (auto [slot, sync] : llvm::enumerate(syncs)) {
    if (!writers[slot])
      return sync->emitError("weft-overlap-grad-sync: nothing on compute "
                             "writes the gradient slot this collective reads");
    ready.push_back({writers[slot], slot});
  }
  llvm::stable_sort(ready, [&](const Ready &a, const Ready &b) {
    return position[a.writer] < position[b.writer];
  });

  EventCounter events(program);
  StreamOp stream =
      getOrCreateStream(program, scatter ? "reducescatter" : "allreduce");
  auto side = OpBuilder::atBlockEnd(&stream.getBody().front());
  Location loc = program.getLoc();
  StringAttr label = side.getStringAttr("grad sync");
  // The side stream waits for an event compute records right after each
  // producing instruction (one per instruction).
  DenseMap<Operation *, int64_t> recorded;
  auto waitFor = [&](Operation *writer) {
    auto [it, inserted] = recorded.try_emplace(writer, 0);
    if (!inserted)
      return;
    it->second = recordAfter(writer, events);
    WaitEventOp::create(side, loc, it->second, ArrayAttr(), ArrayAttr(), label);
  };
  // Compute waits for the whole sync where the run was.
  Operation *after = syncs.back()->getNextNode();

  if (scatter) {
    // Buckets of at most `bucketLimit` gradient bytes in the order their
    // slots become final, each one reduce-scatter of its slots (members)
    // issued once the last is final: one collective launch per bucket.
    SmallVector<RangeAttr> reads, writes;
    int64_t bucketBytes = 0;
    Operation *trigger = nullptr;
    auto first = cast<ReduceScatterOp>(syncs.front());
    auto flush = [&] {
      if (reads.empty())
        return;
      waitFor(trigger);
      createCoalesced<ReduceScatterOp>(side, loc, first.getDtype(),
                                       first.getGroup(), reads, writes, label);
      reads.clear();
      writes.clear();
      bucketBytes = 0;
    };
    for (const Ready &item : ready) {
      auto sync = cast<ReduceScatterOp>(syncs[item.slot]);
      auto read = cast<RangeAttr>(sync.getReads()[0]);
      if (!reads.empty() && bucketBytes + read.getBytes() > bucketLimit)
        flush();
      reads.push_back(read);
      writes.push_back(cast<RangeAttr>(sync.getWrites()[0]));
      bucketBytes += read.getBytes();
      trigger = item.writer;
    }
    flush();
  } else {
    // In-place all-reduces of buckets of neighbouring, contiguous slots of at
    // most `bucketLimit` bytes, each issued once its latest slot is final.
    auto range = [&](size_t slot) {
      return cast<RangeAttr>(
          cast<InstructionOpInterface>(syncs[slot]).getReads()[0]);
    };
    auto contiguous = [&](size_t first, size_t second) {
      return range(first).getEnd() == range(second).getOffset();
    };
    auto bytes = [&](size_t first, size_t last) {
      return range(last).getEnd() - range(first).getOffset();
    };
    std::optional<std::pair<size_t, size_t>> bucket; // [first, last] slot
    Operation *trigger = nullptr;
    auto flush = [&] {
      if (!bucket)
        return;
      waitFor(trigger);
      auto first = cast<AllReduceOp>(syncs[bucket->first]);
      RangeAttr whole =
          RangeAttr::get(side.getContext(), range(bucket->first).getBuffer(),
                         range(bucket->first).getOffset(),
                         bytes(bucket->first, bucket->second));
      int64_t elementBytes = range(bucket->first).getBytes() / first.getCount();
      ArrayAttr list = side.getArrayAttr({whole});
      AllReduceOp::create(side, loc, first.getReduce(),
                          whole.getBytes() / elementBytes, first.getDtype(),
                          first.getGroup(), list, list, label);
      bucket.reset();
    };
    for (const Ready &item : ready) {
      if (bucket) {
        std::pair<size_t, size_t> grown = *bucket;
        if (item.slot + 1 == bucket->first &&
            contiguous(item.slot, grown.first))
          grown.first = item.slot;
        else if (item.slot == bucket->second + 1 &&
                 contiguous(grown.second, item.slot))
          grown.second = item.slot;
        if (grown != *bucket && bytes(grown.first, grown.second) <= bucketLimit)
          bucket = grown;
        else
          flush();
      }
      if (!bucket)
        bucket = {item.slot, item.slot};
      trigger = item.writer;
    }
    flush();
  }
  for (Operation *sync : syncs)
    sync->erase();
  int64_t done = events.next();
  RecordEventOp::create(side, loc, done, ArrayAttr(), ArrayAttr(), label);
  OpBuilder builder(compute.getContext());
  if (after)
    builder.setInsertionPoint(after);
  else
    builder.setInsertionPointToEnd(&block);
  WaitEventOp::create(builder, loc, done, ArrayAttr(), ArrayAttr(), label);
  return success();
}

struct WeftOverlapGradSyncPass
    : mlir::weftx::impl::WeftOverlapGradSyncBase<WeftOverlapGradSyncPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t limit = bucketBytesOf(module);
    for (auto program : module.getOps<ProgramOp>())
      if (failed(overlapGradSync(program, limit)))
        return signalPassFailure();
  }
};

} // namespace
