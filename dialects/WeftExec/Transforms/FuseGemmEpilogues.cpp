//===- FuseGemmEpilogues.cpp - Kernels folded into their gemm -------------===//
//
// A linear layer lowers to a gemm writing y and a bias_add over y in place,
// in an MLP then the activation; its backward to a gemm writing dy and the
// activation's backward over dy, and a weight-gradient gemm followed by the
// bias gradient of the same dy. cuBLASLt computes each of these in the
// gemm's own call (an epilogue): one pass over the output and one rounding
// fewer per folded kernel. Deciding it here, before memory planning, makes it
// part of the plan that is verified, simulated and replayed.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/HappensBefore.h"
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"

#include "weft/kernels/Activations.h"

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTFUSEGEMMEPILOGUES
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

/// A gemm and what its epilogue takes over.
struct Fold {
  GemmOp gemm;
  GemmEpilogueKind kind;
  SmallVector<Operation *> folded; // erased
  SmallVector<KernelOp> kernels;   // the epilogue's, in order
  SmallVector<RangeAttr> reads;    // appended to the gemm's
  SmallVector<RangeAttr> writes;   // appended to the gemm's
};

/// Reads one program's instructions, buffers and the module's kernels.
class Matcher : public LaunchQueries {
public:
  Matcher(ProgramOp program, SymbolTable &kernels, const HappensBefore &order)
      : LaunchQueries(program, kernels), order(order), accesses(order) {
    streams.resize(order.numStreams());
    for (unsigned s = 0; s < order.numStreams(); ++s)
      for (InstructionOpInterface inst : order.getInstructions(s))
        streams[s].push_back(inst);
  }

  bool sameShape(RangeAttr range, RangeAttr like) const {
    return range.getBytes() == like.getBytes() && dtype(range) == dtype(like);
  }
  static int64_t elementBytes(GemmOp gemm) {
    return getElementBytes(gemm.getDtype());
  }
  /// Whether `range` is clear of every operand of `gemm` (an output the gemm
  /// does not write itself is written while it reads them).
  static bool clearOfGemm(GemmOp gemm, RangeAttr range) {
    return !touches(gemm, "reads", range) && !touches(gemm, "writes", range);
  }
  /// A gemm on float storage with one output and no epilogue yet.
  static bool floatGemm(GemmOp gemm) {
    Type type = gemm.getDtype();
    return !gemm.getEpilogue() && gemm.getWrites().size() == 1 &&
           (type.isF32() || type.isBF16() || type.isF16());
  }

  /// bias_grad over the gemm's A (m x k, packed, not transposed) into m
  /// elements of the gemm's type.
  KernelOp biasGradOfA(GemmOp gemm, Operation *next) const {
    KernelOp k = kernelOf(next, "bias_grad");
    auto launch = dyn_cast_or_null<LaunchOp>(next);
    if (!k || launch.getReads().size() != 1 || launch.getWrites().size() != 1 ||
        gemm.getTransA() || gemm.getLda() != gemm.getM())
      return {};
    RangeAttr dy = range(launch.getReads(), 0),
              grad = range(launch.getWrites(), 0);
    bool fits = dy == range(gemm.getReads(), 0) &&
                constant(k, "width") == int64_t(gemm.getM()) &&
                constant(k, "rows") == int64_t(gemm.getK()) &&
                dtype(dy) == gemm.getDtype() &&
                dtype(grad) == gemm.getDtype() &&
                grad.getBytes() == int64_t(gemm.getM()) * elementBytes(gemm);
    return fits ? k : KernelOp();
  }

