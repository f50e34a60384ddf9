//===- WeftDialect.cpp - The Weft model dialect ---------------------------===//
#include "Weft/IR/WeftDialect.h"
#include "Weft/IR/WeftOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::weft;

#include "Weft/IR/WeftOpsDialect.cpp.inc"

void WeftDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "Weft/IR/WeftOps.cpp.inc"
      >();
}

static bool isKnownFamily(StringRef family) {
  static constexpr StringLiteral kFamilies[] = {"gpt2", "llama", "mistral",
                                                "bert", "roberta"};
  return llvm::is_contained(kFamilies, family);
}

//===----------------------------------------------------------------------===//
// Lowering attributes (docs/lowering.md)
//===----------------------------------------------------------------------===//

/// Checks that `dict` has an entry `key` of attribute type `T` (integers:
/// at least `min`). `what` names the dictionary in messages.
template <typename T>
static FailureOr<T> requireEntry(Operation *op, DictionaryAttr dict,
                                 StringRef what, StringRef key,
                                 int64_t min = 0) {
  auto value = dict.getAs<T>(key);
  if (!value)
    return op->emitError() << "'" << what << "' needs a"
                           << " '" << key << "' entry of the right type, got "
                           << dict;
  if constexpr (std::is_same_v<T, IntegerAttr>) {
    if (value.getInt() < min)
      return op->emitError()
             << "'" << what << "' entry '" << key << "' must be at least "
             << min << ", got " << value.getInt();
  }
  return value;
}

/// `weft.parallel`: the parallel configuration of a model or stage function.
static LogicalResult verifyParallelAttr(Operation *op, Attribute value) {
  constexpr StringLiteral name = "weft.parallel";
  auto dict = dyn_cast<DictionaryAttr>(value);
  if (!isa<func::FuncOp>(op) || !dict)
    return op->emitError() << "'" << name
                           << "' must be a dictionary on a func.func";
  for (StringRef key :
       {"tp", "pp", "dp", "micro_batch", "grad_accum", "virtual_stages"})
    if (failed(requireEntry<IntegerAttr>(op, dict, name, key, 1)))
      return failure();
  for (StringRef key : {"zero", "prefetch_depth", "bucket_bytes"})
    if (failed(requireEntry<IntegerAttr>(op, dict, name, key)))
      return failure();
  for (StringRef key : {"schedule", "recompute"})
    if (failed(requireEntry<StringAttr>(op, dict, name, key)))
      return failure();
  if (failed(requireEntry<BoolAttr>(op, dict, name, "sequence_parallel")) ||
      failed(
          requireEntry<DenseI64ArrayAttr>(op, dict, name, "layers_per_stage")))
    return failure();
  return success();
}

/// `weft.placement`: a parameter's TP role, split dimension and stage.
static LogicalResult verifyPlacementAttr(Operation *op, Attribute value) {
  constexpr StringLiteral name = "weft.placement";
  auto param = dyn_cast<ParamOp>(op);
  auto dict = dyn_cast<DictionaryAttr>(value);
  if (!param || !dict)
    return op->emitError() << "'" << name
                           << "' must be a dictionary on a weft.param";
  FailureOr<StringAttr> role = requireEntry<StringAttr>(op, dict, name, "tp");
  if (failed(role) ||
      failed(requireEntry<IntegerAttr>(op, dict, name, "stage")))
    return failure();
  if (!llvm::is_contained({"column", "row", "vocab", "replicated"},
                          role->getValue()))
    return op->emitError() << "'" << name << "' has unknown tp role " << *role
                           << " (expected column, row, vocab or replicated)";
  auto dim = dict.getAs<IntegerAttr>("tp_dim");
  if (role->getValue() == "replicated") {
    if (dim)
      return op->emitError()
             << "'" << name << "' of a replicated parameter has no tp_dim";
    return success();
  }
  // Dialect attributes are verified before the op: a parameter that is not a
  // ranked tensor is left to weft.param's verifier. (ParamOp::getType() casts
  // without checking, so read the generic result type.)
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type)
    return success();
  int64_t rank = type.getRank();
  if (!dim || dim.getInt() < 0 || dim.getInt() >= rank)
    return op->emitError() << "'" << name << "' of a " << role->getValue()
                           << " parameter needs a tp_dim in [0, " << rank
                           << ")";
  return success();
}

