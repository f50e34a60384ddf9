//===- EmitBundle.h - weftx to plan bundle translation ----------*- C++ -*-===//
//
// The last step of the lowering: translate a weftx module (level L2, one
// module per bundle) into the WeftPlan data model, run the plan verifier on
// it and write it. The compiler, the runtime and weft-inspect thereby share
// one serializer and one verifier.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TARGET_EMITBUNDLE_H
#define WEFT_TARGET_EMITBUNDLE_H

#include "weft/Target/KernelFatbins.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace weft {

/// Translate `module` (weftx, every buffer placed) to a plan bundle, verify it
/// with the plan verifier and write it to `dir`. Nothing is written unless the
/// bundle verifies (and, with `fatbins.archs`, every kernel compiles). Errors
/// are one line. `timer` (optional) times the translation, verification,
/// nvcc and writing separately.
llvm::Error emitBundle(mlir::ModuleOp module, llvm::StringRef dir,
                       mlir::TimingScope timer = {},
                       const KernelFatbinOptions &fatbins = {});

} // namespace weft

#endif // WEFT_TARGET_EMITBUNDLE_H
