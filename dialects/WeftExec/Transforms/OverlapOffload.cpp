//===- OverlapOffload.cpp - Offload copies overlapped with compute --------===//
//
// Optimizer offload moves the gradients to the host and the updated weights
// back. weft-optimizer emits those copies on `compute`; this pass issues the
// gradient copies on a `d2h` stream as soon as what they copy is final (so
// they overlap the rest of the backward) and the weight copies on an `h2d`
// stream right after the AdamW bucket that produced them (so they overlap
// the next bucket), as ZeRO-Offload does.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"

#include <numeric>
#include <optional>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTOVERLAPOFFLOAD
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

class OffloadOverlap {
public:
  explicit OffloadOverlap(ProgramOp program) : program(program) {
    for (auto buffer : program.getBody().front().getOps<BufferOp>())
      hostBuffers[buffer.getSymNameAttr()] =
          buffer.getRegion() == weftx::Region::host;
  }

  void run();

private:
  bool isHost(RangeAttr range) {
    return hostBuffers.lookup(range.getBuffer().getAttr());
  }
  RangeAttr source(Operation *copy) {
    return cast<RangeAttr>(cast<CopyOp>(copy).getReads()[0]);
  }
  RangeAttr destination(Operation *copy) {
    return cast<RangeAttr>(cast<CopyOp>(copy).getWrites()[0]);
  }
  /// `stream` waits for an event recorded right after `producer` (one event
  /// per producer).
  void waitFor(Operation *producer, OpBuilder &stream, StringAttr label);
  /// Moves `copies` to the end of `stream`, each after the producers
  /// `producersOf` names, and makes `compute` wait for all of them before
  /// its first instruction from `from` on that touches what they write.
  void move(ArrayRef<Operation *> copies, StringRef streamName,
            function_ref<SmallVector<Operation *>(Operation *)> producersOf,
            Operation *from);

  ProgramOp program;
  /// Made once the program turns out to offload (it walks the program).
  std::optional<EventCounter> events;
  DenseMap<StringAttr, bool> hostBuffers;
  /// The event recorded after each producer, and the (producer, stream)
  /// pairs already waited for.
  DenseMap<Operation *, int64_t> recorded;
  DenseSet<std::pair<Operation *, Operation *>> waited;
};

void OffloadOverlap::waitFor(Operation *producer, OpBuilder &stream,
                             StringAttr label) {
  Operation *streamOp = stream.getInsertionBlock()->getParentOp();
  if (!waited.insert({producer, streamOp}).second)
    return;
  auto [it, inserted] = recorded.try_emplace(producer, 0);
  if (inserted)
    it->second = recordAfter(producer, *events);
  WaitEventOp::create(stream, program.getLoc(), it->second, ArrayAttr(),
                      ArrayAttr(), label);
}