/// `weft.shard`: the global tensor a partitioned parameter is a slice of.
static LogicalResult verifyShardAttr(Operation *op, Attribute value) {
  constexpr StringLiteral name = "weft.shard";
  auto param = dyn_cast<ParamOp>(op);
  auto dict = dyn_cast<DictionaryAttr>(value);
  if (!param || !dict)
    return op->emitError() << "'" << name
                           << "' must be a dictionary on a weft.param";
  FailureOr<DenseI64ArrayAttr> shape =
      requireEntry<DenseI64ArrayAttr>(op, dict, name, "global_shape");
  if (failed(requireEntry<StringAttr>(op, dict, name, "global_name")) ||
      failed(shape))
    return failure();
  auto local = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!local)
    return success(); // left to weft.param's verifier, as above
  if (static_cast<int64_t>(shape->size()) != local.getRank())
    return op->emitError() << "'" << name << "' global_shape " << *shape
                           << " does not have the rank of " << local;
  return success();
}

/// Checks every attribute weft-attach-mesh, weft-partition-tensor and
/// weft-split-stages attach.
static LogicalResult verifyLoweringAttr(Operation *op, NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == "weft.parallel")
    return verifyParallelAttr(op, attr.getValue());
  if (name == "weft.placement")
    return verifyPlacementAttr(op, attr.getValue());
  if (name == "weft.shard")
    return verifyShardAttr(op, attr.getValue());
  if (name == "weft.stage") {
    auto stage = dyn_cast<IntegerAttr>(attr.getValue());
    if (!stage || stage.getInt() < 0)
      return op->emitError() << "'weft.stage' must be a non-negative integer";
    return success();
  }
  if (name == "weft.tied_to") {
    auto target = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<ParamOp>(op) || !target || target.getValue().empty())
      return op->emitError()
             << "'weft.tied_to' must name a parameter, on a weft.param";
    return success();
  }
  if (name == "weft.pipeline_stage") {
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!isa<func::FuncOp>(op) || !dict)
      return op->emitError()
             << "'weft.pipeline_stage' must be a dictionary on a func.func";
    for (StringRef key : {"stage", "rank", "chunk"})
      if (failed(requireEntry<IntegerAttr>(op, dict, name, key)))
        return failure();
    if (failed(requireEntry<IntegerAttr>(op, dict, name, "num_stages", 1)))
      return failure();
    return requireEntry<StringAttr>(op, dict, name, "model");
  }
  return op->emitError() << "unknown weft attribute '" << name << "'";
}

/// `weft.model = "<family>"` marks a func.func as a model: its parameters are
/// named uniquely (checkpoints and shardings are keyed by name), its blocks are
/// numbered 0..n-1 in program order, and it returns the scalar loss.
LogicalResult WeftDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() != kModelAttrName)
    return verifyLoweringAttr(op, attr);
  auto func = dyn_cast<func::FuncOp>(op);
  if (!func)
    return op->emitError() << "'" << kModelAttrName
                           << "' must be attached to a func.func";
  auto family = dyn_cast<StringAttr>(attr.getValue());
  if (!family || !isKnownFamily(family.getValue()))
    return op->emitError()
           << "'" << kModelAttrName
           << "' must name a model family (gpt2, llama, mistral, bert, "
              "roberta), got "
           << attr.getValue();
  if (func.isExternal())
    return op->emitError() << "a weft model must have a body";

  llvm::StringMap<ParamOp> byName;
  WalkResult walk = func.walk([&](ParamOp param) {
    auto [it, inserted] = byName.try_emplace(param.getName(), param);
    if (inserted)
      return WalkResult::advance();
    InFlightDiagnostic diag = param.emitOpError()
                              << "parameter name '" << param.getName()
                              << "' is used twice";
    diag.attachNote(it->second.getLoc()) << "first declared here";
    return WalkResult::interrupt();
  });
  if (walk.wasInterrupted())
    return failure();

  int64_t expectedLayer = 0;
  for (BlockOp block : func.getBody().getOps<BlockOp>()) {
    if (block.getLayerAttr().getInt() != expectedLayer)
      return block.emitOpError()
             << "has layer index " << block.getLayerAttr().getInt()
             << ", expected " << expectedLayer
             << " (blocks are numbered in program order)";
    ++expectedLayer;
  }

  FunctionType type = func.getFunctionType();
  if (type.getNumResults() != 1 || !isa<RankedTensorType>(type.getResult(0)) ||
      cast<RankedTensorType>(type.getResult(0)).getRank() != 0)
    return op->emitError() << "a weft model must return one scalar loss "
                              "tensor, got "
                           << type;
  return success();
}
