//===- OffloadTest.cpp - Optimizer offload and tie-breaking ---------------===//

#include "TestModels.h"

#include "weft/planner/Error.h"
#include "weft/planner/Report.h"
#include "weft/planner/Search.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace weft::planner;
using weft::planner::test::gpt;
using weft::planner::test::gpt1p3b;

namespace {

/// GPT 6.7B (h 4096, 32 layers): 107 GB of mixed-precision model states, more
/// than an 80 GB GPU; 27 GB without the optimizer states and master weights.
ModelSpec gpt6p7b() { return gpt(4096, 32, 32); }

ParallelConfig single(Offload offload) {
  ParallelConfig c;
  c.microBatch = 1;
  c.gradAccum = 8;
  c.recompute = Recompute::Full;
  c.offload = offload;
  return c;
}

} // namespace

TEST(Offload, MakesATooLargeModelFitAndIsExplained) {
  CostModel model(gpt6p7b(), clusterPreset("h100-1gpu"),
                  {8, 2048, Precision::BF16});
  Constraints without;
  without.offload = Offload::None;
  SearchResult none = search(model, without);
  ASSERT_EQ(none.outcome, SearchResult::Outcome::NothingFits);
  // The remedies name offload.
  bool named = false;
  for (const std::string &remedy : none.remedies)
    named |= remedy.find("optimizer offload") != std::string::npos;
  EXPECT_TRUE(named);

  SearchResult free = search(model, {});
  ASSERT_EQ(free.outcome, SearchResult::Outcome::Found);
  const Estimate &best = free.plans.front();
  EXPECT_EQ(best.config.offload, Offload::Optimizer);
  EXPECT_TRUE(best.fits);
  EXPECT_EQ(best.memory.optimizer, 0);
  EXPECT_EQ(best.memory.masterWeights, 0);
  EXPECT_GT(best.hostMemoryBytes, 16.0 * 6.5e9);
  EXPECT_LE(best.hostMemoryBytes, best.usableHostMemoryBytes);
  EXPECT_GT(best.time.optimizer, 0);
  EXPECT_GT(best.time.offload, 0);
  EXPECT_TRUE(free.offloadSearched);
  EXPECT_FALSE(free.bestWithoutOffload);
  std::string explain = renderExplain(free, model);
  EXPECT_NE(explain.find("optimizer offload: on -- nothing fits without it"),
            std::string::npos)
      << explain;
  EXPECT_NE(explain.find("host memory"), std::string::npos);
  nlohmann::json json = toJson(free);
  EXPECT_EQ(json["plans"][0]["offload"], "optimizer");
  EXPECT_GT(json["plans"][0]["breakdown"]["time_s"]["offload"].get<double>(),
            0);
  EXPECT_GT(json["plans"][0]["host_memory_bytes"].get<int64_t>(), 0);
}

TEST(Offload, NotChosenWhenTheModelFitsAndItIsSlower) {
  CostModel model(gpt1p3b(), clusterPreset("h100-1gpu"),
                  {8, 2048, Precision::BF16});
  SearchResult result = search(model, {}, {5, std::nullopt});
  ASSERT_EQ(result.outcome, SearchResult::Outcome::Found);
  const Estimate &best = result.plans.front();
  EXPECT_EQ(best.config.offload, Offload::None);
  ASSERT_TRUE(result.bestWithOffload);
  EXPECT_GT(result.bestWithOffload->stepTimeS, best.stepTimeS);
  std::string explain = renderExplain(result, model);
  EXPECT_NE(explain.find("optimizer offload: off -- the best offloaded plan"),
            std::string::npos)
      << explain;
  EXPECT_NE(explain.find("slower: CPU AdamW"), std::string::npos);
}

TEST(Offload, ChosenWhenFaster) {
  // A slow device optimizer (a GPU with little memory bandwidth) against a
  // fast host: the offloaded step wins on time alone, and the model fits
  // either way.
  Cluster cluster = clusterPreset("h100-1gpu");
  cluster.gpu.memoryBandwidthGBs = 20; // AdamW at 15 GB/s on the device
  cluster.host = HostSpec{2048, 800, 128, 64};
  CostModel model(gpt(1024, 8, 16), cluster, {8, 1024, Precision::BF16});
  SearchResult result = search(model, {});
  ASSERT_EQ(result.outcome, SearchResult::Outcome::Found);
  EXPECT_EQ(result.plans.front().config.offload, Offload::Optimizer);
  ASSERT_TRUE(result.bestWithoutOffload);
  EXPECT_TRUE(result.bestWithoutOffload->fits);
  EXPECT_NE(renderExplain(result, model)
                .find("faster than the best plan "
                      "without it"),
            std::string::npos);
}

