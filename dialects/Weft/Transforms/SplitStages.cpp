//===- SplitStages.cpp - weft-split-stages --------------------------------===//
//
// Step 3 of the lowering (docs/lowering.md): replaces each model by one
// function per pipeline stage, following the `weft.stage` of its top-level
// ops. Virtual stage `s` (of `pp * virtual_stages`) runs on pipeline rank
// `s % pp` as model chunk `s / pp` and becomes
//
//   @<model>_stage<rank>               (one chunk per rank)
//   @<model>_stage<rank>_chunk<chunk>  (interleaved)
//
// A stage function takes the activations its predecessor sends, then the
// model inputs it reads (tokens on the first stage, labels on the last), and
// returns the activations its successor receives, or the loss on the last
// stage. A parameter used on a stage other than its own (the tied embedding
// in the LM head) is copied into the using stage and marked
// `weft.tied_to = "<name>"`: the copies' gradients must be summed across the
// two stages before the optimizer step.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTSPLITSTAGES
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;

namespace {

constexpr StringLiteral kStageAttr = "weft.stage";

/// Splits one model; `stageOf` gives each top-level op's stage.
class StageSplitter {
public:
  StageSplitter(func::FuncOp model, int64_t pp, int64_t numStages)
      : model(model), pp(pp), numStages(numStages) {}

  LogicalResult run();

private:
  LogicalResult assignStages();
  LogicalResult buildStage(int64_t stage, OpBuilder &moduleBuilder);

