//===- FoldZeroFills.cpp - GEMMs that overwrite instead of adding to zeros ===//
//
// A weight gradient is summed into its slot by a GEMM with beta 1, so the
// slot is zero-filled first: ZeRO-2/3 fill every micro-batch's slots right
// before the backward's first sum. When GEMMs are the first to write the
// whole slot they can overwrite it (beta 0) and the fill goes: one pass
// over every such gradient fewer per micro-batch. A fused weight (GPT-2's
// q|k|v) is covered by several GEMMs, each writing its rows of every column.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/IR/WeftExecOps.h"
#include "WeftExec/Transforms/HappensBefore.h"
#include "WeftExec/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

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

struct WeftFoldZeroFillsPass
    : public weftx::impl::WeftFoldZeroFillsBase<WeftFoldZeroFillsPass> {
  void runOnOperation() override {
    for (ProgramOp program : getOperation().getOps<ProgramOp>()) {
      // The candidates in stream order alone; the program's order and
      // accesses only where there are some (ZeRO 0/1 plans have none).
      struct Fold {
        unsigned stream;
        int64_t fill;
        RangeAttr slot;
        SmallVector<int64_t> gemms;
      };
      SmallVector<Fold> candidates;
      SmallVector<SmallVector<InstructionOpInterface>> streams =
          instructionsByStream(program);
      for (auto [s, insts] : llvm::enumerate(streams))
        for (auto [i, inst] : llvm::enumerate(insts)) {
          auto fill = dyn_cast<FillOp>(inst.getOperation());
          if (!fill || fill.getValue().convertToDouble() != 0)
            continue;
          for (RangeAttr slot : fill.getWrites().getAsRange<RangeAttr>()) {
            SmallVector<int64_t> found = coveringGemms(insts, i, slot);
            if (found.empty())
              continue;
            candidates.push_back({unsigned(s), int64_t(i), slot, found});
          }
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
      for (const Fold &fold : candidates) {
        SmallVector<InstructionOpInterface> &insts = streams[fold.stream];
        auto fill = cast<FillOp>(insts[fold.fill].getOperation());
        MLIRContext *context = fill.getContext();
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
        SmallVector<Attribute> writes;
        for (Attribute w : fill.getWrites())
          if (w != fold.slot)
            writes.push_back(w);
        ++numSlots;
        if (writes.empty())
          fill.erase();
        else
          fill.setWritesAttr(ArrayAttr::get(context, writes));
      }
    }
  }
};

} // namespace
