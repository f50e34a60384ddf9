//===- Passes.h - Weft to weftx conversion ----------------------*- C++ -*-===//
#ifndef WEFT_CONVERSION_WEFTTOEXEC_PASSES_H
#define WEFT_CONVERSION_WEFTTOEXEC_PASSES_H

#include "mlir/Pass/Pass.h"

namespace mlir::weft {
#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "Conversion/WeftToExec/Passes.h.inc"
} // namespace mlir::weft

#endif // WEFT_CONVERSION_WEFTTOEXEC_PASSES_H