  func::FuncOp model;
  int64_t pp;
  int64_t numStages;
  DenseMap<Operation *, int64_t> stageOf;
  SmallVector<SmallVector<Operation *>> opsOfStage;
};

LogicalResult StageSplitter::assignStages() {
  opsOfStage.resize(numStages);
  for (Operation &op : model.getBody().front().without_terminator()) {
    auto stage = op.getAttrOfType<IntegerAttr>(kStageAttr);
    if (!stage)
      return op.emitOpError()
             << "has no '" << kStageAttr << "' (run weft-attach-mesh first)";
    if (stage.getInt() >= numStages)
      return op.emitOpError()
             << "is on stage " << stage.getInt() << ", but the model has "
             << numStages << " pipeline stages";
    stageOf[&op] = stage.getInt();
    opsOfStage[stage.getInt()].push_back(&op);
  }
  for (auto [stage, ops] : llvm::enumerate(opsOfStage))
    if (ops.empty())
      return model.emitError() << "pipeline stage " << stage << " has no ops";
  return success();
}

LogicalResult StageSplitter::buildStage(int64_t stage,
                                        OpBuilder &moduleBuilder) {
  ArrayRef<Operation *> ops = opsOfStage[stage];
  llvm::SetVector<Value> received;
  llvm::SetVector<ParamOp> foreignParams;
  for (Operation *op : ops) {
    for (OpOperand &operand : op->getOpOperands()) {
      Value value = operand.get();
      Operation *def = value.getDefiningOp();
      if (!def || stageOf.lookup(def) == stage)
        continue;
      if (auto param = dyn_cast<ParamOp>(def)) {
        foreignParams.insert(param);
        continue;
      }
      int64_t from = stageOf.lookup(def);
      if (from != stage - 1)
        return op->emitOpError()
               << "on stage " << stage << " uses a value computed on stage "
               << from
               << "; stages receive activations only from the stage before";
      received.insert(value);
    }
  }
  llvm::SetVector<Value> sent;
  Operation *terminator = model.getBody().front().getTerminator();
  // Parameters are never sent: a stage that uses another's makes a tied copy.
  for (Operation *op : ops) {
    if (isa<ParamOp>(op))
      continue;
    for (Value result : op->getResults())
      for (Operation *user : result.getUsers())
        if (user == terminator || stageOf.lookup(user) != stage)
          sent.insert(result);
  }

  // Model inputs the stage reads, in the model's argument order.
  SmallVector<BlockArgument> inputs;
  for (BlockArgument arg : model.getArguments())
    if (llvm::any_of(arg.getUsers(), [&](Operation *user) {
          return stageOf.lookup(user) == stage;
        }))
      inputs.push_back(arg);

  SmallVector<Type> argTypes, resultTypes;
  SmallVector<DictionaryAttr> argAttrs;
  Builder b(model.getContext());
  for (Value value : received) {
    argTypes.push_back(value.getType());
    argAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr("weft.input", b.getStringAttr("activation"))));
  }
  for (BlockArgument arg : inputs) {
    argTypes.push_back(arg.getType());
    argAttrs.push_back(model.getArgAttrDict(arg.getArgNumber()));
  }
  for (Value value : sent)
    resultTypes.push_back(value.getType());

  int64_t rank = stage % pp, chunk = stage / pp;
  std::string name = (model.getSymName() + "_stage" + Twine(rank)).str();
  if (numStages > pp)
    name += ("_chunk" + Twine(chunk)).str();
  auto func = func::FuncOp::create(moduleBuilder, model.getLoc(), name,
                                   b.getFunctionType(argTypes, resultTypes));
  func.setAllArgAttrs(argAttrs);
  func->setAttr("weft.parallel", model->getAttr("weft.parallel"));
  func->setAttr(
      "weft.pipeline_stage",
      b.getDictionaryAttr(
          {b.getNamedAttr("model", model.getSymNameAttr()),
           b.getNamedAttr("stage", b.getI64IntegerAttr(stage)),
           b.getNamedAttr("rank", b.getI64IntegerAttr(rank)),
           b.getNamedAttr("chunk", b.getI64IntegerAttr(chunk)),
           b.getNamedAttr("num_stages", b.getI64IntegerAttr(numStages))}));

  Block *entry = func.addEntryBlock();
  IRMapping mapping;
  for (auto [value, arg] :
       llvm::zip(llvm::concat<Value>(received, inputs), entry->getArguments()))
    mapping.map(value, arg);
  auto bodyBuilder = OpBuilder::atBlockBegin(entry);
  for (ParamOp param : foreignParams) {
    Operation *copy = bodyBuilder.clone(*param, mapping);
    copy->setAttr(kStageAttr, b.getI64IntegerAttr(stage));
    copy->setAttr("weft.tied_to", param.getNameAttr());
    if (auto placement =
            param->getAttrOfType<DictionaryAttr>("weft.placement")) {
      NamedAttrList entries(placement);
      entries.set("stage", b.getI64IntegerAttr(stage));
      copy->setAttr("weft.placement", entries.getDictionary(b.getContext()));
    }
  }
  for (Operation *op : ops)
    bodyBuilder.clone(*op, mapping);
  func::ReturnOp::create(
      bodyBuilder, model.getLoc(),
      llvm::map_to_vector(sent, [&](Value v) { return mapping.lookup(v); }));
  return success();
}

LogicalResult StageSplitter::run() {
  if (failed(assignStages()))
    return failure();
  OpBuilder moduleBuilder(model);
  for (int64_t stage = 0; stage < numStages; ++stage)
    if (failed(buildStage(stage, moduleBuilder)))
      return failure();
  model.erase();
  return success();
}

struct SplitStagesPass : weft::impl::WeftSplitStagesBase<SplitStagesPass> {
  using Base::Base;

  void runOnOperation() override {
    auto models = llvm::filter_to_vector(
        getOperation().getOps<func::FuncOp>(), [](func::FuncOp func) {
          return func->hasAttr(WeftDialect::kModelAttrName);
        });
    for (func::FuncOp model : models) {
      auto parallel = model->getAttrOfType<DictionaryAttr>("weft.parallel");
      if (!parallel) {
        model.emitOpError() << "has no 'weft.parallel' (run weft-attach-mesh "
                               "first)";
        return signalPassFailure();
      }
      int64_t pp = parallel.getAs<IntegerAttr>("pp").getInt();
      int64_t chunks = parallel.getAs<IntegerAttr>("virtual_stages").getInt();
      if (failed(StageSplitter(model, pp, pp * chunks).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
