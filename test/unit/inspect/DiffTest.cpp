//===- DiffTest.cpp - Differences between two bundles ---------------------===//

#include "InspectBundles.h"

#include "weft/inspect/Diff.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace weft;
using namespace weft::inspect;
using namespace weft::inspect::test;

namespace {

std::string line(const DiffEntry &entry) {
  return entry.section + ": " + entry.item + " " + entry.before + " -> " +
         entry.after;
}

std::vector<std::string> lines(const plan::Bundle &a, const plan::Bundle &b) {
  std::vector<std::string> out;
  for (const DiffEntry &entry : diffBundles(a, b))
    out.push_back(line(entry));
  return out;
}

TEST(Diff, IdenticalBundlesHaveNoDifferences) {
  EXPECT_TRUE(diffBundles(dataParallelBundle(), dataParallelBundle()).empty());
}

TEST(Diff, ReportsConfigurationMemoryTimeAndCounts) {
  plan::Bundle before = dataParallelBundle();
  plan::Bundle after = dataParallelBundle();
  after.config["zero"] = 1;
  after.prediction.stepTimeS = 0.25;
  after.programs[0].arenaBytes = 1024;
  // A second gradient all-reduce: one more instruction and collective per
  // rank, 256 more bytes per rank.
  auto &insts = after.programs[0].streams[0].instructions;
  insts.insert(insts.begin() + 3, insts[3]);
  EXPECT_EQ(lines(before, after),
            (std::vector<std::string>{
                "config: zero 0 -> 1",
                "prediction: step_time_s 0.125 -> 0.25",
                "memory: ranks 0-1 1536 -> 2048",
                "instructions: all_reduce 2 -> 4",
                "collectives: all_reduce/dp bytes 512 -> 1024",
                "collectives: all_reduce/dp count 2 -> 4",
                "collectives: all_reduce/dp members 2 -> 4",
            }));
}

TEST(Diff, CoalescingChangesLaunchesNotMembers) {
  // The gradient all-reduced in two halves, against one all-reduce whose
  // members are the two halves: one launch fewer per rank, the same
  // members and bytes.
  plan::Bundle before = dataParallelBundle();
  auto &insts = before.programs[0].streams[0].instructions;
  plan::Instruction first = insts[3], second = insts[3];
  first.count = second.count = 32;
  first.reads[0].bytes = first.writes[0].bytes = 128;
  second.reads[0] = second.writes[0] = {first.reads[0].buffer, 128, 128};
  insts[3] = first;
  insts.insert(insts.begin() + 4, second);
  plan::Bundle after = dataParallelBundle();
  plan::Instruction &sum = after.programs[0].streams[0].instructions[3];
  sum.reads = {first.reads[0], second.reads[0]};
  sum.writes = sum.reads;
  EXPECT_EQ(lines(before, after), (std::vector<std::string>{
                                      "instructions: all_reduce 4 -> 2",
                                      "collectives: all_reduce/dp count 4 -> 2",
                                  }));
}

TEST(Diff, GemmEpiloguesAreCountedApart) {
  // The same gemm without and with a bias epilogue (weftc compile
  // --gemm-epilogues): the instruction count stays, the epilogue shows.
  plan::Bundle before = dataParallelBundle();
  plan::Instruction gemm;
  gemm.opcode = plan::Opcode::Gemm;
  gemm.gemm = {false, false, 4, 4, 4, 4, 4, 4, 1.0, 0.0};
  auto &insts = before.programs[0].streams[0].instructions;
  insts.insert(insts.begin(), gemm);
  plan::Bundle after = before;
  plan::Instruction &fused = after.programs[0].streams[0].instructions[0];
  fused.epilogue = plan::GemmEpilogue::Bias;
  fused.epilogueKernels = {0};
  EXPECT_EQ(lines(before, after), (std::vector<std::string>{
                                      "instructions: gemm +bias - -> 2",
                                  }));
}

TEST(Diff, DifferentMeshesAndMissingItems) {
  plan::Bundle a = dataParallelBundle();
  plan::Bundle b = pipelineBundle();
  std::vector<std::string> out = lines(a, b);
  auto has = [&](const std::string &text) {
    return std::find(out.begin(), out.end(), text) != out.end();
  };
  EXPECT_TRUE(has("mesh: dp 2 -> 1")) << ::testing::PrintToString(out);
  EXPECT_TRUE(has("mesh: pp 1 -> 2"));
  EXPECT_TRUE(has("instructions: optimizer_step 2 -> -"));
  EXPECT_TRUE(has("instructions: send 0 -> 2") ||
              has("instructions: send - -> 2"));
  EXPECT_TRUE(has("memory: ranks 0-1 1536 -> 768"));
}

TEST(Diff, PersistentBytesByCategory) {
  // DDP keeps the whole weight, its gradient and both AdamW moments on each
  // rank; the ZeRO-3 plan holds half of the weight (its shard) and, having
  // no optimizer step, nothing else.
  std::vector<std::string> out =
      lines(dataParallelBundle(), shardedZero3Bundle());
  std::vector<std::string> state;
  for (const std::string &entry : out)
    if (entry.rfind("state: ", 0) == 0)
      state.push_back(entry);
  EXPECT_EQ(state, (std::vector<std::string>{
                       "state: gradients bytes 512 -> 0",
                       "state: optimizer_states bytes 1024 -> 0",
                       "state: params bytes 512 -> 256",
                   }));
}

} // namespace
