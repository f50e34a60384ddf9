//===- WeftGradOps.cpp - Backward ops of the weft dialect -----------------===//
//
// A grad op repeats its forward op's operands, so the forward verifier has
// already checked their shapes where weft-autodiff built it; these verifiers
// check what the backward adds: the upstream gradient has the forward
// result's type and there is one gradient per floating-point operand, of that
// operand's type.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/VerifyUtils.h"
#include "Weft/IR/WeftOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;
using namespace mlir::weft;
using namespace mlir::weft::detail;

static bool isFloatTensor(Value value) {
  return isa<FloatType>(cast<ShapedType>(value.getType()).getElementType());
}

/// Checks the op's results against its forward operands (every operand after
/// the upstream gradient, before any `state`): one gradient per float
/// operand, of its type.
static LogicalResult verifyGradients(Operation *op, size_t numState = 0) {
  SmallVector<Value> differentiable = llvm::filter_to_vector(
      op->getOperands().drop_front().drop_back(numState), isFloatTensor);
  if (op->getNumResults() != differentiable.size())
    return op->emitOpError()
           << "expects " << differentiable.size()
           << " gradients (one per floating-point operand), got "
           << op->getNumResults();
  for (auto [index, operand, grad] :
       llvm::enumerate(differentiable, op->getResults()))
    if (grad.getType() != operand.getType())
      return op->emitOpError()
             << "gradient #" << index << " has type " << grad.getType()
             << ", expected " << operand.getType() << " like its operand";
  return success();
}

/// Checks that the upstream gradient has the forward result's type.
static LogicalResult verifyUpstream(Operation *op, Value grad, Type expected) {
  if (grad.getType() == expected)
    return success();
  return op->emitOpError() << "upstream gradient has type " << grad.getType()
                           << ", expected " << expected
                           << " (the forward result's type)";
}

/// Checks that `input` is a `[batch, seq, hidden]` float tensor and returns
/// the forward result type `[batch, seq, width]` of its element type.
static FailureOr<RankedTensorType> hiddenStateResult(Operation *op, Value input,
                                                     int64_t width) {
  auto type = cast<RankedTensorType>(input.getType());
  if (type.getRank() != 3 || !isa<FloatType>(type.getElementType()))
    return op->emitOpError()
           << "input must be a [batch, seq, hidden] float tensor, got " << type;
  return RankedTensorType::get({type.getDimSize(0), type.getDimSize(1), width},
                               type.getElementType());
}

/// The dimension `dim` of a matrix operand, or an error naming it.
static FailureOr<int64_t> matrixDim(Operation *op, Value matrix, StringRef what,
                                    unsigned dim) {
  auto type = cast<RankedTensorType>(matrix.getType());
  if (type.getRank() != 2)
    return op->emitOpError() << what << " must be a matrix, got " << type;
  return type.getDimSize(dim);
}

/// A table lookup's gradient: `[batch, seq]` tokens, a `[rows, hidden]` table,
/// and an upstream gradient of the lookup's `[batch, seq, hidden]` result.
static LogicalResult verifyLookupGrad(Operation *op, Value tokensValue,
                                      Value tableValue, Value grad) {
  auto tokens = cast<RankedTensorType>(tokensValue.getType());
  if (tokens.getRank() != 2)
    return op->emitOpError() << "tokens must be [batch, seq], got " << tokens;
  FailureOr<int64_t> hidden = matrixDim(op, tableValue, "table", 1);
  if (failed(hidden))
    return failure();
  auto table = cast<RankedTensorType>(tableValue.getType());
  auto expected = RankedTensorType::get(
      {tokens.getDimSize(0), tokens.getDimSize(1), *hidden},
      table.getElementType());
  if (failed(verifyUpstream(op, grad, expected)))
    return failure();
  return verifyGradients(op);
}

/// Checks a layer whose result has its input's type, and its `state`
/// operands (OpStateInterface ops) against the forward's state types.
static LogicalResult verifySameShapeLayer(Operation *op, Value grad,
                                          Value input, ValueRange state = {}) {
  auto type = cast<RankedTensorType>(input.getType());
  if (failed(hiddenStateResult(op, input, type.getDimSize(2))) ||
      failed(verifyUpstream(op, grad, type)) ||
      failed(verifyGradients(op, state.size())))
    return failure();
  return verifyState(op, state.getTypes(), "operands");
}

LogicalResult EmbeddingGradOp::verify() {
  return verifyLookupGrad(*this, getTokens(), getTable(), getGrad());
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyEpsilon(*this, getEpsilon().convertToDouble())))
    return failure();
  return verifySameShapeLayer(*this, getGrad(), getInput(), getState());
}

