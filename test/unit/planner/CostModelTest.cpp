//===- CostModelTest.cpp - Memory, FLOP and time formulas -----------------===//

#include "TestModels.h"

#include "weft/planner/CostModel.h"
#include "weft/planner/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

using namespace weft::planner;
using weft::planner::test::gpt1p3b;

namespace {

// s = 2048, b = 4, h = 2048, a = 16: s*b*h = 2^24.
constexpr double kSbh = 2048.0 * 4 * 2048;

ParallelConfig dataParallel(int zero, int64_t dp, int64_t globalBatch) {
  ParallelConfig c;
  c.dp = dp;
  c.zero = zero;
  c.microBatch = 1;
  c.gradAccum = globalBatch / dp;
  c.recompute = Recompute::Full;
  if (zero == 3) {
    c.prefetchDepth = 1;
    c.bucketBytes = 25'000'000;
  }
  return c;
}

} // namespace

TEST(Memory, KorthikantiActivationsPerLayer) {
  ModelSpec m = gpt1p3b();
  // TP=1, no recompute: sbh (34 + 5 a s / h) with 5 a s / h = 80.
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 1, false, Recompute::None, 2),
      kSbh * (34 + 80));
  // TP=8: sbh (10 + 24/t + 5as/(ht)).
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, false, Recompute::None, 2),
      kSbh * (10 + 3 + 10));
  // TP=8 + SP: sbh (34/t + 5as/(ht)).
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, true, Recompute::None, 2),
      kSbh * (34.0 / 8 + 10));
  // Selective: the attention-score term goes.
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, false, Recompute::Selective, 2),
      kSbh * 13);
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, true, Recompute::Selective, 2),
      kSbh * 34 / 8);
  // Full: the layer input only, 2sbh (split by SP).
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, false, Recompute::Full, 2), 2 * kSbh);
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 8, true, Recompute::Full, 2),
      2 * kSbh / 8);
  // fp32 doubles the element bytes but not the 1-byte dropout masks:
  // replicated 4*4 + 2, split 4*(2+2+8), scores a*s*(2*4+1)/h = 144.
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 1, false, Recompute::None, 4),
      kSbh * (18 + 48 + 144));
}

TEST(Memory, FlashAttentionKeepsNoScores) {
  ModelSpec m = gpt1p3b();
  // Without recompute the layer keeps its op state: q, k, v, context (4h)
  // and the MLP's up and activation (2 x 4h) in bf16, lse (a per row) and
  // two LayerNorms' mean and rstd in f32: sbh (2 * 12) + 4 a s b + 16 s b,
  // the norms' rows sequence-sharded under SP.
  double lse = 16.0 * 2048 * 4 * 4;
  double norms = 16.0 * 2048 * 4;
  EXPECT_DOUBLE_EQ(layerOpStateBytes(m, 2048, 4, 1, false, 2),
                   kSbh * 24 + lse + norms);
  EXPECT_DOUBLE_EQ(layerOpStateBytes(m, 2048, 4, 8, false, 2),
                   (kSbh * 24 + lse) / 8 + norms);
  EXPECT_DOUBLE_EQ(layerOpStateBytes(m, 2048, 4, 8, true, 2),
                   (kSbh * 24 + lse + norms) / 8);
  // Flash (Weft's compiled plan): the layer keeps 4, 2 or 1 [s, b, h]
  // tensors (none, selective, full), replicated over TP unless SP, and the
  // op state without recompute.
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 1, false, Recompute::None,
                                        2, Attention::Flash),
                   kSbh * 8 + kSbh * 24 + lse + norms);
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 8, false,
                                        Recompute::Selective, 2,
                                        Attention::Flash),
                   kSbh * 4);
  // SP: input and residual sequence-sharded, the two norm outputs saved as
  // the all-gathered inputs of the column-parallel matmuls.
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 8, true, Recompute::None, 2,
                                        Attention::Flash),
                   kSbh / 2 + 4 * kSbh + (kSbh * 24 + lse + norms) / 8);
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 8, true,
                                        Recompute::Selective, 2,
                                        Attention::Flash),
                   kSbh / 2 + 4 * kSbh);
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 8, false, Recompute::Full,
                                        2, Attention::Flash),
                   2 * kSbh);
  // Backward workspace without recompute: the gradients of q, k, v and the
  // context (4 [s,b,h]), or the MLP's dh (f = 4h), plus the incoming
  // gradient ([s,b,h]). With recompute: q, k, v, context and their
  // gradients (8 [s,b,h] split by TP) + lse, or the MLP's up output and
  // activation (2f = 8h), plus the incoming gradient; selective re-runs the
  // two norm outputs on top, and their row statistics wait for their grad
  // ops.
  EXPECT_DOUBLE_EQ(layerBackwardWorkspaceBytes(m, 2048, 4, 1, false,
                                               Recompute::None, 2,
                                               Attention::Flash),
                   kSbh * 2 * (4 + 1));
  EXPECT_DOUBLE_EQ(layerBackwardWorkspaceBytes(m, 2048, 4, 8, false,
                                               Recompute::Selective, 2,
                                               Attention::Flash),
                   kSbh * 2 * (1 + 1 + 2) + lse / 8 + norms);
  // Full: the re-run attention's state (4 [s,b,h] + lse) waits through the
  // MLP's backward, which recomputes its up output and activation (8h):
  // 12 [s,b,h] + lse, above attention_grad's 8 + lse; plus the incoming
  // gradient, three re-run saved tensors and the re-run norms' statistics.
  EXPECT_DOUBLE_EQ(layerBackwardWorkspaceBytes(m, 2048, 4, 1, false,
                                               Recompute::Full, 2,
                                               Attention::Flash),
                   kSbh * 2 * (12 + 1 + 3) + lse + norms);
  // Eager: Megatron's full recompute re-materialises the whole layer.
  EXPECT_DOUBLE_EQ(layerBackwardWorkspaceBytes(m, 2048, 4, 1, false,
                                               Recompute::Full, 2,
                                               Attention::Eager),
                   kSbh * (34 + 80));
  // Eager is the closed form's default (Korthikanti).
  EXPECT_DOUBLE_EQ(layerActivationBytes(m, 2048, 4, 1, false, Recompute::None,
                                        2, Attention::Eager),
                   kSbh * (34 + 80));
  // In a plan (micro-batch 1, 24 layers): flash keeps no scores, and
  // without recompute the grad ops recompute nothing (they read the op
  // state).
  TrainingConfig eager{8, 2048, Precision::BF16, Attention::Eager};
  TrainingConfig flash{8, 2048, Precision::BF16, Attention::Flash};
  ParallelConfig c = dataParallel(0, 1, 8);
  c.recompute = Recompute::None;
  Estimate withEager =
      CostModel(m, clusterPreset("h100-1gpu"), eager).evaluate(c);
  Estimate withFlash =
      CostModel(m, clusterPreset("h100-1gpu"), flash).evaluate(c);
  EXPECT_NEAR(withEager.memory.activations - withFlash.memory.activations,
              24 * (kSbh / 4 * (114 - 32) - (lse + norms) / 4) - 4 * 2048, 1);
  EXPECT_EQ(withEager.time.recompute, 0);
  EXPECT_EQ(withFlash.time.recompute, 0);
  // Selective's grad ops recompute the op state (QKV and up GEMMs, the
  // attention forward): far more than the norms alone.
  c.recompute = Recompute::Selective;
  Estimate selective =
      CostModel(m, clusterPreset("h100-1gpu"), flash).evaluate(c);
  EXPECT_GT(selective.time.recompute, 0.2 * selective.time.compute / 3);
}

