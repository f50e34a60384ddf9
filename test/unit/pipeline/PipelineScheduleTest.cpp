//===- PipelineScheduleTest.cpp - Pipeline task orders --------------------===//
//
// Exact orders for small pipelines, then properties of every order over a
// range of shapes: each (chunk, micro-batch) runs its forward once and its
// backward once after it, in micro-batch order per chunk; 1F1B keeps at most
// `stages - rank` micro-batches in flight; and all ranks together finish
// when every task waits for its pipeline neighbours (no schedule deadlocks).
//
//===----------------------------------------------------------------------===//
#include "PipelineSchedule.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace weft::pipeline;

namespace {

/// "F0.1" is the forward of chunk 0, micro-batch 1.
std::string describe(const std::vector<Task> &order) {
  std::string text;
  for (const Task &task : order) {
    if (!text.empty())
      text += ' ';
    text += (task.backward ? "B" : "F") + std::to_string(task.chunk) + "." +
            std::to_string(task.microBatch);
  }
  return text;
}

TEST(PipelineSchedule, ParsesScheduleNames) {
  EXPECT_EQ(parseScheduleKind("gpipe"), ScheduleKind::GPipe);
  EXPECT_EQ(parseScheduleKind("1f1b"), ScheduleKind::OneFOneB);
  EXPECT_EQ(parseScheduleKind("interleaved"), ScheduleKind::Interleaved);
  EXPECT_EQ(parseScheduleKind("zigzag"), std::nullopt);
}

TEST(PipelineSchedule, GPipeRunsAllForwardsFirst) {
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::GPipe, 2, 1, 3, 0)),
            "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2");
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::GPipe, 2, 1, 3, 1)),
            "F0.0 F0.1 F0.2 B0.0 B0.1 B0.2");
}

TEST(PipelineSchedule, OneFOneBWarmsUpByDistanceToTheLastStage) {
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::OneFOneB, 3, 1, 4, 0)),
            "F0.0 F0.1 F0.2 B0.0 F0.3 B0.1 B0.2 B0.3");
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::OneFOneB, 3, 1, 4, 1)),
            "F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3");
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::OneFOneB, 3, 1, 4, 2)),
            "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3");
  // Fewer micro-batches than stages: warm-up is capped.
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::OneFOneB, 4, 1, 2, 0)),
            "F0.0 F0.1 B0.0 B0.1");
}

TEST(PipelineSchedule, InterleavedVisitsChunksInGroupsOfStages) {
  // As many micro-batches as stages: every forward is warm-up.
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::Interleaved, 2, 2, 2, 0)),
            "F0.0 F0.1 F1.0 F1.1 B1.0 B1.1 B0.0 B0.1");
  // Rank 1 of 2 with 4 micro-batches: (2 - 1 - 1) * 2 + (2 - 1) * 2 = 2
  // warm-up forwards.
  EXPECT_EQ(describe(pipelineOrder(ScheduleKind::Interleaved, 2, 2, 4, 1)),
            "F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 "
            "F1.3 B1.3 B0.2 B0.3");
}

TEST(PipelineSchedule, RejectsUnsupportedShapes) {
  EXPECT_TRUE(pipelineOrder(ScheduleKind::OneFOneB, 2, 2, 4, 0).empty());
  EXPECT_TRUE(pipelineOrder(ScheduleKind::Interleaved, 2, 2, 3, 0).empty());
  EXPECT_TRUE(pipelineOrder(ScheduleKind::GPipe, 2, 1, 4, 2).empty());
  EXPECT_TRUE(pipelineOrder(ScheduleKind::GPipe, 2, 1, 0, 0).empty());
}

/// Runs every rank's order against the data dependencies of the pipeline:
/// the forward of virtual stage v (chunk v / stages on rank v % stages) needs
/// v - 1's forward of the same micro-batch, its backward needs v + 1's
/// backward (the last virtual stage: its own forward). Transfers are
/// buffered, so a rank blocks only on missing inputs. Returns whether every
/// task ran.
bool runsToCompletion(ScheduleKind kind, int64_t stages, int64_t chunks,
                      int64_t microBatches) {
  int64_t virtualStages = stages * chunks;
  std::vector<std::vector<Task>> orders;
  for (int64_t rank = 0; rank < stages; ++rank)
    orders.push_back(pipelineOrder(kind, stages, chunks, microBatches, rank));
  std::map<std::tuple<int64_t, int64_t, bool>, bool> done;
  std::vector<size_t> next(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t rank = 0; rank < stages; ++rank) {
      while (next[rank] < orders[rank].size()) {
        const Task &task = orders[rank][next[rank]];
        int64_t v = task.chunk * stages + rank;
        bool ready =
            task.backward
                ? (v == virtualStages - 1
                       ? done.count({v, task.microBatch, false})
                       : done.count({v + 1, task.microBatch, true}))
                : (v == 0 || done.count({v - 1, task.microBatch, false}));
        if (!ready)
          break;
        done[{v, task.microBatch, task.backward}] = true;
        ++next[rank];
        progress = true;
      }
    }
  }
  for (int64_t rank = 0; rank < stages; ++rank)
    if (next[rank] != orders[rank].size())
      return false;
  return true;
}

TEST(PipelineSchedule, EveryOrderIsCompleteOrderedAndDeadlockFree) {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    for (int64_t stages = 1; stages <= 4; ++stages)
      for (int64_t chunks = 1; chunks <= 3; ++chunks)
        for (int64_t microBatches = 1; microBatches <= 8; ++microBatches) {
          bool valid = kind == ScheduleKind::Interleaved
                           ? microBatches % stages == 0
                           : chunks == 1;
          if (!valid)
            continue;
          SCOPED_TRACE(std::to_string(int(kind)) + " stages " +
                       std::to_string(stages) + " chunks " +
                       std::to_string(chunks) + " micro-batches " +
                       std::to_string(microBatches));
          for (int64_t rank = 0; rank < stages; ++rank) {
            std::vector<Task> order =
                pipelineOrder(kind, stages, chunks, microBatches, rank);
            ASSERT_EQ(int64_t(order.size()), 2 * chunks * microBatches);
            std::map<std::pair<int64_t, bool>, int64_t> nextMicroBatch;
            std::map<std::pair<int64_t, int64_t>, int> state;
            int64_t inFlight = 0, maxInFlight = 0;
            for (const Task &task : order) {
              // Micro-batches of a chunk run in order, in each direction.
              int64_t &expected = nextMicroBatch[{task.chunk, task.backward}];
              EXPECT_EQ(task.microBatch, expected);
              ++expected;
              int &seen = state[{task.chunk, task.microBatch}];
              EXPECT_EQ(seen, task.backward ? 1 : 0);
              seen = task.backward ? 2 : 1;
              inFlight += task.backward ? -1 : 1;
              maxInFlight = std::max(maxInFlight, inFlight);
            }
            if (kind == ScheduleKind::OneFOneB) {
              EXPECT_LE(maxInFlight, stages - rank);
            }
          }
          EXPECT_TRUE(runsToCompletion(kind, stages, chunks, microBatches));
        }
}

} // namespace
