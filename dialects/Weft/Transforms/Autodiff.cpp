//===- Autodiff.cpp - weft-autodiff ---------------------------------------===//
//
// Reverse-mode differentiation of every function that holds weft parameters
// (a model or a pipeline stage): `@f_backward` runs the grad ops in reverse,
// one `weft.block_grad` per layer; `@f` gains the `weft.save`s its backward
// `weft.restore`s. See docs/autodiff.md for the ABI and the recompute modes.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTAUTODIFF
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;

namespace {

enum class Recompute { None, Selective, Full };

/// What the backward of one body (a function's or a layer's) needs from the
/// forward.
struct BodyPlan {
  /// Ops whose results reach the body's terminator.
  DenseSet<Operation *> active;
  /// Ops the backward re-runs, in forward order.
  SmallVector<Operation *> recomputed;
  /// Values the forward saves, in forward order.
  SmallVector<Value> saved;
};

/// The grad op of `op`, when it is a layer whose backward follows the grad-op
/// convention (upstream gradient, then the forward operands and attributes).
/// A `weft.block` has a region backward instead.
std::optional<OperationName> gradOpName(Operation *op) {
  if (op->getDialect() != op->getContext()->getLoadedDialect<WeftDialect>() ||
      isa<BlockOp>(op))
    return std::nullopt;
  OperationName name(op->getName().getStringRef().str() + "_grad",
                     op->getContext());
  if (!name.isRegistered())
    return std::nullopt;
  return name;
}

bool isFloatTensor(Value value) {
  auto type = dyn_cast<RankedTensorType>(value.getType());
  return type && isa<FloatType>(type.getElementType());
}

DenseSet<Operation *> activeOps(Block &body) {
  DenseSet<Operation *> active;
  SmallVector<Operation *> worklist = {body.getTerminator()};
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && def->getBlock() == &body && active.insert(def).second)
        worklist.push_back(def);
  }
  return active;
}

/// The state results of a forward op (OpStateInterface ops rebuilt by
/// addStateResults): every result after the first.
ResultRange stateResults(Operation *op) {
  return op->getResults().drop_front(std::min(1u, op->getNumResults()));
}

/// Decides which forward ops of `body` the backward re-runs and which values
/// the forward saves. Only layers recompute: the ops around them (embedding,
/// final norm, head, loss) run once per micro-batch and are cheap to keep.
BodyPlan planBody(Block &body, Recompute policy, bool isLayer) {
  BodyPlan plan;
  plan.active = activeOps(body);
  llvm::SetVector<Value> needed;
  for (Operation &op : body.without_terminator())
    if (plan.active.contains(&op) && gradOpName(&op)) {
      needed.insert(op.operand_begin(), op.operand_end());
      // The grad op reads the op's state results too.
      ResultRange state = stateResults(&op);
      needed.insert(state.begin(), state.end());
    }
  // Re-run a candidate only when the backward reads its result; its operands
  // are then read in turn, so walk backwards.
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    bool candidate =
        isLayer && plan.active.contains(&op) && !isa<ParamOp>(op) &&
        (policy == Recompute::Full ||
         (policy == Recompute::Selective && isa<LayerNormOp, RMSNormOp>(op)));
    if (!candidate || llvm::none_of(op.getResults(), [&](Value result) {
          return needed.contains(result);
        }))
      continue;
    plan.recomputed.push_back(&op);
    needed.insert(op.operand_begin(), op.operand_end());
  }
  std::reverse(plan.recomputed.begin(), plan.recomputed.end());
  DenseSet<Operation *> rerun(plan.recomputed.begin(), plan.recomputed.end());
  auto isSaved = [&](Value value) {
    Operation *def = value.getDefiningOp();
    return needed.contains(value) && !isa_and_present<ParamOp>(def) &&
           !rerun.contains(def);
  };
  // A function's arguments are the backward's arguments; a layer's is saved.
  if (isLayer)
    llvm::append_range(plan.saved,
                       llvm::make_filter_range(body.getArguments(), isSaved));
  for (Operation &op : body.without_terminator())
    llvm::append_range(plan.saved,
                       llvm::make_filter_range(op.getResults(), isSaved));
  return plan;
}

