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
      HappensBefore order;
      // A wait nothing records: weft-plan-memory reports it.
      if (order.build(program))
        continue;
      BufferAccesses accesses(order);
      struct Fold {
        FillOp fill;
        RangeAttr slot;
        SmallVector<GemmOp> gemms;
      };
      SmallVector<Fold> folds;
      for (unsigned s = 0; s < order.numStreams(); ++s) {
        ArrayRef<InstructionOpInterface> insts = order.getInstructions(s);
        for (int64_t i = 0; i < int64_t(insts.size()); ++i) {
          InstructionOpInterface inst = insts[i];
          auto fill = dyn_cast<FillOp>(inst.getOperation());
          if (!fill || fill.getValue().convertToDouble() != 0)
            continue;
          for (RangeAttr slot : fill.getWrites().getAsRange<RangeAttr>()) {
            SmallVector<int64_t> found = coveringGemms(insts, i, slot);
            if (found.empty())
              continue;
            if (!onlyBetween(order, accesses, slot, s, i, found))
              continue;
            Fold fold{fill, slot, {}};
            for (int64_t j : found)
              fold.gemms.push_back(cast<GemmOp>(
                  InstructionOpInterface(insts[j]).getOperation()));
            folds.push_back(std::move(fold));
          }
        }
      }
      for (Fold &fold : folds) {
        MLIRContext *context = fold.fill.getContext();
        for (GemmOp gemm : fold.gemms) {
          // Beta 0: C is written, not read (reads[2] goes).
          SmallVector<Attribute> reads(gemm.getReads().begin(),
                                       gemm.getReads().end());
          reads.erase(reads.begin() + 2);
          gemm.setReadsAttr(ArrayAttr::get(context, reads));
          gemm.setBetaAttr(FloatAttr::get(Float64Type::get(context), 0.0));
          ++numGemms;
        }
        SmallVector<Attribute> writes;
        for (Attribute w : fold.fill.getWrites())
          if (w != fold.slot)
            writes.push_back(w);
        ++numSlots;
        if (writes.empty())
          fold.fill.erase();
        else
          fold.fill.setWritesAttr(ArrayAttr::get(context, writes));
      }
    }
  }
};

} // namespace
