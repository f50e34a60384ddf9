//===- PlanMemory.cpp - Static memory planning for weftx programs ---------===//
//
// Places every buffer of every program: persistent buffers packed in
// declaration order, arena buffers at offsets that may be shared by buffers
// whose lifetimes are ordered by happens-before (stream order plus events).
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"

#include "WeftExec/IR/WeftExecOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTPLANMEMORY
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

/// The happens-before relation of one program's instructions, from vector
/// clocks: clock[s][i][t] is how many instructions of stream t are known to
/// have completed when instruction i of stream s starts (itself included for
/// t == s).
class HappensBefore {
public:
  /// Executes the streams in an interleaving that honors events; fails (with
  /// a diagnostic on the program) if some wait can never be satisfied.
  LogicalResult build(ProgramOp program);

  /// Whether instruction (sa, ia) happens strictly before (sb, ib).
  bool before(unsigned sa, int64_t ia, unsigned sb, int64_t ib) const {
    return sa == sb ? ia < ib : clocks[sb][ib][sa] > ia;
  }

  unsigned numStreams() const { return streams.size(); }
  ArrayRef<InstructionOpInterface> getInstructions(unsigned stream) const {
    return streams[stream];
  }
  /// Position of (stream, index) in the interleaving.
  int64_t position(unsigned stream, int64_t index) const {
    return positions[stream][index];
  }

private:
  SmallVector<SmallVector<InstructionOpInterface>> streams;
  SmallVector<SmallVector<SmallVector<int64_t>>> clocks;
  SmallVector<SmallVector<int64_t>> positions;
};

LogicalResult HappensBefore::build(ProgramOp program) {
  for (StreamOp stream : program.getStreams())
    streams.push_back(llvm::to_vector(
        stream.getBody().front().getOps<InstructionOpInterface>()));
  unsigned numStreams = streams.size();
  clocks.resize(numStreams);
  positions.resize(numStreams);
  SmallVector<SmallVector<int64_t>> current(
      numStreams, SmallVector<int64_t>(numStreams, 0));
  llvm::DenseMap<int64_t, SmallVector<int64_t>> recorded;
  int64_t position = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (unsigned s = 0; s < numStreams; ++s) {
      while (clocks[s].size() < streams[s].size()) {
        Operation *op = streams[s][clocks[s].size()];
        if (auto wait = dyn_cast<WaitEventOp>(op)) {
          auto it = recorded.find(wait.getEvent());
          if (it == recorded.end())
            break;
          for (unsigned t = 0; t < numStreams; ++t)
            current[s][t] = std::max(current[s][t], it->second[t]);
        }
        current[s][s] = clocks[s].size() + 1;
        if (auto record = dyn_cast<RecordEventOp>(op))
          recorded[record.getEvent()] = current[s];
        clocks[s].push_back(current[s]);
        positions[s].push_back(position++);
        progress = true;
      }
    }
  }
  for (unsigned s = 0; s < numStreams; ++s)
    if (clocks[s].size() < streams[s].size())
      return streams[s][clocks[s].size()]->emitError()
             << "waits for an event that is never recorded before it in any "
                "order of the streams; the program cannot be memory-planned";
  return success();
}

/// Where one buffer is accessed: per stream, the first and last instruction.
struct Lifetime {
  SmallVector<int64_t> first, last;
  int64_t firstPosition = kNever, lastPosition = -1;

  bool isAccessed() const { return lastPosition >= 0; }
};

/// Whether every access of `a` happens strictly before every access of `b`.
/// Checking each stream's last access of `a` against each stream's first
/// access of `b` suffices: clocks only grow along a stream.
bool entirelyBefore(const Lifetime &a, const Lifetime &b,
                    const HappensBefore &hb) {
  for (unsigned s = 0; s < hb.numStreams(); ++s) {
    if (a.last[s] < 0)
      continue;
    for (unsigned t = 0; t < hb.numStreams(); ++t)
      if (b.first[t] != kNever && !hb.before(s, a.last[s], t, b.first[t]))
        return false;
  }
  return true;
}

struct PlanMemoryPass
    : public mlir::weftx::impl::WeftPlanMemoryBase<PlanMemoryPass> {
  using WeftPlanMemoryBase::WeftPlanMemoryBase;

  void runOnOperation() override;

private:
  LogicalResult planProgram(ProgramOp program, int64_t role,
                            PredictionAttr prediction);
};

