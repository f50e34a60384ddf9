//===- AttachMesh.cpp - weft-attach-mesh ----------------------------------===//
//
// Step 1 of the lowering (docs/lowering.md): checks the parallel configuration
// against each model, creates the DP x PP x TP grid, and records on the IR
// what the later steps decide from: `weft.parallel` on the model,
// `weft.stage` on every block and top-level op, `weft.placement` on every
// parameter.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTATTACHMESH
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;

namespace {

constexpr StringLiteral kGridName = "weft_mesh";

/// How a parameter is split over TP (Megatron): `column` splits the output
/// features, `row` the input features, `vocab` the vocabulary rows of the
/// token table and LM head; `replicated` parameters are whole on every rank.
struct TPRole {
  StringRef kind;
  int64_t dim = -1;
};

constexpr TPRole kReplicated{"replicated"};

/// The TP role a parameter gets from one of its uses.
TPRole roleOfUse(OpOperand &use) {
  auto in = [&](MutableOperandRange operands) {
    return llvm::any_of(operands,
                        [&](OpOperand &operand) { return &operand == &use; });
  };
  Operation *user = use.getOwner();
  if (auto embedding = dyn_cast<EmbeddingOp>(user))
    return in(embedding.getTableMutable()) ? TPRole{"vocab", 0} : kReplicated;
  if (auto attention = dyn_cast<AttentionOp>(user)) {
    if (in(attention.getQkvWeightsMutable()))
      return {"column", 1};
    if (in(attention.getQkvBiasesMutable()))
      return {"column", 0};
    if (in(attention.getOutWeightMutable()))
      return {"row", 0};
    return kReplicated;
  }
  if (auto mlp = dyn_cast<MLPOp>(user)) {
    if (in(mlp.getUpWeightMutable()) || in(mlp.getGateWeightMutable()))
      return {"column", 1};
    if (in(mlp.getUpBiasMutable()))
      return {"column", 0};
    if (in(mlp.getDownWeightMutable()))
      return {"row", 0};
    return kReplicated;
  }
  if (auto head = dyn_cast<LMHeadOp>(user))
    return in(head.getInputMutable()) ? kReplicated : TPRole{"vocab", 0};
  return kReplicated;
}

/// Blocks per pipeline stage when the planner gives none: as even as possible;
/// the remainder goes one block each to the stages just before the last, since
/// the first stage also holds the embedding and the last the head and loss.
SmallVector<int64_t> evenLayerSplit(int64_t blocks, int64_t stages) {
  SmallVector<int64_t> split(stages, blocks / stages);
  int64_t remainder = blocks % stages;
  for (int64_t stage = stages - 1 - remainder; stage < stages - 1; ++stage)
    ++split[stage];
  return split;
}

struct AttachMeshPass : weft::impl::WeftAttachMeshBase<AttachMeshPass> {
  using Base::Base;

  void runOnOperation() override;

private:
  LogicalResult verifyOptions(ModuleOp module);
  FailureOr<SmallVector<int64_t>> layerSplit(func::FuncOp model,
                                             int64_t blocks);
  LogicalResult verifyHeadsAndWidths(func::FuncOp model);
  LogicalResult attach(func::FuncOp model);