/// Rebuilds the ops of `body` that can return their internal state
/// (OpStateInterface) with their state results, so that their grad ops read
/// the state instead of recomputing it (docs/autodiff.md, "Op state"):
/// without recompute, and outside the layers (which always save what their
/// grad ops read), every active one (the forward saves the state); in a
/// layer with recompute the ones the backward re-runs (the re-run hands its
/// state to the grad op; nothing more is saved).
void addStateResults(Block &body, Recompute policy, bool isLayer,
                     OpBuilder &builder) {
  DenseSet<Operation *> withState;
  if (policy == Recompute::None || !isLayer)
    withState = activeOps(body);
  else
    for (Operation *op : planBody(body, policy, isLayer).recomputed)
      withState.insert(op);
  for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
    auto stateful = dyn_cast<OpStateInterface>(op);
    if (!stateful || !withState.contains(&op) || op.getNumResults() != 1)
      continue;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(&op);
    OperationState state(op.getLoc(), op.getName());
    state.addOperands(op.getOperands());
    state.addTypes(op.getResultTypes());
    state.addTypes(stateful.getStateTypes());
    state.propertiesAttr = op.getPropertiesAsAttribute();
    state.addAttributes(llvm::to_vector(op.getDiscardableAttrs()));
    Operation *rebuilt = builder.create(state);
    op.getResult(0).replaceAllUsesWith(rebuilt->getResult(0));
    op.erase();
  }
}

/// Builds `@f_backward` for one forward function `@f`.
class BackwardBuilder {
public:
  BackwardBuilder(func::FuncOp forward, Recompute policy)
      : forward(forward), policy(policy), builder(forward.getContext()) {}

  LogicalResult run();

private:
  void planAndSave();
  LogicalResult emitBody(Block &body, IRMapping &primal,
                         DenseMap<Value, Value> &adjoints);
  LogicalResult emitOp(Operation *op, Value grad, IRMapping &primal,
                       DenseMap<Value, Value> &adjoints);
  FailureOr<Value> emitBlockGrad(BlockOp block, Value grad);
  void accumulate(DenseMap<Value, Value> &adjoints, Value value, Value grad);
  FailureOr<Value> gradientOrZero(Operation *owner, Value value,
                                  DenseMap<Value, Value> &adjoints);

  func::FuncOp forward;
  Recompute policy;
  OpBuilder builder;
  DenseMap<Block *, BodyPlan> plans;
  DenseMap<Value, int64_t> slots;
  /// Gradients of the parameters of the layers, by name.
  llvm::StringMap<Value> layerParamGrads;
};

} // namespace

/// Plans every body and inserts the forward's `weft.save`s, numbering slots
/// in forward program order.
void BackwardBuilder::planAndSave() {
  Block &top = forward.front();
  addStateResults(top, policy, /*isLayer=*/false, builder);
  for (BlockOp block : top.getOps<BlockOp>())
    addStateResults(block.getBody().front(), policy, /*isLayer=*/true, builder);
  plans[&top] = planBody(top, policy, /*isLayer=*/false);
  // The saves of one op's results (its state) follow it in slot order.
  DenseMap<Operation *, Operation *> lastSaveAfter;
  auto save = [&](Value value) {
    OpBuilder::InsertionGuard guard(builder);
    Operation *def = value.getDefiningOp();
    if (Operation *previous = lastSaveAfter.lookup(def))
      builder.setInsertionPointAfter(previous);
    else
      builder.setInsertionPointAfterValue(value);
    int64_t slot = slots.size();
    slots[value] = slot;
    auto saveOp = SaveOp::create(builder, value.getLoc(), value,
                                 builder.getI64IntegerAttr(slot));
    if (def)
      lastSaveAfter[def] = saveOp;
  };
  // Saves are inserted after planning, so they do not disturb the walk.
  DenseMap<Operation *, SmallVector<Value>> topSaves;
  for (Value value : plans[&top].saved)
    topSaves[value.getDefiningOp()].push_back(value);
  for (Operation &op : llvm::make_early_inc_range(top.without_terminator())) {
    if (auto block = dyn_cast<BlockOp>(op)) {
      Block &body = block.getBody().front();
      plans[&body] = planBody(body, policy, /*isLayer=*/true);
      for (Value value : plans[&body].saved)
        save(value);
    }
    for (Value value : topSaves.lookup(&op))
      save(value);
  }
}

void BackwardBuilder::accumulate(DenseMap<Value, Value> &adjoints, Value value,
                                 Value grad) {
  auto [it, inserted] = adjoints.try_emplace(value, grad);
  if (!inserted)
    it->second =
        arith::AddFOp::create(builder, grad.getLoc(), it->second, grad);
}

