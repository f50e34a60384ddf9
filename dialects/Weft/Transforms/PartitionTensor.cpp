//===- PartitionTensor.cpp - weft-partition-tensor ------------------------===//
//
// Step 2 of the lowering (docs/lowering.md): rewrites each model to what one
// tensor-parallel rank computes, Megatron style.
//
//   parameters      local shapes from `weft.placement`; `weft.shard` records
//                   the global tensor and the slice this rank holds
//   attention       tp_copy -> weft.tp_attention (local heads) -> all_reduce
//                   -> bias_add (the output bias, once, after the reduction)
//   mlp             tp_copy -> weft.mlp (local width, no down bias)
//                   -> all_reduce -> bias_add
//   embedding       weft.vocab_embedding (masked lookup) -> all_reduce
//                   [-> weft.position_embedding]
//   lm_head + loss  tp_copy -> weft.lm_head (local vocabulary)
//                   -> weft.vocab_parallel_cross_entropy
//
// With sequence parallelism, activations between the TP regions are split
// along the sequence (dimension 1): all_gather replaces tp_copy, and
// reduce_scatter replaces all_reduce (after the embedding: all_reduce, the
// position rows, then all_slice, since position rows depend on the global
// sequence index). Norms, residuals and bias adds then run on sequence shards.
//
// With tp = 1 the IR is unchanged apart from the `weft.shard` attributes.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTPARTITIONTENSOR
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;

namespace {

constexpr StringLiteral kGridName = "weft_mesh";
constexpr int16_t kTPAxis = 2;
constexpr int64_t kSequenceDim = 1;

/// Collects the ops a rewrite creates, so they can inherit the pipeline
/// stage of the op they replace.
struct CreatedOps : OpBuilder::Listener {
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    ops.push_back(op);
  }
  SmallVector<Operation *> ops;
};

/// Rewrites one model for a TP group of `tp` ranks.
class ModelPartitioner {
public:
  ModelPartitioner(func::FuncOp model, int64_t tp, bool sequenceParallel)
      : model(model), tp(tp), sequenceParallel(sequenceParallel),
        builder(model.getContext(), &created),
        grid(FlatSymbolRefAttr::get(model.getContext(), kGridName)),
        axes(builder.getDenseI16ArrayAttr({kTPAxis})) {}

  LogicalResult run();

private:
  LogicalResult localizeParam(ParamOp param);
  void rewrite(EmbeddingOp op);
  void rewrite(AttentionOp op);
  void rewrite(MLPOp op);
  LogicalResult rewrite(LMHeadOp op);
  LogicalResult rewrite(CrossEntropyOp op);

  /// Megatron's `f` before a column-parallel layer: the replicated input
  /// (or, with sequence parallelism, the gathered sequence).
  Value enterParallelRegion(Value input, Location loc);
  /// Megatron's `g` after a row-parallel layer: sums the partial products
  /// (or, with sequence parallelism, sums and splits the sequence).
  Value leaveParallelRegion(Value partial, Location loc);
  Value addBias(Value input, Value bias, Location loc);

  func::FuncOp model;
  int64_t tp;
  bool sequenceParallel;
  CreatedOps created;
  OpBuilder builder;
  FlatSymbolRefAttr grid;
  DenseI16ArrayAttr axes;
  /// Global widths of the slices a fused [q|k|v] parameter splits one by one.
  DenseMap<Operation *, SmallVector<int64_t>> fusedSegments;
  /// The unpadded vocabulary of each embedding, before its table is sharded.
  DenseMap<Operation *, int64_t> vocabOfEmbedding;
  /// Local logits of a vocabulary-parallel LM head -> the unpadded vocabulary.
  DenseMap<Value, int64_t> vocabOfLogits;
};

Value ModelPartitioner::enterParallelRegion(Value input, Location loc) {
  if (!sequenceParallel)
    return TPCopyOp::create(builder, loc, input.getType(), input, grid, axes);
  return shard::AllGatherOp::create(builder, loc, input.getType(), grid, axes,
                                    input, builder.getIndexAttr(kSequenceDim));
}

Value ModelPartitioner::leaveParallelRegion(Value partial, Location loc) {
  if (!sequenceParallel)
    return shard::AllReduceOp::create(builder, loc, partial.getType(), grid,
                                      axes, partial);
  return shard::ReduceScatterOp::create(
      builder, loc, partial.getType(), grid, axes, partial,
      shard::ReductionKindAttr::get(builder.getContext(),
                                    shard::ReductionKind::Sum),
      builder.getIndexAttr(kSequenceDim));
}

Value ModelPartitioner::addBias(Value input, Value bias, Location loc) {
  if (!bias)
    return input;
  return BiasAddOp::create(builder, loc, input.getType(), input, bias);
}

