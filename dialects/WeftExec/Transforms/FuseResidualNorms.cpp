//===- FuseResidualNorms.cpp - Residual adds run inside their norm --------===//
//
// A transformer block's forward ends in a residual add whose sum the next
// norm reads right away; its backward ends a norm backward whose input
// gradient a residual add sums with the skip path's right away. One kernel
// does each pair in one pass over the rows: the forward reads a and b once
// and never reads the sum back, the backward never stores dx (only the add
// read it). Deciding it here, before memory planning, also drops the dx
// buffers from the plan.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/IR/WeftExecOps.h"
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTFUSERESIDUALNORMS
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

/// Two launches and the one that replaces them (at the first's place).
struct Fusion {
  LaunchOp first, second;
  std::string kernel; // the fused registry kernel
  DictionaryAttr constants;
  SmallVector<Attribute> reads, writes;
  StringAttr dx; // backward: the buffer of the dx no longer stored
};

class Matcher : public LaunchQueries {
public:
  Matcher(ProgramOp program, SymbolTable &kernels)
      : LaunchQueries(program, kernels) {
    // Every read, per buffer: dx may go only when the add alone reads it.
    program.walk([&](InstructionOpInterface inst) {
      for (RangeAttr range : inst.getReadRanges())
        readers[range.getBuffer().getAttr()].push_back(
            {inst.getOperation(), range});
    });
  }

  /// Whether no range of `writes` overlaps a range of `reads` or another
  /// write (the fused kernels read a row before they write it, but their
  /// fallbacks on a GPU do not: docs/runtime.md, "Kernel ABI").
  static bool disjoint(ArrayRef<Attribute> reads, ArrayRef<Attribute> writes) {
    for (size_t i = 0; i < writes.size(); ++i) {
      auto w = cast<RangeAttr>(writes[i]);
      for (Attribute r : reads)
        if (w.overlaps(cast<RangeAttr>(r)))
          return false;
      for (size_t j = i + 1; j < writes.size(); ++j)
        if (w.overlaps(cast<RangeAttr>(writes[j])))
          return false;
    }
    return true;
  }
  /// A residual_add of two ranges of `n` elements into a third, all of one
  /// type.
  bool residualAdd(LaunchOp add, int64_t n) const {
    KernelOp k = kernelOf(add, "residual_add");
    if (!k || add.getReads().size() != 2 || add.getWrites().size() != 1 ||
        constant(k, "n") != n)
      return false;
    Type type = dtype(range(add.getWrites(), 0));
    return dtype(range(add.getReads(), 0)) == type &&
           dtype(range(add.getReads(), 1)) == type;
  }
  /// `norm`'s kernel when it is `layer_norm_<pass>` or `rms_norm_<pass>`.
  KernelOp norm(LaunchOp launch, StringRef pass) const {
    KernelOp k = kernelOf(launch);
    if (!k)
      return {};
    StringRef name = k.getRegistryName();
    return name == ("layer_norm_" + pass).str() ||
                   name == ("rms_norm_" + pass).str()
               ? k
               : KernelOp();
  }
  static int64_t elements(KernelOp norm) {
    return constant(norm, "rows") * constant(norm, "width");
  }

  /// residual_add (a, b -> sum) then a norm forward of sum:
  /// residual_<norm>_forward (a, b, gamma[, beta] -> sum, y, stats).
  std::optional<Fusion> forward(LaunchOp add, LaunchOp normOp) const {
    KernelOp k = norm(normOp, "forward");
    if (!k || !residualAdd(add, elements(k)) || normOp.getReads().empty() ||
        range(normOp.getReads(), 0) != range(add.getWrites(), 0) ||
        dtype(range(add.getWrites(), 0)) != dtype(range(normOp.getReads(), 0)))
      return std::nullopt;
    Fusion fusion{add,
                  normOp,
                  ("residual_" + k.getRegistryName()).str(),
                  k.getConstants(),
                  {},
                  {},
                  {}};
    fusion.reads.append(add.getReads().begin(), add.getReads().end());
    fusion.reads.append(normOp.getReads().begin() + 1, normOp.getReads().end());
    fusion.writes.append(add.getWrites().begin(), add.getWrites().end());
    fusion.writes.append(normOp.getWrites().begin(), normOp.getWrites().end());
    if (!disjoint(fusion.reads, fusion.writes))
      return std::nullopt;
    return fusion;
  }