TEST(Memory, GqaAndSwiGluActivations) {
  ModelSpec m = gpt1p3b();
  m.numKvHeads = 4; // K and V are a quarter of Q
  m.gatedMlp = true;
  m.ffnSize = 5632; // 2.75 h; SwiGLU keeps gate, up and their product
  // 10 + 2 * (2 + 2 * 0.25 + 3 * 2.75) + 80 = 111.5
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(m, 2048, 4, 1, false, Recompute::None, 2),
      kSbh * 111.5);
}

TEST(Memory, ZeroStateBytes) {
  StateBytes z0 = stateBytesPerParam(Precision::BF16, 0, 8);
  EXPECT_DOUBLE_EQ(z0.weights + z0.gradients + z0.optimizer + z0.master, 16);
  EXPECT_DOUBLE_EQ(z0.master, 4);
  // Mixed ZeRO-1/2 as compiled: beside the full half weights, the
  // optimizer's rounded half copy of this rank's shard (`params.shard`, which
  // the all-gather reads); ZeRO-1 keeps the full half gradients and the
  // reduce-scatter's shard (`grads.shard`), ZeRO-2 only the shard.
  StateBytes z1 = stateBytesPerParam(Precision::BF16, 1, 8);
  EXPECT_DOUBLE_EQ(z1.optimizer + z1.master, 1.5);
  EXPECT_DOUBLE_EQ(z1.gradients, 2 + 0.25);
  EXPECT_DOUBLE_EQ(z1.weights, 2 + 0.25);
  StateBytes z2 = stateBytesPerParam(Precision::FP16, 2, 8);
  EXPECT_DOUBLE_EQ(z2.gradients, 0.25);
  EXPECT_DOUBLE_EQ(z2.weights, 2 + 0.25);
  EXPECT_DOUBLE_EQ(z2.optimizer + z2.master, 1.5);
  // One DP rank shards nothing: the full fp32 master, as ZeRO-0.
  StateBytes z1dp1 = stateBytesPerParam(Precision::BF16, 1, 1);
  EXPECT_DOUBLE_EQ(
      z1dp1.weights + z1dp1.gradients + z1dp1.optimizer + z1dp1.master, 16);
  StateBytes z3 = stateBytesPerParam(Precision::BF16, 3, 8);
  EXPECT_DOUBLE_EQ(z3.weights + z3.gradients + z3.optimizer + z3.master, 2.0);
  StateBytes fp32 = stateBytesPerParam(Precision::FP32, 0, 8);
  EXPECT_DOUBLE_EQ(fp32.weights, 4);
  EXPECT_DOUBLE_EQ(fp32.gradients, 4);
  EXPECT_DOUBLE_EQ(fp32.optimizer, 8);
  EXPECT_DOUBLE_EQ(fp32.master, 0); // the fp32 weights are the master copy
  // fp32 ZeRO-1 as compiled: full weights and gradients, and this rank's
  // shard of m, v, master weights and reduced gradients.
  StateBytes fp32z1 = stateBytesPerParam(Precision::FP32, 1, 4);
  EXPECT_DOUBLE_EQ(fp32z1.weights, 4);
  EXPECT_DOUBLE_EQ(fp32z1.gradients, 4 + 1);
  EXPECT_DOUBLE_EQ(fp32z1.optimizer, 2);
  EXPECT_DOUBLE_EQ(fp32z1.master, 1);
  // Offload moves the moments and master weights off the device.
  StateBytes off =
      stateBytesPerParam(Precision::BF16, 0, 1, Offload::Optimizer);
  EXPECT_DOUBLE_EQ(off.weights + off.gradients, 4);
  EXPECT_DOUBLE_EQ(off.optimizer + off.master, 0);
}