  int64_t numStages() { return pp * virtualStages; }
};

LogicalResult AttachMeshPass::verifyOptions(ModuleOp module) {
  for (auto [name, value] : {std::pair<StringRef, int64_t>{"tp", tp},
                             {"pp", pp},
                             {"dp", dp},
                             {"micro-batch", microBatch},
                             {"grad-accum", gradAccum},
                             {"virtual-stages", virtualStages}})
    if (value < 1)
      return module.emitError()
             << "option '" << name << "' must be at least 1, got " << value;
  for (auto [name, value] :
       {std::pair<StringRef, int64_t>{"prefetch-depth", prefetchDepth},
        {"bucket-bytes", bucketBytes}})
    if (value < 0)
      return module.emitError()
             << "option '" << name << "' must not be negative, got " << value;
  if (gradAccum > kMaxGradAccum)
    return module.emitError()
           << "option 'grad-accum' is " << static_cast<int64_t>(gradAccum)
           << ": a step unrolls at most " << kMaxGradAccum
           << " micro-batches (use larger micro-batches)";
  if (zero < 0 || zero > 3)
    return module.emitError() << "option 'zero' must be 0, 1, 2 or 3, got "
                              << static_cast<int64_t>(zero);
  if (!llvm::is_contained({"gpipe", "1f1b", "interleaved"}, schedule))
    return module.emitError() << "option 'schedule' must be gpipe, 1f1b or "
                                 "interleaved, got '"
                              << schedule.getValue() << "'";
  if (!llvm::is_contained({"none", "selective", "full"}, recompute))
    return module.emitError() << "option 'recompute' must be none, selective "
                                 "or full, got '"
                              << recompute.getValue() << "'";
  if (schedule != "interleaved") {
    if (virtualStages != 1)
      return module.emitError()
             << "virtual-stages " << static_cast<int64_t>(virtualStages)
             << " needs schedule=interleaved";
    return success();
  }
  if (virtualStages < 2)
    return module.emitError()
           << "schedule=interleaved needs virtual-stages >= 2, got "
           << static_cast<int64_t>(virtualStages);
  if (pp < 2)
    return module.emitError() << "schedule=interleaved needs pp >= 2, got "
                              << static_cast<int64_t>(pp);
  // Megatron's interleaved 1F1B runs micro-batches in groups of pp.
  if (gradAccum % pp != 0)
    return module.emitError()
           << "schedule=interleaved needs grad-accum ("
           << static_cast<int64_t>(gradAccum) << ") to be a multiple of pp ("
           << static_cast<int64_t>(pp) << ")";
  return success();
}

FailureOr<SmallVector<int64_t>> AttachMeshPass::layerSplit(func::FuncOp model,
                                                           int64_t blocks) {
  int64_t stages = numStages();
  if (blocks < stages)
    return model.emitError() << "pp * virtual-stages = " << stages
                             << " pipeline stages exceed the " << blocks
                             << " blocks of the model";
  if (layersPerStage.empty()) {
    if (schedule == "interleaved" && blocks % stages != 0)
      return model.emitError()
             << "schedule=interleaved needs the " << blocks
             << " blocks divisible by pp * virtual-stages = " << stages
             << " (or an explicit layers-per-stage)";
    return evenLayerSplit(blocks, stages);
  }
  if (static_cast<int64_t>(layersPerStage.size()) != stages)
    return model.emitError()
           << "layers-per-stage has " << layersPerStage.size()
           << " entries, expected pp * virtual-stages = " << stages;
  if (llvm::any_of(layersPerStage, [](int64_t n) { return n < 1; }))
    return model.emitError() << "layers-per-stage entries must be at least 1";
  int64_t sum = 0;
  for (int64_t n : layersPerStage)
    sum += n;
  if (sum != blocks)
    return model.emitError() << "layers-per-stage sums to " << sum
                             << ", but the model has " << blocks << " blocks";
  return SmallVector<int64_t>(layersPerStage.begin(), layersPerStage.end());
}

LogicalResult AttachMeshPass::verifyHeadsAndWidths(func::FuncOp model) {
  WalkResult result = model.walk([&](Operation *op) {
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      for (auto [what, heads] :
           {std::pair<StringRef, int64_t>{"num_heads",
                                          attention.getNumHeadsAttr().getInt()},
            {"num_kv_heads", attention.getNumKvHeadsAttr().getInt()}})
        if (heads % tp != 0) {
          attention.emitOpError()
              << "cannot be split over tp = " << static_cast<int64_t>(tp)
              << ": it does not divide " << what << " = " << heads;
          return WalkResult::interrupt();
        }
    }
    if (auto mlp = dyn_cast<MLPOp>(op)) {
      int64_t width =
          cast<RankedTensorType>(mlp.getUpWeight().getType()).getDimSize(1);
      if (width % tp != 0) {
        mlp.emitOpError() << "cannot be split over tp = "
                          << static_cast<int64_t>(tp)
                          << ": it does not divide the MLP width " << width;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

LogicalResult AttachMeshPass::attach(func::FuncOp model) {
  if (failed(verifyHeadsAndWidths(model)))
    return failure();
  Block &body = model.getBody().front();
  auto blocks = llvm::to_vector(body.getOps<BlockOp>());
  FailureOr<SmallVector<int64_t>> split = layerSplit(model, blocks.size());
  if (failed(split))
    return failure();

  // Stages in program order: ops before the first block are on stage 0, every
  // other top-level op on the stage of the block before it.
  Builder builder(&getContext());
  SmallVector<int64_t> stageOfBlock;
  for (auto [stage, count] : llvm::enumerate(*split))
    stageOfBlock.append(count, stage);
  int64_t stage = 0;
  for (Operation &op : body.without_terminator()) {
    if (auto block = dyn_cast<BlockOp>(op))
      stage = stageOfBlock[block.getLayer()];
    op.setAttr("weft.stage", builder.getI64IntegerAttr(stage));
  }

  // A parameter is where it is declared: its block's stage, or its own.
  WalkResult result = model.walk([&](ParamOp param) {
    Operation *top = body.findAncestorOpInBlock(*param);
    auto paramStage = top->getAttrOfType<IntegerAttr>("weft.stage");
    std::optional<TPRole> role;
    for (OpOperand &use : param->getUses()) {
      TPRole useRole = roleOfUse(use);
      if (role && (role->kind != useRole.kind || role->dim != useRole.dim)) {
        param.emitOpError()
            << "parameter '" << param.getName() << "' is used both as "
            << role->kind << " and as " << useRole.kind << " tensor-parallel";
        return WalkResult::interrupt();
      }
      role = useRole;
    }
    role = role.value_or(kReplicated);
    SmallVector<NamedAttribute> placement = {
        builder.getNamedAttr("tp", builder.getStringAttr(role->kind)),
        builder.getNamedAttr("stage", paramStage)};
    if (role->dim >= 0)
      placement.push_back(
          builder.getNamedAttr("tp_dim", builder.getI64IntegerAttr(role->dim)));
    param->setAttr("weft.placement", builder.getDictionaryAttr(placement));
    return WalkResult::advance();
  });
  if (result.wasInterrupted())
    return failure();

  model->setAttr(
      "weft.parallel",
      builder.getDictionaryAttr({
          builder.getNamedAttr("tp", builder.getI64IntegerAttr(tp)),
          builder.getNamedAttr("pp", builder.getI64IntegerAttr(pp)),
          builder.getNamedAttr("dp", builder.getI64IntegerAttr(dp)),
          builder.getNamedAttr("zero", builder.getI64IntegerAttr(zero)),
          builder.getNamedAttr("micro_batch",
                               builder.getI64IntegerAttr(microBatch)),
          builder.getNamedAttr("grad_accum",
                               builder.getI64IntegerAttr(gradAccum)),
          builder.getNamedAttr("schedule", builder.getStringAttr(schedule)),
          builder.getNamedAttr("virtual_stages",
                               builder.getI64IntegerAttr(virtualStages)),
          builder.getNamedAttr("sequence_parallel",
                               builder.getBoolAttr(sequenceParallel)),
          builder.getNamedAttr("recompute", builder.getStringAttr(recompute)),
          builder.getNamedAttr("prefetch_depth",
                               builder.getI64IntegerAttr(prefetchDepth)),
          builder.getNamedAttr("bucket_bytes",
                               builder.getI64IntegerAttr(bucketBytes)),
          builder.getNamedAttr("layers_per_stage",
                               builder.getDenseI64ArrayAttr(*split)),
      }));
  return success();
}

void AttachMeshPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (failed(verifyOptions(module)))
    return signalPassFailure();
  auto models = llvm::filter_to_vector(
      module.getOps<func::FuncOp>(), [](func::FuncOp func) {
        return func->hasAttr(WeftDialect::kModelAttrName);
      });
  if (models.empty()) {
    module.emitError() << "no func.func marked '" << WeftDialect::kModelAttrName
                       << "' to place";
    return signalPassFailure();
  }
  if (SymbolTable::lookupSymbolIn(module, kGridName)) {
    module.emitError() << "a symbol named '" << kGridName
                       << "' already exists (was the mesh attached twice?)";
    return signalPassFailure();
  }
  for (func::FuncOp model : models)
    if (failed(attach(model)))
      return signalPassFailure();

  // Axis 0 is DP, 1 PP, 2 TP: the row-major linear index is the planner's
  // rank order (dp * PP + pp) * TP + tp.
  auto builder = OpBuilder::atBlockBegin(module.getBody());
  shard::GridOp::create(builder, module.getLoc(), kGridName,
                        ArrayRef<int64_t>{dp, pp, tp});
}

} // namespace