  /// Whether `range` still holds zeros when instruction `at` of `stream`
  /// runs, and nothing on another stream writes it before that instruction
  /// has finished: every write of it on another stream waits (through the
  /// events) for `at`, and its last writer before on this stream is a fill
  /// of 0 covering it. (One pass over the writes of its buffer.) With
  /// `until`, other streams' writes must wait for instruction `until` (where
  /// the folded kernel now runs) instead.
  bool stillZeroFilled(unsigned stream, int64_t at, RangeAttr range,
                       std::optional<int64_t> until = std::nullopt) const {
    const BufferAccess *last = nullptr; // the last write before `at` here
    for (const BufferAccess &write : accesses.of(range.getBuffer())) {
      if (!write.write || !write.range.overlaps(range))
        continue;
      if (write.stream != stream) {
        if (!order.completesBefore(stream, until.value_or(at), write.stream,
                                   write.index))
          return false;
      } else if (write.index < at && (!last || write.index > last->index)) {
        last = &write;
      }
    }
    auto fill = last ? dyn_cast<FillOp>(last->op) : FillOp();
    if (!fill || fill.getValue().convertToDouble() != 0)
      return false; // nothing says it holds zeros
    for (RangeAttr w : fill.getWrites().getAsRange<RangeAttr>())
      if (w.getBuffer() == range.getBuffer() &&
          w.getOffset() <= range.getOffset() && range.getEnd() <= w.getEnd())
        return true;
    return false;
  }

  /// A bias_add over the gemm's output in place, the bias along m.
  KernelOp biasAdd(GemmOp gemm, Operation *next) const {
    KernelOp k = kernelOf(next, "bias_add");
    auto launch = dyn_cast_or_null<LaunchOp>(next);
    if (!k || launch.getReads().size() != 2 || launch.getWrites().size() != 1)
      return {};
    RangeAttr y = range(gemm.getWrites(), 0),
              bias = range(launch.getReads(), 1);
    bool fits = range(launch.getReads(), 0) == y &&
                range(launch.getWrites(), 0) == y && !bias.overlaps(y) &&
                constant(k, "width") == int64_t(gemm.getM()) &&
                constant(k, "rows") == int64_t(gemm.getN()) &&
                dtype(y) == gemm.getDtype() && dtype(bias) == gemm.getDtype() &&
                bias.getBytes() == int64_t(gemm.getM()) * elementBytes(gemm);
    return fits ? k : KernelOp();
  }

  /// A tanh-GELU activation kernel `name` over the gemm's m x n output
  /// (cuBLASLt's GELU is the tanh approximation; its aux matrix needs a
  /// leading dimension that is a multiple of 8).
  KernelOp gelu(GemmOp gemm, Operation *op, StringRef name) const {
    KernelOp k = kernelOf(op, name);
    int64_t m = gemm.getM(), n = gemm.getN();
    if (!k ||
        constant(k, "act") != int64_t(weft::kernels::Activation::GeluTanh) ||
        constant(k, "n") != m * n || m % 8 != 0)
      return {};
    return k;
  }

  /// activation_forward reading y into another range of y's shape.
  KernelOp geluForward(GemmOp gemm, Operation *op) const {
    KernelOp k = gelu(gemm, op, "activation_forward");
    if (!k)
      return {};
    auto launch = cast<LaunchOp>(op);
    RangeAttr y = range(gemm.getWrites(), 0);
    if (launch.getReads().size() != 1 || launch.getWrites().size() != 1)
      return {};
    RangeAttr out = range(launch.getWrites(), 0);
    return range(launch.getReads(), 0) == y && out != y && sameShape(out, y) &&
                   clearOfGemm(gemm, out)
               ? k
               : KernelOp();
  }

  /// activation_backward(x, dy = y) over y in place.
  KernelOp geluBackward(GemmOp gemm, Operation *op) const {
    if (gemm.getBeta().convertToDouble() != 0)
      return {};
    KernelOp k = gelu(gemm, op, "activation_backward");
    if (!k)
      return {};
    auto launch = cast<LaunchOp>(op);
    if (launch.getReads().size() != 2 || launch.getWrites().size() != 1)
      return {};
    RangeAttr y = range(gemm.getWrites(), 0), x = range(launch.getReads(), 0);
    return range(launch.getReads(), 1) == y &&
                   range(launch.getWrites(), 0) == y && x != y &&
                   sameShape(x, y) && dtype(y) == gemm.getDtype() &&
                   clearOfGemm(gemm, x)
               ? k
               : KernelOp();
  }

