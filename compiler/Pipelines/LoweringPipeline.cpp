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

void weft::buildStepPipeline(mlir::OpPassManager &pm) {
  pm.addPass(mlir::weftx::createWeftOptimizer());
  pm.addPass(mlir::weftx::createWeftOverlapGradSync());
  pm.addPass(mlir::weftx::createWeftOverlapOffload());
  pm.addPass(mlir::weftx::createWeftOverlapParamGathers());
  pm.addPass(mlir::weftx::createWeftOverlapTpCollectives());
}

void weft::buildCompileStage(mlir::OpPassManager &pm, CompileStage stage,
                             const LoweringOptions &lowering,
                             const mlir::weft::WeftScheduleOptions &schedule,
                             ExecFusions fusions) {
  switch (stage) {
  case CompileStage::Lower:
    buildLoweringPipeline(pm, lowering);
    return;
  case CompileStage::Autodiff:
    pm.addPass(mlir::weft::createWeftAutodiff());
    return;
  case CompileStage::Exec:
    buildExecStage(pm, mlir::weft::createWeftSchedule(schedule), fusions);
    return;
  }
}

void weft::buildExecStage(mlir::OpPassManager &pm,
                          std::unique_ptr<mlir::Pass> schedule,
                          ExecFusions fusions) {
  pm.addPass(std::move(schedule));
  buildStepPipeline(pm);
  pm.addPass(mlir::weftx::createWeftFoldZeroFills());
  if (fusions.gemmEpilogues)
    pm.addPass(mlir::weftx::createWeftFuseGemmEpilogues());
  if (fusions.residualNorms)
    pm.addPass(mlir::weftx::createWeftFuseResidualNorms());
  pm.addPass(mlir::weftx::createWeftPlanMemory());
  pm.addPass(mlir::weftx::createWeftGenerateKernels());
}

/// `weft-compile`: the stages of `weftc compile` from option strings.
static mlir::LogicalResult buildCompileFromStrings(
    mlir::OpPassManager &pm, llvm::StringRef optionsStr,
    llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> errorHandler) {
  weft::CompilePipelineOptions options;
  if (mlir::failed(options.parseFromString(optionsStr)))
    return errorHandler("weft-compile: cannot parse options '" + optionsStr +
                        "'");
  std::unique_ptr<weft::LoweringOptions> lowering =
      weft::LoweringOptions::createFromString(options.lower);
  if (!lowering)
    return errorHandler("weft-compile: bad lower options '" + options.lower +
                        "'");
  std::unique_ptr<mlir::Pass> schedule = mlir::weft::createWeftSchedule();
  if (mlir::failed(schedule->initializeOptions(options.schedule, errorHandler)))
    return mlir::failure();
  weft::buildLoweringPipeline(pm, *lowering);
  pm.addPass(mlir::weft::createWeftAutodiff());
  weft::buildExecStage(pm, std::move(schedule),
                       {options.gemmEpilogues, options.residualNorms});
  return mlir::success();
}

void weft::registerLoweringPipeline() {
  mlir::PassPipelineRegistration<LoweringOptions>(
      "weft-lower",
      "Lower weft models for a parallel configuration (docs/lowering.md)",
      buildLoweringPipeline);
  mlir::PassPipelineRegistration<>(
      "weft-step",
      "After weft-schedule: the optimizer step and the overlap of the "
      "gradient sync, offload copies, ZeRO-1/2 parameter gathers and TP "
      "collectives "
      "(docs/lowering.md)",
      buildStepPipeline);
  mlir::registerPassPipeline(
      "weft-compile",
      "Every stage of `weftc compile` (weft-lower, weft-autodiff, "
      "weft-schedule, weft-step, weft-fold-zero-fills, "
      "[weft-fuse-gemm-epilogues,] "
      "[weft-fuse-residual-norms,] weft-plan-memory, weft-generate-kernels): "
      "--weft-compile='lower={dp=2 zero=1} schedule={seq-len=8}'",
      buildCompileFromStrings,
      [](llvm::function_ref<void(const mlir::detail::PassOptions &)> print) {
        print(CompilePipelineOptions());
      });
}
