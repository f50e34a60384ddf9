//===- WeftExecDialect.h - The Weft execution dialect -----------*- C++ -*-===//
#ifndef WEFTEXEC_IR_WEFTEXECDIALECT_H
#define WEFTEXEC_IR_WEFTEXECDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "WeftExec/IR/WeftExecOpsDialect.h.inc"

#include "WeftExec/IR/WeftExecEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "WeftExec/IR/WeftExecAttrs.h.inc"

#endif // WEFTEXEC_IR_WEFTEXECDIALECT_H
