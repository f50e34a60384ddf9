//===- OverlapGradSync.cpp - DP gradient sync overlapped with backward ----===//
//
// Moves the data-parallel gradient collectives that weft-schedule emits as
// one run on `compute` to a side stream in buckets, each behind the last
// write of its slots: ZeRO-0's all-reduces as one all-reduce whose members
// are the bucket's runs of contiguous slots, ZeRO-1's reduce-scatters as
// the members of one coalesced reduce-scatter.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

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

  // Buckets of at most `bucketLimit` gradient bytes in the order the slots
  // become final, each one collective issued once its latest slot is final
  // (one launch per bucket): ZeRO-1 reduce-scatters every slot as a member;
  // ZeRO-0 all-reduces in place, a slot that extends a run of contiguous
  // slots of the bucket joining that member.
  auto range = [&](size_t slot, StringRef attr = "reads") {
    return cast<RangeAttr>(syncs[slot]->getAttrOfType<ArrayAttr>(attr)[0]);
  };
  auto contiguous = [&](size_t first, size_t second) {
    return range(first).getEnd() == range(second).getOffset();
  };
  for (auto [begin, end] : bucketsInOrder(
           ready.size(),
           [&](size_t i) { return range(ready[i].slot).getBytes(); },
           bucketLimit)) {
    SmallVector<std::pair<size_t, size_t>> runs; // [first, last] slot
    for (const Ready &item : ArrayRef(ready).slice(begin, end - begin)) {
      auto run = llvm::find_if(runs, [&](const std::pair<size_t, size_t> &r) {
        return !scatter &&
               ((item.slot + 1 == r.first && contiguous(item.slot, r.first)) ||
                (item.slot == r.second + 1 && contiguous(r.second, item.slot)));
      });
      if (run == runs.end()) {
        runs.push_back({item.slot, item.slot});
        continue;
      }
      if (item.slot < run->first)
        run->first = item.slot;
      else
        run->second = item.slot;
      // The grown run may now touch another: one member.
      auto touching = llvm::find_if(runs, [&](const auto &r) {
        return (run->second + 1 == r.first &&
                contiguous(run->second, r.first)) ||
               (r.second + 1 == run->first && contiguous(r.second, run->first));
      });
      if (touching != runs.end()) {
        run->first = std::min(run->first, touching->first);
        run->second = std::max(run->second, touching->second);
        runs.erase(touching);
      }
    }
    // The latest slot's writer (ready is in writer order).
    waitFor(ready[end - 1].writer);
    SmallVector<RangeAttr> reads, writes;
    for (auto [first, last] : runs) {
      reads.push_back(RangeAttr::get(
          side.getContext(), range(first).getBuffer(), range(first).getOffset(),
          range(last).getEnd() - range(first).getOffset()));
      writes.push_back(scatter ? range(first, "writes") : reads.back());
    }
    if (auto first = dyn_cast<ReduceScatterOp>(syncs.front()))
      createCoalesced<ReduceScatterOp>(side, loc, first.getDtype(),
                                       first.getGroup(), reads, writes, label);
    else if (auto first = dyn_cast<AllReduceOp>(syncs.front()))
      createCoalesced<AllReduceOp>(side, loc, first.getDtype(),
                                   first.getGroup(), reads, writes, label);
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
