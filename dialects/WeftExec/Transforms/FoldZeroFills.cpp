//===- FoldZeroFills.cpp - GEMMs that overwrite instead of adding to zeros ===//
//
// A weight gradient is summed into its slot by a GEMM with beta 1, so the
// slot is zero-filled first: ZeRO-2/3 fill every micro-batch's slots right
// before the backward's first sum, ZeRO 0/1 the whole gradient buffer at
// the step's start. When GEMMs are the first to write a whole slot they can
// overwrite it (beta 0) and the fill leaves it: one pass over every such
// gradient fewer (per micro-batch under ZeRO-2/3). A fused weight (GPT-2's
// q|k|v) is covered by several GEMMs, each writing its rows of every column.
// A fill of many slots at once (ZeRO 0/1's one range) keeps the bytes
// between the folded slots: the norms, biases and embedding-written tables.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/IR/WeftExecOps.h"
#include "WeftExec/Transforms/HappensBefore.h"
#include "WeftExec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTFOLDZEROFILLS
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

/// Whether every access of `slot` but the fill (instruction `fill` of
/// `stream`) and `gemms` (later instructions of that stream, in order)
/// completes before the fill or starts after the last of the GEMMs.
bool onlyBetween(const HappensBefore &order, const BufferAccesses &accesses,
                 RangeAttr slot, unsigned stream, int64_t fill,
                 ArrayRef<int64_t> gemms) {
  int64_t last = gemms.back();
  for (const BufferAccess &access : accesses.of(slot.getBuffer())) {
    if (!access.range.overlaps(slot))
      continue;
    if (access.stream == stream &&
        (access.index == fill || llvm::is_contained(gemms, access.index)))
      continue;
    if (!order.completesBefore(access.stream, access.index, stream, fill) &&
        !order.completesBefore(stream, last, access.stream, access.index))
      return false;
  }
  return true;
}

/// A GEMM that adds its product to C (beta 1: C is reads[2]).
bool accumulates(GemmOp gemm) {
  return gemm.getBeta().convertToDouble() == 1.0 && gemm.getReads().size() >= 3;
}

/// The GEMMs of `insts` after `from` that write inside `slot` with beta 1,
/// rows [row, row + m) of every column of a column-major matrix of `ldc`
/// rows, in order, until their rows cover all `ldc`: the slot's first
/// writers if they fill it exactly. Empty otherwise.
SmallVector<int64_t> coveringGemms(ArrayRef<InstructionOpInterface> insts,
                                   int64_t from, RangeAttr slot) {
  SmallVector<int64_t> found;
  int64_t covered = 0, ldc = 0, n = 0, elementBytes = 0;
  for (int64_t j = from + 1; j < int64_t(insts.size()); ++j) {
    InstructionOpInterface inst = insts[j];
    Operation *op = inst;
    auto writes = op->getAttrOfType<ArrayAttr>("writes");
    bool touchesSlot =
        writes && llvm::any_of(writes.getAsRange<RangeAttr>(),
                               [&](RangeAttr w) { return w.overlaps(slot); });
    if (!touchesSlot)
      continue;
    auto gemm = dyn_cast<GemmOp>(op);
    if (!gemm || !accumulates(gemm))
      return {};
    auto c = cast<RangeAttr>(gemm.getWrites()[0]);
    int64_t e = getElementBytes(gemm.getDtype());
    if (found.empty()) {
      ldc = gemm.getLdc();
      n = gemm.getN();
      elementBytes = e;
      if (slot.getBytes() != ldc * n * e)
        return {};
    }
    // Rows [covered, covered + m) of every column, starting at the slot.
    bool next = int64_t(gemm.getLdc()) == ldc && int64_t(gemm.getN()) == n &&
                e == elementBytes && c.getBuffer() == slot.getBuffer() &&
                c.getOffset() == slot.getOffset() + covered * e &&
                c.getBytes() == ((n - 1) * ldc + int64_t(gemm.getM())) * e;
    if (!next)
      return {};
    found.push_back(j);
    covered += gemm.getM();
    if (covered == ldc)
      return found;
    if (covered > ldc)
      return {};
  }
  return {};
}

/// A slot of `range` that GEMMs after `fill` could overwrite: `range`
/// itself, else, for a range of many slots, each slot [C, C + ldc n) that
/// an accumulating GEMM's output starts inside `range`.
struct Fold {
  unsigned stream;
  int64_t fill;
  RangeAttr range; // the fill's write range that holds the slot
  RangeAttr slot;
  SmallVector<int64_t> gemms;
};

