//===- weft-opt.cpp - The Weft IR driver ----------------------------------===//
#include "weft/Compiler/InitAll.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  weft::registerAllDialects(registry);
  weft::registerAllPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "Weft optimizer driver\n", registry));
}