/// The gradient of `value`, or zeros for a parameter nothing differentiable
/// reads (the ABI has one gradient per parameter).
FailureOr<Value>
BackwardBuilder::gradientOrZero(Operation *owner, Value value,
                                DenseMap<Value, Value> &adjoints) {
  if (Value grad = adjoints.lookup(value))
    return grad;
  auto type = cast<RankedTensorType>(value.getType());
  if (!type.hasStaticShape() || !isa<FloatType>(type.getElementType()))
    return owner->emitError("weft-autodiff: ")
           << "no gradient reaches " << type << " value";
  return arith::ConstantOp::create(
             builder, value.getLoc(),
             DenseElementsAttr::get(
                 type, builder.getFloatAttr(type.getElementType(), 0.0)))
      .getResult();
}

/// Emits the backward of a body in reverse: its parameters, its restores and
/// re-run ops first, then one adjoint per active op. `adjoints` holds the
/// seed and receives the gradients of the body's arguments and parameters.
LogicalResult BackwardBuilder::emitBody(Block &body, IRMapping &primal,
                                        DenseMap<Value, Value> &adjoints) {
  const BodyPlan &plan = plans[&body];
  for (ParamOp param : body.getOps<ParamOp>())
    builder.clone(*param, primal);
  for (Value value : plan.saved)
    primal.map(value,
               RestoreOp::create(builder, value.getLoc(), value.getType(),
                                 forward.getSymName(), slots[value]));
  for (Operation *op : plan.recomputed)
    builder.clone(*op, primal);

  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (!plan.active.contains(&op) || isa<ParamOp>(op))
      continue;
    // Forward layers may carry state results beside their one result.
    if (op.getNumResults() != 1 &&
        !(isa<OpStateInterface>(op) && gradOpName(&op)))
      return op.emitOpError("weft-autodiff: expected one result");
    if (Value grad = adjoints.lookup(op.getResult(0)))
      if (failed(emitOp(&op, grad, primal, adjoints)))
        return failure();
  }
  return success();
}

/// Emits the adjoint of one forward op given the gradient of its result.
LogicalResult BackwardBuilder::emitOp(Operation *op, Value grad,
                                      IRMapping &primal,
                                      DenseMap<Value, Value> &adjoints) {
  Location loc = op->getLoc();
  if (std::optional<OperationName> name = gradOpName(op)) {
    OperationState state(loc, *name);
    state.addOperands(grad);
    for (Value operand : op->getOperands())
      state.addOperands(primal.lookup(operand));
    // The forward's state results, restored (or re-run), follow as the grad
    // op's `state` operands.
    ResultRange opState = stateResults(op);
    for (Value value : opState)
      state.addOperands(primal.lookup(value));
    bool takesState = name->hasInterface<OpStateInterface>();
    SmallVector<Value> differentiable =
        llvm::filter_to_vector(op->getOperands(), isFloatTensor);
    for (Value operand : differentiable)
      state.addTypes(operand.getType());
    // Same properties as the forward op, with a segment for the gradient.
    if (auto props =
            dyn_cast_or_null<DictionaryAttr>(op->getPropertiesAsAttribute())) {
      NamedAttrList attrs(props);
      if (auto sizes = dyn_cast_or_null<DenseI32ArrayAttr>(
              attrs.get("operandSegmentSizes"))) {
        SmallVector<int32_t> withGrad = {1};
        llvm::append_range(withGrad, sizes.asArrayRef());
        if (takesState)
          withGrad.push_back(int32_t(opState.size()));
        attrs.set("operandSegmentSizes",
                  builder.getDenseI32ArrayAttr(withGrad));
      }
      state.propertiesAttr = attrs.getDictionary(op->getContext());
    }
    Operation *gradOp = builder.create(state);
    for (auto [operand, operandGrad] :
         llvm::zip_equal(differentiable, gradOp->getResults()))
      accumulate(adjoints, operand, operandGrad);
    return success();
  }

  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::AddFOp add) {
        accumulate(adjoints, add.getLhs(), grad);
        accumulate(adjoints, add.getRhs(), grad);
        return success();
      })
      .Case([&](BiasAddOp biasAdd) {
        accumulate(adjoints, biasAdd.getInput(), grad);
        accumulate(adjoints, biasAdd.getBias(),
                   BiasGradOp::create(builder, loc, biasAdd.getBias().getType(),
                                      grad));
        return success();
      })
      .Case([&](BlockOp block) {
        FailureOr<Value> inputGrad = emitBlockGrad(block, grad);
        if (failed(inputGrad))
          return failure();
        accumulate(adjoints, block.getInput(), *inputGrad);
        return success();
      })
      // Megatron's f and g: the all-reduce that completes a row-parallel
      // product passes the replicated gradient through, and the identity
      // before a column-parallel layer all-reduces the partial input
      // gradients.
      .Case([&](shard::AllReduceOp allReduce) -> LogicalResult {
        if (allReduce.getReduction() != shard::ReductionKind::Sum ||
            allReduce.getInput().getType() != allReduce.getType())
          return allReduce.emitOpError(
              "weft-autodiff: only a sum all-reduce of one type has an "
              "adjoint");
        accumulate(adjoints, allReduce.getInput(), grad);
        return success();
      })
      .Case([&](TPCopyOp copy) {
        accumulate(adjoints, copy.getInput(),
                   shard::AllReduceOp::create(
                       builder, loc, grad, copy.getGrid(), copy.getGridAxes(),
                       shard::ReductionKind::Sum));
        return success();
      })
      // Sequence parallelism: all-gather and reduce-scatter are each other's
      // adjoint along the same tensor dimension.
      .Case([&](shard::AllGatherOp gather) {
        accumulate(adjoints, gather.getInput(),
                   shard::ReduceScatterOp::create(
                       builder, loc, gather.getInput().getType(),
                       gather.getGridAttr(), gather.getGridAxesAttr(), grad,
                       shard::ReductionKindAttr::get(op->getContext(),
                                                     shard::ReductionKind::Sum),
                       gather.getGatherAxisAttr()));
        return success();
      })
      // Each rank keeps its slice of a replicated tensor (after the
      // embedding's position rows); the replicated input's gradient is the
      // concatenation of the slices' gradients.
      .Case([&](shard::AllSliceOp slice) {
        accumulate(adjoints, slice.getInput(),
                   shard::AllGatherOp::create(
                       builder, loc, slice.getInput().getType(),
                       slice.getGridAttr(), slice.getGridAxesAttr(), grad,
                       slice.getSliceAxisAttr()));
        return success();
      })
      .Case([&](shard::ReduceScatterOp scatter) -> LogicalResult {
        if (scatter.getReduction() != shard::ReductionKind::Sum)
          return scatter.emitOpError(
              "weft-autodiff: only a sum reduce-scatter has an adjoint");
        accumulate(adjoints, scatter.getInput(),
                   shard::AllGatherOp::create(
                       builder, loc, scatter.getInput().getType(),
                       scatter.getGridAttr(), scatter.getGridAxesAttr(), grad,
                       scatter.getScatterAxisAttr()));
        return success();
      })
      .Default([&](Operation *op) {
        return op->emitOpError("weft-autodiff: no adjoint for this op");
      });
}