void collectFolds(ArrayRef<InstructionOpInterface> insts, unsigned stream,
                  int64_t fill, RangeAttr range, SmallVectorImpl<Fold> &out) {
  if (SmallVector<int64_t> found = coveringGemms(insts, fill, range);
      !found.empty()) {
    out.push_back({stream, fill, range, range, found});
    return;
  }
  size_t first = out.size(); // this range's slots, which may not overlap
  for (int64_t j = fill + 1; j < int64_t(insts.size()); ++j) {
    Operation *op = insts[j];
    auto gemm = dyn_cast<GemmOp>(op);
    if (!gemm || !accumulates(gemm))
      continue;
    auto c = cast<RangeAttr>(gemm.getWrites()[0]);
    int64_t bytes = int64_t(gemm.getLdc()) * int64_t(gemm.getN()) *
                    getElementBytes(gemm.getDtype());
    if (c.getBuffer() != range.getBuffer() ||
        c.getOffset() + bytes > range.getEnd() ||
        c.getOffset() < range.getOffset())
      continue;
    auto slot =
        RangeAttr::get(range.getContext(), c.getBuffer(), c.getOffset(), bytes);
    // A GEMM inside a slot already taken (a fused weight's later row
    // blocks, a later micro-batch's sum) starts none: skipped before the
    // walk, and the slots stay disjoint, as the rewrite needs.
    if (llvm::any_of(ArrayRef(out).drop_front(first),
                     [&](const Fold &f) { return f.slot.overlaps(slot); }))
      continue;
    // Only the GEMM that writes the slot's first rows starts it.
    SmallVector<int64_t> found = coveringGemms(insts, fill, slot);
    if (found.empty() || found.front() != j)
      continue;
    out.push_back({stream, fill, range, slot, found});
  }
}

/// `range` without the (disjoint) `slots` inside it, in offset order.
SmallVector<Attribute> remainder(RangeAttr range,
                                 SmallVector<RangeAttr> slots) {
  llvm::sort(slots, [](RangeAttr a, RangeAttr b) {
    return a.getOffset() < b.getOffset();
  });
  SmallVector<Attribute> pieces;
  int64_t at = range.getOffset();
  auto piece = [&](int64_t end) {
    if (end > at)
      pieces.push_back(
          RangeAttr::get(range.getContext(), range.getBuffer(), at, end - at));
  };
  for (RangeAttr slot : slots) {
    piece(slot.getOffset());
    at = slot.getEnd();
  }
  piece(range.getEnd());
  return pieces;
}

struct WeftFoldZeroFillsPass
    : public weftx::impl::WeftFoldZeroFillsBase<WeftFoldZeroFillsPass> {
  void runOnOperation() override {
    for (ProgramOp program : getOperation().getOps<ProgramOp>()) {
      // The candidates in stream order alone; the program's order and
      // accesses only where there are some.
      SmallVector<Fold> candidates;
      SmallVector<SmallVector<InstructionOpInterface>> streams =
          instructionsByStream(program);
      for (auto [s, insts] : llvm::enumerate(streams))
        for (auto [i, inst] : llvm::enumerate(insts)) {
          auto fill = dyn_cast<FillOp>(inst.getOperation());
          if (!fill || fill.getValue().convertToDouble() != 0)
            continue;
          for (RangeAttr range : fill.getWrites().getAsRange<RangeAttr>())
            collectFolds(insts, unsigned(s), int64_t(i), range, candidates);
        }
      if (candidates.empty())
        continue;
      HappensBefore order;
      // A wait nothing records: weft-plan-memory reports it.
      if (order.build(program))
        continue;
      BufferAccesses accesses(order);
      llvm::erase_if(candidates, [&](const Fold &fold) {
        return !onlyBetween(order, accesses, fold.slot, fold.stream, fold.fill,
                            fold.gemms);
      });
      // The folded slots of each fill's ranges, to cut out of them.
      llvm::MapVector<Operation *,
                      llvm::MapVector<Attribute, SmallVector<RangeAttr>>>
          folded;
      for (const Fold &fold : candidates) {
        SmallVector<InstructionOpInterface> &insts = streams[fold.stream];
        MLIRContext *context = program.getContext();
        for (int64_t j : fold.gemms) {
          auto gemm = cast<GemmOp>(insts[j].getOperation());
          // Beta 0: C is written, not read (reads[2] goes).
          SmallVector<Attribute> reads(gemm.getReads().begin(),
                                       gemm.getReads().end());
          reads.erase(reads.begin() + 2);
          gemm.setReadsAttr(ArrayAttr::get(context, reads));
          gemm.setBetaAttr(FloatAttr::get(Float64Type::get(context), 0.0));
          ++numGemms;
        }
        folded[insts[fold.fill].getOperation()][fold.range].push_back(
            fold.slot);
        ++numSlots;
      }
      for (auto &[op, slotsByRange] : folded) {
        auto fill = cast<FillOp>(op);
        SmallVector<Attribute> writes;
        for (Attribute w : fill.getWrites()) {
          auto it = slotsByRange.find(w);
          if (it == slotsByRange.end())
            writes.push_back(w);
          else
            llvm::append_range(writes,
                               remainder(cast<RangeAttr>(w), it->second));
        }
        if (writes.empty())
          fill.erase();
        else
          fill.setWritesAttr(ArrayAttr::get(fill.getContext(), writes));
      }
    }
  }
};

} // namespace
