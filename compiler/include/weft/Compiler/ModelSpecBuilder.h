//===- ModelSpecBuilder.h - IR analysis -> planner input --------*- C++ -*-===//
#ifndef WEFT_COMPILER_MODELSPECBUILDER_H
#define WEFT_COMPILER_MODELSPECBUILDER_H

#include "weft/planner/ModelSpec.h"
#include "llvm/Support/Error.h"

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace weft {
/// Fills the planner's ModelSpec from the model analysis of `model`. Fails if
/// the blocks are not uniform (the planner assumes one repeated layer).
llvm::Expected<planner::ModelSpec> buildModelSpec(mlir::func::FuncOp model,
                                                  llvm::StringRef name);
} // namespace weft

#endif // WEFT_COMPILER_MODELSPECBUILDER_H
