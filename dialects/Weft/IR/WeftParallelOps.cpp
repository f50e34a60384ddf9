//===- WeftParallelOps.cpp - Tensor-parallel ops of weft ------------------===//
//
// Verifiers of the ops weft-partition-tensor introduces. Group sizes come from
// the referenced shard.grid, so shard widths are checked against the TP
// degree, not only against each other.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/VerifyUtils.h"
#include "Weft/IR/WeftOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace mlir::weft;
using namespace mlir::weft::detail;

/// Resolves `grid` and checks `axes` against it; returns the number of ranks
/// the axes span.
static FailureOr<int64_t> resolveGroup(Operation *op, FlatSymbolRefAttr grid,
                                       ArrayRef<int16_t> axes,
                                       SymbolTableCollection &symbolTables) {
  shard::GridOp gridOp = shard::getGridOrNull(op, grid, symbolTables);
  if (!gridOp)
    return op->emitOpError()
           << "refers to " << grid << ", which is not a shard.grid";
  if (axes.empty())
    return op->emitOpError() << "needs at least one grid axis";
  int64_t size = 1;
  for (int16_t axis : axes) {
    if (axis < 0 || axis >= gridOp.getRank())
      return op->emitOpError()
             << "grid axis " << axis << " is out of range for " << grid
             << " of rank " << gridOp.getRank();
    int64_t extent = gridOp.getShape()[axis];
    if (ShapedType::isDynamic(extent))
      return op->emitOpError() << "grid axis " << axis << " of " << grid
                               << " must have a static size";
    size *= extent;
  }
  return size;
}

int64_t mlir::weft::vocabShardRows(int64_t vocab, int64_t group) {
  int64_t rows = llvm::divideCeil(vocab, group);
  int64_t aligned = llvm::alignTo(rows, 8);
  return (group - 1) * aligned < vocab ? aligned : rows;
}

/// Checks that a local vocabulary shard of `localRows` rows, over a group of
/// `groupSize` ranks, is the padded `vocabSize` (vocabShardRows).
static LogicalResult verifyVocabShard(Operation *op, int64_t vocabSize,
                                      int64_t localRows, int64_t groupSize) {
  int64_t expected = vocabShardRows(vocabSize, groupSize);
  if (localRows == expected)
    return success();
  return op->emitOpError() << "holds " << localRows
                           << " vocabulary rows per rank, expected " << expected
                           << " (vocab_size " << vocabSize << " padded over "
                           << groupSize << " ranks)";
}

//===----------------------------------------------------------------------===//
// TPCopyOp
//===----------------------------------------------------------------------===//

LogicalResult TPCopyOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  return resolveGroup(*this, getGridAttr(), getGridAxes(), symbolTables);
}

//===----------------------------------------------------------------------===//
// BiasAddOp
//===----------------------------------------------------------------------===//

LogicalResult BiasAddOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  auto bias = cast<RankedTensorType>(getBias().getType());
  if (input.getRank() == 0 || bias.getRank() != 1 ||
      bias.getDimSize(0) != input.getShape().back() ||
      bias.getElementType() != input.getElementType())
    return emitOpError() << "bias " << bias
                         << " must be a vector of the input's last dimension ("
                         << input << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// VocabEmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult VocabEmbeddingOp::verify() {
  auto tokens = cast<RankedTensorType>(getTokens().getType());
  auto table = cast<RankedTensorType>(getTable().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (tokens.getRank() != 2 || table.getRank() != 2)
    return emitOpError() << "expects [batch, seq] tokens and a [rows, hidden] "
                            "table, got "
                         << tokens << " and " << table;
  auto expected = RankedTensorType::get(
      {tokens.getDimSize(0), tokens.getDimSize(1), table.getDimSize(1)},
      table.getElementType());
  if (result != expected)
    return emitOpError() << "result type " << result << " should be "
                         << expected;
  if (getVocabSizeAttr().getInt() <= 0)
    return emitOpError() << "vocab_size must be positive";
  return success();
}

LogicalResult
VocabEmbeddingOp::verifySymbolUses(SymbolTableCollection &symbolTables) {
  FailureOr<int64_t> groupSize =
      resolveGroup(*this, getGridAttr(), getGridAxes(), symbolTables);
  if (failed(groupSize))
    return failure();
  return verifyVocabShard(
      *this, getVocabSizeAttr().getInt(),
      cast<RankedTensorType>(getTable().getType()).getDimSize(0), *groupSize);
}

