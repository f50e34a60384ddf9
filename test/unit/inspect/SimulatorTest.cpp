//===- SimulatorTest.cpp - Hand-computed timelines of tiny plans ----------===//
//
// Durations on the unit cluster (InspectBundles.h) are byte and FLOP counts.
//
//===----------------------------------------------------------------------===//

#include "InspectBundles.h"

#include "weft/inspect/Analysis.h"
#include "weft/inspect/Simulator.h"
#include "weft/plan/Error.h"
#include "weft/plan/Verifier.h"

#include <gtest/gtest.h>

using namespace weft;
using namespace weft::inspect;
using namespace weft::inspect::test;

namespace {

Timeline simulateUnit(const plan::Bundle &bundle) {
  EXPECT_TRUE(plan::verify(bundle).ok());
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  return simulate(bundle, costs);
}

TEST(InstructionCosts, FollowThePlannerFormulas) {
  plan::Bundle bundle = slowRankBundle();
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  const plan::Stream &stream = bundle.programs[0].streams[0];
  EXPECT_DOUBLE_EQ(costs.seconds(stream.instructions[0], 0), 100); // 100 B
  // Ring all-reduce over 2 ranks: 2 * (1/2) * 100 B at 1 B/s.
  EXPECT_DOUBLE_EQ(costs.seconds(stream.instructions[1], 0), 100);

  plan::Instruction gemm;
  gemm.opcode = plan::Opcode::Gemm;
  gemm.gemm = {false, false, 2, 3, 4, 2, 4, 2, 1.0, 0.0};
  EXPECT_DOUBLE_EQ(costs.seconds(gemm, 0), 2.0 * 2 * 3 * 4);
  // An epilogue's own operands cross HBM once more: a bias read (8 bytes),
  // then (gelu_bias) the activation written too (24 bytes); the product's
  // operands, C included, are the gemm's.
  gemm.reads = {{0, 0, 16}, {0, 0, 48}};
  gemm.writes = {{0, 0, 24}};
  EXPECT_DOUBLE_EQ(costs.seconds(gemm, 0), 2.0 * 2 * 3 * 4);
  gemm.epilogue = plan::GemmEpilogue::Bias;
  gemm.reads.push_back({0, 0, 8});
  EXPECT_DOUBLE_EQ(costs.seconds(gemm, 0), 2.0 * 2 * 3 * 4 + 8);
  gemm.epilogue = plan::GemmEpilogue::GeluBias;
  gemm.writes.push_back({0, 0, 24});
  EXPECT_DOUBLE_EQ(costs.seconds(gemm, 0), 2.0 * 2 * 3 * 4 + 8 + 24);
  gemm.gemm.beta = 1; // C is the third read, the bias the fourth
  gemm.reads.insert(gemm.reads.begin() + 2, {0, 0, 24});
  EXPECT_DOUBLE_EQ(costs.seconds(gemm, 0), 2.0 * 2 * 3 * 4 + 8 + 24);

  // With the default constants the planner's own helper gives the time.
  planner::Cluster h100 = planner::clusterPreset("dgx-h100-80g");
  InstructionCosts real(bundle, h100);
  planner::GroupSpan span{2, 2, 1};
  EXPECT_DOUBLE_EQ(real.seconds(stream.instructions[1], 0),
                   planner::collectiveTime(planner::Collective::AllReduce, h100,
                                           {}, span, 100));
}

TEST(InstructionCosts, AttentionKernelsAreBoundByTheirGemms) {
  // As the planner's core attention: per (sequence, head) an s x s x d and
  // an s x d x s GEMM, 2 * 2 s^2 d FLOPs at 1 FLOP/s on the unit cluster;
  // the backward 2.5 times that. Other kernels stay memory-bound.
  Bundle bundle = baseBundle({1, 1, 1}, 1);
  bundle.rankRoles = {0};
  Program program;
  program.buffers = {buffer(0, "q", Region::Arena, 0, 400),
                     buffer(1, "ctx", Region::Arena, 512, 400)};
  program.streams.push_back({"compute", {}});
  bundle.programs.push_back(program);
  bundle.kernels = {{0,
                     "attention_forward",
                     "",
                     {{"batch", 2}, {"heads", 3}, {"seq", 4}, {"head_dim", 5}}},
                    {1,
                     "attention_backward",
                     "",
                     {{"batch", 2}, {"heads", 3}, {"seq", 4}, {"head_dim", 5}}},
                    {2, "residual_add", "", {{"n", 100}}}};
  auto launch = [&](int64_t kernel) {
    Instruction inst = op(Opcode::Kernel, {{0, 0, 400}}, {{1, 0, 400}}, "k");
    inst.kernel = kernel;
    return inst;
  };
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  double forward = 2 * 3 * (2.0 * 4 * 4 * 5 + 2.0 * 4 * 5 * 4);
  EXPECT_DOUBLE_EQ(costs.seconds(launch(0), 0), forward);
  EXPECT_DOUBLE_EQ(costs.seconds(launch(1), 0), 2.5 * forward);
  EXPECT_DOUBLE_EQ(costs.seconds(launch(2), 0), 800); // bytes touched
}

TEST(InstructionCosts, HostOperandsRunAtTheHostsSpeeds) {
  // Optimizer offload: a copy between device and host memory moves at the
  // pinned bandwidth (2 B/s here), AdamW on host buffers at the planner's
  // CPU rate (28 B per fp32 parameter over 1 B/s of DRAM), shared by the
  // node's ranks (one here), and a host clip is DRAM-bound. Without a host
  // in the cluster, or on device buffers, they cost HBM bytes as before.
  Bundle bundle = baseBundle({1, 1, 1}, 1);
  bundle.rankRoles = {0};
  Program program;
  program.persistentBytes = 512;
  program.hostBytes = 2048;
  program.buffers = {buffer(0, "grads", Region::Persistent, 0, 400),
                     buffer(1, "grads.host", Region::Host, 0, 400),
                     buffer(2, "master", Region::Host, 512, 400),
                     buffer(3, "exp_avg", Region::Host, 1024, 400),
                     buffer(4, "exp_avg_sq", Region::Host, 1536, 400)};
  program.streams.push_back({"compute", {}});
  bundle.programs.push_back(program);
  Instruction copy = op(Opcode::Copy, {{0, 0, 400}}, {{1, 0, 400}}, "offload");
  Instruction adamw = op(Opcode::OptimizerStep,
                         {{2, 0, 400}, {1, 0, 400}, {3, 0, 400}, {4, 0, 400}},
                         {{2, 0, 400}, {3, 0, 400}, {4, 0, 400}}, "adamw");
  adamw.count = 100;
  Instruction clip =
      op(Opcode::Clip, {{1, 0, 4}, {1, 0, 400}}, {{1, 0, 400}}, "clip");
  Instruction deviceCopy =
      op(Opcode::Copy, {{0, 0, 200}}, {{0, 200, 200}}, "copy");

  planner::Cluster cluster = unitCluster();
  cluster.nodes = 1;
  cluster.gpusPerNode = 1;
  cluster.host = planner::HostSpec{1, 1e-9, 1, 2e-9};
  planner::CostConstants constants = unitConstants();
  constants.hostMemoryBandwidthFraction = 1;
  constants.cpuAdamParamsPerCoreS = 1e12; // memory-bound
  InstructionCosts costs(bundle, cluster, constants);
  EXPECT_DOUBLE_EQ(costs.seconds(copy, 0), 200);
  EXPECT_DOUBLE_EQ(costs.seconds(adamw, 0), 100 * 28);
  EXPECT_DOUBLE_EQ(costs.seconds(clip, 0), 804);
  EXPECT_DOUBLE_EQ(costs.seconds(deviceCopy, 0), 400); // HBM: 400 B
  // Two GPUs on the node share its CPU.
  cluster.gpusPerNode = 2;
  cluster.nodes = 1;
  bundle.rankRoles = {0, 0};
  InstructionCosts shared(bundle, cluster, constants);
  EXPECT_DOUBLE_EQ(shared.seconds(adamw, 0), 2 * 100 * 28);
  EXPECT_DOUBLE_EQ(shared.seconds(copy, 0), 200); // per-GPU copy engines

  InstructionCosts noHost(bundle, unitCluster(), unitConstants());
  EXPECT_DOUBLE_EQ(noHost.seconds(copy, 0), 800);
}

TEST(Simulator, StreamsOverlapWithoutEvents) {
  Timeline timeline = simulateUnit(twoStreamBundle(false));
  const RoleTimeline &role = timeline.roles[0];
  EXPECT_DOUBLE_EQ(role.streams[0][0].start, 0);
  EXPECT_DOUBLE_EQ(role.streams[0][0].end, 200);
  EXPECT_DOUBLE_EQ(role.streams[1][0].start, 0);
  EXPECT_DOUBLE_EQ(role.streams[1][0].end, 100);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 200);
}

