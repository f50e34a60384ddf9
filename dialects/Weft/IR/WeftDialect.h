//===- WeftDialect.h - The Weft model dialect -------------------*- C++ -*-===//
#ifndef WEFT_IR_WEFTDIALECT_H
#define WEFT_IR_WEFTDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "Weft/IR/WeftOpsDialect.h.inc"

#endif // WEFT_IR_WEFTDIALECT_H
