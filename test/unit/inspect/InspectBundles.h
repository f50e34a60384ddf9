//===- InspectBundles.h - Bundles and a unit cluster for weft-inspect tests
//===//
//
// The unit cluster makes every duration a byte or FLOP count: 1 FLOP/s, 1 B/s
// of HBM and link bandwidth, no latency and every efficiency 1, so a kernel
// touching 576 bytes takes 576 s and timelines can be computed by hand.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TEST_UNIT_INSPECT_INSPECTBUNDLES_H
#define WEFT_TEST_UNIT_INSPECT_INSPECTBUNDLES_H

#include "TestBundles.h"

#include "weft/planner/Cluster.h"
#include "weft/planner/CostModel.h"

#include <string>

namespace weft::inspect::test {

using namespace weft::plan;
using namespace weft::plan::test;

inline planner::Cluster unitCluster() {
  planner::Cluster cluster;
  cluster.name = "unit";
  cluster.nodes = 1;
  cluster.gpusPerNode = 8;
  cluster.gpu = {"unit", 1.0, 1e-12, 1e-12, 1e-12, 1e-9};
  cluster.intraNodeBandwidthGBs = 1e-9;
  cluster.interNodeBandwidthGBs = 1e-9;
  return cluster;
}

inline planner::CostConstants unitConstants() {
  planner::CostConstants constants;
  constants.matmulPeakFraction = 1;
  constants.matmulHalfDim = 0;
  constants.memoryBandwidthFraction = 1;
  constants.intraNodeBusEfficiency = 1;
  constants.interNodeBusEfficiency = 1;
  return constants;
}

/// One rank, two streams: "compute" runs a 200 s kernel, "side" a 100 s
/// kernel. With `ordered`, side waits for an event compute records after its
/// kernel.
inline Bundle twoStreamBundle(bool ordered) {
  Bundle bundle = baseBundle({1, 1, 1}, 1);
  bundle.rankRoles = {0};
  Program program;
  program.numEvents = ordered ? 1 : 0;
  program.persistentBytes = 256;
  program.arenaBytes = 256;
  // u8: the kernels' ranges count bytes, not whole f32s.
  program.buffers = {buffer(0, "w", Region::Persistent, 0, 128, DType::U8),
                     buffer(1, "v", Region::Persistent, 128, 64, DType::U8),
                     buffer(2, "act", Region::Arena, 0, 128, DType::U8),
                     buffer(3, "side.act", Region::Arena, 128, 64, DType::U8)};
  program.streams.push_back(
      {"compute", {kernel(0, {{0, 0, 100}}, {{2, 0, 100}}, "fwd L0")}});
  program.streams.push_back(
      {"side", {kernel(0, {{1, 0, 50}}, {{3, 0, 50}}, "fwd L1")}});
  if (ordered) {
    program.streams[0].instructions.push_back(
        event(Opcode::RecordEvent, 0, "fwd L0"));
    program.streams[1].instructions.insert(
        program.streams[1].instructions.begin(),
        event(Opcode::WaitEvent, 0, "fwd L1"));
  }
  bundle.programs.push_back(program);
  return bundle;
}

/// Two ranks with their own programs: rank 0 computes for 100 s, rank 1 for
/// 300 s, then both all-reduce 25 f32 (100 B: 100 s over two ranks).
inline Bundle slowRankBundle() {
  Bundle bundle = baseBundle({2, 1, 1}, 2);
  bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 1};
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.persistentBytes = 512;
    program.arenaBytes = 256;
    // u8 where the kernel's ranges count bytes, not whole f32s.
    program.buffers = {buffer(0, "w", Region::Persistent, 0, 256, DType::U8),
                       buffer(1, "w.grad", Region::Persistent, 256, 256),
                       buffer(2, "act", Region::Arena, 0, 256, DType::U8)};
    int64_t bytes = role == 0 ? 50 : 150;
    program.streams.push_back(
        {"compute",
         {kernel(0, {{0, 0, bytes}}, {{2, 0, bytes}}, "bwd"),
          comm(Opcode::AllReduce, 0, 25, {{1, 0, 100}}, {{1, 0, 100}},
               "bwd")}});
    bundle.programs.push_back(program);
  }
  return bundle;
}