TEST(Simulator, EventOrdersStreams) {
  Timeline timeline = simulateUnit(twoStreamBundle(true));
  const RoleTimeline &role = timeline.roles[0];
  // side: wait_event arrives at 0, proceeds at 200; the kernel runs 200-300.
  EXPECT_DOUBLE_EQ(role.streams[1][0].arrive, 0);
  EXPECT_DOUBLE_EQ(role.streams[1][0].start, 200);
  EXPECT_DOUBLE_EQ(role.streams[1][1].start, 200);
  EXPECT_DOUBLE_EQ(role.streams[1][1].end, 300);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 300);
}

TEST(Simulator, CollectiveWaitsForTheSlowestRank) {
  plan::Bundle bundle = slowRankBundle();
  Timeline timeline = simulateUnit(bundle);
  const InstTiming &fast = timeline.roles[0].streams[0][1];
  const InstTiming &slow = timeline.roles[1].streams[0][1];
  EXPECT_DOUBLE_EQ(fast.arrive, 100);
  EXPECT_DOUBLE_EQ(slow.arrive, 300);
  EXPECT_DOUBLE_EQ(fast.start, 300);
  EXPECT_DOUBLE_EQ(slow.start, 300);
  EXPECT_DOUBLE_EQ(fast.end, 400);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 400);

  TimelineStats stats = analyzeTimeline(bundle, timeline);
  EXPECT_DOUBLE_EQ(stats.roles[0].computeBusy, 100);
  EXPECT_DOUBLE_EQ(stats.roles[0].idle, 200); // waiting for rank 1
  EXPECT_DOUBLE_EQ(stats.roles[1].idle, 0);
  EXPECT_DOUBLE_EQ(stats.exposedByKind.at("all_reduce/dp"), 100);
  EXPECT_EQ(stats.slowestRole, 1);
}