/// Emits one layer's backward as a `weft.block_grad` and returns the
/// gradient of its input; its parameter gradients go to `layerParamGrads`.
FailureOr<Value> BackwardBuilder::emitBlockGrad(BlockOp block, Value grad) {
  Block &body = block.getBody().front();
  SmallVector<ParamOp> params = llvm::to_vector(body.getOps<ParamOp>());
  SmallVector<Type> resultTypes = {block.getInput().getType()};
  SmallVector<Attribute> names;
  for (ParamOp param : params) {
    resultTypes.push_back(param.getType());
    names.push_back(param.getNameAttr());
  }
  auto gradOp =
      BlockGradOp::create(builder, block.getLoc(), resultTypes, grad,
                          block.getLayerAttr(), builder.getArrayAttr(names));
  OpBuilder::InsertionGuard guard(builder);
  Block *gradBody = builder.createBlock(&gradOp.getBody(), {}, grad.getType(),
                                        block.getLoc());
  IRMapping primal;
  DenseMap<Value, Value> adjoints;
  adjoints[cast<YieldOp>(body.getTerminator()).getValue()] =
      gradBody->getArgument(0);
  if (failed(emitBody(body, primal, adjoints)))
    return failure();
  SmallVector<Value> yielded;
  for (Value value : llvm::concat<Value>(
           body.getArguments(),
           llvm::map_range(params, [](ParamOp p) { return p.getResult(); }))) {
    FailureOr<Value> valueGrad = gradientOrZero(block, value, adjoints);
    if (failed(valueGrad))
      return failure();
    yielded.push_back(*valueGrad);
  }
  GradYieldOp::create(builder, block.getLoc(), yielded);
  for (auto [param, paramGrad] :
       llvm::zip_equal(params, gradOp.getParamGrads()))
    layerParamGrads[param.getName()] = paramGrad;
  return gradOp.getInputGrad();
}