/// zero3Bundle() with the parameter record weftc writes: the 8x8 weight
/// whose ZeRO shard (half of it, 128 bytes) is "w.shard". Categories come
/// from what the plan does with buffers, so without the record nothing says
/// "w.shard" holds a parameter.
inline Bundle shardedZero3Bundle() {
  Bundle bundle = zero3Bundle();
  Parameter w;
  w.name = "h.0.mlp.w";
  w.shape = {8, 8};
  w.init = {"normal", 0.02};
  w.hfName = "transformer.h.0.mlp.c_fc.weight";
  w.shards.push_back({0, 0, 0, -1, 0, 0, 2, 64});
  bundle.parameters.push_back(w);
  return bundle;
}

/// One rank whose buffer names say nothing ("b0".."b11"); what each holds
/// follows from the instructions alone:
///   b0  persistent  ZeRO shard of the weight (gathered, updated by AdamW)
///   b1  persistent  reduced gradient shard (AdamW's gradient)
///   b2  persistent  exp_avg          b3 persistent  exp_avg_sq
///   b4  persistent  loss             b5 arena       gathered weight
///   b6  arena       tokens           b7 arena       activation
///   b8  arena       activation gradient
///   b9  arena       unsharded weight gradient (written by the backward)
///   b10 arena       bucket: b9 copied in, reduce-scattered into b1
///   b11 arena       scratch of one kernel (read and written by it only)
inline Bundle categoriesBundle() {
  Bundle bundle = baseBundle({2, 1, 1}, 1);
  bundle.config["zero"] = 3;
  bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 0};
  Program program;
  program.arenaBytes = 7 * 256;
  program.persistentBytes = 5 * 128;
  for (int64_t b = 0; b < 5; ++b)
    program.buffers.push_back(
        buffer(b, "b" + std::to_string(b), Region::Persistent, 128 * b, 128));
  for (int64_t b = 5; b < 12; ++b)
    program.buffers.push_back(
        buffer(b, "b" + std::to_string(b), Region::Arena, 256 * (b - 5), 256));
  const Program &p = program;
  Instruction adamw = op(Opcode::OptimizerStep,
                         {whole(p, 0), whole(p, 1), whole(p, 2), whole(p, 3)},
                         {whole(p, 0), whole(p, 2), whole(p, 3)}, "adamw");
  adamw.count = 32;
  program.streams.push_back(
      {"compute",
       {comm(Opcode::AllGather, 0, 32, {whole(p, 0)}, {whole(p, 5)}, "gather"),
        op(Opcode::LoadBatch, {}, {whole(p, 6)}, "data"),
        kernel(0, {whole(p, 6), whole(p, 5)}, {whole(p, 7)}, "fwd"),
        kernel(0, {whole(p, 7), whole(p, 11)}, {whole(p, 4), whole(p, 11)},
               "loss"),
        kernel(0, {whole(p, 7)}, {whole(p, 8)}, "bwd"),
        kernel(0, {whole(p, 8), whole(p, 7)}, {whole(p, 9)}, "bwd"),
        op(Opcode::Release, {}, {whole(p, 5)}, "bwd"),
        op(Opcode::Copy, {whole(p, 9)}, {whole(p, 10)}, "grad sync"),
        comm(Opcode::ReduceScatter, 0, 32, {whole(p, 10)}, {whole(p, 1)},
             "grad sync"),
        adamw}});
  bundle.programs.push_back(program);
  return bundle;
}

/// One rank, three 192 s kernels in a row: arena buffers "a" (written by the
/// first, read by the second) and "b" (written by the third) share the same
/// bytes at different times.
inline Bundle reuseBundle() {
  Bundle bundle = baseBundle({1, 1, 1}, 1);
  bundle.rankRoles = {0};
  Program program;
  program.persistentBytes = 64;
  program.arenaBytes = 128;
  program.buffers = {buffer(0, "w", Region::Persistent, 0, 64),
                     buffer(1, "a", Region::Arena, 0, 128),
                     buffer(2, "b", Region::Arena, 0, 128)};
  program.streams.push_back(
      {"compute",
       {kernel(0, {{0, 0, 64}}, {{1, 0, 128}}, "fwd L0"),
        kernel(0, {{1, 0, 128}}, {{0, 0, 64}}, "fwd L1"),
        kernel(0, {{0, 0, 64}}, {{2, 0, 128}}, "fwd L2")}});
  bundle.programs.push_back(program);
  return bundle;
}

