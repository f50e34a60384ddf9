//===- Passes.h - Weft dialect passes ---------------------------*- C++ -*-===//
#ifndef WEFT_TRANSFORMS_PASSES_H
#define WEFT_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"

#include <cstdint>

namespace mlir::weft {

/// The most micro-batches per step (grad-accum) a plan may have: the
/// lowering unrolls every one into the programs (about a millisecond, 90 KB
/// of compiler memory and 18 KB of plan per micro-batch of gpt2-tiny), so
/// larger counts are refused at weft-attach-mesh instead of running for
/// hours (docs/lowering.md).
constexpr int64_t kMaxGradAccum = 16384;

#define GEN_PASS_DECL
#define GEN_PASS_REGISTRATION
#include "Weft/Transforms/Passes.h.inc"
} // namespace mlir::weft

#endif // WEFT_TRANSFORMS_PASSES_H
