//===- SearchTest.cpp - Search outcomes, constraints and renderings -------===//

#include "TestModels.h"

#include "weft/planner/Error.h"
#include "weft/planner/Report.h"
#include "weft/planner/Search.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

using namespace weft::planner;
using weft::planner::test::gpt;
using weft::planner::test::gpt1p3b;

TEST(Search, FindsValidPlansFastestFirst) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g:2"),
                  {64, 2048, Precision::BF16});
  SearchResult result = search(model, {}, {10, std::nullopt});
  ASSERT_EQ(result.outcome, SearchResult::Outcome::Found);
  ASSERT_EQ(result.plans.size(), 10u);
  EXPECT_GT(result.configsEvaluated, 100);
  for (size_t i = 0; i < result.plans.size(); ++i) {
    const Estimate &plan = result.plans[i];
    const ParallelConfig &c = plan.config;
    EXPECT_TRUE(plan.fits);
    EXPECT_EQ(c.tp * c.pp * c.dp, 16);                // world identity
    EXPECT_EQ(c.microBatch * c.gradAccum * c.dp, 64); // batch identity
    EXPECT_LE(c.tp, 8);                               // TP inside a node
    if (i > 0) { // fastest first, up to the documented tie tolerance
      EXPECT_LE(result.plans[i - 1].stepTimeS, plan.stepTimeS * 1.005);
    }
  }
}

TEST(Search, FixedDimensionsAreHonoured) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g:2"),
                  {64, 2048, Precision::BF16});
  Constraints fixed;
  fixed.pp = 2;
  fixed.recompute = Recompute::Selective;
  fixed.schedule = Schedule::Interleaved;
  SearchResult result = search(model, fixed, {5, std::nullopt});
  ASSERT_FALSE(result.plans.empty());
  for (const Estimate &plan : result.plans) {
    EXPECT_EQ(plan.config.pp, 2);
    EXPECT_EQ(plan.config.recompute, Recompute::Selective);
    EXPECT_EQ(plan.config.schedule, Schedule::Interleaved);
    EXPECT_GE(plan.config.virtualStages, 2);
  }
}

TEST(Search, FreeSearchBeatsOrTiesAnyFixedPlan) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g:2"),
                  {64, 2048, Precision::BF16});
  Constraints fixed;
  fixed.tp = 4;
  fixed.zero = 1;
  SearchResult constrained = search(model, fixed, {1, std::nullopt});
  SearchResult free = search(model, {}, {1, constrained.plans[0].stepTimeS});
  EXPECT_LE(free.plans[0].stepTimeS, constrained.plans[0].stepTimeS);
  EXPECT_LT(free.fasterThanReference, free.candidatesFitting);
}

TEST(Search, EveryDimensionFixedEvaluatesANonFittingPlan) {
  // 1.3B parameters without sharding need 21 GB of model states; cpu-sim-8
  // ranks have 8 GiB.
  CostModel model(gpt1p3b(), clusterPreset("cpu-sim-8"),
                  {8, 2048, Precision::BF16});
  Constraints fixed;
  fixed.tp = 1;
  fixed.pp = 1;
  fixed.zero = 0;
  fixed.microBatch = 1;
  fixed.recompute = Recompute::None;
  SearchResult result = search(model, fixed);
  ASSERT_EQ(result.outcome, SearchResult::Outcome::Fixed);
  ASSERT_EQ(result.plans.size(), 1u);
  const Estimate &plan = result.plans[0];
  EXPECT_FALSE(plan.fits);
  EXPECT_GT(plan.stepTimeS, 0);
  EXPECT_NEAR(plan.shortfallBytes,
              plan.peakMemoryBytes - plan.usableMemoryBytes, 1);
  EXPECT_GT(plan.memory.weights + plan.memory.gradients +
                plan.memory.optimizer + plan.memory.masterWeights,
            16.0 * 1.3e9);
  EXPECT_EQ(plan.config.offload, Offload::None); // as described
  ASSERT_FALSE(result.remedies.empty());
  EXPECT_NE(result.remedies[0].find("ZeRO-3"), std::string::npos);
  nlohmann::json json = toJson(result);
  EXPECT_EQ(json["outcome"], "fixed");
  EXPECT_EQ(json["plans"][0]["fits"], false);
  EXPECT_GT(json["plans"][0]["shortfall_bytes"].get<int64_t>(), 0);
  EXPECT_NE(renderTable(result, model).find("does not fit"), std::string::npos);
}

