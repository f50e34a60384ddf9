//===- AdamWStep.h - AdamW's constants of a step ----------------*- C++ -*-===//
//
// Shared by the CPU and CUDA backends, which both run AdamW from a step's
// context (docs/runtime.md, optimizer_step).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_ADAMWSTEP_H
#define WEFT_EXEC_ADAMWSTEP_H

#include "weft/exec/Backend.h"
#include "weft/kernels/Optimizer.h"

#include <optional>
#include <vector>

namespace weft::exec {

/// AdamW's constants for this step: the LR, the training's betas, eps and
/// weight decay, bias correction at the update count, and the gradient scale
/// 1 / `lossScale`; for an optimizer_step that reads the global sum of
/// squares (kernels::clippedGradScale), the loss scale, the clip limit and
/// whether an overflow skips the update.
inline kernels::AdamWStep adamwStepOf(const StepContext &context,
                                      double lossScale) {
  const plan::TrainingInfo &t = *context.training;
  kernels::AdamWConfig config{context.lr, t.beta1, t.beta2, t.eps,
                              t.weightDecay};
  kernels::AdamWStep step =
      kernels::makeAdamWStep(config, context.optimizerStep, 1.0 / lossScale);
  step.lossScale = lossScale;
  step.maxNorm = t.gradClip;
  step.skipNonFinite = t.lossScale.dynamic;
  return step;
}

/// The AdamW step an optimizer_step run on the host takes (the CPU backend,
/// the CUDA backend's offloaded AdamW), or nothing where the update is
/// skipped: by the loss scaler at an older plan's clip (`skipUpdate`), or
/// by the overflow the step's own sum of squares (`reads[4]`) shows; with
/// that sum the gradient scale includes the clip factor.
inline std::optional<kernels::AdamWStep>
hostAdamWStep(const StepContext &context, const plan::Instruction &inst,
              const std::vector<Operand> &reads) {
  if (context.skipUpdate)
    return std::nullopt;
  kernels::AdamWStep step = adamwStepOf(context, context.lossScale);
  if (plan::readsGradientNorm(inst) &&
      !kernels::clippedGradScale(step, reads[4].as<const float>()[0],
                                 step.gradScale))
    return std::nullopt;
  return step;
}

} // namespace weft::exec

#endif // WEFT_EXEC_ADAMWSTEP_H