  /// What the epilogue of gemm `index` of `stream` can take over.
  std::optional<Fold> match(unsigned stream, int64_t index) const {
    ArrayRef<Operation *> insts = streams[stream];
    auto gemm = dyn_cast<GemmOp>(insts[index]);
    if (!gemm || !floatGemm(gemm))
      return std::nullopt;
    // The instructions after the gemm that do device work: record_events
    // (they only make the folded results ready earlier) and releases (the
    // end of a buffer's life) are passed over.
    SmallVector<int64_t, 3> next;
    for (int64_t j = index + 1; j < int64_t(insts.size()) && next.size() < 3;
         ++j)
      if (!isa<RecordEventOp, ReleaseOp>(insts[j]))
        next.push_back(j);
    Fold fold{gemm, GemmEpilogueKind::bias, {}, {}, {}, {}};
    if (std::optional<Fold> grad = biasGradAfter(fold, stream, next))
      return grad;
    if (std::optional<Fold> grad = biasGradBefore(fold, stream, index))
      return grad;
    if (next.empty() || gemm.getLdc() != gemm.getM())
      return std::nullopt;
    Operation *first = insts[next[0]];
    bool betaZero = gemm.getBeta().convertToDouble() == 0;
    if (KernelOp k = biasAdd(gemm, first)) {
      fold.folded.push_back(first);
      fold.kernels.push_back(k);
      fold.reads.push_back(range(cast<LaunchOp>(first).getReads(), 1));
      if (KernelOp act = next.size() > 1 && betaZero
                             ? geluForward(gemm, insts[next[1]])
                             : KernelOp()) {
        fold.kind = GemmEpilogueKind::gelu_bias;
        fold.folded.push_back(insts[next[1]]);
        fold.kernels.push_back(act);
        fold.writes.push_back(
            range(cast<LaunchOp>(insts[next[1]]).getWrites(), 0));
      }
      return fold;
    }
    if (KernelOp k = geluBackward(gemm, first)) {
      fold.kind = GemmEpilogueKind::dgelu;
      fold.folded.push_back(first);
      fold.kernels.push_back(k);
      fold.reads.push_back(range(cast<LaunchOp>(first).getReads(), 0));
      return fold;
    }
    return std::nullopt;
  }

private:
  /// A bias_grad of the gemm's A after it (`next`: the instructions after
  /// it that do device work), after a zero fill of exactly its slot where
  /// the plan has one (ZeRO-2 fills a micro-batch's gradient slot right
  /// before its first sum; the epilogue writes, so the fill folds too).
  std::optional<Fold> biasGradAfter(Fold fold, unsigned stream,
                                    ArrayRef<int64_t> next) const {
    if (next.empty())
      return std::nullopt;
    ArrayRef<Operation *> insts = streams[stream];
    int64_t grad = next[0];
    FillOp slotFill;
    if (auto fill = dyn_cast<FillOp>(insts[next[0]]);
        fill && next.size() > 1 && fill.getValue().convertToDouble() == 0 &&
        fill.getWrites().size() == 1) {
      auto list = insts[next[1]]->getAttrOfType<ArrayAttr>("writes");
      if (list && list.size() == 1 && list[0] == fill.getWrites()[0]) {
        slotFill = fill;
        grad = next[1];
      }
    }
    KernelOp k = biasGradOfA(fold.gemm, insts[grad]);
    if (!k)
      return std::nullopt;
    RangeAttr slot = range(cast<LaunchOp>(insts[grad]).getWrites(), 0);
    if (!stillZeroFilled(stream, grad, slot) || !clearOfGemm(fold.gemm, slot))
      return std::nullopt;
    if (slotFill)
      fold.folded.push_back(slotFill);
    return withBiasGrad(std::move(fold), insts[grad], k, slot);
  }