TEST(Search, NothingFitsReportsTheSmallestShortfall) {
  // 22B parameters on eight 8 GiB ranks: even fully sharded model states
  // (44 GB per rank) exceed memory.
  CostModel model(gpt(6144, 48, 64), clusterPreset("cpu-sim-8"),
                  {8, 2048, Precision::BF16});
  SearchResult result = search(model, {});
  ASSERT_EQ(result.outcome, SearchResult::Outcome::NothingFits);
  EXPECT_TRUE(result.plans.empty());
  ASSERT_TRUE(result.closest.has_value());
  EXPECT_GT(result.closest->shortfallBytes, 0);
  EXPECT_FALSE(result.rejected.empty());
  for (const RejectedRegion &region : result.rejected)
    EXPECT_GE(region.neededBytes - region.usableBytes,
              result.closest->shortfallBytes - 1);
  ASSERT_FALSE(result.remedies.empty());
  EXPECT_NE(result.remedies.back().find("more GPUs"), std::string::npos);
  std::vector<std::string> lines = describeRejected(result);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("GiB per GPU"), std::string::npos);
  EXPECT_NE(lines[0].find("GiB over"), std::string::npos);
  EXPECT_EQ(toJson(result)["outcome"], "nothing_fits");
  EXPECT_NE(renderTable(result, model).find("nothing fits"), std::string::npos);
}

TEST(Search, UnusableWorldSizeIsAnError) {
  // Batch 3 needs DP in {1, 3}; 12 heads and 2 layers cap TP x PP at 8 of 16.
  CostModel model(gpt(768, 2, 12), clusterPreset("dgx-a100-80g:2"),
                  {3, 1024, Precision::BF16});
  try {
    search(model, {});
    FAIL() << "expected an error";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()).rfind("no valid plan for 16 GPUs", 0),
              0u)
        << error.what();
  }
  Constraints impossible;
  impossible.tp = 3;
  impossible.pp = 1;
  impossible.zero = 0;
  impossible.microBatch = 1;
  impossible.recompute = Recompute::None;
  impossible.sequenceParallel = false;
  EXPECT_THROW(search(model, impossible), Error);
}

TEST(Report, JsonHasTheDocumentedFields) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  SearchResult result = search(model, {}, {3, std::nullopt});
  nlohmann::json json = toJson(result);
  ASSERT_EQ(json["plans"].size(), 3u);
  for (const char *key :
       {"tp", "pp", "dp", "zero", "micro_batch", "grad_accum", "recompute",
        "schedule", "virtual_stages", "sequence_parallel", "step_time_s",
        "tokens_per_s", "model_tflops_per_gpu", "mfu", "peak_memory_bytes",
        "fits", "breakdown"})
    EXPECT_TRUE(json["plans"][0].contains(key)) << key;
  EXPECT_TRUE(json["plans"][0]["breakdown"]["time_s"].contains("bubble"));
  const nlohmann::json &memory = json["plans"][0]["breakdown"]["memory_bytes"];
  for (const char *key :
       {"weights", "gradients", "optimizer", "master_weights", "activations",
        "recompute_workspace", "logits", "zero3_buffers", "gradient_buffer",
        "pipeline_buffers", "comm_buffers", "workspace", "margin",
        "static_plan_bytes"})
    EXPECT_TRUE(memory.contains(key)) << key;
  // The breakdown sums to the peak; the static plan leaves out the GPU
  // runtime's workspace and buckets.
  int64_t sum = 0;
  for (const char *key : {"weights", "gradients", "optimizer", "master_weights",
                          "activations", "recompute_workspace", "logits",
                          "zero3_buffers", "gradient_buffer",
                          "pipeline_buffers", "comm_buffers", "workspace"})
    sum += memory[key].get<int64_t>();
  EXPECT_NEAR(double(sum), json["plans"][0]["peak_memory_bytes"].get<double>(),
              16);
  EXPECT_NEAR(memory["static_plan_bytes"].get<double>(),
              double(sum - memory["workspace"].get<int64_t>() -
                     memory["comm_buffers"].get<int64_t>()),
              16);
  EXPECT_EQ(json["configs_evaluated"], result.configsEvaluated);
  EXPECT_TRUE(json.contains("search_time_s"));
  // Ranked by step time, except that plans within the tie tolerance rank
  // simplest first.
  EXPECT_LE(json["plans"][0]["step_time_s"].get<double>(),
            json["plans"][1]["step_time_s"].get<double>() *
                (1 + SearchOptions().tieTolerance));

  std::string explain = renderExplain(result, model);
  for (const char *needle :
       {"best plan:", "time per step:", "bubble", "memory per GPU",
        "activations", "why the runner-ups lose:", "#2 "})
    EXPECT_NE(explain.find(needle), std::string::npos) << needle;
  std::string table = renderTable(result, model);
  EXPECT_NE(table.find("MFU"), std::string::npos);
  EXPECT_NE(table.find("configurations evaluated"), std::string::npos);
}
