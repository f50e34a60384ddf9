//===- LoweringPipeline.cpp - The weft-lower pipeline ---------------------===//
#include "Pipelines/LoweringPipeline.h"

#include "Weft/Transforms/Passes.h"
#include "WeftExec/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

void weft::buildLoweringPipeline(mlir::OpPassManager &pm,
                                 const LoweringOptions &options) {
  mlir::weft::WeftAttachMeshOptions mesh;
  mesh.tp = options.tp;
  mesh.pp = options.pp;
  mesh.dp = options.dp;
  mesh.zero = options.zero;
  mesh.microBatch = options.microBatch;
  mesh.gradAccum = options.gradAccum;
  mesh.schedule = options.schedule;
  mesh.virtualStages = options.virtualStages;
  mesh.sequenceParallel = options.sequenceParallel;
  mesh.recompute = options.recompute;
  mesh.prefetchDepth = options.prefetchDepth;
  mesh.bucketBytes = options.bucketBytes;
  mesh.layersPerStage.assign(options.layersPerStage.begin(),
                             options.layersPerStage.end());
  pm.addPass(mlir::weft::createWeftAttachMesh(mesh));
  pm.addPass(mlir::weft::createWeftPartitionTensor());
  pm.addPass(mlir::weft::createWeftSplitStages());
}

void weft::buildCompileStage(mlir::OpPassManager &pm, CompileStage stage,
                             const LoweringOptions &lowering,
                             const mlir::weft::WeftScheduleOptions &schedule) {
  switch (stage) {
  case CompileStage::Lower:
    buildLoweringPipeline(pm, lowering);
    return;
  case CompileStage::Autodiff:
    pm.addPass(mlir::weft::createWeftAutodiff());
    return;
  case CompileStage::Exec:
    pm.addPass(mlir::weft::createWeftSchedule(schedule));
    pm.addPass(mlir::weftx::createWeftPlanMemory());
    pm.addPass(mlir::weftx::createWeftGenerateKernels());
    return;
  }
}

void weft::buildCompilePipeline(
    mlir::OpPassManager &pm, const LoweringOptions &lowering,
    const mlir::weft::WeftScheduleOptions &schedule) {
  for (CompileStage stage :
       {CompileStage::Lower, CompileStage::Autodiff, CompileStage::Exec})
    buildCompileStage(pm, stage, lowering, schedule);
}

void weft::registerLoweringPipeline() {
  mlir::PassPipelineRegistration<LoweringOptions>(
      "weft-lower",
      "Lower weft models for a parallel configuration (docs/lowering.md)",
      buildLoweringPipeline);
}
