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
/// Rows of one rank's shard of a `vocab`-word table split over `group`
/// ranks: the vocabulary padded to a multiple of the group and, where every
/// rank still holds a word, each shard to a multiple of 8 rows (16-byte
/// aligned rows of 16-bit local logits for the LM head's GEMMs).
int64_t vocabShardRows(int64_t vocab, int64_t group);
} // namespace mlir::weft

#endif // WEFT_IR_WEFTOPS_H