TEST(Memory, ModelStatesOfOneGpu) {
  // One GPU, no sharding: 16 bytes per parameter exactly.
  ModelSpec m = gpt1p3b();
  CostModel model(m, clusterPreset("h100-1gpu"),
                  {8, 2048, Precision::BF16, Attention::Eager});
  Estimate e = model.evaluate(dataParallel(0, 1, 8));
  EXPECT_EQ(m.totalParams, 1317654528); // hand-counted GPT-3 XL
  EXPECT_DOUBLE_EQ(e.memory.weights + e.memory.gradients + e.memory.optimizer +
                       e.memory.masterWeights,
                   16.0 * m.totalParams);
  EXPECT_DOUBLE_EQ(e.memory.activations, 24 * 2 * 2048.0 * 2048);
  // fp32 logits saved + half logits + fp32 gradient: s*b*V*(4+2+4).
  EXPECT_DOUBLE_EQ(e.memory.logits, 2048.0 * 51200 * 10);
  EXPECT_DOUBLE_EQ(e.memory.commBuffers, 0);
  // Weft's plan: the layer inputs plus the token ids; the logits (their
  // gradient overwrites them), the last layer's and the final norm's outputs
  // and the targets.
  CostModel weft(m, clusterPreset("h100-1gpu"), {8, 2048, Precision::BF16});
  Estimate w = weft.evaluate(dataParallel(0, 1, 8));
  EXPECT_DOUBLE_EQ(w.memory.activations, 24 * 2 * 2048.0 * 2048 + 4 * 2048.0);
  EXPECT_DOUBLE_EQ(w.memory.logits,
                   2048.0 * 51200 * 2 + 2 * 2048.0 * 2048 * 2 + 4 * 2048.0);
}

TEST(Memory, TensorParallelKeepsNormsBiasesAndPositionsWhole) {
  ModelSpec m = gpt1p3b();
  CostModel model(m, clusterPreset("dgx-a100-80g"), {8, 2048, Precision::BF16});
  ParallelConfig c;
  c.tp = 8;
  c.gradAccum = 8;
  Estimate e = model.evaluate(c);
  // Replicated: per layer two LayerNorms (4h) and the attention-output and
  // MLP-down biases (2h); the learned positions (2048 h); the final norm.
  double h = 2048;
  double replicated = 24 * 6 * h + 2048 * h + 2 * h;
  double perRank = (m.totalParams - replicated) / 8 + replicated;
  EXPECT_NEAR(e.memory.weights, 2 * perRank, 1);
  EXPECT_NEAR(e.memory.masterWeights, 4 * perRank, 1);
}

TEST(Memory, NonIncreasingInZeroStage) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  double previous = INFINITY;
  for (int zero = 0; zero <= 3; ++zero) {
    Estimate e = model.evaluate(dataParallel(zero, 8, 64));
    // ZeRO-2/3 hold a few micro-batch gradients not yet reduce-scattered.
    if (zero >= 2)
      EXPECT_GT(e.memory.gradientBuffer, 0) << "ZeRO-" << zero;
    EXPECT_LE(e.peakMemoryBytes, previous) << "ZeRO-" << zero;
    previous = e.peakMemoryBytes;
  }
}

TEST(Memory, MixedZeroStatesAsCompiled) {
  // weft-schedule's bf16 layout on 8 DP ranks (docs/planner.md, "Memory
  // fidelity"): ZeRO-1 2 (params) + 2 (grads) + 16/8 (master, moments and
  // the half grads.shard and params.shard); ZeRO-2 the same without the full
  // gradients: in the arena, the micro-batch gradients not yet
  // reduce-scattered, at most weft-schedule's live bound (the largest
  // parameter, the embedding, plus three times the second largest, an MLP
  // matrix).
  ModelSpec m = gpt1p3b();
  CostModel model(m, clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  auto states = [](const MemoryBreakdown &b) {
    return b.weights + b.gradients + b.optimizer + b.masterWeights;
  };
  Estimate z1 = model.evaluate(dataParallel(1, 8, 64));
  EXPECT_NEAR(states(z1.memory), (4 + 2.0) * m.totalParams, 1);
  Estimate z2 = model.evaluate(dataParallel(2, 8, 64));
  EXPECT_NEAR(states(z2.memory), (2 + 2.0) * m.totalParams, 1);
  double h = double(m.hiddenSize);
  // With 8 micro-batches per replica, each with its reduce-scatter output
  // (1/8 of it) after the first.
  double bound = double(m.vocabSize) * h + 3 * double(m.ffnSize) * h;
  EXPECT_NEAR(z2.memory.gradientBuffer, 2.0 * bound * (1 + 1.0 / 8), 1);
  // About an eighth of the full gradient at 1.3B parameters.
  EXPECT_LT(z2.memory.gradientBuffer, 0.14 * 2.0 * m.totalParams);
}

TEST(Memory, ZeroThreeKeepsSmallParametersWhole) {
  // weft-schedule's default persist-threshold: vectors of at most
  // min(100000, largest parameter / 64) elements stay whole on every DP
  // rank. GPT 1.3B (bf16): the threshold is 100000 (the embedding has
  // 51200 h elements), so the norms (4h per layer and the final 2h) and
  // biases (3h + h + 4h + h) are kept whole: 13h per layer + 2h.
  ModelSpec m = gpt1p3b();
  CostModel model(m, clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  Estimate e = model.evaluate(dataParallel(3, 8, 64));
  double h = 2048;
  double persistent = 24 * 13 * h + 2 * h;
  EXPECT_NEAR(e.memory.weights, 2 * (m.totalParams / 8.0 + persistent), 1);
  // A small model's threshold follows its largest parameter: GPT h = 64,
  // vocabulary 256: 16384 / 64 = 256 keeps the 4h = 256 MLP bias whole.
  ModelSpec tiny = weft::planner::test::gpt(64, 2, 2, 256, 128);
  CostModel small(tiny, clusterPreset("dgx-a100-80g"),
                  {8, 64, Precision::FP32});
  Estimate t = small.evaluate(dataParallel(3, 8, 8));
  EXPECT_NEAR(t.memory.weights,
              4 * (tiny.totalParams / 8.0 + 2 * 13 * 64 + 2 * 64), 1e-6);
}

TEST(Memory, PipelineInFlight) {
  EXPECT_EQ(activationsInFlight(Schedule::OneFOneB, 8, 0, 64, 1), 8);
  EXPECT_EQ(activationsInFlight(Schedule::OneFOneB, 8, 7, 64, 1), 1);
  EXPECT_EQ(activationsInFlight(Schedule::OneFOneB, 8, 0, 4, 1), 4);
  EXPECT_EQ(activationsInFlight(Schedule::GPipe, 8, 5, 64, 1), 64);
  EXPECT_EQ(activationsInFlight(Schedule::GPipe, 1, 0, 64, 1), 1);
  // Interleaved stage 0: p + (p - 1) / v stage-equivalents.
  EXPECT_DOUBLE_EQ(activationsInFlight(Schedule::Interleaved, 8, 0, 64, 3),
                   8 + 7.0 / 3);
}

TEST(Time, BubbleFractions) {
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::OneFOneB, 8, 64, 1), 7.0 / 64);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::GPipe, 8, 64, 1), 7.0 / 64);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::Interleaved, 8, 64, 3), 7.0 / 192);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::OneFOneB, 1, 64, 1), 0);
}