/// A GPipe plan over tp x pp x dp ranks: every layer is a gemm, a kernel and
/// a TP all-reduce forward, two gemms and an all-reduce backward; activations
/// go between stages by send/recv; gradients are all-reduced over DP on their
/// own stream, then AdamW runs. Instructions name the TP, PP and DP group
/// families (ids 0, 1, 2). With `shareReplicas` the DP replicas of a (pp, tp)
/// position share one program (one role per position); otherwise every rank
/// has its own program.
inline Bundle gpipeBundle(int64_t tp, int64_t pp, int64_t dp,
                          int64_t microBatches, int64_t layersPerStage,
                          bool shareReplicas = false) {
  Mesh mesh{dp, pp, tp};
  int64_t numRoles = shareReplicas ? pp * tp : mesh.worldSize();
  Bundle bundle = baseBundle(mesh, numRoles);
  bundle.training.gradAccum = microBatches;
  bundle.training.globalBatch = microBatches * dp;
  bundle.config["pp"] = pp;
  bundle.config["schedule"] = "gpipe";
  // Families: TP groups per (dp, pp), PP groups per (dp, tp), DP groups per
  // (pp, tp).
  const int64_t tpFamily = 0, ppFamily = 1, dpFamily = 2;
  GroupFamily tpGroups{tpFamily, GroupKind::TP, {}};
  GroupFamily ppGroups{ppFamily, GroupKind::PP, {}};
  GroupFamily dpGroups{dpFamily, GroupKind::DP, {}};
  for (int64_t d = 0; d < dp; ++d)
    for (int64_t s = 0; s < pp; ++s) {
      std::vector<int64_t> &ranks = tpGroups.groups.emplace_back();
      for (int64_t t = 0; t < tp; ++t)
        ranks.push_back(mesh.rankOf({d, s, t}));
    }
  for (int64_t d = 0; d < dp; ++d)
    for (int64_t t = 0; t < tp; ++t) {
      std::vector<int64_t> &ranks = ppGroups.groups.emplace_back();
      for (int64_t s = 0; s < pp; ++s)
        ranks.push_back(mesh.rankOf({d, s, t}));
    }
  for (int64_t s = 0; s < pp; ++s)
    for (int64_t t = 0; t < tp; ++t) {
      std::vector<int64_t> &ranks = dpGroups.groups.emplace_back();
      for (int64_t d = 0; d < dp; ++d)
        ranks.push_back(mesh.rankOf({d, s, t}));
    }
  bundle.groups = {tpGroups, ppGroups, dpGroups};

  constexpr int64_t kAct = 1 << 20, kWeight = 1 << 22;
  for (int64_t rank = 0; rank < mesh.worldSize(); ++rank)
    bundle.rankRoles.push_back(shareReplicas ? rank % (pp * tp) : rank);
  for (int64_t role = 0; role < numRoles; ++role) {
    // The role's first rank stands for all of its ranks: they differ only by
    // DP index, which the families resolve.
    int64_t rank = role;
    int64_t stage = mesh.coordOf(rank).pp;
    Program program;
    program.role = role;
    program.numEvents = 2;
    program.persistentBytes = 4 * kWeight;
    program.arenaBytes = 3 * kAct;
    program.buffers = {
        buffer(0, "w", Region::Persistent, 0, kWeight),
        buffer(1, "w.grad", Region::Persistent, kWeight, kWeight),
        buffer(2, "w.exp_avg", Region::Persistent, 2 * kWeight, kWeight),
        buffer(3, "w.exp_avg_sq", Region::Persistent, 3 * kWeight, kWeight),
        buffer(4, "act", Region::Arena, 0, kAct),
        buffer(5, "act.out", Region::Arena, kAct, kAct),
        buffer(6, "act.grad", Region::Arena, 2 * kAct, kAct)};
    const Program &p = program;
    std::vector<Instruction> compute;
    auto gemm = [&](BufferRange a, BufferRange out, std::string phase) {
      Instruction inst = op(Opcode::Gemm, {a, whole(p, 0)}, {out}, phase);
      inst.gemm = {false, false, 1024, 1024, 256, 1024, 256, 1024, 1.0, 0.0};
      return inst;
    };
    auto tpAllReduce = [&](int64_t buffer, std::string phase) {
      return comm(Opcode::AllReduce, tpFamily, kAct / 4, {whole(p, buffer)},
                  {whole(p, buffer)}, phase);
    };
    int64_t prev = stage - 1, next = stage + 1; // PP-group-relative peers
    for (int64_t mb = 0; mb < microBatches; ++mb) {
      std::string tag = " mb" + std::to_string(mb);
      if (stage == 0)
        compute.push_back(op(Opcode::LoadBatch, {}, {whole(p, 4)}, "data"));
      else
        compute.push_back(comm(Opcode::Recv, ppFamily, kAct / 4, {},
                               {whole(p, 4)}, "fwd" + tag, prev));
      for (int64_t l = 0; l < layersPerStage; ++l) {
        std::string phase = "fwd L" + std::to_string(l) + tag;
        compute.push_back(gemm(whole(p, 4), whole(p, 5), phase));
        compute.push_back(kernel(0, {whole(p, 5)}, {whole(p, 4)}, phase));
        compute.push_back(tpAllReduce(4, phase));
      }
      if (stage + 1 < pp)
        compute.push_back(comm(Opcode::Send, ppFamily, kAct / 4, {whole(p, 4)},
                               {}, "fwd" + tag, next));
    }
    for (int64_t mb = 0; mb < microBatches; ++mb) {
      std::string tag = " mb" + std::to_string(mb);
      if (stage + 1 < pp)
        compute.push_back(comm(Opcode::Recv, ppFamily, kAct / 4, {},
                               {whole(p, 6)}, "bwd" + tag, next));
      else
        compute.push_back(
            kernel(0, {whole(p, 4)}, {whole(p, 6)}, "bwd loss" + tag));
      for (int64_t l = layersPerStage - 1; l >= 0; --l) {
        std::string phase = "bwd L" + std::to_string(l) + tag;
        compute.push_back(gemm(whole(p, 6), whole(p, 5), phase));
        Instruction wgrad = gemm(whole(p, 6), whole(p, 1), phase);
        wgrad.reads = {whole(p, 6), whole(p, 4)};
        compute.push_back(wgrad);
        compute.push_back(kernel(0, {whole(p, 5)}, {whole(p, 6)}, phase));
        compute.push_back(tpAllReduce(6, phase));
      }
      if (stage > 0)
        compute.push_back(comm(Opcode::Send, ppFamily, kAct / 4, {whole(p, 6)},
                               {}, "bwd" + tag, prev));
    }
    compute.push_back(event(Opcode::RecordEvent, 0, "bwd"));
    compute.push_back(event(Opcode::WaitEvent, 1, "adamw"));
    Instruction adamw = op(Opcode::OptimizerStep,
                           {whole(p, 0), whole(p, 1), whole(p, 2), whole(p, 3)},
                           {whole(p, 0), whole(p, 2), whole(p, 3)}, "adamw");
    adamw.count = kWeight / 4;
    compute.push_back(adamw);
    program.streams.push_back({"compute", compute});
    program.streams.push_back({"reducescatter",
                               {event(Opcode::WaitEvent, 0, "dp grads"),
                                comm(Opcode::AllReduce, dpFamily, kWeight / 4,
                                     {whole(p, 1)}, {whole(p, 1)}, "dp grads"),
                                event(Opcode::RecordEvent, 1, "dp grads")}});
    bundle.programs.push_back(program);
  }
  bundle.prediction.peakMemoryBytes.assign(numRoles, 4 * kWeight + 3 * kAct);
  return bundle;
}

} // namespace weft::inspect::test

#endif // WEFT_TEST_UNIT_INSPECT_INSPECTBUNDLES_H