LogicalResult PlanMemoryPass::planProgram(ProgramOp program, int64_t role,
                                          PredictionAttr prediction) {
  HappensBefore hb;
  if (failed(hb.build(program)))
    return failure();

  SmallVector<BufferOp> buffers = llvm::to_vector(program.getBuffers());
  llvm::DenseMap<StringAttr, unsigned> bufferIndex;
  for (auto [index, buffer] : llvm::enumerate(buffers))
    bufferIndex[buffer.getSymNameAttr()] = index;
  unsigned numStreams = hb.numStreams();
  SmallVector<Lifetime> lifetimes(
      buffers.size(), Lifetime{SmallVector<int64_t>(numStreams, kNever),
                               SmallVector<int64_t>(numStreams, -1)});
  for (unsigned s = 0; s < numStreams; ++s) {
    for (auto [index, constInst] : llvm::enumerate(hb.getInstructions(s))) {
      InstructionOpInterface inst = constInst;
      int64_t i = index, position = hb.position(s, i);
      for (ArrayAttr ranges : {inst.getReads(), inst.getWrites()}) {
        for (RangeAttr range : ranges.getAsRange<RangeAttr>()) {
          Lifetime &life =
              lifetimes[bufferIndex.lookup(range.getBuffer().getAttr())];
          life.first[s] = std::min(life.first[s], i);
          life.last[s] = std::max(life.last[s], i);
          life.firstPosition = std::min(life.firstPosition, position);
          life.lastPosition = std::max(life.lastPosition, position);
        }
      }
    }
  }

  OpBuilder builder(program);
  auto setOffset = [&](BufferOp buffer, int64_t offset) {
    buffer.setOffsetAttr(builder.getI64IntegerAttr(offset));
  };

  int64_t persistentSize = 0;
  SmallVector<unsigned> arena;
  for (auto [index, buffer] : llvm::enumerate(buffers)) {
    if (buffer.getRegion() == weftx::Region::arena) {
      arena.push_back(index);
      continue;
    }
    int64_t offset = llvm::alignTo(persistentSize, buffer.getAlignment());
    setOffset(buffer, offset);
    persistentSize = offset + buffer.getSize();
  }

  // Largest first packs best; ties go to the earlier first access, then to
  // declaration order, so the result is deterministic.
  llvm::stable_sort(arena, [&](unsigned a, unsigned b) {
    int64_t sizeA = buffers[a].getSize(), sizeB = buffers[b].getSize();
    if (sizeA != sizeB)
      return sizeA > sizeB;
    return lifetimes[a].firstPosition < lifetimes[b].firstPosition;
  });
  SmallVector<unsigned> placed;
  SmallVector<std::pair<int64_t, int64_t>> busy;
  int64_t arenaSize = 0;
  for (unsigned index : arena) {
    BufferOp buffer = buffers[index];
    int64_t size = buffer.getSize(), alignment = buffer.getAlignment();
    const Lifetime &life = lifetimes[index];
    busy.clear();
    if (life.isAccessed()) {
      for (unsigned other : placed) {
        const Lifetime &otherLife = lifetimes[other];
        if (entirelyBefore(life, otherLife, hb) ||
            entirelyBefore(otherLife, life, hb))
          continue;
        int64_t offset = *buffers[other].getOffset();
        busy.push_back({offset, offset + int64_t(buffers[other].getSize())});
      }
      placed.push_back(index);
    }
    llvm::sort(busy);
    // Best fit: the smallest gap between conflicting buffers that holds the
    // aligned buffer, else the first aligned offset after all of them.
    int64_t cursor = 0, bestOffset = -1, bestGap = kNever;
    for (auto [begin, end] : busy) {
      int64_t offset = llvm::alignTo(cursor, alignment);
      if (offset + size <= begin && begin - cursor < bestGap) {
        bestGap = begin - cursor;
        bestOffset = offset;
      }
      cursor = std::max(cursor, end);
    }
    int64_t offset = bestOffset >= 0
                         ? bestOffset
                         : int64_t(llvm::alignTo(cursor, alignment));
    setOffset(buffer, offset);
    arenaSize = std::max(arenaSize, offset + size);
  }

  program.setArenaSizeAttr(builder.getI64IntegerAttr(arenaSize));
  program.setPersistentSizeAttr(builder.getI64IntegerAttr(persistentSize));
  if (!report)
    return success();

  // Live bytes along the interleaving: a lower bound for any placement.
  SmallVector<std::pair<int64_t, int64_t>> deltas;
  for (unsigned index : arena) {
    const Lifetime &life = lifetimes[index];
    if (!life.isAccessed())
      continue;
    deltas.push_back({life.firstPosition, int64_t(buffers[index].getSize())});
    deltas.push_back(
        {life.lastPosition + 1, -int64_t(buffers[index].getSize())});
  }
  llvm::sort(deltas);
  int64_t live = 0, liveBound = 0;
  for (auto [position, delta] : deltas) {
    live += delta;
    liveBound = std::max(liveBound, live);
  }
  llvm::raw_ostream &os = llvm::outs();
  os << "weft-plan-memory: program @" << program.getSymName() << " (role "
     << role << "): arena " << arenaSize << " B (live lower bound " << liveBound
     << " B), persistent " << persistentSize << " B, planned peak "
     << arenaSize + persistentSize << " B";
  if (prediction)
    os << ", predicted " << prediction.getPeakMemoryBytes()[role] << " B";
  os << "\n";
  return success();
}

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto prediction = module->getAttrOfType<PredictionAttr>(
      WeftExecDialect::kPredictionAttrName);
  for (auto [role, program] : llvm::enumerate(module.getOps<ProgramOp>()))
    if (failed(planProgram(program, role, prediction)))
      return signalPassFailure();
}

} // namespace