TEST(Simulator, TwoStagePipelineBubble) {
  plan::Bundle bundle = pipelineBundle();
  Timeline timeline = simulateUnit(bundle);
  const auto &stage0 = timeline.roles[0].streams[0];
  const auto &stage1 = timeline.roles[1].streams[0];
  // Stage 0: load 64 B (0-64), forward reads 320 B and writes 128 B
  // (64-512), send 128 B meets stage 1's recv (512-640).
  EXPECT_DOUBLE_EQ(stage0[1].end, 512);
  EXPECT_DOUBLE_EQ(stage1[0].arrive, 0);
  EXPECT_DOUBLE_EQ(stage1[0].start, 512);
  EXPECT_DOUBLE_EQ(stage1[0].end, 640);
  // Stage 1: backward 384 + 128 B (640-1152), then the gradient goes back.
  EXPECT_DOUBLE_EQ(stage1[1].end, 1152);
  EXPECT_DOUBLE_EQ(stage0[3].arrive, 640);
  EXPECT_DOUBLE_EQ(stage0[3].start, 1152);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 1280);

  TimelineStats stats = analyzeTimeline(bundle, timeline);
  ASSERT_EQ(stats.idleByStage.size(), 2u);
  // Each stage computes 512 s and transfers 256 s of the 1280 s step.
  EXPECT_DOUBLE_EQ(stats.idleByStage[0], 512);
  EXPECT_DOUBLE_EQ(stats.idleByStage[1], 512);
  EXPECT_DOUBLE_EQ(stats.exposedByKind.at("send_recv/pp"), 256);
}

