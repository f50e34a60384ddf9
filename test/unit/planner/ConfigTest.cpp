//===- ConfigTest.cpp - Enum spellings and constraint completeness --------===//

#include "weft/planner/Config.h"
#include "weft/planner/Error.h"

#include <gtest/gtest.h>

using namespace weft::planner;

TEST(Config, EnumsRoundTrip) {
  for (Precision p : {Precision::BF16, Precision::FP16, Precision::FP32})
    EXPECT_EQ(parsePrecision(toString(p)), p);
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(parseRecompute(toString(r)), r);
  for (Schedule s :
       {Schedule::GPipe, Schedule::OneFOneB, Schedule::Interleaved})
    EXPECT_EQ(parseSchedule(toString(s)), s);
  for (Offload o : {Offload::None, Offload::Optimizer})
    EXPECT_EQ(parseOffload(toString(o)), o);
  for (Attention a : {Attention::Flash, Attention::Eager})
    EXPECT_EQ(parseAttention(toString(a)), a);
  EXPECT_EQ(toString(Schedule::OneFOneB), "1f1b");
  EXPECT_EQ(toString(Recompute::Selective), "selective");
}

TEST(Config, UnknownSpellingsAreErrors) {
  auto message = [](auto parse, const char *text) {
    try {
      parse(text);
    } catch (const Error &error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(parsePrecision, "int8"),
            "unknown precision 'int8' (expected bf16|fp16|fp32)");
  EXPECT_EQ(message(parseRecompute, "some"),
            "unknown recompute mode 'some' (expected none|selective|full)");
  EXPECT_EQ(
      message(parseSchedule, "1F1B"),
      "unknown pipeline schedule '1F1B' (expected gpipe|1f1b|interleaved)");
  EXPECT_EQ(message(parseOffload, "cpu"),
            "unknown offload mode 'cpu' (expected none|optimizer)");
  EXPECT_EQ(message(parseAttention, "sdpa"),
            "unknown attention implementation 'sdpa' (expected flash|eager)");
}

TEST(Config, AllFixedNeedsEveryDimension) {
  Constraints fixed;
  fixed.tp = 8;
  fixed.pp = 4;
  fixed.zero = 1;
  fixed.microBatch = 1;
  fixed.recompute = Recompute::Full;
  fixed.sequenceParallel = true;
  EXPECT_FALSE(fixed.allFixed()); // schedule still free
  fixed.schedule = Schedule::Interleaved;
  EXPECT_FALSE(fixed.allFixed()); // virtual stages still free
  fixed.virtualStages = 2;
  EXPECT_TRUE(fixed.allFixed());
  fixed.sequenceParallel.reset();
  EXPECT_FALSE(fixed.allFixed());
  fixed.tp = 1; // SP is moot without TP
  EXPECT_TRUE(fixed.allFixed());
}

TEST(Config, DescribeIsCompact) {
  ParallelConfig c;
  c.tp = 8;
  c.pp = 8;
  c.gradAccum = 64;
  c.recompute = Recompute::Selective;
  c.schedule = Schedule::Interleaved;
  c.virtualStages = 3;
  c.sequenceParallel = true;
  EXPECT_EQ(
      c.describe(),
      "TP=8 PP=8 DP=1 ZeRO-0 mb=1 ga=64 rc=selective interleaved(v=3) SP");
}