  /// A bias_grad of the same dy at most a few instructions before gemm
  /// `index`: a row-parallel layer's replicated bias under tensor
  /// parallelism, whose gradient its backward takes first (under full
  /// recomputation the layer's re-run forward may lie between). It may run
  /// where the gemm does instead when no record_event lies between (another
  /// stream could read the gradient before the gemm that now writes it),
  /// nothing between writes its dy or touches its slot, and the slot holds
  /// zeros until the gemm.
  std::optional<Fold> biasGradBefore(Fold fold, unsigned stream,
                                     int64_t index) const {
    constexpr int64_t kWindow = 8;
    ArrayRef<Operation *> insts = streams[stream];
    RangeAttr dy = range(fold.gemm.getReads(), 0);
    for (int64_t j = index - 1; j >= 0 && j >= index - kWindow; --j) {
      Operation *op = insts[j];
      if (isa<RecordEventOp>(op) || touches(op, "writes", dy))
        return std::nullopt;
      KernelOp k = biasGradOfA(fold.gemm, op);
      if (!k)
        continue;
      RangeAttr slot = range(cast<LaunchOp>(op).getWrites(), 0);
      for (int64_t between = j + 1; between < index; ++between)
        if (touches(insts[between], "reads", slot) ||
            touches(insts[between], "writes", slot))
          return std::nullopt;
      if (!stillZeroFilled(stream, j, slot, index) ||
          !clearOfGemm(fold.gemm, slot))
        return std::nullopt;
      return withBiasGrad(std::move(fold), op, k, slot);
    }
    return std::nullopt;
  }

  /// `fold` taking over bias_grad `grad` (kernel `k`) into `slot`.
  static Fold withBiasGrad(Fold fold, Operation *grad, KernelOp k,
                           RangeAttr slot) {
    fold.kind = GemmEpilogueKind::bias_grad;
    fold.folded.push_back(grad);
    fold.kernels.push_back(k);
    fold.writes.push_back(slot);
    return fold;
  }

  const HappensBefore &order;
  BufferAccesses accesses;
  /// Each stream's instructions.
  SmallVector<SmallVector<Operation *>> streams;
};

void apply(const Fold &fold) {
  GemmOp gemm = fold.gemm;
  MLIRContext *context = gemm.getContext();
  auto append = [&](ArrayAttr list, ArrayRef<RangeAttr> extra) {
    SmallVector<Attribute> ranges(list.begin(), list.end());
    ranges.append(extra.begin(), extra.end());
    return ArrayAttr::get(context, ranges);
  };
  gemm.setReadsAttr(append(gemm.getReads(), fold.reads));
  gemm.setWritesAttr(append(gemm.getWrites(), fold.writes));
  SmallVector<Attribute> kernels;
  for (KernelOp kernel : fold.kernels)
    kernels.push_back(FlatSymbolRefAttr::get(kernel.getSymNameAttr()));
  gemm.setEpilogue(fold.kind);
  gemm.setEpilogueKernelsAttr(ArrayAttr::get(context, kernels));
  for (Operation *op : fold.folded)
    op->erase();
}

struct WeftFuseGemmEpiloguesPass
    : public weftx::impl::WeftFuseGemmEpiloguesBase<WeftFuseGemmEpiloguesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable kernels(module);
    for (ProgramOp program : module.getOps<ProgramOp>()) {
      HappensBefore order;
      // A wait nothing records: weft-plan-memory reports it.
      if (order.build(program))
        continue;
      Matcher matcher(program, kernels, order);
      SmallVector<Fold, 0> folds;
      // A bias_grad between two gemms of its dy folds into the first.
      llvm::SmallPtrSet<Operation *, 16> claimed;
      for (unsigned s = 0; s < order.numStreams(); ++s)
        for (int64_t i = 0; i < order.numInstructions(s); ++i)
          if (std::optional<Fold> fold = matcher.match(s, i))
            if (llvm::none_of(fold->folded, [&](Operation *op) {
                  return claimed.count(op);
                })) {
              claimed.insert(fold->folded.begin(), fold->folded.end());
              folds.push_back(std::move(*fold));
            }
      for (const Fold &fold : folds) {
        switch (fold.kind) {
        case GemmEpilogueKind::bias:
          ++numBias;
          break;
        case GemmEpilogueKind::gelu_bias:
          ++numGeluBias;
          break;
        case GemmEpilogueKind::dgelu:
          ++numDGelu;
          break;
        case GemmEpilogueKind::bias_grad:
          ++numBiasGrad;
          break;
        }
        apply(fold);
      }
    }
  }
};

} // namespace