TEST(Simulator, RolesSharedAcrossRanksSimulateOnce) {
  // Both ranks of the ZeRO-3 plan share role 0: the all-gather (256 B over
  // two ranks: 128 s) completes without waiting for another role.
  plan::Bundle bundle = zero3Bundle();
  Timeline timeline = simulateUnit(bundle);
  ASSERT_EQ(timeline.roles.size(), 1u);
  EXPECT_EQ(timeline.roles[0].firstRank, 0);
  EXPECT_DOUBLE_EQ(timeline.roles[0].streams[1][0].end, 128);
  // compute: the kernel waits for the gather, then reads 320 B and writes
  // 256 B.
  EXPECT_DOUBLE_EQ(timeline.roles[0].streams[0][2].start, 128);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 704);
}

TEST(Simulator, GPipeScalesWithStagesAndMicroBatches) {
  plan::Bundle bundle = gpipeBundle(2, 2, 2, 4, 2);
  ASSERT_TRUE(plan::verify(bundle).ok());
  InstructionCosts costs(bundle, planner::clusterPreset("dgx-h100-80g"));
  Timeline timeline = simulate(bundle, costs);
  TimelineStats stats = analyzeTimeline(bundle, timeline);
  EXPECT_GT(timeline.stepTimeS, 0);
  // GPipe: the first stage idles while the last runs the forward of the
  // final micro-batch and the first backward, and vice versa.
  EXPECT_GT(stats.idleByStage[0], 0);
  EXPECT_GT(stats.idleByStage[1], 0);
  EXPECT_GT(stats.exposedByKind.at("all_reduce/tp"), 0);
  EXPECT_GT(stats.exposedByKind.at("all_reduce/dp"), 0);
}

TEST(Simulator, ReplicasSharingProgramsTimeLikeOneProgramPerRank) {
  // DP replicas that share a program resolve their own TP/PP/DP groups; the
  // per-role simulation must time the step exactly like one program per rank.
  plan::Bundle perRank = gpipeBundle(2, 2, 2, 4, 2);
  plan::Bundle shared = gpipeBundle(2, 2, 2, 4, 2, /*shareReplicas=*/true);
  plan::VerifyResult result = plan::verify(shared);
  ASSERT_TRUE(result.ok()) << result.diagnostics.front().message;
  ASSERT_EQ(shared.programs.size(), 4u);
  planner::Cluster cluster = planner::clusterPreset("dgx-h100-80g");
  InstructionCosts perRankCosts(perRank, cluster), sharedCosts(shared, cluster);
  Timeline perRankTimeline = simulate(perRank, perRankCosts);
  Timeline sharedTimeline = simulate(shared, sharedCosts);
  EXPECT_DOUBLE_EQ(sharedTimeline.stepTimeS, perRankTimeline.stepTimeS);
  for (size_t role = 0; role < shared.programs.size(); ++role)
    EXPECT_DOUBLE_EQ(sharedTimeline.roles[role].end,
                     perRankTimeline.roles[role].end);
}

