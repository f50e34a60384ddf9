//===- Import.h - Hugging Face config.json -> weft model IR -----*- C++ -*-===//
#ifndef WEFT_COMPILER_IMPORT_H
#define WEFT_COMPILER_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <optional>

namespace weft {

/// Builds a module holding one weft model from the text of a Hugging Face
/// config.json. `origin` (a file name or preset) starts every error message:
/// "<origin>: field '<name>': <reason>".
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importHFConfig(llvm::StringRef jsonText, llvm::StringRef origin,
               mlir::MLIRContext &context);

/// Imports what a user names as a model: a preset name, a config.json file,
/// or a .mlir file holding a weft model (parsed and verified).
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importModel(llvm::StringRef source, mlir::MLIRContext &context);

/// Built-in presets: Hugging Face config.json texts embedded at build time.
llvm::ArrayRef<llvm::StringRef> presetNames();
std::optional<llvm::StringRef> presetConfig(llvm::StringRef name);

} // namespace weft

#endif // WEFT_COMPILER_IMPORT_H
