//===- DeepSpeed.cpp - DeepSpeed config reader ----------------------------===//

#include "weft/planner/DeepSpeed.h"
#include "weft/planner/Error.h"

#include "JsonFile.h"

#include <nlohmann/json.hpp>

#include <optional>

using nlohmann::json;

namespace weft::planner {
namespace {

std::optional<int64_t> optionalPositive(const json &root, const char *key,
                                        const std::string &source) {
  auto it = root.find(key);
  if (it == root.end())
    return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    throw Error(source + ": field '" + key +
                "': must be a positive integer, got " + it->dump());
  return it->get<int64_t>();
}

bool enabled(const json &root, const char *section, const std::string &source) {
  auto it = root.find(section);
  if (it == root.end())
    return false;
  if (!it->is_object())
    throw Error(source + ": field '" + section + "': must be an object, got " +
                it->dump());
  auto flag = it->find("enabled");
  if (flag == it->end())
    return false;
  if (!flag->is_boolean())
    throw Error(source + ": field '" + section +
                ".enabled': must be true or false, got " + flag->dump());
  return flag->get<bool>();
}

} // namespace

DeepSpeedPlan parseDeepSpeedConfig(const json &root, const std::string &source,
                                   int64_t worldSize) {
  if (!root.is_object())
    throw Error(source + ": must be a JSON object, got " + root.dump());
  std::optional<int64_t> batch =
      optionalPositive(root, "train_batch_size", source);
  std::optional<int64_t> micro =
      optionalPositive(root, "train_micro_batch_size_per_gpu", source);
  std::optional<int64_t> accum =
      optionalPositive(root, "gradient_accumulation_steps", source);

  // DeepSpeed's rule: batch = micro * accum * world; any two give the third.
  if (!batch && !micro)
    throw Error(source + ": needs train_batch_size or "
                         "train_micro_batch_size_per_gpu");
  if (!accum)
    accum = (batch && micro) ? *batch / (*micro * worldSize) : 1;
  if (!micro) {
    if (*batch % (*accum * worldSize) != 0)
      throw Error(source + ": train_batch_size " + std::to_string(*batch) +
                  " is not divisible by gradient_accumulation_steps " +
                  std::to_string(*accum) + " x " + std::to_string(worldSize) +
                  " GPUs");
    micro = *batch / (*accum * worldSize);
  }
  if (!batch)
    batch = *micro * *accum * worldSize;
  if (*batch != *micro * *accum * worldSize)
    throw Error(source + ": train_batch_size " + std::to_string(*batch) +
                " != train_micro_batch_size_per_gpu " + std::to_string(*micro) +
                " x gradient_accumulation_steps " + std::to_string(*accum) +
                " x " + std::to_string(worldSize) + " GPUs");

  int zero = 0;
  Offload offload = Offload::None;
  if (auto section = root.find("zero_optimization"); section != root.end()) {
    if (!section->is_object())
      throw Error(source +
                  ": field 'zero_optimization': must be an object, "
                  "got " +
                  section->dump());
    if (auto stage = section->find("stage"); stage != section->end()) {
      if (!stage->is_number_integer() || stage->get<int64_t>() < 0 ||
          stage->get<int64_t>() > 3)
        throw Error(source +
                    ": field 'zero_optimization.stage': must be 0, "
                    "1, 2 or 3, got " +
                    stage->dump());
      zero = stage->get<int>();
    }
    // offload_optimizer.device: "cpu" is optimizer offload; "nvme"
    // (ZeRO-Infinity) is not modelled; "none" or absent is no offload.
    if (auto off = section->find("offload_optimizer"); off != section->end()) {
      auto device = off->is_object() ? off->find("device") : off->end();
      std::string value = device != off->end() && device->is_string()
                              ? device->get<std::string>()
                              : "";
      if (value != "cpu" && value != "none")
        throw Error(source +
                    ": field 'zero_optimization.offload_optimizer.device': "
                    "must be \"cpu\" or \"none\" (nvme is not modelled), "
                    "got " +
                    (device != off->end() ? device->dump() : off->dump()));
      offload = value == "cpu" ? Offload::Optimizer : Offload::None;
    }
  }

  bool bf16 = enabled(root, "bf16", source);
  bool fp16 = enabled(root, "fp16", source);
  if (bf16 && fp16)
    throw Error(source + ": bf16.enabled and fp16.enabled are both true");

  DeepSpeedPlan plan;
  plan.globalBatch = *batch;
  plan.precision = bf16   ? Precision::BF16
                   : fp16 ? Precision::FP16
                          : Precision::FP32;
  Constraints &fixed = plan.constraints;
  fixed.tp = 1;
  fixed.pp = 1;
  fixed.dp = worldSize;
  fixed.zero = zero;
  fixed.microBatch = *micro;
  fixed.gradAccum = *accum;
  fixed.recompute = Recompute::None;
  fixed.schedule = Schedule::OneFOneB;
  fixed.virtualStages = 1;
  fixed.sequenceParallel = false;
  fixed.offload = offload;
  return plan;
}

DeepSpeedPlan loadDeepSpeedConfig(const std::string &path, int64_t worldSize) {
  return parseDeepSpeedConfig(detail::readJsonFile(path, "DeepSpeed config"),
                              path, worldSize);
}

} // namespace weft::planner