TEST(Simulator, CollectiveMembersPayTheLatencyOnce) {
  // 25 f32 (100 B) all-reduced over two ranks as one instruction of four
  // members or as four instructions: the same bytes (100 s at 1 B/s), but
  // the ring's two 1 s hops are paid once instead of four times.
  const int64_t members[4] = {6, 6, 6, 7};
  auto bundleOf = [&](bool coalesced) {
    Bundle bundle = baseBundle({2, 1, 1}, 1);
    bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
    bundle.rankRoles = {0, 0};
    Program program;
    program.persistentBytes = 128;
    program.buffers = {buffer(0, "grads", Region::Persistent, 0, 100)};
    std::vector<BufferRange> ranges;
    for (int64_t m = 0, offset = 0; m < 4; offset += members[m++] * 4)
      ranges.push_back({0, offset, members[m] * 4});
    std::vector<Instruction> insts;
    if (coalesced)
      insts.push_back(comm(Opcode::AllReduce, 0, 25, ranges, ranges, "bwd"));
    else
      for (int64_t m = 0; m < 4; ++m)
        insts.push_back(comm(Opcode::AllReduce, 0, members[m],
                             {ranges[size_t(m)]}, {ranges[size_t(m)]}, "bwd"));
    program.streams.push_back({"compute", insts});
    bundle.programs.push_back(program);
    return bundle;
  };
  planner::Cluster cluster = unitCluster();
  cluster.intraNodeLatencyUs = 1e6; // 1 s per ring hop
  auto stepTime = [&](const Bundle &bundle) {
    EXPECT_TRUE(plan::verify(bundle).ok());
    InstructionCosts costs(bundle, cluster, unitConstants());
    return simulate(bundle, costs).stepTimeS;
  };
  Bundle coalesced = bundleOf(true);
  InstructionCosts costs(coalesced, cluster, unitConstants());
  const Instruction &all = coalesced.programs[0].streams[0].instructions[0];
  EXPECT_DOUBLE_EQ(costs.commBytes(all), 100);
  EXPECT_DOUBLE_EQ(costs.seconds(all, 0), 100 + 2);
  EXPECT_DOUBLE_EQ(stepTime(coalesced), 100 + 2);
  EXPECT_DOUBLE_EQ(stepTime(bundleOf(false)), 100 + 4 * 2);
}

/// Four ranks, two per node, one program: its streams all-reduce 25 f32
/// (100 B: 100 s alone on the unit cluster's links) in the group families
/// they name, stream s after a kernel touching delays[s] bytes (seconds).
/// Family 0 (TP) pairs the ranks of a node (NVLink), family 1 (DP) the ranks of
/// the two nodes (the NICs).
Bundle concurrentTransfers(const std::vector<int64_t> &families,
                           const std::vector<int64_t> &delays) {
  Bundle bundle = baseBundle({2, 1, 2}, 1);
  bundle.groups.push_back({0, GroupKind::TP, {{0, 1}, {2, 3}}});
  bundle.groups.push_back({1, GroupKind::DP, {{0, 2}, {1, 3}}});
  bundle.rankRoles = {0, 0, 0, 0};
  Program program;
  int64_t streams = int64_t(families.size());
  program.persistentBytes = 384 * streams;
  for (int64_t s = 0; s < streams; ++s) // buffer ids are their indices
    program.buffers.push_back(buffer(s, "grads" + std::to_string(s),
                                     Region::Persistent, 128 * s, 100));
  for (int64_t s = 0; s < streams; ++s)
    program.buffers.push_back(buffer(streams + s, "in" + std::to_string(s),
                                     Region::Persistent,
                                     128 * streams + 256 * s, 256,
                                     DType::U8)); // the delays count bytes
  for (size_t s = 0; s < families.size(); ++s) {
    int64_t grads = int64_t(s), input = streams + int64_t(s);
    std::vector<Instruction> insts;
    if (delays[s] > 0) // reads and writes half the delay's bytes each
      insts.push_back(kernel(0, {{input, 0, delays[s] / 2}},
                             {{input, 128, delays[s] / 2}}, "bwd"));
    insts.push_back(comm(Opcode::AllReduce, families[s], 25, {{grads, 0, 100}},
                         {{grads, 0, 100}}, "bwd"));
    program.streams.push_back({"sync" + std::to_string(s), insts});
  }
  bundle.programs.push_back(program);
  return bundle;
}

planner::Cluster twoNodes() {
  planner::Cluster cluster = unitCluster();
  cluster.nodes = 2;
  cluster.gpusPerNode = 2;
  return cluster;
}

double transferEnd(const Timeline &timeline, size_t stream) {
  return timeline.roles[0].streams[stream].back().end;
}

