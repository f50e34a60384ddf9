//===- WeftExecOps.h - Weft execution dialect operations --------*- C++ -*-===//
#ifndef WEFTEXEC_IR_WEFTEXECOPS_H
#define WEFTEXEC_IR_WEFTEXECOPS_H

#include "WeftExec/IR/WeftExecDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::weftx {
class RangeAttr;
} // namespace mlir::weftx

#include "WeftExec/IR/WeftExecInterfaces.h.inc"

#define GET_OP_CLASSES
#include "WeftExec/IR/WeftExecOps.h.inc"

namespace mlir::weftx {
/// Bytes per element of a plan element type (f32, f16, bf16, f64, i32, i64,
/// ui16, ui8).
int64_t getElementBytes(Type type);
/// The plan-format spelling of a plan element type ("f32", ..., "u8").
llvm::StringRef getDTypeName(Type type);
} // namespace mlir::weftx

#endif // WEFTEXEC_IR_WEFTEXECOPS_H
