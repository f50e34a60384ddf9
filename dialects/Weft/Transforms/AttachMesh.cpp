//===- AttachMesh.cpp - weft-attach-mesh (placeholder) ----------------------------===//
//
// Placeholder until the pass lands (docs/lowering.md): it fails loudly rather
// than passing IR through unchanged.
//
//===----------------------------------------------------------------------===//
#include "Weft/IR/WeftOps.h"
#include "Weft/Transforms/Passes.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTATTACHMESH
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

namespace {
struct AttachMeshPass : mlir::weft::impl::WeftAttachMeshBase<AttachMeshPass> {
  using Base::Base;
  void runOnOperation() override {
    getOperation().emitError("weft-attach-mesh is not implemented yet");
    signalPassFailure();
  }
};
} // namespace
