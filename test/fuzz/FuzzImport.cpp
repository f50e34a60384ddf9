//===- FuzzImport.cpp - libFuzzer target for the config importer ----------===//
//
// Any byte string given to importHFConfig must produce a module or an error,
// never a crash, hang or unbounded allocation. Run through scripts/fuzz.sh.
//
//===----------------------------------------------------------------------===//
#include "weft/Compiler/Import.h"
#include "weft/Compiler/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static mlir::MLIRContext *context = [] {
    mlir::DialectRegistry registry;
    weft::registerAllDialects(registry);
    return new mlir::MLIRContext(registry);
  }();
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto module = weft::importHFConfig(text, "fuzz.json", *context);
  if (!module)
    llvm::consumeError(module.takeError());
  return 0;
}
