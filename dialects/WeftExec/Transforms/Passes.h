//===- Passes.h - Weft execution dialect passes -----------------*- C++ -*-===//
#ifndef WEFTEXEC_TRANSFORMS_PASSES_H
#define WEFTEXEC_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::weftx {
#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

#endif // WEFTEXEC_TRANSFORMS_PASSES_H
