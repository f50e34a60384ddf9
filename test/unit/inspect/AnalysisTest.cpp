//===- AnalysisTest.cpp - Memory liveness and peaks -----------------------===//

#include "InspectBundles.h"

#include "weft/exec/StateGroups.h"
#include "weft/inspect/Analysis.h"

#include <gtest/gtest.h>

using namespace weft;
using namespace weft::inspect;
using namespace weft::inspect::test;

namespace {

MemoryProfile profileOf(const plan::Bundle &bundle, int64_t role = 0) {
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  Timeline timeline = simulate(bundle, costs);
  return memoryProfile(bundle, bundle.programs[role], timeline.roles[role]);
}

TEST(Categories, FollowTheInstructionsNotTheNames) {
  plan::Bundle bundle = categoriesBundle();
  std::vector<Category> categories =
      classifyBuffers(bundle, bundle.programs[0]);
  EXPECT_EQ(categories, (std::vector<Category>{
                            Category::MasterParams,    // b0 gathered shard
                            Category::Gradients,       // b1
                            Category::OptimizerStates, // b2
                            Category::OptimizerStates, // b3
                            Category::Other,           // b4 loss
                            Category::Gathered,        // b5
                            Category::Activations,     // b6 tokens
                            Category::Activations,     // b7
                            Category::Activations,     // b8 activation grad
                            Category::Gradients,       // b9
                            Category::CommBuckets,     // b10
                            Category::Workspace,       // b11
                        }));
}

TEST(Categories, PersistentOnesAreTheStateGroups) {
  // A parameter record alone makes "w.shard" a parameter, and what it
  // gathers into the arena a gathered parameter; a name does not.
  plan::Bundle bundle = shardedZero3Bundle();
  EXPECT_EQ(
      classifyBuffers(bundle, bundle.programs[0]),
      (std::vector<Category>{Category::Params, Category::Gathered,
                             Category::Activations, Category::Activations}));
  bundle = zero3Bundle();
  EXPECT_EQ(
      classifyBuffers(bundle, bundle.programs[0]),
      (std::vector<Category>{Category::Other, Category::Activations,
                             Category::Activations, Category::Activations}));
  // DDP: the one copy AdamW updates is the params, the all-reduced gradient
  // the gradients.
  bundle = dataParallelBundle();
  std::vector<Category> ddp = classifyBuffers(bundle, bundle.programs[0]);
  EXPECT_EQ(ddp[0], Category::Params);
  EXPECT_EQ(ddp[1], Category::Gradients);
  EXPECT_EQ(ddp[4], Category::OptimizerStates);
  EXPECT_EQ(ddp[5], Category::OptimizerStates);
}

TEST(Categories, AgreeWithTheStateGroupsOnPersistentBuffers) {
  for (const plan::Bundle &bundle :
       {categoriesBundle(), shardedZero3Bundle(), dataParallelBundle()}) {
    const plan::Program &program = bundle.programs[0];
    std::vector<Category> categories = classifyBuffers(bundle, program);
    std::vector<exec::StateGroup> groups =
        exec::classifyStateGroups(bundle, program);
    for (size_t b = 0; b < categories.size(); ++b) {
      if (program.buffers[b].region != plan::Region::Persistent)
        continue;
      EXPECT_EQ(toString(categories[b]), exec::toString(groups[b]))
          << program.buffers[b].name;
    }
  }
}

TEST(Categories, MapTheRuntimesBufferFacts) {
  // No rule of their own: the arena split reads exec::analyzeBuffers.
  plan::Bundle bundle = categoriesBundle();
  const plan::Program &program = bundle.programs[0];
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  std::vector<Category> categories = classifyBuffers(bundle, program);
  ASSERT_EQ(facts.size(), categories.size());
  EXPECT_TRUE(facts[5].gathered);
  EXPECT_TRUE(facts[9].gradients && facts[9].computed);
  EXPECT_TRUE(facts[10].gradients && !facts[10].computed);
  EXPECT_TRUE(facts[11].scratch);
  for (size_t b = 0; b < facts.size(); ++b) {
    if (!facts[b].arena) {
      EXPECT_EQ(toString(categories[b]),
                exec::toString(exec::stateGroupOf(facts[b])));
    }
  }
}

TEST(Memory, GatheredWeightLiveUntilRelease) {
  // ZeRO-3: tokens live 0-704, w.full from the gather (0) to its release
  // (704), act from the kernel's start (128) to its end (704).
  plan::Bundle bundle = shardedZero3Bundle();
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
  EXPECT_EQ(profile.peakByCategory[int(Category::Params)], 128);
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
