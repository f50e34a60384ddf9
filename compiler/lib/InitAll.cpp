//===- InitAll.cpp - Register every Weft dialect and pass -----------------===//
#include "weft/Compiler/InitAll.h"

#include "Conversion/WeftToExec/Passes.h"
#include "Pipelines/LoweringPipeline.h"
#include "Weft/IR/WeftDialect.h"
#include "Weft/Transforms/Passes.h"
#include "WeftExec/IR/WeftExecDialect.h"
#include "WeftExec/Transforms/Passes.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

void weft::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<mlir::weft::WeftDialect, mlir::weftx::WeftExecDialect,
                  mlir::arith::ArithDialect, mlir::func::FuncDialect,
                  mlir::tensor::TensorDialect, mlir::shard::ShardDialect>();
}

void weft::registerAllPasses() {
  mlir::weft::registerWeftPasses();
  mlir::weftx::registerWeftExecPasses();
  mlir::weft::registerWeftToExecPasses();
  weft::registerLoweringPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
}
