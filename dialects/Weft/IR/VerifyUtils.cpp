//===- VerifyUtils.cpp - Checks shared by the weft op verifiers -----------===//
#include "Weft/IR/VerifyUtils.h"
#include "Weft/IR/WeftOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::weft;

namespace mlir::weft::detail {

LogicalResult verifyActivation(Operation *op, StringRef activation) {
  if (isKnownActivation(activation))
    return success();
  return op->emitOpError() << "unknown activation '" << activation
                           << "' (expected gelu, gelu_tanh, relu or silu)";
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleave(
      shape, os,
      [&](int64_t dim) {
        if (ShapedType::isDynamic(dim))
          os << '?';
        else
          os << dim;
      },
      "x");
  return text;
}

LogicalResult verifyShape(Operation *op, Value value, StringRef what,
                          ArrayRef<int64_t> expected) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getShape() == expected)
    return success();
  return op->emitOpError() << what << " has shape "
                           << shapeString(type.getShape()) << ", expected "
                           << shapeString(expected);
}

FailureOr<int64_t> verifyHiddenState(Operation *op, Value value,
                                     StringRef what) {
  auto type = cast<RankedTensorType>(value.getType());
  if (type.getRank() != 3 || ShapedType::isDynamic(type.getDimSize(2)) ||
      !isa<FloatType>(type.getElementType()))
    return op->emitOpError()
           << what << " must be a [batch, seq, hidden] float tensor with a "
           << "static hidden size, got " << type;
  return type.getDimSize(2);
}

LogicalResult verifyEpsilon(Operation *op, double epsilon) {
  if (epsilon > 0)
    return success();
  return op->emitOpError() << "epsilon must be positive, got " << epsilon;
}

LogicalResult verifyPositionTables(Operation *op, Value positions,
                                   Value tokenTypes, int64_t hidden,
                                   int64_t positionOffset) {
  for (auto [value, what] : {std::pair{positions, "position table"},
                             std::pair{tokenTypes, "token-type table"}}) {
    if (!value)
      continue;
    auto type = cast<RankedTensorType>(value.getType());
    if (type.getRank() != 2 || type.getDimSize(1) != hidden)
      return op->emitOpError() << what << " must be [rows, " << hidden
                               << "] like the token table, got " << type;
  }
  if (positionOffset < 0)
    return op->emitOpError() << "position_offset must not be negative";
  if (positionOffset != 0 && !positions)
    return op->emitOpError() << "position_offset needs a position table";
  return success();
}

FailureOr<SmallVector<int64_t>> qkvWidths(Operation *op, size_t numWeights,
                                          int64_t qWidth, int64_t kvWidth) {
  if (numWeights == 1)
    return SmallVector<int64_t>{qWidth + 2 * kvWidth};
  if (numWeights == 3)
    return SmallVector<int64_t>{qWidth, kvWidth, kvWidth};
  return op->emitOpError()
         << "expects 1 fused or 3 separate query/key/value weights, got "
         << numWeights;
}

/// `[batch, seq, width]` of `input`'s batch and sequence, in `element`.
static Type rowsOf(Value input, int64_t width, Type element) {
  auto type = cast<RankedTensorType>(input.getType());
  return RankedTensorType::get({type.getDimSize(0), type.getDimSize(1), width},
                               element);
}

SmallVector<Type> attentionStateTypes(Value input, int64_t heads,
                                      int64_t kvHeads, int64_t headDim) {
  Type element = cast<RankedTensorType>(input.getType()).getElementType();
  Type q = rowsOf(input, heads * headDim, element);
  Type kv = rowsOf(input, kvHeads * headDim, element);
  Type lse = rowsOf(input, heads, Float32Type::get(input.getContext()));
  return {q, kv, kv, q, lse};
}

SmallVector<StringRef> attentionStateNames() {
  return {"q", "k", "v", "context", "lse"};
}

SmallVector<Type> mlpStateTypes(Value input, Value upWeight, bool gated) {
  auto type = cast<RankedTensorType>(input.getType());
  int64_t ffn = cast<RankedTensorType>(upWeight.getType()).getDimSize(1);
  Type hidden = rowsOf(input, ffn, type.getElementType());
  if (gated)
    return {hidden, hidden, hidden};
  return {hidden, hidden};
}

SmallVector<StringRef> mlpStateNames(bool gated) {
  if (gated)
    return {"up", "gate", "act"};
  return {"up", "act"};
}

SmallVector<Type> normStateTypes(Value input, bool withMean) {
  auto type = cast<RankedTensorType>(input.getType());
  Type rows = RankedTensorType::get(type.getShape().drop_back(),
                                    Float32Type::get(input.getContext()));
  if (withMean)
    return {rows, rows};
  return {rows};
}

SmallVector<StringRef> normStateNames(bool withMean) {
  if (withMean)
    return {"mean", "rstd"};
  return {"rstd"};
}

LogicalResult verifyState(Operation *op, TypeRange state, StringRef what) {
  if (state.empty())
    return success();
  auto stateful = cast<OpStateInterface>(op);
  SmallVector<Type> expected = stateful.getStateTypes();
  if (TypeRange(expected) == state)
    return success();
  InFlightDiagnostic diag = op->emitOpError()
                            << "state " << what << " must be (";
  llvm::interleaveComma(stateful.getStateNames(), diag);
  diag << ") of types (";
  llvm::interleaveComma(expected, diag);
  diag << "), got (";
  llvm::interleaveComma(state, diag);
  return diag << ")";
}

} // namespace mlir::weft::detail