TEST(Offload, CostTermsScale) {
  ModelSpec m = gpt1p3b();
  Cluster cluster = clusterPreset("h100-1gpu");
  CostModel model(m, cluster, {8, 2048, Precision::BF16});
  CostConstants k;
  Estimate off = model.evaluate(single(Offload::Optimizer));
  Estimate on = model.evaluate(single(Offload::None));
  // Device memory: exactly the 12 bytes per parameter of m, v and master.
  EXPECT_NEAR(on.peakMemoryBytes - off.peakMemoryBytes, 12.0 * m.totalParams,
              1);
  EXPECT_DOUBLE_EQ(off.hostMemoryBytes, 16.0 * m.totalParams);
  // CPU AdamW: memory-bound here (36 B/param at half of 76.8 GB/s beats 14
  // cores x 1e8 params/s).
  const HostSpec &host = *cluster.host;
  double perParam = std::max(
      (k.cpuAdamBytesPerParam + k.cpuAdamMixedExtraBytesPerParam) /
          (host.memoryBandwidthGBs * 1e9 * k.hostMemoryBandwidthFraction),
      1 / (host.cores * k.cpuAdamParamsPerCoreS));
  EXPECT_NEAR(off.time.optimizer, m.totalParams * perParam,
              1e-9 * off.time.optimizer);
  // Half the host bandwidth: twice the CPU step.
  Cluster slowHost = cluster;
  slowHost.host->memoryBandwidthGBs /= 2;
  Estimate slow = CostModel(m, slowHost, {8, 2048, Precision::BF16})
                      .evaluate(single(Offload::Optimizer));
  EXPECT_NEAR(slow.time.optimizer, 2 * off.time.optimizer,
              1e-9 * off.time.optimizer);
  // Copies: 2 B/param each way at the pinned bandwidth; at least the last
  // bucket of each direction is exposed (gradient buckets of dpBucketBytes,
  // AdamW buckets of offloadAdamBucketBytes fp32 weights), at most all of it.
  double copy = 2.0 * m.totalParams / (host.pinnedBandwidthGBs * 1e9);
  double buckets = std::ceil(2.0 * m.totalParams / k.dpBucketBytes);
  double adamBuckets =
      std::ceil(4.0 * m.totalParams / k.offloadAdamBucketBytes);
  EXPECT_GE(off.time.offload, copy / buckets + copy / adamBuckets);
  EXPECT_LE(off.time.offload, 2 * copy);
  // A 100x slower link hides almost nothing of the gradient copy under one
  // micro-batch's compute (tens of ms against 5 s), and of the weight copy
  // only what the CPU AdamW of the buckets after the first covers.
  Cluster slowLink = cluster;
  slowLink.host->pinnedBandwidthGBs /= 100;
  Estimate exposed = CostModel(m, slowLink, {8, 2048, Precision::BF16})
                         .evaluate(single(Offload::Optimizer));
  double adamWindow = off.time.optimizer * (adamBuckets - 1) / adamBuckets;
  EXPECT_GT(exposed.time.offload, 0.98 * 100 * copy + 100 * copy - adamWindow);
  EXPECT_NEAR(exposed.time.offload - (100 * copy - adamWindow), 100 * copy,
              0.02 * 100 * copy);
  EXPECT_LE(exposed.time.offload, 2 * 100 * copy * (1 + 1e-9));
  // A backward window that covers the gradient copy hides all but its last
  // bucket; the weight copy hides under the AdamW of the later buckets.
  CostConstants idealOverlap;
  idealOverlap.commOverlapFraction = 1e6; // unlimited window, for the test
  Estimate hidden =
      CostModel(m, cluster, {8, 2048, Precision::BF16}, idealOverlap)
          .evaluate(single(Offload::Optimizer));
  EXPECT_NEAR(hidden.time.offload,
              copy / buckets + std::max(copy / adamBuckets, copy - adamWindow),
              1e-12);
  // ZeRO-1 over 8 ranks of one node: each rank copies an eighth, the host
  // holds the same total and the CPU step takes as long (one shared CPU).
  CostModel node(m, clusterPreset("dgx-a100-80g"), {64, 2048, Precision::BF16});
  ParallelConfig z1 = single(Offload::Optimizer);
  z1.dp = 8;
  z1.zero = 1;
  Estimate sharded = node.evaluate(z1);
  EXPECT_NEAR(sharded.hostMemoryBytes, 16.0 * m.totalParams,
              1e-6 * sharded.hostMemoryBytes);
}