SmallVector<Type> LayerNormGradOp::getStateTypes() {
  return normStateTypes(getInput(), /*withMean=*/true);
}

SmallVector<StringRef> LayerNormGradOp::getStateNames() {
  return normStateNames(/*withMean=*/true);
}

LogicalResult RMSNormGradOp::verify() {
  if (failed(verifyEpsilon(*this, getEpsilon().convertToDouble())))
    return failure();
  return verifySameShapeLayer(*this, getGrad(), getInput(), getState());
}

SmallVector<Type> RMSNormGradOp::getStateTypes() {
  return normStateTypes(getInput(), /*withMean=*/false);
}

SmallVector<StringRef> RMSNormGradOp::getStateNames() {
  return normStateNames(/*withMean=*/false);
}

LogicalResult AttentionGradOp::verify() {
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t kvHeads = getNumKvHeadsAttr().getInt();
  if (heads <= 0 || kvHeads <= 0 || heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " must be a positive multiple of num_kv_heads "
                         << kvHeads;
  size_t numWeights = getQkvWeights().size();
  if (numWeights != 1 && numWeights != 3)
    return emitOpError() << "expects 1 fused or 3 separate query/key/value "
                            "weights, got "
                         << numWeights;
  if (!getQkvBiases().empty() && getQkvBiases().size() != numWeights)
    return emitOpError() << "has " << getQkvBiases().size()
                         << " query/key/value biases for " << numWeights
                         << " weights";
  return verifySameShapeLayer(*this, getGrad(), getInput(), getState());
}

SmallVector<Type> AttentionGradOp::getStateTypes() {
  return attentionStateTypes(getInput(), getNumHeads(), getNumKvHeads(),
                             getHeadDim());
}

SmallVector<StringRef> AttentionGradOp::getStateNames() {
  return attentionStateNames();
}

LogicalResult MLPGradOp::verify() {
  if (failed(verifyActivation(*this, getActivation())))
    return failure();
  if (cast<RankedTensorType>(getUpWeight().getType()).getRank() != 2)
    return emitOpError() << "up weight must be a matrix, got "
                         << getUpWeight().getType();
  return verifySameShapeLayer(*this, getGrad(), getInput(), getState());
}

SmallVector<Type> MLPGradOp::getStateTypes() {
  return mlpStateTypes(getInput(), getUpWeight(), bool(getGateWeight()));
}

SmallVector<StringRef> MLPGradOp::getStateNames() {
  return mlpStateNames(bool(getGateWeight()));
}

LogicalResult LinearGradOp::verify() {
  if (getActivation() && failed(verifyActivation(*this, *getActivation())))
    return failure();
  FailureOr<int64_t> out = matrixDim(*this, getWeight(), "weight", 1);
  if (failed(out))
    return failure();
  FailureOr<RankedTensorType> expected =
      hiddenStateResult(*this, getInput(), *out);
  if (failed(expected) || failed(verifyUpstream(*this, getGrad(), *expected)))
    return failure();
  return verifyGradients(*this);
}

LogicalResult LMHeadGradOp::verify() {
  FailureOr<int64_t> vocab = matrixDim(*this, getWeight(), "weight", 0);
  if (failed(vocab))
    return failure();
  FailureOr<RankedTensorType> expected =
      hiddenStateResult(*this, getInput(), *vocab);
  if (failed(expected) || failed(verifyUpstream(*this, getGrad(), *expected)))
    return failure();
  return verifyGradients(*this);
}

LogicalResult CrossEntropyGradOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  if (logits.getRank() != 3 || !isa<FloatType>(logits.getElementType()))
    return emitOpError() << "logits must be a [batch, seq, vocab] float "
                            "tensor, got "
                         << logits;
  if (labels.getRank() != 2 ||
      failed(verifyCompatibleShape(labels.getShape(),
                                   logits.getShape().drop_back())))
    return emitOpError() << "labels " << labels
                         << " must match the logits' [batch, seq]";
  return verifyGradients(*this);
}

//===----------------------------------------------------------------------===//
// BlockGradOp
//===----------------------------------------------------------------------===//

