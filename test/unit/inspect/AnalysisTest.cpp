//===- AnalysisTest.cpp - Memory liveness and peaks -----------------------===//

#include "InspectBundles.h"

#include "weft/inspect/Analysis.h"

#include <gtest/gtest.h>

using namespace weft;
using namespace weft::inspect;
using namespace weft::inspect::test;

namespace {

MemoryProfile profileOf(const plan::Bundle &bundle, int64_t role = 0) {
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  Timeline timeline = simulate(bundle, costs);
  return memoryProfile(bundle.programs[role], timeline.roles[role]);
}

TEST(Categories, FollowNamesAndRegions) {
  using plan::Region;
  auto classify = [](const char *name, Region region) {
    return classifyBuffer(buffer(0, name, region, 0, 64));
  };
  EXPECT_EQ(classify("w", Region::Persistent), Category::Weights);
  EXPECT_EQ(classify("w.grad", Region::Persistent), Category::Gradients);
  EXPECT_EQ(classify("w.exp_avg_sq", Region::Persistent),
            Category::OptimizerStates);
  EXPECT_EQ(classify("w.master", Region::Persistent),
            Category::OptimizerStates);
  EXPECT_EQ(classify("w.full", Region::Arena), Category::Gathered);
  EXPECT_EQ(classify("prefetch.3", Region::Arena), Category::Gathered);
  EXPECT_EQ(classify("grad.bucket0", Region::Arena), Category::CommBuckets);
  EXPECT_EQ(classify("act.grad", Region::Arena), Category::Activations);
  EXPECT_EQ(classify("gemm.workspace", Region::Arena), Category::Workspace);
  EXPECT_EQ(classify("tokens", Region::Arena), Category::Activations);
}

TEST(Memory, GatheredWeightLiveUntilRelease) {
  // ZeRO-3: tokens live 0-704, w.full from the gather (0) to its release
  // (704), act from the kernel's start (128) to its end (704).
  plan::Bundle bundle = zero3Bundle();
  MemoryProfile profile = profileOf(bundle);
  EXPECT_EQ(profile.persistentBytes, 128);
  ASSERT_EQ(profile.samples.size(), 3u);
  EXPECT_DOUBLE_EQ(profile.samples[0].time, 0);
  EXPECT_EQ(profile.samples[0].bytes, 128 + 256 + 64);
  EXPECT_DOUBLE_EQ(profile.samples[1].time, 128);
  EXPECT_EQ(profile.samples[1].bytes, 128 + 256 + 64 + 256);
  EXPECT_DOUBLE_EQ(profile.samples[2].time, 704);
  EXPECT_EQ(profile.samples[2].bytes, 128);
  EXPECT_EQ(profile.peakBytes, 704);
  EXPECT_DOUBLE_EQ(profile.peakTime, 128);
  EXPECT_EQ(profile.liveAtPeak, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(profile.peakByCategory[int(Category::Gathered)], 256);
  EXPECT_EQ(profile.peakByCategory[int(Category::Activations)], 320);
  EXPECT_EQ(profile.peakByCategory[int(Category::Weights)], 128);
  EXPECT_EQ(maxBytesIn(profile, 0, 100), 448);
  EXPECT_EQ(maxBytesIn(profile, 0, 200), 704);
  EXPECT_EQ(maxBytesIn(profile, 800, 900), 128);
}

TEST(Memory, BuffersSharingBytesAtDifferentTimesDoNotAdd) {
  // Kernels run 0-192, 192-384, 384-576: "a" is live 0-384, "b" 384-576.
  MemoryProfile profile = profileOf(reuseBundle());
  EXPECT_EQ(profile.peakBytes, 64 + 128);
  EXPECT_DOUBLE_EQ(profile.peakTime, 0);
  EXPECT_EQ(profile.liveAtPeak, (std::vector<int64_t>{0, 1}));
  ASSERT_EQ(profile.samples.size(), 3u);
  EXPECT_DOUBLE_EQ(profile.samples[1].time, 384);
  EXPECT_EQ(profile.samples[1].bytes, 64 + 128); // a freed, b allocated
  EXPECT_DOUBLE_EQ(profile.samples[2].time, 576);
  EXPECT_EQ(profile.samples[2].bytes, 64);
}

TEST(Memory, PipelineStagesHaveTheirOwnProfiles) {
  plan::Bundle bundle = pipelineBundle();
  // Stage 1 receives act at 512 and keeps it until its backward ends (1152);
  // act.grad is live from 640 until the send ends at 1280.
  MemoryProfile stage1 = profileOf(bundle, 1);
  EXPECT_EQ(stage1.peakBytes, 256 + 128 + 128);
  EXPECT_DOUBLE_EQ(stage1.peakTime, 640);
}

} // namespace
