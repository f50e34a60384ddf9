//===- InitAll.h - Register every Weft dialect and pass ---------*- C++ -*-===//
//
// One registration point shared by weftc and weft-opt, so both tools accept
// exactly the same IR, passes and pipelines.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_COMPILER_INITALL_H
#define WEFT_COMPILER_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace weft {
void registerAllDialects(mlir::DialectRegistry &registry);
void registerAllPasses();
} // namespace weft

#endif // WEFT_COMPILER_INITALL_H
