//===- WeftOps.cpp - Weft model dialect operations ------------------------===//
//
// Verifiers check the shapes a planner and partitioner rely on, with messages
// that name the operand, the shape found and the shape expected.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/IR/VerifyUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::weft;
using namespace mlir::weft::detail;

#include "Weft/IR/WeftEnums.cpp.inc"
#include "Weft/IR/WeftInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "Weft/IR/WeftOps.cpp.inc"

bool mlir::weft::isKnownActivation(StringRef name) {
  static constexpr StringLiteral kActivations[] = {"gelu", "gelu_tanh", "relu",
                                                   "silu"};
  return llvm::is_contained(kActivations, name);
}

/// Checks that `result` is `input`'s batch and sequence with a new width.
static LogicalResult verifyResultWidth(Operation *op, Value input, Value result,
                                       int64_t width) {
  auto in = cast<RankedTensorType>(input.getType());
  auto out = cast<RankedTensorType>(result.getType());
  SmallVector<int64_t> expected = {in.getDimSize(0), in.getDimSize(1), width};
  if (out.getShape() == ArrayRef<int64_t>(expected) &&
      out.getElementType() == in.getElementType())
    return success();
  return op->emitOpError() << "result type " << out << " should be "
                           << RankedTensorType::get(expected,
                                                    in.getElementType());
}

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError() << "parameter name must not be empty";
  auto type = cast<RankedTensorType>(getType());
  if (!isa<FloatType>(type.getElementType()))
    return emitOpError() << "parameter '" << getName()
                         << "' must have a float element type, got "
                         << type.getElementType();
  if (getInit() == InitKind::normal) {
    if (!getInitStd() || getInitStd()->convertToDouble() <= 0)
      return emitOpError() << "parameter '" << getName()
                           << "' with normal init needs a positive standard "
                              "deviation";
  } else if (getInitStd()) {
    return emitOpError() << "parameter '" << getName() << "' with "
                         << stringifyInitKind(getInit())
                         << " init takes no standard deviation";
  }
  if (getHfTransposed() && type.getRank() != 2)
    return emitOpError() << "hf_transposed needs a matrix, got " << type;
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::verify() {
  auto tokens = cast<RankedTensorType>(getTokens().getType());
  if (tokens.getRank() != 2)
    return emitOpError() << "tokens must be [batch, seq], got " << tokens;
  auto table = cast<RankedTensorType>(getTable().getType());
  if (table.getRank() != 2)
    return emitOpError() << "table must be [vocab, hidden], got " << table;
  int64_t hidden = table.getDimSize(1);
  auto result = cast<RankedTensorType>(getResult().getType());
  SmallVector<int64_t> expected = {tokens.getDimSize(0), tokens.getDimSize(1),
                                   hidden};
  if (result.getShape() != ArrayRef<int64_t>(expected) ||
      result.getElementType() != table.getElementType())
    return emitOpError() << "result type " << result << " should be "
                         << RankedTensorType::get(expected,
                                                  table.getElementType());
  return verifyPositionTables(*this, getPositions(), getTokenTypes(), hidden,
                              getPositionOffsetAttr().getInt());
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

LogicalResult LayerNormOp::verify() {
  FailureOr<int64_t> hidden = verifyHiddenState(*this, getInput(), "input");
  if (failed(hidden) ||
      failed(verifyShape(*this, getWeight(), "weight", {*hidden})) ||
      failed(verifyShape(*this, getBias(), "bias", {*hidden})) ||
      failed(verifyEpsilon(*this, getEpsilon().convertToDouble())))
    return failure();
  return verifyState(*this, getState().getTypes(), "results");
}

SmallVector<Type> LayerNormOp::getStateTypes() {
  return normStateTypes(getInput(), /*withMean=*/true);
}

SmallVector<StringRef> LayerNormOp::getStateNames() {
  return normStateNames(/*withMean=*/true);
}

LogicalResult RMSNormOp::verify() {
  FailureOr<int64_t> hidden = verifyHiddenState(*this, getInput(), "input");
  if (failed(hidden) ||
      failed(verifyShape(*this, getWeight(), "weight", {*hidden})) ||
      failed(verifyEpsilon(*this, getEpsilon().convertToDouble())))
    return failure();
  return verifyState(*this, getState().getTypes(), "results");
}

SmallVector<Type> RMSNormOp::getStateTypes() {
  return normStateTypes(getInput(), /*withMean=*/false);
}

SmallVector<StringRef> RMSNormOp::getStateNames() {
  return normStateNames(/*withMean=*/false);
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

LogicalResult AttentionOp::verify() {
  FailureOr<int64_t> hidden = verifyHiddenState(*this, getInput(), "input");
  if (failed(hidden))
    return failure();
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t kvHeads = getNumKvHeadsAttr().getInt();
  if (heads <= 0 || kvHeads <= 0)
    return emitOpError() << "num_heads and num_kv_heads must be positive, got "
                         << heads << " and " << kvHeads;
  if (*hidden % heads != 0)
    return emitOpError() << "hidden size " << *hidden
                         << " is not divisible by num_heads " << heads;
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " is not divisible by num_kv_heads " << kvHeads;
  int64_t headDim = getHeadDimAttr().getInt();
  if (headDim != *hidden / heads)
    return emitOpError() << "head_dim " << headDim
                         << " does not equal hidden size / num_heads = "
                         << *hidden / heads;
  if (getRopeTheta() && getRopeTheta()->convertToDouble() <= 0)
    return emitOpError() << "rope_theta must be positive";

  int64_t qWidth = heads * headDim, kvWidth = kvHeads * headDim;
  FailureOr<SmallVector<int64_t>> widths =
      qkvWidths(*this, getQkvWeights().size(), qWidth, kvWidth);
  if (failed(widths))
    return failure();
  static constexpr StringLiteral kFused[] = {"fused qkv"};
  static constexpr StringLiteral kSeparate[] = {"query", "key", "value"};
  ArrayRef<StringLiteral> names =
      widths->size() == 1 ? ArrayRef(kFused) : ArrayRef(kSeparate);
  for (auto [weight, width, name] :
       llvm::zip_equal(getQkvWeights(), *widths, names))
    if (failed(verifyShape(*this, weight, (name + " weight").str(),
                           {*hidden, width})))
      return failure();
  if (!getQkvBiases().empty()) {
    if (getQkvBiases().size() != widths->size())
      return emitOpError() << "has " << getQkvBiases().size()
                           << " query/key/value biases for " << widths->size()
                           << " weights";
    for (auto [bias, width, name] :
         llvm::zip_equal(getQkvBiases(), *widths, names))
      if (failed(verifyShape(*this, bias, (name + " bias").str(), {width})))
        return failure();
  }
  if (failed(verifyShape(*this, getOutWeight(), "output weight",
                         {qWidth, *hidden})))
    return failure();
  if (getOutBias() &&
      failed(verifyShape(*this, getOutBias(), "output bias", {*hidden})))
    return failure();
  return verifyState(*this, getState().getTypes(), "results");
}

SmallVector<Type> AttentionOp::getStateTypes() {
  return attentionStateTypes(getInput(), getNumHeads(), getNumKvHeads(),
                             getHeadDim());
}

SmallVector<StringRef> AttentionOp::getStateNames() {
  return attentionStateNames();
}

//===----------------------------------------------------------------------===//
// MLPOp and LinearOp
//===----------------------------------------------------------------------===//

LogicalResult MLPOp::verify() {
  FailureOr<int64_t> hidden = verifyHiddenState(*this, getInput(), "input");
  if (failed(hidden) || failed(verifyActivation(*this, getActivation())))
    return failure();
  auto up = cast<RankedTensorType>(getUpWeight().getType());
  if (up.getRank() != 2 || up.getDimSize(0) != *hidden)
    return emitOpError() << "up weight must be [" << *hidden << ", ffn], got "
                         << up;
  int64_t ffn = up.getDimSize(1);
  if (getGateWeight() && failed(verifyShape(*this, getGateWeight(),
                                            "gate weight", {*hidden, ffn})))
    return failure();
  if (getUpBias() && failed(verifyShape(*this, getUpBias(), "up bias", {ffn})))
    return failure();
  if (failed(
          verifyShape(*this, getDownWeight(), "down weight", {ffn, *hidden})))
    return failure();
  if (getDownBias() &&
      failed(verifyShape(*this, getDownBias(), "down bias", {*hidden})))
    return failure();
  return verifyState(*this, getState().getTypes(), "results");
}

SmallVector<Type> MLPOp::getStateTypes() {
  return mlpStateTypes(getInput(), getUpWeight(), bool(getGateWeight()));
}

SmallVector<StringRef> MLPOp::getStateNames() {
  return mlpStateNames(bool(getGateWeight()));
}

LogicalResult LinearOp::verify() {
  FailureOr<int64_t> in = verifyHiddenState(*this, getInput(), "input");
  if (failed(in))
    return failure();
  if (getActivation() && failed(verifyActivation(*this, *getActivation())))
    return failure();
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (weight.getRank() != 2 || weight.getDimSize(0) != *in)
    return emitOpError() << "weight must be [" << *in << ", out], got "
                         << weight;
  int64_t out = weight.getDimSize(1);
  if (getBias() && failed(verifyShape(*this, getBias(), "bias", {out})))
    return failure();
  return verifyResultWidth(*this, getInput(), getResult(), out);
}

//===----------------------------------------------------------------------===//
// LMHeadOp and CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult LMHeadOp::verify() {
  FailureOr<int64_t> hidden = verifyHiddenState(*this, getInput(), "input");
  if (failed(hidden))
    return failure();
  auto weight = cast<RankedTensorType>(getWeight().getType());
  if (weight.getRank() != 2 || weight.getDimSize(1) != *hidden)
    return emitOpError() << "weight must be [vocab, " << *hidden << "], got "
                         << weight;
  int64_t vocab = weight.getDimSize(0);
  if (getBias() && failed(verifyShape(*this, getBias(), "bias", {vocab})))
    return failure();
  return verifyResultWidth(*this, getInput(), getResult(), vocab);
}

LogicalResult CrossEntropyOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  if (logits.getRank() != 3)
    return emitOpError() << "logits must be [batch, seq, vocab], got "
                         << logits;
  if (labels.getRank() != 2 ||
      failed(verifyCompatibleShape(labels.getShape(),
                                   logits.getShape().drop_back())))
    return emitOpError() << "labels " << labels
                         << " must match the logits' [batch, seq] "
                         << shapeString(logits.getShape().drop_back());
  return success();
}

//===----------------------------------------------------------------------===//
// BlockOp
//===----------------------------------------------------------------------===//

LogicalResult BlockOp::verifyRegions() {
  if (getLayerAttr().getInt() < 0)
    return emitOpError() << "layer index must not be negative";
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 ||
      body.getArgument(0).getType() != getInput().getType())
    return emitOpError() << "body must take one argument of the input type "
                         << getInput().getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end in weft.yield";
  if (yield.getValue().getType() != getResult().getType())
    return yield.emitOpError()
           << "yields " << yield.getValue().getType()
           << " but the block produces " << getResult().getType();
  return success();
}