//===----------------------------------------------------------------------===//
// PositionEmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult PositionEmbeddingOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  if (input.getRank() != 3 || ShapedType::isDynamic(input.getDimSize(2)))
    return emitOpError() << "input must be [batch, seq, hidden] with a static "
                            "hidden size, got "
                         << input;
  if (!getPositions() && !getTokenTypes())
    return emitOpError() << "needs a position or token-type table";
  return verifyPositionTables(*this, getPositions(), getTokenTypes(),
                              input.getDimSize(2),
                              getPositionOffsetAttr().getInt());
}

//===----------------------------------------------------------------------===//
// TPAttentionOp
//===----------------------------------------------------------------------===//

LogicalResult TPAttentionOp::verify() {
  auto input = cast<RankedTensorType>(getInput().getType());
  if (input.getRank() != 3 || ShapedType::isDynamic(input.getDimSize(2)))
    return emitOpError() << "input must be [batch, seq, hidden] with a static "
                            "hidden size, got "
                         << input;
  int64_t hidden = input.getDimSize(2);
  int64_t heads = getNumHeadsAttr().getInt();
  int64_t kvHeads = getNumKvHeadsAttr().getInt();
  int64_t headDim = getHeadDimAttr().getInt();
  int64_t tpSize = getTpSizeAttr().getInt();
  if (heads <= 0 || kvHeads <= 0 || headDim <= 0 || tpSize <= 0)
    return emitOpError() << "num_heads, num_kv_heads, head_dim and tp_size "
                            "must be positive";
  if (heads % kvHeads != 0)
    return emitOpError() << "num_heads " << heads
                         << " is not divisible by num_kv_heads " << kvHeads;
  if (heads * headDim * tpSize != hidden)
    return emitOpError() << "num_heads * head_dim * tp_size = "
                         << heads * headDim * tpSize
                         << " does not equal the hidden size " << hidden;
  if (getRopeTheta() && getRopeTheta()->convertToDouble() <= 0)
    return emitOpError() << "rope_theta must be positive";

  int64_t qWidth = heads * headDim, kvWidth = kvHeads * headDim;
  FailureOr<SmallVector<int64_t>> widths =
      qkvWidths(*this, getQkvWeights().size(), qWidth, kvWidth);
  if (failed(widths))
    return failure();
  Type element = input.getElementType();
  for (auto [weight, width] : llvm::zip_equal(getQkvWeights(), *widths))
    if (weight.getType() != RankedTensorType::get({hidden, width}, element))
      return emitOpError() << "query/key/value weight " << weight.getType()
                           << " should be "
                           << RankedTensorType::get({hidden, width}, element);
  if (!getQkvBiases().empty() && getQkvBiases().size() != widths->size())
    return emitOpError() << "has " << getQkvBiases().size()
                         << " query/key/value biases for " << widths->size()
                         << " weights";
  for (auto [bias, width] : llvm::zip(getQkvBiases(), *widths))
    if (bias.getType() != RankedTensorType::get({width}, element))
      return emitOpError() << "query/key/value bias " << bias.getType()
                           << " should be "
                           << RankedTensorType::get({width}, element);
  auto out = RankedTensorType::get({qWidth, hidden}, element);
  if (getOutWeight().getType() != out)
    return emitOpError() << "output weight " << getOutWeight().getType()
                         << " should be " << out;
  return verifyState(*this, getState().getTypes(), "results");
}

SmallVector<Type> TPAttentionOp::getStateTypes() {
  return attentionStateTypes(getInput(), getNumHeads(), getNumKvHeads(),
                             getHeadDim());
}

SmallVector<StringRef> TPAttentionOp::getStateNames() {
  return attentionStateNames();
}

//===----------------------------------------------------------------------===//
// VocabParallelCrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult VocabParallelCrossEntropyOp::verify() {
  auto logits = cast<RankedTensorType>(getLogits().getType());
  auto labels = cast<RankedTensorType>(getLabels().getType());
  if (logits.getRank() != 3 || ShapedType::isDynamic(logits.getDimSize(2)))
    return emitOpError() << "logits must be [batch, seq, local vocab] with a "
                            "static vocabulary, got "
                         << logits;
  if (labels.getRank() != 2 ||
      failed(verifyCompatibleShape(labels.getShape(),
                                   logits.getShape().drop_back())))
    return emitOpError() << "labels " << labels
                         << " must match the logits' [batch, seq]";
  if (getVocabSizeAttr().getInt() <= 0)
    return emitOpError() << "vocab_size must be positive";
  return success();
}

LogicalResult VocabParallelCrossEntropyOp::verifySymbolUses(
    SymbolTableCollection &symbolTables) {
  FailureOr<int64_t> groupSize =
      resolveGroup(*this, getGridAttr(), getGridAxes(), symbolTables);
  if (failed(groupSize))
    return failure();
  return verifyVocabShard(
      *this, getVocabSizeAttr().getInt(),
      cast<RankedTensorType>(getLogits().getType()).getDimSize(2), *groupSize);
}
