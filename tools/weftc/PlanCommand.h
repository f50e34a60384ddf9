//===- PlanCommand.h - `weftc plan` -----------------------------*- C++ -*-===//
//
// The planner throws weft::planner::Error on bad input; this file is compiled
// with exceptions (the rest of weftc follows LLVM's -fno-exceptions) and turns
// them into one-line errors and exit codes.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TOOLS_WEFTC_PLANCOMMAND_H
#define WEFT_TOOLS_WEFTC_PLANCOMMAND_H

#include "weft/planner/CostModel.h"
#include "weft/planner/ModelSpec.h"

#include <cstdint>
#include <optional>
#include <string>

namespace weft {

/// Exit codes shared by weftc's commands.
enum ExitCode { kExitOk = 0, kExitBadInput = 2, kExitNothingFits = 3 };

/// `weftc plan` options as given on the command line (unset = free).
struct PlanOptions {
  std::string cluster;
  std::optional<int64_t> globalBatch, seqLen;
  std::string precision = "bf16";
  std::optional<int64_t> tp, pp, dp, zero, microBatch, virtualStages,
      prefetchDepth;
  std::optional<std::string> recompute, schedule, sequenceParallel;
  /// `--offload none|optimizer|auto` (unset or auto: searched) and
  /// `--attention flash|eager` (plan only; compile lowers neither choice).
  std::optional<std::string> offload;
  std::string attention = "flash";
  bool allowTpAcrossNodes = false;
  /// `--gemm-epilogues`: the plan folds bias adds, tanh GELUs and bias
  /// gradients into GEMM epilogues (TrainingConfig::gemmEpilogues).
  bool gemmEpilogues = false;
  /// `--residual-norms`: residual adds run inside the norms next to them
  /// (TrainingConfig::residualNorms).
  bool residualNorms = false;
  /// `weftc compile --bucket-bytes` (0: the default), costed as compiled.
  int64_t bucketBytes = 0;
  std::optional<std::string> fromDeepSpeed;
  int top = 5;
  bool explain = false;
  bool json = false;
};

/// Plans `model` and prints the result; returns the process exit code.
int runPlan(const planner::ModelSpec &model, const PlanOptions &options);

/// Plans `model` without printing and stores the fastest fitting plan (or
/// the fixed configuration, fitting or not) in `chosen`; returns the exit
/// code (errors are printed as one line). For `weftc compile`: an unset
/// offload means none (the lowering has no offload yet).
int selectPlan(const planner::ModelSpec &model, const PlanOptions &options,
               planner::Estimate &chosen, std::string &clusterJson);

} // namespace weft

#endif // WEFT_TOOLS_WEFTC_PLANCOMMAND_H