TEST(Time, CollectivesFollowTheTopology) {
  Cluster c = clusterPreset("dgx-a100-80g:4");
  CostConstants k;
  GroupSpan tp = spanOfGroup(c, 8, 1);
  EXPECT_EQ(tp.nodes, 1);
  EXPECT_EQ(tp.ranksPerNode, 8);
  GroupSpan dp = spanOfGroup(c, 4, 8); // one rank per node
  EXPECT_EQ(dp.nodes, 4);
  EXPECT_EQ(dp.ranksPerNode, 1);
  double bytes = 1e9;
  EXPECT_DOUBLE_EQ(collectiveTime(Collective::AllReduce, c, k, tp, bytes),
                   2 * 7.0 / 8 * bytes / (300e9 * k.intraNodeBusEfficiency) +
                       14 * 2e-6);
  EXPECT_DOUBLE_EQ(collectiveTime(Collective::AllGather, c, k, dp, bytes),
                   3.0 / 4 * bytes / (25e9 * k.interNodeBusEfficiency) +
                       3 * 5e-6);
  // A group spread one per node is slower than one packed into nodes.
  GroupSpan packed = spanOfGroup(c, 32, 1);
  EXPECT_EQ(packed.ranksPerNode, 8);
  EXPECT_GT(
      collectiveTime(Collective::AllReduce, c, k, spanOfGroup(c, 4, 8), bytes),
      collectiveTime(Collective::AllReduce, c, k, spanOfGroup(c, 4, 1), bytes));
  EXPECT_EQ(
      collectiveTime(Collective::AllReduce, c, k, spanOfGroup(c, 1, 1), bytes),
      0);
  // Latency per hop, as NCCL's tuning model: 32 ranks over 4 nodes (8 per
  // node) reduce-scatter in 31 steps, 3 of them between nodes; a ring
  // all-reduce one rank per node crosses nodes on every one of its 6 steps.
  // The split into latency and transfer (what concurrent transfers share).
  EXPECT_NEAR(
      collectiveCost(Collective::ReduceScatter, c, k, packed, 1.0).latency,
      28 * 2e-6 + 3 * 5e-6, 1e-12);
  EXPECT_NEAR(collectiveCost(Collective::AllReduce, c, k, dp, 1.0).latency,
              6 * 5e-6, 1e-12);
  CommTime split = collectiveCost(Collective::AllGather, c, k, dp, bytes);
  EXPECT_DOUBLE_EQ(split.transfer,
                   3.0 / 4 * bytes / (25e9 * k.interNodeBusEfficiency));
  EXPECT_DOUBLE_EQ(split.total(),
                   collectiveTime(Collective::AllGather, c, k, dp, bytes));
  CommTime p2p = pointToPointCost(c, k, /*crossesNodes=*/true, bytes);
  EXPECT_DOUBLE_EQ(p2p.latency, 5e-6);
  EXPECT_DOUBLE_EQ(p2p.transfer, bytes / (25e9 * k.interNodeBusEfficiency));
}

TEST(Time, ZeroThreeBackwardSharesTheLinksNotTheLatency) {
  // Links so fast that only latency is left, and no compute hides ZeRO-3's
  // transfers: per layer and micro-batch the forward gathers its four
  // matrices one after the other (none is under a quarter of the 25 MB
  // bucket; the vectors persist), then the backward gathers them again
  // while the reduce-scatters run on their own stream, each waiting out its
  // own calls' latency (side by side, not one after the other): only the
  // last reduce-scatter ends after the last gather. At the step's edges the
  // token and position tables are gathered before anything runs and their
  // gradients reduce-scattered after everything (two calls each).
  Cluster cluster = clusterPreset("dgx-a100-80g:2");
  cluster.intraNodeBandwidthGBs = cluster.interNodeBandwidthGBs = 1e12;
  CostConstants k;
  k.commOverlapFraction = 0;
  TrainingConfig training;
  training.globalBatch = 64;
  training.seqLen = 2048;
  training.precision = Precision::BF16;
  ParallelConfig c = dataParallel(3, 16, 64);
  c.recompute = Recompute::None;
  ModelSpec model = gpt1p3b();
  Estimate estimate = CostModel(model, cluster, training, k).evaluate(c);
  double latency = collectiveCost(Collective::AllGather, cluster, k,
                                  spanOfGroup(cluster, 16, 1), 1.0)
                       .latency;
  double layers = double(model.numLayers), microBatches = double(c.gradAccum);
  EXPECT_NEAR(estimate.time.zeroComm,
              (microBatches * (2 * layers * 4 + 1) + 4) * latency,
              1e-3 * estimate.time.zeroComm);
}