  /// A norm backward (..., dy -> dx, dGamma[, dBeta]) then a residual_add of
  /// dx and another gradient: <norm>_backward_add (..., dy, addend -> sum,
  /// dGamma[, dBeta]), when nothing else reads dx (an arena buffer).
  std::optional<Fusion> backward(LaunchOp normOp, LaunchOp add) const {
    KernelOp k = norm(normOp, "backward");
    if (!k || !residualAdd(add, elements(k)) || normOp.getWrites().empty())
      return std::nullopt;
    RangeAttr dx = range(normOp.getWrites(), 0);
    RangeAttr a = range(add.getReads(), 0), b = range(add.getReads(), 1);
    if ((a == dx) == (b == dx) || dtype(dx) != dtype(range(add.getWrites(), 0)))
      return std::nullopt;
    BufferOp dxBuffer = bufferOf(dx);
    if (!dxBuffer || dxBuffer.getRegion() != weftx::Region::arena)
      return std::nullopt;
    auto it = readers.find(dx.getBuffer().getAttr());
    if (it != readers.end())
      for (const auto &[op, read] : it->second)
        if (op != add.getOperation() && read.overlaps(dx))
          return std::nullopt;
    Fusion fusion{normOp,
                  add,
                  (k.getRegistryName() + "_add").str(),
                  k.getConstants(),
                  {},
                  {},
                  dx.getBuffer().getAttr()};
    fusion.reads.append(normOp.getReads().begin(), normOp.getReads().end());
    fusion.reads.push_back(a == dx ? b : a);
    fusion.writes.push_back(add.getWrites()[0]);
    fusion.writes.append(normOp.getWrites().begin() + 1,
                         normOp.getWrites().end());
    if (!disjoint(fusion.reads, fusion.writes))
      return std::nullopt;
    return fusion;
  }

  /// The fusion starting at `op`, whose stream continues with `rest`: the
  /// next instruction that does device work (record_events and releases
  /// are passed over: they only end lives or make results ready earlier).
  std::optional<Fusion> match(Operation *op, Block::iterator rest,
                              Block::iterator end) const {
    auto first = dyn_cast<LaunchOp>(op);
    if (!first)
      return std::nullopt;
    while (rest != end && isa<RecordEventOp, ReleaseOp>(*rest))
      ++rest;
    auto second = rest == end ? LaunchOp() : dyn_cast<LaunchOp>(*rest);
    if (!second)
      return std::nullopt;
    if (std::optional<Fusion> fusion = forward(first, second))
      return fusion;
    return backward(first, second);
  }

private:
  DenseMap<StringAttr, SmallVector<std::pair<Operation *, RangeAttr>>> readers;
};

struct WeftFuseResidualNormsPass
    : public weftx::impl::WeftFuseResidualNormsBase<WeftFuseResidualNormsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SymbolTable kernels(module);
    KernelDeclarations declarations(module);
    OpBuilder builder(module.getContext());

    DenseSet<StringAttr> droppedDx;
    llvm::SetVector<Operation *> replacedKernels;
    for (ProgramOp program : module.getOps<ProgramOp>()) {
      Matcher matcher(program, kernels);
      SmallVector<Fusion, 0> fusions;
      for (StreamOp stream : program.getBody().getOps<StreamOp>()) {
        Block &block = stream.getBody().front();
        for (auto it = block.begin(), end = block.end(); it != end; ++it)
          if (std::optional<Fusion> fusion =
                  matcher.match(&*it, std::next(it), end)) {
            it = Block::iterator(fusion->second.getOperation());
            fusions.push_back(std::move(*fusion));
          }
      }
      for (Fusion &fusion : fusions) {
        FlatSymbolRefAttr kernel =
            declarations.get(fusion.kernel, fusion.constants);
        builder.setInsertionPoint(fusion.first);
        LaunchOp::create(
            builder, fusion.first.getLoc(), kernel, DenseI64ArrayAttr(),
            builder.getArrayAttr(fusion.reads),
            builder.getArrayAttr(fusion.writes), fusion.first.getPhaseAttr());
        for (LaunchOp launch : {fusion.first, fusion.second})
          replacedKernels.insert(kernels.lookup(launch.getKernel()));
        fusion.first.erase();
        fusion.second.erase();
        if (fusion.dx)
          droppedDx.insert(fusion.dx);
        ++(fusion.dx ? numBackward : numForward);
      }
      // dx buffers nothing touches any more leave the plan.
      if (!droppedDx.empty()) {
        program.walk([&](InstructionOpInterface inst) {
          for (ArrayAttr list : {inst.getReads(), inst.getWrites()})
            for (RangeAttr range : list.getAsRange<RangeAttr>())
              droppedDx.erase(range.getBuffer().getAttr());
        });
        for (BufferOp buffer : llvm::make_early_inc_range(program.getBuffers()))
          if (droppedDx.contains(buffer.getSymNameAttr()))
            buffer.erase();
        droppedDx.clear();
      }
    }
    // Replaced kernels no launch or epilogue names any more. (Instructions
    // sit in programs, symbol tables of their own: name uses by hand.)
    if (replacedKernels.empty())
      return;
    DenseSet<StringAttr> named;
    module.walk([&](InstructionOpInterface inst) {
      inst->getAttrDictionary().walk(
          [&](FlatSymbolRefAttr ref) { named.insert(ref.getAttr()); });
    });
    for (Operation *kernel : replacedKernels)
      if (!named.contains(SymbolTable::getSymbolName(kernel)))
        kernel->erase();
  }
};

} // namespace
