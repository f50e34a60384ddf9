//===- DeepSpeedTest.cpp - DeepSpeed config reader ------------------------===//

#include "weft/planner/DeepSpeed.h"
#include "weft/planner/Error.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace weft::planner;
using nlohmann::json;

namespace {

std::string errorOf(const char *text, int64_t world = 8) {
  try {
    parseDeepSpeedConfig(json::parse(text), "ds_config.json", world);
  } catch (const Error &error) {
    return error.what();
  }
  return "no error";
}

} // namespace

TEST(DeepSpeed, FixesEveryDimension) {
  DeepSpeedPlan plan =
      parseDeepSpeedConfig(json::parse(R"({"train_batch_size": 256,
                      "train_micro_batch_size_per_gpu": 4,
                      "gradient_accumulation_steps": 8,
                      "zero_optimization": {"stage": 2, "overlap_comm": true},
                      "bf16": {"enabled": true},
                      "optimizer": {"type": "AdamW"}})"),
                           "ds_config.json", 8);
  EXPECT_EQ(plan.globalBatch, 256);
  EXPECT_EQ(plan.precision, Precision::BF16);
  EXPECT_TRUE(plan.constraints.allFixed());
  EXPECT_EQ(*plan.constraints.tp, 1);
  EXPECT_EQ(*plan.constraints.pp, 1);
  EXPECT_EQ(*plan.constraints.dp, 8);
  EXPECT_EQ(*plan.constraints.zero, 2);
  EXPECT_EQ(*plan.constraints.microBatch, 4);
  EXPECT_EQ(*plan.constraints.gradAccum, 8);
  EXPECT_EQ(*plan.constraints.offload, Offload::None);
  plan = parseDeepSpeedConfig(
      json::parse(R"({"train_batch_size": 64, "zero_optimization": {
                      "stage": 2, "offload_optimizer": {"device": "cpu",
                                                        "pin_memory": true}}})"),
      "ds_config.json", 8);
  EXPECT_EQ(*plan.constraints.offload, Offload::Optimizer);
}

TEST(DeepSpeed, DerivesTheMissingBatchTerm) {
  DeepSpeedPlan plan = parseDeepSpeedConfig(
      json::parse(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2,
                      "fp16": {"enabled": true}})"),
      "ds_config.json", 8);
  EXPECT_EQ(*plan.constraints.microBatch, 4);
  EXPECT_EQ(*plan.constraints.zero, 0);
  EXPECT_EQ(plan.precision, Precision::FP16);
  plan = parseDeepSpeedConfig(
      json::parse(R"({"train_micro_batch_size_per_gpu": 2})"), "ds.json", 8);
  EXPECT_EQ(plan.globalBatch, 16);
  EXPECT_EQ(plan.precision, Precision::FP32);
}

TEST(DeepSpeed, ErrorsAreOneLine) {
  EXPECT_EQ(errorOf(R"({"train_batch_size": 100,
                        "train_micro_batch_size_per_gpu": 4,
                        "gradient_accumulation_steps": 2})"),
            "ds_config.json: train_batch_size 100 != "
            "train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 "
            "x 8 GPUs");
  EXPECT_EQ(errorOf(R"({"train_batch_size": "auto"})"),
            "ds_config.json: field 'train_batch_size': must be a positive "
            "integer, got \"auto\"");
  EXPECT_EQ(errorOf(R"({"train_batch_size": 64,
                        "zero_optimization": {"stage": 4}})"),
            "ds_config.json: field 'zero_optimization.stage': must be 0, 1, "
            "2 or 3, got 4");
  EXPECT_EQ(errorOf(R"({"train_batch_size": 64, "zero_optimization":
                        {"offload_optimizer": {"device": "nvme"}}})"),
            "ds_config.json: field 'zero_optimization.offload_optimizer."
            "device': must be \"cpu\" or \"none\" (nvme is not modelled), "
            "got \"nvme\"");
  EXPECT_EQ(errorOf(R"({"train_batch_size": 64, "bf16": {"enabled": true},
                        "fp16": {"enabled": true}})"),
            "ds_config.json: bf16.enabled and fp16.enabled are both true");
  EXPECT_EQ(
      errorOf(R"({"train_batch_size": 64, "bf16": {"enabled": 1}})"),
      "ds_config.json: field 'bf16.enabled': must be true or false, got 1");
  EXPECT_EQ(errorOf(R"({"train_batch_size": 60})"),
            "ds_config.json: train_batch_size 60 is not divisible by "
            "gradient_accumulation_steps 1 x 8 GPUs");
  EXPECT_EQ(errorOf(R"({"gradient_accumulation_steps": 2})"),
            "ds_config.json: needs train_batch_size or "
            "train_micro_batch_size_per_gpu");
}