TEST(Simulator, TransfersOnOneLinkShareItsBandwidth) {
  Bundle bundle = concurrentTransfers({0, 0}, {0, 0});
  ASSERT_TRUE(plan::verify(bundle).ok());
  InstructionCosts costs(bundle, twoNodes(), unitConstants());
  Timeline timeline = simulate(bundle, costs);
  // Alone 100 s each; together each moves at half the rate.
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 0), 200);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 1), 200);
  EXPECT_DOUBLE_EQ(timeline.roles[0].streams[1].back().start, 0);
}

TEST(Simulator, TransfersOnDifferentLinksDoNotSlowEachOther) {
  // TP within the node, DP across the nodes: NVLink and the NICs.
  Bundle bundle = concurrentTransfers({0, 1}, {0, 0});
  ASSERT_TRUE(plan::verify(bundle).ok());
  InstructionCosts costs(bundle, twoNodes(), unitConstants());
  const Instruction &tp = bundle.programs[0].streams[0].instructions[0];
  const Instruction &dp = bundle.programs[0].streams[1].instructions[0];
  EXPECT_EQ(costs.linkUse(tp, 0)->link, Link::IntraNode);
  EXPECT_EQ(costs.linkUse(dp, 0)->link, Link::InterNode);
  EXPECT_DOUBLE_EQ(costs.linkUse(tp, 0)->time.latency, 0);
  Timeline timeline = simulate(bundle, costs);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 0), 100);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 1), 100);
}

TEST(Simulator, ALaterTransferSharesOnlyWhatIsLeft) {
  // Stream 1 starts its all-reduce at 50 s: stream 0 moved half alone, the
  // other half at half rate (50-150); stream 1 then finishes alone at 200.
  Bundle bundle = concurrentTransfers({0, 0}, {0, 50});
  plan::VerifyResult verified = plan::verify(bundle);
  ASSERT_TRUE(verified.ok()) << verified.diagnostics.front().message;
  InstructionCosts costs(bundle, twoNodes(), unitConstants());
  Timeline timeline = simulate(bundle, costs);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 0), 150);
  EXPECT_DOUBLE_EQ(timeline.roles[0].streams[1].back().start, 50);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 1), 200);
  EXPECT_DOUBLE_EQ(timeline.stepTimeS, 200);
}

TEST(Simulator, ConcurrentTransfersEachWaitOutTheirOwnLatency) {
  // 1 s per ring hop: an all-reduce over two ranks takes two hops. Shared
  // bytes (200 s for both), unshared latency: 202 s, not 204 s.
  planner::Cluster cluster = twoNodes();
  cluster.intraNodeLatencyUs = 1e6;
  Bundle bundle = concurrentTransfers({0, 0}, {0, 0});
  InstructionCosts costs(bundle, cluster, unitConstants());
  const Instruction &first = bundle.programs[0].streams[0].instructions[0];
  EXPECT_DOUBLE_EQ(costs.linkUse(first, 0)->time.latency, 2);
  EXPECT_DOUBLE_EQ(costs.linkUse(first, 0)->time.transfer, 100);
  EXPECT_DOUBLE_EQ(costs.seconds(first, 0), 102);
  Timeline timeline = simulate(bundle, costs);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 0), 202);
  EXPECT_DOUBLE_EQ(transferEnd(timeline, 1), 202);
}

TEST(Simulator, DeadlockIsOneLineError) {
  plan::Bundle bundle = pipelineBundle();
  // Stage 0 now waits for the gradient before sending the activation: both
  // stages block in a recv.
  std::swap(bundle.programs[0].streams[0].instructions[2],
            bundle.programs[0].streams[0].instructions[3]);
  InstructionCosts costs(bundle, unitCluster(), unitConstants());
  try {
    simulate(bundle, costs);
    FAIL() << "expected a deadlock";
  } catch (const plan::Error &error) {
    std::string message = error.what();
    EXPECT_NE(message.find("simulation cannot finish: rank 0 stream 0 "
                           "'compute' instruction 2 (bwd): recv"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

} // namespace