LogicalResult ModelPartitioner::localizeParam(ParamOp param) {
  auto placement = param->getAttrOfType<DictionaryAttr>("weft.placement");
  if (!placement)
    return param.emitOpError() << "has no 'weft.placement' (run "
                                  "weft-attach-mesh first)";
  auto global = cast<RankedTensorType>(param.getType());
  StringRef role = placement.getAs<StringAttr>("tp").getValue();
  SmallVector<NamedAttribute> shard = {
      builder.getNamedAttr("global_name", param.getNameAttr()),
      builder.getNamedAttr("global_shape",
                           builder.getDenseI64ArrayAttr(global.getShape()))};
  if (role == "replicated" || tp == 1) {
    // Sequence-parallel ranks see different tokens, so the gradients of
    // replicated parameters used on sequence shards must be summed over TP.
    bool onSequenceShards =
        sequenceParallel && tp > 1 &&
        llvm::any_of(param->getUsers(),
                     [](Operation *user) { return !isa<EmbeddingOp>(user); });
    if (onSequenceShards)
      shard.push_back(
          builder.getNamedAttr("sequence_partial", builder.getUnitAttr()));
    param->setAttr("weft.shard", builder.getDictionaryAttr(shard));
    return success();
  }

  int64_t dim = placement.getAs<IntegerAttr>("tp_dim").getInt();
  int64_t size = global.getDimSize(dim);
  int64_t padding = 0;
  if (role == "vocab")
    padding = vocabShardRows(size, tp) * tp - size;
  else if (size % tp != 0)
    return param.emitOpError() << "cannot split parameter '" << param.getName()
                               << "' over tp = " << tp << ": dimension " << dim
                               << " has size " << size;
  SmallVector<int64_t> localShape(global.getShape());
  localShape[dim] = (size + padding) / tp;
  shard.append({builder.getNamedAttr("tp_dim", builder.getI64IntegerAttr(dim)),
                builder.getNamedAttr(
                    "local_size", builder.getI64IntegerAttr(localShape[dim]))});
  if (auto it = fusedSegments.find(param); it != fusedSegments.end())
    shard.push_back(builder.getNamedAttr(
        "segments", builder.getDenseI64ArrayAttr(it->second)));
  if (padding)
    shard.push_back(
        builder.getNamedAttr("padding", builder.getI64IntegerAttr(padding)));
  param->setAttr("weft.shard", builder.getDictionaryAttr(shard));
  param.getResult().setType(global.clone(localShape));
  return success();
}

void ModelPartitioner::rewrite(EmbeddingOp op) {
  builder.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value partial = VocabEmbeddingOp::create(
      builder, loc, op.getType(), op.getTokens(), op.getTable(),
      builder.getI64IntegerAttr(vocabOfEmbedding.lookup(op)), grid, axes);
  Value result;
  if (!op.getPositions() && !op.getTokenTypes()) {
    result = leaveParallelRegion(partial, loc);
  } else {
    result = shard::AllReduceOp::create(builder, loc, partial.getType(), grid,
                                        axes, partial);
    result = PositionEmbeddingOp::create(builder, loc, result.getType(), result,
                                         op.getPositions(), op.getTokenTypes(),
                                         op.getPositionOffsetAttr());
    if (sequenceParallel)
      result =
          shard::AllSliceOp::create(builder, loc, result.getType(), grid, axes,
                                    result, builder.getIndexAttr(kSequenceDim));
  }
  op.replaceAllUsesWith(result);
  op.erase();
}

void ModelPartitioner::rewrite(AttentionOp op) {
  builder.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value input = enterParallelRegion(op.getInput(), loc);
  Value partial =
      TPAttentionOp::create(
          builder, loc, op.getResult().getType(), /*state=*/TypeRange(), input,
          op.getQkvWeights(), op.getQkvBiases(), op.getOutWeight(),
          builder.getI64IntegerAttr(op.getNumHeadsAttr().getInt() / tp),
          builder.getI64IntegerAttr(op.getNumKvHeadsAttr().getInt() / tp),
          op.getHeadDimAttr(), builder.getI64IntegerAttr(tp),
          op.getCausalAttr(), op.getRopeThetaAttr())
          .getResult();
  Value result =
      addBias(leaveParallelRegion(partial, loc), op.getOutBias(), loc);
  op.getResult().replaceAllUsesWith(result);
  op.erase();
}

void ModelPartitioner::rewrite(MLPOp op) {
  builder.setInsertionPoint(op);
  Location loc = op.getLoc();
  Value input = enterParallelRegion(op.getInput(), loc);
  Value partial =
      MLPOp::create(builder, loc, op.getResult().getType(),
                    /*state=*/TypeRange(), input, op.getUpWeight(),
                    op.getUpBias(), op.getGateWeight(), op.getDownWeight(),
                    /*down_bias=*/Value(), op.getActivationAttr())
          .getResult();
  Value result =
      addBias(leaveParallelRegion(partial, loc), op.getDownBias(), loc);
  op.getResult().replaceAllUsesWith(result);
  op.erase();
}