void OffloadOverlap::move(
    ArrayRef<Operation *> copies, StringRef streamName,
    function_ref<SmallVector<Operation *>(Operation *)> producersOf,
    Operation *from) {
  if (copies.empty())
    return;
  // Found before anything moves: the producers, and compute's first
  // instruction after the copies that touches their destinations.
  SmallVector<SmallVector<Operation *>> producers;
  for (Operation *copy : copies)
    producers.push_back(producersOf(copy));
  Operation *firstUser = nullptr;
  for (Operation *op = from; op && !firstUser; op = op->getNextNode()) {
    if (llvm::is_contained(copies, op))
      continue;
    for (Operation *copy : copies)
      if (overlaps(op, "reads", copy, "writes") ||
          overlaps(op, "writes", copy, "writes")) {
        firstUser = op;
        break;
      }
  }
  // Issued in the order their sources become final: by the producer's place
  // in its stream, side streams (which run under the backward) before
  // compute.
  SmallVector<size_t> order(copies.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](size_t i) {
    std::pair<int, int64_t> latest{0, -1};
    for (Operation *producer : producers[i]) {
      int onCompute =
          isa<StreamOp>(producer->getParentOp()) &&
          cast<StreamOp>(producer->getParentOp()).getName() == "compute";
      int64_t at =
          std::distance(producer->getBlock()->begin(), producer->getIterator());
      latest = std::max(latest, {onCompute, at});
    }
    return latest;
  };
  SmallVector<std::pair<int, int64_t>> keys;
  for (size_t i = 0; i < copies.size(); ++i)
    keys.push_back(key(i));
  llvm::stable_sort(order,
                    [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  StreamOp stream = getOrCreateStream(program, streamName);
  auto side = OpBuilder::atBlockEnd(&stream.getBody().front());
  for (size_t i : order) {
    Operation *copy = copies[i];
    ArrayRef<Operation *> mine = producers[i];
    for (Operation *producer : mine)
      waitFor(producer, side, phaseOf(copy));
    copy->moveBefore(side.getInsertionBlock(), side.getInsertionPoint());
  }
  int64_t done = events->next();
  RecordEventOp::create(side, program.getLoc(), done, ArrayAttr(), ArrayAttr(),
                        phaseOf(copies.back()));
  if (firstUser)
    waitBefore(firstUser, done, phaseOf(firstUser));
}

void OffloadOverlap::run() {
  StreamOp compute = findStream(program, "compute");
  if (!compute)
    return;
  Block &block = compute.getBody().front();
  Operation *firstHostStep = nullptr;
  for (Operation &op : block)
    if (auto step = dyn_cast<OptimizerStepOp>(op))
      if (llvm::all_of(step.getReads().getAsRange<RangeAttr>(),
                       [&](RangeAttr range) { return isHost(range); })) {
        firstHostStep = &op;
        break;
      }
  if (!firstHostStep)
    return;
  events.emplace(program);
  // Device-to-host copies before the host's AdamW, host-to-device copies
  // after its first bucket.
  SmallVector<Operation *> toHost, toDevice;
  for (Operation &op : block) {
    if (!isa<CopyOp>(op))
      continue;
    bool fromHost = isHost(source(&op)),
         toHostMemory = isHost(destination(&op));
    if (!fromHost && toHostMemory && op.isBeforeInBlock(firstHostStep))
      toHost.push_back(&op);
    else if (fromHost && !toHostMemory && firstHostStep->isBeforeInBlock(&op))
      toDevice.push_back(&op);
  }

  // A gradient copy waits for the last instruction that writes its source:
  // on a side stream (the DP sync, which is final once it has run), else on
  // compute before the copy.
  SmallVector<StreamOp> sideStreams;
  for (auto stream : program.getBody().front().getOps<StreamOp>())
    if (stream != compute)
      sideStreams.push_back(stream);
  // The last compute instruction before `copy` that writes its source.
  auto computeWriter = [&](Operation *copy) {
    SmallVector<Operation *> writers;
    for (Operation *op = copy->getPrevNode(); op; op = op->getPrevNode())
      if (touches(op, "writes", source(copy))) {
        writers.push_back(op);
        break;
      }
    return writers;
  };
  auto lastWriters = [&](Operation *copy) {
    SmallVector<Operation *> writers;
    for (StreamOp stream : sideStreams)
      for (Operation &op : llvm::reverse(stream.getBody().front()))
        if (touches(&op, "writes", source(copy))) {
          writers.push_back(&op);
          break;
        }
    return writers.empty() ? computeWriter(copy) : writers;
  };
  auto after = [](ArrayRef<Operation *> copies) {
    return copies.empty() ? nullptr : copies.back()->getNextNode();
  };
  move(toHost, "d2h", lastWriters, after(toHost));
  // A weight copy waits for the AdamW bucket (on compute) that wrote its
  // source.
  move(toDevice, "h2d", computeWriter, after(toDevice));
}

struct WeftOverlapOffloadPass
    : mlir::weftx::impl::WeftOverlapOffloadBase<WeftOverlapOffloadPass> {
  void runOnOperation() override {
    for (auto program : getOperation().getOps<ProgramOp>())
      OffloadOverlap(program).run();
  }
};

} // namespace