TEST(Time, ZeroThreeDeeperPrefetchHidesUnevenGathers) {
  // gpt2-medium's shape on 64 GPUs over 8 nodes: each gather waits out 56
  // NVLink and 7 NIC hops, longer than the compute between some first uses
  // (the attention output projection's), which one unit of prefetch cannot
  // smooth over and two can.
  TrainingConfig training;
  training.globalBatch = 256;
  training.seqLen = 1024;
  training.precision = Precision::BF16;
  CostModel model(weft::planner::test::gpt(1024, 24, 16),
                  clusterPreset("dgx-a100-80g:8"), training);
  ParallelConfig c = dataParallel(3, 64, 256);
  c.microBatch = 2;
  c.gradAccum = 2;
  c.recompute = Recompute::None;
  auto exposed = [&](int64_t depth) {
    c.prefetchDepth = depth;
    return model.evaluate(c).time.zeroComm;
  };
  EXPECT_GT(exposed(1), 1.05 * exposed(2));
  EXPECT_GE(exposed(2), exposed(4) * (1 - 1e-12)); // nothing more to hide
  EXPECT_GT(exposed(4), 0); // each pass's first gather has nothing to hide
}

TEST(Time, ModelFlopsAndThroughputIdentities) {
  ModelSpec m = gpt1p3b();
  CostModel model(m, clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  // Forward per token: 2hV + L (24h^2 + 4hs).
  double perToken =
      2.0 * 2048 * 51200 + 24 * (24.0 * 2048 * 2048 + 4.0 * 2048 * 2048);
  EXPECT_DOUBLE_EQ(model.modelFlopsPerStep(), 3 * perToken * 64 * 2048);
  Estimate e = model.evaluate(dataParallel(1, 8, 64));
  EXPECT_NEAR(e.time.total(), e.stepTimeS, 1e-12);
  EXPECT_NEAR(e.tokensPerS * e.stepTimeS, 64.0 * 2048, 1e-6);
  EXPECT_NEAR(e.mfu * 312, e.modelTflopsPerGpu, 1e-9);
  EXPECT_GT(e.time.recompute, 0);
  EXPECT_EQ(e.time.bubble, 0);
}

/// gpt1p3b on one DGX H100 with TP 8, micro-batch 4, no recompute.
ParallelConfig tensorParallel(bool sequenceParallel) {
  ParallelConfig c;
  c.tp = 8;
  c.microBatch = 4;
  c.gradAccum = 16;
  c.recompute = Recompute::None;
  c.sequenceParallel = sequenceParallel;
  return c;
}

TEST(Time, TensorParallelBackwardHidesUnderWeightGradients) {
  // The forward's collectives are exposed; the backward's reductions (the
  // all-reduces, or SP's reduce-scatters) run under the q|k|v and MLP up
  // weight-gradient GEMMs (the compiled plan's `tp` stream); SP's backward
  // all-gathers stay exposed.
  TrainingConfig training{64, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("dgx-h100-80g");
  CostConstants serial;
  serial.commOverlapFraction = 0;
  auto tpComm = [&](bool sp, const CostConstants &k) {
    return CostModel(gpt1p3b(), cluster, training, k)
        .evaluate(tensorParallel(sp))
        .time.tpComm;
  };
  double exposed = tpComm(false, serial), hidden = tpComm(false, {});
  EXPECT_LT(hidden, 0.9 * exposed);
  EXPECT_GE(hidden, 0.5 * exposed); // the forward's half
  // SP: the reduce-scatters are half of the backward's traffic.
  double spExposed = tpComm(true, serial), spHidden = tpComm(true, {});
  EXPECT_LT(spHidden, 0.95 * spExposed);
  EXPECT_GE(spHidden, 0.75 * spExposed);
}

TEST(Time, SequenceParallelShardsTheNormsAndResiduals) {
  // Free collectives, so only compute differs: SP runs the norms, residual
  // adds and the row-parallel biases after the reduction on a t-th of the
  // tokens (forward 10h + 4h elements per token, backward 12h + 2h; see
  // docs/planner.md, "Time model"). Its collectives move each
  // sequence's blocks directly (one member per sequence): no copies.
  TrainingConfig training{64, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("dgx-h100-80g");
  cluster.intraNodeBandwidthGBs = 1e12;
  cluster.intraNodeLatencyUs = 0;
  CostConstants k;
  CostModel model(gpt1p3b(), cluster, training, k);
  ParallelConfig c = tensorParallel(false);
  double compute = model.evaluate(c).time.compute;
  double sequenceParallel = model.evaluate(tensorParallel(true)).time.compute;
  double h = 2048, t = 8, tokens = 2048.0 * c.microBatch;
  double hbm = cluster.gpu.memoryBandwidthGBs * 1e9 * k.memoryBandwidthFraction;
  double perLayer = tokens * 2 / hbm * (28 * h / t - 28 * h);
  EXPECT_NEAR(sequenceParallel - compute, double(c.gradAccum) * 24 * perLayer,
              1e-9 * compute);
}

/// ZeRO-0 on 16 A100s (two DGX nodes), GPT 1.3B in bf16, batch 256 x 2048
/// in micro-batches of 16, no recompute: a backward long enough to hide the
/// gradient all-reduces.
struct DataParallelCase {
  TrainingConfig training{256, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("dgx-a100-80g:2");
  CostConstants k;
  ModelSpec model = gpt1p3b();
  ParallelConfig c = dataParallel(0, 16, 256);
  DataParallelCase() {
    c.microBatch = 16;
    c.gradAccum = 1;
    c.recompute = Recompute::None;
  }
  Estimate evaluate() const {
    return CostModel(model, cluster, training, k).evaluate(c);
  }
  double gradBytes() const { return double(model.totalParams) * 2; }
  /// The token and position tables' gradients, which the embedding's
  /// backward completes last.
  double tableBytes() const {
    return double(model.vocabSize + model.maxPositions) * model.hiddenSize * 2;
  }
  /// What stays exposed of `calls` all-reduces of the whole gradient.
  double exposed(double calls) const {
    CommTime one = collectiveCost(Collective::AllReduce, cluster, k,
                                  spanOfGroup(cluster, 16, 1), gradBytes());
    return (calls * one.latency + one.transfer) * tableBytes() / gradBytes();
  }
};

TEST(Time, DataParallelTablesGradientsReduceLast) {
  // What stays exposed is what the backward completes last, the token and
  // position tables' gradients, not just one 25 MiB bucket.
  DataParallelCase dp;
  // weft-schedule's buckets hold whole gradients: the two 2048 x 8192 MLP
  // matrices of each layer (32 MiB) and the token table (200 MiB) are calls
  // of their own, everything else (the 8 MiB attention matrices, vectors,
  // the position table) shares 25 MiB buckets.
  double h = double(dp.model.hiddenSize);
  double mlpBytes = 2 * (4 * h * h) * 2 * double(dp.model.numLayers);
  double tokenTableBytes = double(dp.model.vocabSize) * h * 2;
  double calls = 2 * double(dp.model.numLayers) + 1 +
                 std::ceil((dp.gradBytes() - mlpBytes - tokenTableBytes) /
                           dp.k.planBucketBytes);
  EXPECT_GT(4 * h * h * 2, dp.k.planBucketBytes);
  EXPECT_LT(h * h * 2, dp.k.planBucketBytes);
  EXPECT_LT(double(dp.model.maxPositions) * h * 2, dp.k.planBucketBytes);
  EXPECT_GT(dp.tableBytes() / dp.gradBytes(), 2 / calls); // over 2 buckets
  Estimate estimate = dp.evaluate();
  EXPECT_NEAR(estimate.time.dpComm, dp.exposed(calls),
              1e-9 * estimate.time.dpComm);
}

TEST(Time, BucketBytesOfTheCompiledPlanSetTheCalls) {
  // weftc compile --bucket-bytes 4 MiB (TrainingConfig::bucketBytes): every
  // layer matrix (8 and 32 MiB), the token table and the position table
  // (8 MiB) are calls of their own, the vectors (1.2 MiB in all) share one
  // bucket: 24 x 6 + 2 + 1 = 147 all-reduces, each paying the latency.
  DataParallelCase dp;
  dp.training.bucketBytes = 4 << 20;
  Estimate small = dp.evaluate();
  EXPECT_NEAR(small.time.dpComm, dp.exposed(147), 1e-9 * small.time.dpComm);
  // The default (25 MiB) makes fewer calls, so less is exposed.
  dp.training.bucketBytes = 0;
  EXPECT_LT(dp.evaluate().time.dpComm, small.time.dpComm);
}

TEST(Time, GemmEpiloguesRemoveTheKernelsTheyFold) {
  // One GPU, so only the layers' element-wise kernels differ: with epilogues
  // the bias adds (q|k|v 3h, the MLP up f, attention output and down h
  // each: read and written) and bias gradients (dy read) cost nothing, and
  // the tanh GELU costs its aux matrix instead of a read and a write
  // forward and two reads and a write backward: per token and layer
  // 2(3h + f + 2h) + 3h + f + 2h + (2f - f) + (3f - f) = 15h + 6f elements.
  // An erf GELU does not fold (cuBLASLt's is the tanh one), nor does
  // anything of a model without biases.
  TrainingConfig training{64, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("h100-1gpu");
  CostConstants k;
  ParallelConfig c = dataParallel(0, 1, 64);
  c.recompute = Recompute::None;
  auto compute = [&](const ModelSpec &model, bool epilogues) {
    TrainingConfig t = training;
    t.gemmEpilogues = epilogues;
    return CostModel(model, cluster, t, k).evaluate(c).time.compute;
  };
  ModelSpec gpt = gpt1p3b();
  double h = 2048, f = 4 * h, tokens = 2048.0 * c.microBatch;
  double hbm = cluster.gpu.memoryBandwidthGBs * 1e9 * k.memoryBandwidthFraction;
  double perElement =
      double(c.gradAccum) * gpt.numLayers * tokens * 2 / hbm; // bf16
  EXPECT_NEAR(compute(gpt, false) - compute(gpt, true),
              (15 * h + 6 * f) * perElement, 1e-9 * compute(gpt, false));
  ModelSpec erf = gpt;
  erf.mlpActivation = "gelu";
  EXPECT_NEAR(compute(erf, false) - compute(erf, true),
              (15 * h + 3 * f) * perElement, 1e-9 * compute(erf, false));
  ModelSpec unbiased = gpt;
  unbiased.linearBias = false;
  EXPECT_DOUBLE_EQ(compute(unbiased, false), compute(unbiased, true));
}

TEST(Time, RowParallelBiasGradientsFoldUnlessSequenceParallel) {
  // Under TP the row-parallel layers' bias adds (attention output, MLP down)
  // follow the reduction and stay kernels, but their bias gradients read the
  // same dy as the weight gradient's GEMM and fold into it (from before it):
  // 2h elements read per token and layer. Under SP the bias gradient reads
  // the shard and the GEMM the gathered gradient: nothing folds. So the
  // epilogues' gain differs by exactly those 2h.
  TrainingConfig training{64, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("dgx-h100-80g");
  cluster.intraNodeBandwidthGBs = 1e12;
  cluster.intraNodeLatencyUs = 0;
  CostConstants k;
  ModelSpec gpt = gpt1p3b();
  auto gain = [&](bool sp) {
    ParallelConfig c = tensorParallel(sp);
    auto compute = [&](bool epilogues) {
      TrainingConfig t = training;
      t.gemmEpilogues = epilogues;
      return CostModel(gpt, cluster, t, k).evaluate(c).time.compute;
    };
    return compute(false) - compute(true);
  };
  ParallelConfig c = tensorParallel(false);
  double h = 2048, tokens = 2048.0 * c.microBatch;
  double hbm = cluster.gpu.memoryBandwidthGBs * 1e9 * k.memoryBandwidthFraction;
  double perElement = double(c.gradAccum) * gpt.numLayers * tokens * 2 / hbm;
  EXPECT_GT(gain(true), 0);
  EXPECT_NEAR(gain(false) - gain(true), 2 * h * perElement, 1e-6 * gain(false));
}

TEST(Time, ResidualNormsReadNeitherTheSumNorDx) {
  // Per token and layer two block ends: forward a, b -> sum, y instead of the
  // add and the norm apart (5h: the sum read back), backward x, dy, addend ->
  // sum instead of the norm backward and the add (6h: dx written and read):
  // 2 (5h - 4h) + 2 (6h - 4h) = 6h elements; with SP each rank holds h/t.
  TrainingConfig training{64, 2048, Precision::BF16};
  Cluster cluster = clusterPreset("dgx-h100-80g");
  CostConstants k;
  ModelSpec gpt = gpt1p3b();
  double h = 2048;
  double hbm = cluster.gpu.memoryBandwidthGBs * 1e9 * k.memoryBandwidthFraction;
  for (bool sp : {false, true}) {
    ParallelConfig c = dataParallel(0, 1, 64);
    c.tp = sp ? 2 : 1;
    c.dp = 8 / c.tp;
    c.microBatch = 2;
    c.gradAccum = 64 / c.dp / c.microBatch;
    c.sequenceParallel = sp;
    c.recompute = Recompute::None;
    auto compute = [&](bool fused) {
      TrainingConfig t = training;
      t.residualNorms = fused;
      return CostModel(gpt, cluster, t, k).evaluate(c).time.compute;
    };
    double tokens = 2048.0 * c.microBatch;
    double perElement = double(c.gradAccum) * gpt.numLayers * tokens * 2 / hbm;
    EXPECT_NEAR(compute(false) - compute(true), 6 * h / c.tp * perElement,
                1e-9 * compute(false))
        << (sp ? "with SP" : "without");
  }
}

TEST(Time, OptimizerPassesAreThePlans) {
  // Bytes per local parameter the compiled plan's optimizer phase moves
  // (counted from plan.json: optimizer_step, grad_norm, fill): AdamW 24 + e
  // (+ e mixed: the half weights; it clips the gradients on their way in),
  // the norm e: bf16 30, fp32 32 (a separate clip pass, until 2026-12-01,
  // added 2e); and the zero fill, e per parameter that no GEMM writes first
  // (weft-fold-zero-fills: the layers' matrices and the tied head's table
  // are overwritten by beta-0 GEMMs): ZeRO 0/1 once per step, ZeRO-2 the
  // shard and every micro-batch's slots. ZeRO >= 1 steps the shard. Ratios,
  // so the bandwidth drops out.
  Cluster cluster = clusterPreset("dgx-a100-80g");
  auto optimizer = [&](Precision precision, int zero) {
    ParallelConfig c = dataParallel(zero, 8, 64); // 8 micro-batches
    return CostModel(gpt1p3b(), cluster, {64, 2048, precision})
        .evaluate(c)
        .time.optimizer;
  };
  ModelSpec spec = gpt1p3b();
  double params = double(spec.totalParams);
  double unfolded = params -
                    spec.numLayers * spec.layerMatmulFlopsPerToken / 2 -
                    double(spec.vocabSize) * spec.hiddenSize;
  EXPECT_GT(unfolded, 0);
  EXPECT_LT(unfolded, 0.05 * params); // norms, biases, positions
  double f = unfolded / params;
  double bf16 = optimizer(Precision::BF16, 0);
  EXPECT_NEAR(optimizer(Precision::FP32, 0) / bf16, (32 + 4 * f) / (30 + 2 * f),
              1e-12);
  EXPECT_NEAR(optimizer(Precision::BF16, 1) / bf16,
              (30.0 / 8 + 2 * f) / (30 + 2 * f), 1e-12);
  EXPECT_NEAR(optimizer(Precision::BF16, 2) / bf16,
              (30.0 / 8 + 2.0 / 8 + 8 * 2 * f) / (30 + 2 * f), 1e-9);
}

TEST(Time, ZeroTwoReducesUnderTheNextForward) {
  // ZeRO-2 reduce-scatters every micro-batch's gradients; the compiled plan
  // runs them on their own stream, under the next micro-batch's forward, so
  // only the last micro-batch's tail shows: four times the micro-batches,
  // the same exposed DP time (it was m times the tail). The updated shards'
  // gathers show at least the first unit's: on the first stage the token
  // table, which the forward reads first.
  auto dpComm = [&](int zero, int64_t globalBatch) {
    CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g:8"),
                    {globalBatch, 2048, Precision::BF16});
    ParallelConfig c = dataParallel(zero, 64, globalBatch);
    return model.evaluate(c).time.dpComm;
  };
  EXPECT_GT(dpComm(2, 128), 0);
  EXPECT_NEAR(dpComm(2, 512), dpComm(2, 128), 1e-12);
  EXPECT_GT(dpComm(1, 128), 0);
}

TEST(Time, RecomputeAndPipelineCostTime) {
  // Eager attention: selective recompute has scores to recompute.
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16, Attention::Eager});
  ParallelConfig c;
  c.tp = 2;
  c.pp = 4;
  c.microBatch = 1;
  c.gradAccum = 64;
  c.schedule = Schedule::OneFOneB;
  double none = model.evaluate(c).stepTimeS;
  c.recompute = Recompute::Selective;
  double selective = model.evaluate(c).stepTimeS;
  c.recompute = Recompute::Full;
  double full = model.evaluate(c).stepTimeS;
  EXPECT_LT(none, selective);
  EXPECT_LT(selective, full);
  // Interleaving shrinks the bubble by v.
  Estimate plain = model.evaluate(c);
  c.schedule = Schedule::Interleaved;
  c.virtualStages = 2;
  Estimate interleaved = model.evaluate(c);
  EXPECT_NEAR(interleaved.time.bubble * 2, plain.time.bubble,
              1e-9 * plain.time.bubble);
  EXPECT_GT(interleaved.time.ppComm, plain.time.ppComm);
  int64_t layers = 0;
  for (int64_t n : plain.layersPerStage)
    layers += n;
  EXPECT_EQ(layers, 24);
}

TEST(Time, UnevenLayerSplitsBalanceTheHead) {
  // 25 layers over 4 stages: the last stage, which also runs the LM head,
  // never gets more layers than a middle stage.
  ModelSpec m = gpt1p3b();
  m.numLayers = 25;
  CostModel model(m, clusterPreset("dgx-a100-80g"), {8, 2048, Precision::BF16});
  ParallelConfig c;
  c.tp = 2;
  c.pp = 4;
  c.gradAccum = 8;
  Estimate e = model.evaluate(c);
  ASSERT_EQ(e.layersPerStage.size(), 4u);
  EXPECT_EQ(e.layersPerStage[0] + e.layersPerStage[1] + e.layersPerStage[2] +
                e.layersPerStage[3],
            25);
  EXPECT_LE(e.layersPerStage[3], e.layersPerStage[1]);
}

TEST(Time, ClusterCostConstantsReplaceTheDefaults) {
  Cluster cluster = clusterPreset("dgx-a100-80g");
  TrainingConfig training;
  training.globalBatch = 64;
  training.seqLen = 2048;
  ParallelConfig c = dataParallel(1, 8, 64);
  c.recompute = Recompute::None;
  CostModel base(gpt1p3b(), cluster, training);
  Estimate before = base.evaluate(c);

  auto computeWith = [&](CostOverrides overrides) {
    Cluster measured = cluster;
    measured.costOverrides = overrides;
    return CostModel(gpt1p3b(), measured, training).evaluate(c).time;
  };
  // GEMMs (linear layers and attention) at half the default fraction: the
  // compute time nearly doubles (the element-wise traffic stays).
  CostOverrides slowGemms;
  slowGemms.matmulPeakFraction = CostConstants{}.matmulPeakFraction / 2;
  TimeBreakdown after = computeWith(slowGemms);
  EXPECT_GT(after.compute, 1.5 * before.time.compute);
  EXPECT_LT(after.compute, 2.0 * before.time.compute);
  EXPECT_DOUBLE_EQ(after.optimizer, before.time.optimizer);
  // Without the saturation, or with attention twice the GEMM formula's
  // speed: faster.
  CostOverrides noSaturation, fastAttention;
  noSaturation.matmulHalfDim = 0;
  fastAttention.attentionEfficiency = 2;
  EXPECT_LT(computeWith(noSaturation).compute, before.time.compute);
  EXPECT_LT(computeWith(fastAttention).compute, before.time.compute);
  // Element-wise kernels at a lower share of the bandwidth: the optimizer
  // (memory-bound) slows by the same factor.
  CostOverrides slowMemory;
  slowMemory.memoryBandwidthFraction =
      CostConstants{}.memoryBandwidthFraction / 2;
  EXPECT_DOUBLE_EQ(computeWith(slowMemory).optimizer,
                   2 * before.time.optimizer);
  // The model reports the constants it uses.
  Cluster measured = cluster;
  measured.costOverrides = slowGemms;
  EXPECT_DOUBLE_EQ(
      CostModel(gpt1p3b(), measured, training).constants().matmulPeakFraction,
      CostConstants{}.matmulPeakFraction / 2);
}

TEST(CostModel, InvalidPlansAreRejectedWithReasons) {
  CostModel model(gpt1p3b(), clusterPreset("dgx-a100-80g"),
                  {64, 2048, Precision::BF16});
  ParallelConfig c = dataParallel(0, 8, 64);
  c.gradAccum = 4;
  EXPECT_EQ(model.check(c),
            "micro-batch 1 x accumulation 4 x DP 8 != global batch 64");
  c = dataParallel(0, 8, 64);
  c.dp = 4;
  EXPECT_EQ(model.check(c), "TP x PP x DP = 4, but the cluster has 8 GPUs");
  c = dataParallel(0, 8, 64);
  c.sequenceParallel = true;
  EXPECT_EQ(model.check(c), "sequence parallelism needs TP > 1");
  c.sequenceParallel = false;
  c.zero = 3;
  EXPECT_EQ(model.check(c), "ZeRO-3 needs a prefetch depth >= 1 and a "
                            "positive bucket size");
  EXPECT_THROW(model.evaluate(c), Error);
}
