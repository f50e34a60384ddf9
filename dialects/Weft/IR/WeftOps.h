//===- WeftOps.h - Weft model dialect operations ----------------*- C++ -*-===//
#ifndef WEFT_IR_WEFTOPS_H
#define WEFT_IR_WEFTOPS_H

#include "Weft/IR/WeftDialect.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "Weft/IR/WeftEnums.h.inc"
#include "Weft/IR/WeftInterfaces.h.inc"

#define GET_OP_CLASSES
#include "Weft/IR/WeftOps.h.inc"

namespace mlir::weft {
/// The activations weft.mlp and weft.linear accept.
bool isKnownActivation(llvm::StringRef name);
} // namespace mlir::weft

#endif // WEFT_IR_WEFTOPS_H
