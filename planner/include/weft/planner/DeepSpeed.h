//===- DeepSpeed.h - Read a DeepSpeed config as fixed constraints -*- C++ -*-=//
//
// Reads train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps, zero_optimization.stage,
// zero_optimization.offload_optimizer.device (cpu | none) and
// bf16.enabled / fp16.enabled. DeepSpeed's data parallelism spans the whole
// world (TP = PP = 1) and it only recomputes when the model code asks, so the
// result fixes recompute to none; callers may override any dimension. Other
// keys are ignored (DeepSpeed configs carry many unrelated settings).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_DEEPSPEED_H
#define WEFT_PLANNER_DEEPSPEED_H

#include "weft/planner/Config.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace weft::planner {

struct DeepSpeedPlan {
  Constraints constraints; // every dimension fixed
  int64_t globalBatch = 0;
  Precision precision = Precision::FP32;
};

/// `source` prefixes errors: "ds_config.json: field 'zero_optimization.stage':
/// must be 0, 1, 2 or 3, got 4".
DeepSpeedPlan parseDeepSpeedConfig(const nlohmann::json &json,
                                   const std::string &source,
                                   int64_t worldSize);
DeepSpeedPlan loadDeepSpeedConfig(const std::string &path, int64_t worldSize);

} // namespace weft::planner

#endif // WEFT_PLANNER_DEEPSPEED_H
