//===- VerifyUtils.h - Checks shared by the weft op verifiers ---*- C++ -*-===//
//
// Internal to dialects/Weft/IR: the forward, parallel and gradient ops check
// the same things (hidden states, exact shapes, activations, epsilons,
// position tables) and must say them the same way.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_IR_VERIFYUTILS_H
#define WEFT_IR_VERIFYUTILS_H

#include "mlir/IR/Operation.h"

namespace mlir::weft::detail {

/// "2x?x8" for a shape.
std::string shapeString(ArrayRef<int64_t> shape);
/// `activation` is one the MLP and linear ops accept.
LogicalResult verifyActivation(Operation *op, StringRef activation);
LogicalResult verifyEpsilon(Operation *op, double epsilon);
/// `value` is a tensor of exactly the static shape `expected`.
LogicalResult verifyShape(Operation *op, Value value, StringRef what,
                          ArrayRef<int64_t> expected);
/// `value` is a `[batch, seq, hidden]` float tensor with a static hidden size;
/// returns that size.
FailureOr<int64_t> verifyHiddenState(Operation *op, Value value,
                                     StringRef what);
/// The learned position and token-type tables (either may be null) are
/// `[rows, hidden]`, and a position offset needs a position table.
LogicalResult verifyPositionTables(Operation *op, Value positions,
                                   Value tokenTypes, int64_t hidden,
                                   int64_t positionOffset);

/// Output widths of an attention op's `numWeights` query/key/value weights:
/// one fused `[q|k|v]` matrix or three separate ones.
FailureOr<SmallVector<int64_t>> qkvWidths(Operation *op, size_t numWeights,
                                          int64_t qWidth, int64_t kvWidth);

/// What `weft.attention`-like ops keep as state (OpStateInterface): q, k, v
/// and the context of `input`'s element type, the log-sum-exp in f32.
SmallVector<Type> attentionStateTypes(Value input, int64_t heads,
                                      int64_t kvHeads, int64_t headDim);
SmallVector<StringRef> attentionStateNames();
/// What `weft.mlp` keeps as state: up, gate (gated only) and the hidden
/// activation, `[batch, seq, ffn]` of `input`'s element type.
SmallVector<Type> mlpStateTypes(Value input, Value upWeight, bool gated);
SmallVector<StringRef> mlpStateNames(bool gated);
/// What the norms keep as state: per row of `input`, `[batch, seq]` f32, the
/// mean and rstd (LayerNorm) or the rstd (RMSNorm).
SmallVector<Type> normStateTypes(Value input, bool withMean);
SmallVector<StringRef> normStateNames(bool withMean);
/// `state` (an op's state results or operands, `what` says which) is empty or
/// exactly the op's OpStateInterface types.
LogicalResult verifyState(Operation *op, TypeRange state, StringRef what);

} // namespace mlir::weft::detail

#endif // WEFT_IR_VERIFYUTILS_H