LogicalResult ModelPartitioner::rewrite(LMHeadOp op) {
  for (Operation *user : op->getUsers())
    if (!isa<CrossEntropyOp>(user))
      return user->emitOpError()
             << "uses vocabulary-parallel logits; only weft.cross_entropy "
                "can consume them";
  builder.setInsertionPoint(op);
  Location loc = op.getLoc();
  auto global = cast<RankedTensorType>(op.getType());
  int64_t localVocab =
      cast<RankedTensorType>(op.getWeight().getType()).getDimSize(0);
  Value input = enterParallelRegion(op.getInput(), loc);
  auto local = LMHeadOp::create(
      builder, loc,
      global.clone({global.getDimSize(0), global.getDimSize(1), localVocab}),
      input, op.getWeight(), op.getBias());
  vocabOfLogits[local] = global.getDimSize(2);
  op.replaceAllUsesWith(local.getResult());
  op.erase();
  return success();
}

LogicalResult ModelPartitioner::rewrite(CrossEntropyOp op) {
  auto it = vocabOfLogits.find(op.getLogits());
  if (it == vocabOfLogits.end())
    return op.emitOpError() << "takes logits that are not a weft.lm_head's; "
                               "cannot partition its vocabulary";
  builder.setInsertionPoint(op);
  Value loss = VocabParallelCrossEntropyOp::create(
      builder, op.getLoc(), op.getType(), op.getLogits(), op.getLabels(),
      builder.getI64IntegerAttr(it->second), op.getIgnoreIndexAttr(), grid,
      axes);
  op.replaceAllUsesWith(loss);
  op.erase();
  return success();
}

LogicalResult ModelPartitioner::run() {
  model.walk([&](EmbeddingOp op) {
    vocabOfEmbedding[op] =
        cast<RankedTensorType>(op.getTable().getType()).getDimSize(0);
  });
  model.walk([&](AttentionOp op) {
    if (op.getQkvWeights().size() != 1)
      return;
    int64_t qWidth =
        op.getNumHeadsAttr().getInt() * op.getHeadDimAttr().getInt();
    int64_t kvWidth =
        op.getNumKvHeadsAttr().getInt() * op.getHeadDimAttr().getInt();
    for (Value fused :
         {op.getQkvWeights()[0],
          op.getQkvBiases().empty() ? Value() : op.getQkvBiases()[0]})
      if (auto param = fused ? fused.getDefiningOp<ParamOp>() : ParamOp())
        fusedSegments[param] = {qWidth, kvWidth, kvWidth};
  });
  WalkResult localized = model.walk([&](ParamOp param) {
    return failed(localizeParam(param)) ? WalkResult::interrupt()
                                        : WalkResult::advance();
  });
  if (localized.wasInterrupted())
    return failure();
  if (tp == 1)
    return success();

  // Collect first: rewriting replaces the ops being visited. Op state comes
  // later (weft-autodiff, on the partitioned layers).
  SmallVector<Operation *> layers;
  WalkResult stateless = model.walk([&](Operation *op) {
    if (isa<OpStateInterface>(op) && op->getNumResults() > 1) {
      op->emitOpError("weft-partition-tensor: op state results are added by "
                      "weft-autodiff after partitioning");
      return WalkResult::interrupt();
    }
    if (isa<EmbeddingOp, AttentionOp, MLPOp, LMHeadOp, CrossEntropyOp>(op))
      layers.push_back(op);
    return WalkResult::advance();
  });
  if (stateless.wasInterrupted())
    return failure();
  for (Operation *op : layers) {
    auto stage = op->getAttrOfType<IntegerAttr>("weft.stage");
    created.ops.clear();
    LogicalResult result =
        TypeSwitch<Operation *, LogicalResult>(op)
            .Case<EmbeddingOp, AttentionOp, MLPOp>([&](auto layer) {
              rewrite(layer);
              return success();
            })
            .Case<LMHeadOp, CrossEntropyOp>(
                [&](auto layer) { return rewrite(layer); });
    if (failed(result))
      return failure();
    if (stage)
      for (Operation *newOp : created.ops)
        newOp->setAttr("weft.stage", stage);
  }
  return success();
}

struct PartitionTensorPass
    : weft::impl::WeftPartitionTensorBase<PartitionTensorPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto models = llvm::filter_to_vector(
        module.getOps<func::FuncOp>(), [](func::FuncOp func) {
          return func->hasAttr(WeftDialect::kModelAttrName);
        });
    if (!models.empty() && !SymbolTable::lookupSymbolIn(module, kGridName)) {
      module.emitError() << "needs the shard.grid @" << kGridName
                         << " (run weft-attach-mesh first)";
      return signalPassFailure();
    }
    for (func::FuncOp model : models) {
      auto parallel = model->getAttrOfType<DictionaryAttr>("weft.parallel");
      if (!parallel) {
        model.emitOpError() << "has no 'weft.parallel' (run weft-attach-mesh "
                               "first)";
        return signalPassFailure();
      }
      ModelPartitioner partitioner(
          model, parallel.getAs<IntegerAttr>("tp").getInt(),
          parallel.getAs<BoolAttr>("sequence_parallel").getValue());
      if (failed(partitioner.run()))
        return signalPassFailure();
    }
  }
};

} // namespace
