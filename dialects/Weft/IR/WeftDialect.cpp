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

/// `weft.model = "<family>"` marks a func.func as a model: its parameters are
/// named uniquely (checkpoints and shardings are keyed by name), its blocks are
/// numbered 0..n-1 in program order, and it returns the scalar loss.
LogicalResult WeftDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  if (attr.getName() != kModelAttrName)
    return op->emitError() << "unknown weft attribute '"
                           << attr.getName().getValue() << "'";
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
    if (block.getLayer() != expectedLayer)
      return block.emitOpError()
             << "has layer index " << block.getLayer() << ", expected "
             << expectedLayer << " (blocks are numbered in program order)";
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
