//===- Passes.h - Weft dialect passes ---------------------------*- C++ -*-===//
#ifndef WEFT_TRANSFORMS_PASSES_H
#define WEFT_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::weft {
#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

#endif // WEFT_TRANSFORMS_PASSES_H