LogicalResult BackwardBuilder::run() {
  Block &top = forward.front();
  auto ret = dyn_cast<func::ReturnOp>(top.getTerminator());
  if (!ret || ret.getNumOperands() != 1 || !isFloatTensor(ret.getOperand(0)))
    return forward.emitOpError(
        "weft-autodiff: expected one float tensor result (a loss or an "
        "activation)");
  std::string name = (forward.getSymName() + "_backward").str();
  auto module = forward->getParentOfType<ModuleOp>();
  if (module.lookupSymbol(name))
    return forward.emitOpError("weft-autodiff: '")
           << name << "' already exists";

  planAndSave();

  // Arguments: the forward's, then the gradient of an activation result (a
  // loss is seeded with 1). Results: the gradient of each float argument, then
  // of each parameter in declaration order.
  Value result = ret.getOperand(0);
  bool isLoss = cast<RankedTensorType>(result.getType()).getRank() == 0;
  SmallVector<Type> argTypes(forward.getArgumentTypes());
  if (!isLoss)
    argTypes.push_back(result.getType());
  SmallVector<BlockArgument> inputs =
      llvm::filter_to_vector(forward.getArguments(), isFloatTensor);
  SmallVector<ParamOp> params;
  forward.walk<WalkOrder::PreOrder>(
      [&](ParamOp param) { params.push_back(param); });
  SmallVector<Type> resultTypes;
  for (Value value : inputs)
    resultTypes.push_back(value.getType());
  for (ParamOp param : params)
    resultTypes.push_back(param.getType());

  builder.setInsertionPointAfter(forward);
  Location loc = forward.getLoc();
  auto backward = func::FuncOp::create(
      builder, loc, name, builder.getFunctionType(argTypes, resultTypes));
  MLIRContext *ctx = forward.getContext();
  for (unsigned i = 0, e = forward.getNumArguments(); i < e; ++i)
    backward.setArgAttrs(i, forward.getArgAttrDict(i));
  if (!isLoss)
    backward.setArgAttr(argTypes.size() - 1, "weft.output_grad",
                        UnitAttr::get(ctx));
  for (auto [i, input] : llvm::enumerate(inputs))
    backward.setResultAttr(i, "weft.input_grad",
                           builder.getI64IntegerAttr(input.getArgNumber()));
  for (auto [i, param] : llvm::enumerate(params))
    backward.setResultAttr(inputs.size() + i, "weft.grad", param.getNameAttr());

  Block *entry = backward.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  IRMapping primal;
  primal.map(forward.getArguments(),
             entry->getArguments().take_front(forward.getNumArguments()));
  DenseMap<Value, Value> adjoints;
  if (isLoss)
    adjoints[result] = arith::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(
            cast<ShapedType>(result.getType()),
            builder.getFloatAttr(getElementTypeOrSelf(result.getType()), 1.0)));
  else
    adjoints[result] = entry->getArguments().back();
  if (failed(emitBody(top, primal, adjoints)))
    return failure();

  SmallVector<Value> grads;
  for (Value input : inputs) {
    FailureOr<Value> grad = gradientOrZero(forward, input, adjoints);
    if (failed(grad))
      return failure();
    grads.push_back(*grad);
  }
  for (ParamOp param : params) {
    if (Value grad = layerParamGrads.lookup(param.getName())) {
      grads.push_back(grad);
      continue;
    }
    FailureOr<Value> grad = gradientOrZero(param, param.getResult(), adjoints);
    if (failed(grad))
      return failure();
    grads.push_back(*grad);
  }
  func::ReturnOp::create(builder, loc, grads);
  return success();
}

namespace {
struct AutodiffPass : weft::impl::WeftAutodiffBase<AutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    // Functions that hold parameters and have not been differentiated.
    SmallVector<func::FuncOp> forwards;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      bool hasParams = false, isBackward = false;
      func.walk([&](Operation *op) {
        hasParams |= isa<ParamOp>(op);
        isBackward |= isa<RestoreOp, SaveOp, BlockGradOp>(op);
      });
      if (hasParams && !isBackward)
        forwards.push_back(func);
    }
    for (func::FuncOp func : forwards) {
      FailureOr<Recompute> policy = getPolicy(func);
      if (failed(policy) || failed(BackwardBuilder(func, *policy).run()))
        return signalPassFailure();
    }
  }

  /// The `recompute` option, else `recompute` in the function's
  /// `weft.parallel`, else none.
  FailureOr<Recompute> getPolicy(func::FuncOp func) {
    StringRef mode = recompute;
    if (auto config = func->getAttrOfType<DictionaryAttr>("weft.parallel");
        mode.empty() && config)
      if (auto attr = config.getAs<StringAttr>("recompute"))
        mode = attr.getValue();
    if (mode.empty() || mode == "none")
      return Recompute::None;
    if (mode == "selective")
      return Recompute::Selective;
    if (mode == "full")
      return Recompute::Full;
    return func.emitOpError("weft-autodiff: unknown recompute mode '")
           << mode << "' (expected none, selective or full)";
  }
};
} // namespace