TEST(Offload, InvalidCombinationsAreExplained) {
  Cluster noHost = clusterPreset("h100-1gpu");
  noHost.host.reset();
  CostModel model(gpt1p3b(), noHost, {8, 2048, Precision::BF16});
  EXPECT_EQ(model.check(single(Offload::Optimizer)),
            "optimizer offload needs the cluster's host description (field "
            "'host')");
  // Without a host the search never tries it.
  SearchResult result = search(model, {});
  EXPECT_FALSE(result.offloadSearched);
  EXPECT_NE(renderExplain(result, model).find("no 'host' description"),
            std::string::npos);
  CostModel node(gpt1p3b(), clusterPreset("dgx-a100-80g"),
                 {64, 2048, Precision::BF16});
  ParallelConfig c = single(Offload::Optimizer);
  c.dp = 8;
  EXPECT_EQ(node.check(c), "optimizer offload with DP > 1 needs ZeRO >= 1 "
                           "(each DP rank offloads its own optimizer shard, "
                           "as in DeepSpeed)");
  // Host memory is a hard limit too.
  Cluster tinyHost = clusterPreset("h100-1gpu");
  tinyHost.host->memoryGib = 8;
  CostModel cramped(gpt1p3b(), tinyHost, {8, 2048, Precision::BF16});
  Estimate e = cramped.evaluate(single(Offload::Optimizer));
  EXPECT_FALSE(e.fits);
  EXPECT_GT(e.hostShortfallBytes, 0);
}

namespace {

Estimate planWith(int zero, Recompute recompute, int64_t pp, Offload offload,
                  double seconds) {
  Estimate e;
  e.config.zero = zero;
  e.config.recompute = recompute;
  e.config.pp = pp;
  e.config.offload = offload;
  e.stepTimeS = seconds;
  return e;
}

} // namespace

TEST(TieBreaking, SimplerPlanWinsWithinTheNoise) {
  std::vector<Estimate> plans = {
      planWith(1, Recompute::None, 1, Offload::None, 1.000),
      planWith(0, Recompute::None, 1, Offload::None, 1.0035),
      planWith(0, Recompute::None, 1, Offload::None, 1.020),
      planWith(0, Recompute::Full, 1, Offload::None, 0.999),
      planWith(0, Recompute::None, 2, Offload::Optimizer, 0.9995),
  };
  std::vector<Estimate> ranked = rankWithTies(plans, 0.005, 10);
  ASSERT_EQ(ranked.size(), 5u);
  // Fastest is 0.999; within 0.5%: all but 1.020. Simplest: ZeRO-0, no
  // recompute, PP=1, no offload (1.0035 s).
  EXPECT_DOUBLE_EQ(ranked[0].stepTimeS, 1.0035);
  // Then among 0.999..1.0035: ZeRO-0 full recompute beats ZeRO-1 and offload.
  EXPECT_DOUBLE_EQ(ranked[1].stepTimeS, 0.999);
  EXPECT_DOUBLE_EQ(ranked[2].stepTimeS, 1.000);
  EXPECT_DOUBLE_EQ(ranked[3].stepTimeS, 0.9995);
  EXPECT_DOUBLE_EQ(ranked[4].stepTimeS, 1.020);
  // No tolerance: plain time order.
  std::vector<Estimate> strict = rankWithTies(plans, 0, 2);
  ASSERT_EQ(strict.size(), 2u);
  EXPECT_DOUBLE_EQ(strict[0].stepTimeS, 0.999);
  EXPECT_DOUBLE_EQ(strict[1].stepTimeS, 0.9995);
  // Keys: offload outranks ZeRO, ZeRO outranks recompute, recompute PP.
  EXPECT_LT(
      complexityKey(planWith(3, Recompute::Full, 8, Offload::None, 1).config),
      complexityKey(
          planWith(0, Recompute::None, 1, Offload::Optimizer, 1).config));
}

TEST(TieBreaking, SearchWinnerIsTheSimplestNearTie) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g:2"),
                  {64, 2048, Precision::BF16});
  SearchResult strict = search(model, {}, {200, std::nullopt, 0.0});
  SearchResult tied = search(model, {}, {1, std::nullopt, 0.005});
  ASSERT_FALSE(strict.plans.empty());
  double fastest = strict.plans.front().stepTimeS;
  const Estimate &winner = tied.plans.front();
  EXPECT_LE(winner.stepTimeS, fastest * 1.005);
  for (const Estimate &plan : strict.plans)
    if (plan.stepTimeS <= fastest * 1.005) {
      EXPECT_FALSE(complexityKey(plan.config) < complexityKey(winner.config))
          << plan.config.describe() << " is simpler than "
          << winner.config.describe();
    }
}