LogicalResult BlockGradOp::verifyRegions() {
  if (getLayerAttr().getInt() < 0)
    return emitOpError() << "layer index must not be negative";
  if (getGrad().getType() != getInputGrad().getType())
    return emitOpError() << "input gradient has type "
                         << getInputGrad().getType()
                         << ", expected the upstream gradient's type "
                         << getGrad().getType();
  if (getParams().size() != getParamGrads().size())
    return emitOpError() << "names " << getParams().size() << " parameters for "
                         << getParamGrads().size() << " parameter gradients";
  llvm::StringSet<> names;
  for (StringRef name : getParams().getAsValueRange<StringAttr>())
    if (name.empty() || !names.insert(name).second)
      return emitOpError() << "parameter names must be unique and non-empty, "
                              "got '"
                           << name << "' twice or empty";
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 ||
      body.getArgument(0).getType() != getGrad().getType())
    return emitOpError() << "body must take one argument of the upstream "
                            "gradient's type "
                         << getGrad().getType();
  auto yield = dyn_cast<GradYieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end in weft.grad_yield";
  if (yield.getValues().getTypes() != getResultTypes())
    return yield.emitOpError()
           << "yields " << yield.getValues().getTypes()
           << " but the layer's backward produces " << getResultTypes();
  return success();
}

//===----------------------------------------------------------------------===//
// SaveOp and RestoreOp
//===----------------------------------------------------------------------===//

static LogicalResult verifySlot(Operation *op, IntegerAttr slot) {
  if (slot.getInt() >= 0)
    return success();
  return op->emitOpError() << "slot must not be negative, got "
                           << slot.getInt();
}

LogicalResult SaveOp::verify() { return verifySlot(*this, getSlotAttr()); }

LogicalResult RestoreOp::verify() { return verifySlot(*this, getSlotAttr()); }

/// The pairing with the forward's `weft.save`: `forward` is a function in
/// which exactly one save writes the slot, with the restored type.
LogicalResult RestoreOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  auto forward = symbolTables.lookupNearestSymbolFrom<func::FuncOp>(
      *this, getForwardAttr());
  if (!forward)
    return emitOpError() << "refers to " << getForwardAttr()
                         << ", which is not a func.func";
  int64_t slot = getSlotAttr().getInt();
  SmallVector<SaveOp> saves;
  forward.walk([&](SaveOp save) {
    if (save.getSlotAttr().getInt() == slot)
      saves.push_back(save);
  });
  if (saves.empty())
    return emitOpError() << "reads slot " << slot << " of " << getForwardAttr()
                         << ", which no weft.save there writes";
  if (saves.size() > 1) {
    InFlightDiagnostic diag =
        emitOpError() << "reads slot " << slot << " of " << getForwardAttr()
                      << ", which " << saves.size() << " weft.saves write";
    for (SaveOp save : saves)
      diag.attachNote(save.getLoc()) << "written here";
    return diag;
  }
  Type saved = saves.front().getValue().getType();
  if (saved == getType())
    return success();
  InFlightDiagnostic diag = emitOpError()
                            << "has type " << getType() << ", but slot " << slot
                            << " of " << getForwardAttr() << " holds " << saved;
  diag.attachNote(saves.front().getLoc()) << "saved here";
  return diag;
}

//===----------------------------------------------------------------------===//
// Gradients of the tensor-parallel ops
//===----------------------------------------------------------------------===//

LogicalResult BiasGradOp::verify() {
  auto grad = cast<RankedTensorType>(getGrad().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (grad.getRank() == 0 || result.getRank() != 1 ||
      result.getDimSize(0) != grad.getDimSize(grad.getRank() - 1) ||
      result.getElementType() != grad.getElementType())
    return emitOpError() << "result " << result
                         << " must be a vector as wide as the last dimension "
                            "of "
                         << grad;
  return success();
}

LogicalResult VocabEmbeddingGradOp::verify() {
  return verifyLookupGrad(*this, getTokens(), getTable(), getGrad());
}

LogicalResult PositionEmbeddingGradOp::verify() {
  return verifySameShapeLayer(*this, getGrad(), getInput());
}

LogicalResult TPAttentionGradOp::verify() {
  if (getTpSizeAttr().getInt() <= 0)
    return emitOpError() << "tp_size must be positive, got "
                         << getTpSizeAttr().getInt();
  return verifySameShapeLayer(*this, getGrad(), getInput(), getState());
}

SmallVector<Type> TPAttentionGradOp::getStateTypes() {
  return attentionStateTypes(getInput(), getNumHeads(), getNumKvHeads(),
                             getHeadDim());
}

SmallVector<StringRef> TPAttentionGradOp::getStateNames() {
  return attentionStateNames();
}

LogicalResult VocabParallelCrossEntropyGradOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  if (logits.getRank() != 3 || !isa<FloatType>(logits.getElementType()))
    return emitOpError() << "logits must be a [batch, seq, vocab shard] float "
                            "tensor, got "
                         << logits;
  return verifyGradients(*this);
}
