//===- LoweringPipeline.h - The weft-lower pipeline -------------*- C++ -*-===//
//
// One function builds the lowering pipeline (docs/lowering.md); weftc and
// weft-opt (`--weft-lower`) both use it, so they lower identically.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PIPELINES_LOWERINGPIPELINE_H
#define WEFT_PIPELINES_LOWERINGPIPELINE_H

#include "Conversion/WeftToExec/Passes.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace weft {

/// The parallel configuration to lower for, as `weft-attach-mesh` takes it;
/// on the command line `--weft-lower="tp=2 pp=2 ..."`.
struct LoweringOptions : mlir::PassPipelineOptions<LoweringOptions> {
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel degree"),
                     llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero", llvm::cl::desc("ZeRO stage (0-3)"),
                       llvm::cl::init(0)};
  Option<int64_t> microBatch{*this, "micro-batch",
                             llvm::cl::desc("Micro-batch size"),
                             llvm::cl::init(1)};
  Option<int64_t> gradAccum{*this, "grad-accum",
                            llvm::cl::desc("Micro-batches per step"),
                            llvm::cl::init(1)};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("gpipe, 1f1b or interleaved"),
                               llvm::cl::init("1f1b")};
  Option<int64_t> virtualStages{*this, "virtual-stages",
                                llvm::cl::desc("Model chunks per rank"),
                                llvm::cl::init(1)};
  Option<bool> sequenceParallel{*this, "sequence-parallel",
                                llvm::cl::desc("Sequence parallelism"),
                                llvm::cl::init(false)};
  Option<std::string> recompute{*this, "recompute",
                                llvm::cl::desc("none, selective or full"),
                                llvm::cl::init("none")};
  Option<int64_t> prefetchDepth{*this, "prefetch-depth",
                                llvm::cl::desc("ZeRO-3 buckets ahead"),
                                llvm::cl::init(0)};
  Option<int64_t> bucketBytes{*this, "bucket-bytes",
                              llvm::cl::desc("ZeRO-3 bucket size in bytes"),
                              llvm::cl::init(0)};
  ListOption<int64_t> layersPerStage{
      *this, "layers-per-stage",
      llvm::cl::desc("Blocks per pipeline stage (default: even split)")};
};

/// Appends the lowering passes, in order, to `pm` (a module pass manager).
void buildLoweringPipeline(mlir::OpPassManager &pm,
                           const LoweringOptions &options);

/// Appends what follows weft-schedule in every training step (`weft-step`
/// in weft-opt): weft-optimizer, then the overlap passes
/// (weft-overlap-grad-sync, weft-overlap-offload,
/// weft-overlap-param-gathers, weft-overlap-tp-collectives).
void buildStepPipeline(mlir::OpPassManager &pm);

/// The stages of `weftc compile`, in order; `--emit-mlir` names them.
enum class CompileStage {
  Lower,    // weft-lower: mesh, tensor partition, stage functions (L1)
  Autodiff, // weft-autodiff: backward functions
  Exec,     // weft-schedule, weft-step, weft-fold-zero-fills,
            // [weft-fuse-gemm-epilogues,] [weft-fuse-residual-norms,]
            // weft-plan-memory, weft-generate-kernels: the placed weftx
            // bundle (L2)
};

/// The kernel fusions the exec stage decides before memory planning (each
/// off unless asked for: `weftc compile --gemm-epilogues --residual-norms`).
struct ExecFusions {
  bool gemmEpilogues = false; // weft-fuse-gemm-epilogues
  bool residualNorms = false; // weft-fuse-residual-norms
};

/// Appends the passes of one compile stage to `pm` (a module pass manager);
/// `fusions` adds the fusion passes to the exec stage.
void buildCompileStage(mlir::OpPassManager &pm, CompileStage stage,
                       const LoweringOptions &lowering,
                       const mlir::weft::WeftScheduleOptions &schedule,
                       ExecFusions fusions = {});

/// Appends the exec stage with `schedule` (a weft-schedule pass) first.
void buildExecStage(mlir::OpPassManager &pm,
                    std::unique_ptr<mlir::Pass> schedule,
                    ExecFusions fusions = {});

/// `weft-compile`'s options: the options of weft-lower and of
/// weft-schedule, each in braces, e.g.
/// `--weft-compile='lower={dp=2 zero=1} schedule={seq-len=8}'`.
struct CompilePipelineOptions
    : mlir::PassPipelineOptions<CompilePipelineOptions> {
  Option<std::string> lower{*this, "lower",
                            llvm::cl::desc("weft-lower's options")};
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("weft-schedule's options")};
  Option<bool> gemmEpilogues{
      *this, "gemm-epilogues",
      llvm::cl::desc("Run weft-fuse-gemm-epilogues before weft-plan-memory"),
      llvm::cl::init(false)};
  Option<bool> residualNorms{
      *this, "residual-norms",
      llvm::cl::desc("Run weft-fuse-residual-norms before weft-plan-memory"),
      llvm::cl::init(false)};
};

/// Registers `weft-lower`, `weft-step` and `weft-compile` (every stage of
/// `weftc compile`, built by the same functions) for weft-opt.
void registerLoweringPipeline();

} // namespace weft

#endif // WEFT_PIPELINES_LOWERINGPIPELINE_H
