//===- StateGroupsTest.cpp - Buffers classified into state groups ---------===//
//
// The classification rule of StateGroups.h on the MLP plans (DDP, ZeRO-1)
// and on a hand-built mixed-precision program (fp32 master + bf16 copy).
//
//===----------------------------------------------------------------------===//

#include "weft/exec/StateGroups.h"
#include "e2e/MlpBundle.h"
#include "unit/plan/TestBundles.h"
#include "weft/exec/Error.h"
#include "weft/inspect/State.h"
#include "weft/plan/Error.h"

#include <gtest/gtest.h>

#include <map>

using namespace weft;
using exec::StateGroup;
using plan::test::op;

namespace {

/// buffer name -> group name, for readable expectations.
std::map<std::string, std::string> groupsByName(const plan::Bundle &bundle) {
  const plan::Program &program = bundle.programs[0];
  std::vector<StateGroup> groups = exec::classifyStateGroups(bundle, program);
  std::map<std::string, std::string> out;
  for (size_t b = 0; b < groups.size(); ++b)
    out[program.buffers[b].name] = std::string(exec::toString(groups[b]));
  return out;
}

/// Appends a buffer named x<id> to `program`; its whole range.
plan::BufferRange addBuffer(plan::Program &program, plan::Region region,
                            int64_t offset, int64_t size) {
  plan::Buffer b;
  b.id = int64_t(program.buffers.size());
  b.name = "x" + std::to_string(b.id);
  b.region = region;
  b.offset = offset;
  b.size = size;
  program.buffers.push_back(b);
  return plan::BufferRange{b.id, 0, size};
}

} // namespace

TEST(StateGroups, DataParallelPlan) {
  weft::test::MlpConfig config;
  config.variant = "ddp";
  config.dp = 2;
  auto groups = groupsByName(weft::test::buildMlpBundle(config));
  EXPECT_EQ(groups["w1"], "params"); // the optimizer updates the only copy
  EXPECT_EQ(groups["w1.grad"], "gradients");
  EXPECT_EQ(groups["w1.exp_avg"], "optimizer_states");
  EXPECT_EQ(groups["w1.exp_avg_sq"], "optimizer_states");
  EXPECT_EQ(groups["loss"], "other");
  EXPECT_EQ(groups["grad.sumsq"], "other");
  EXPECT_EQ(groups["tokens"], "activations");
  EXPECT_EQ(groups["a.grad"], "activations"); // arena: dead between steps
  for (const auto &[name, group] : groups)
    EXPECT_NE(group, "master_params") << name;
}

TEST(StateGroups, ZeroOnePlanSeparatesMasterShardsAndGradientInputs) {
  weft::test::MlpConfig config;
  config.variant = "zero1";
  config.dp = 2;
  auto groups = groupsByName(weft::test::buildMlpBundle(config));
  EXPECT_EQ(groups["w2"], "params");               // gathered working copy
  EXPECT_EQ(groups["w2.master"], "master_params"); // the shard AdamW updates
  EXPECT_EQ(groups["w2.grad.shard"], "gradients"); // AdamW's gradient
  EXPECT_EQ(groups["w2.grad"], "gradients");       // reduce_scatter input
  EXPECT_EQ(groups["w2.exp_avg"], "optimizer_states");
}

TEST(StateGroups, MixedPrecisionCopyIsParamsAndMasterIsSeparate) {
  using namespace weft::plan;
  Bundle bundle;
  Program program;
  auto add = [&](const std::string &name, Region region, int64_t offset,
                 int64_t size, DType dtype) {
    Buffer b;
    b.id = int64_t(program.buffers.size());
    b.name = name;
    b.region = region;
    b.offset = offset;
    b.size = size;
    b.dtype = dtype;
    program.buffers.push_back(b);
    return BufferRange{b.id, 0, size};
  };
  // Names deliberately say nothing: the rule reads the instructions.
  BufferRange master = add("a", Region::Persistent, 0, 64, DType::F32);
  BufferRange grad = add("b", Region::Persistent, 64, 32, DType::BF16);
  BufferRange m = add("c", Region::Persistent, 128, 64, DType::F32);
  BufferRange v = add("d", Region::Persistent, 192, 64, DType::F32);
  BufferRange copy = add("e", Region::Persistent, 256, 32, DType::BF16);
  BufferRange bucket = add("f", Region::Persistent, 320, 32, DType::BF16);
  add("g", Region::Persistent, 384, 4, DType::F32);
  Instruction reduce = op(Opcode::AllReduce, {bucket}, {grad}, "");
  Instruction step =
      op(Opcode::OptimizerStep, {master, grad, m, v}, {master, m, v, copy}, "");
  program.streams.push_back({"compute", {reduce, step}});
  std::vector<StateGroup> groups = exec::classifyStateGroups(bundle, program);
  EXPECT_EQ(groups,
            (std::vector<StateGroup>{
                StateGroup::MasterParams, StateGroup::Gradients,
                StateGroup::OptimizerStates, StateGroup::OptimizerStates,
                StateGroup::Params, StateGroup::Gradients, StateGroup::Other}));
}

TEST(StateGroups, FactsFollowCopiesAndReductionsToTheGradientSources) {
  // One analysis (analyzeBuffers) behind the groups and weft-inspect's
  // categories: a gradient's sources through copies and reductions hold
  // gradients, whatever wrote them.
  using namespace weft::plan;
  Bundle bundle;
  Program program;
  auto add = [&](Region region, int64_t offset, int64_t size) {
    return addBuffer(program, region, offset, size);
  };
  BufferRange param = add(Region::Persistent, 0, 64);
  BufferRange grad = add(Region::Persistent, 64, 64);
  BufferRange m = add(Region::Persistent, 128, 64);
  BufferRange v = add(Region::Persistent, 192, 64);
  BufferRange local = add(Region::Arena, 0, 64);   // backward writes it
  BufferRange bucket = add(Region::Arena, 64, 64); // copy -> all_reduce
  Instruction backward = op(Opcode::Kernel, {}, {local}, "");
  Instruction stage = op(Opcode::Copy, {local}, {bucket}, "");
  Instruction reduce = op(Opcode::AllReduce, {bucket}, {grad}, "");
  Instruction step =
      op(Opcode::OptimizerStep, {param, grad, m, v}, {param, m, v}, "");
  program.streams.push_back({"compute", {backward, stage, reduce, step}});
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  ASSERT_EQ(facts.size(), 6u);
  EXPECT_TRUE(facts[1].gradients);
  EXPECT_TRUE(facts[5].gradients); // reduction input
  EXPECT_TRUE(facts[4].gradients); // copy input
  EXPECT_TRUE(facts[4].computed);
  EXPECT_FALSE(facts[5].computed); // only a copy writes it
  EXPECT_TRUE(facts[0].params);
  EXPECT_FALSE(facts[0].masterParams); // no separate working copy
  EXPECT_EQ(exec::classifyStateGroups(bundle, program),
            (std::vector<StateGroup>{
                StateGroup::Params, StateGroup::Gradients,
                StateGroup::OptimizerStates, StateGroup::OptimizerStates,
                StateGroup::Activations, StateGroup::Activations}));
}

TEST(StateGroups, AReduceScatterOfGradientsWritesGradients) {
  // ZeRO-2/3's later micro-batches: a gradient is reduce-scattered into a
  // staging buffer that an add folds into the shard. The staging buffer
  // holds gradients (weft-inspect: comm_buckets, not activations), though
  // nothing after it is a reduction or copy into a known gradient.
  using namespace weft::plan;
  Bundle bundle;
  Program program;
  auto add = [&](int64_t offset, int64_t size) {
    return addBuffer(program, Region::Arena, offset, size);
  };
  BufferRange grad = add(0, 128);  // the backward writes it
  BufferRange part = add(128, 64); // the reduce-scatter's output
  BufferRange other = add(192, 64);
  Instruction backward = op(Opcode::Kernel, {}, {grad}, "");
  Instruction gradNorm = op(Opcode::GradNorm, {grad}, {other}, "");
  Instruction scatter = op(Opcode::ReduceScatter, {grad}, {part}, "");
  program.streams.push_back({"compute", {backward, gradNorm, scatter}});
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  ASSERT_EQ(facts.size(), 3u);
  EXPECT_TRUE(facts[0].gradients);
  EXPECT_TRUE(facts[1].gradients);
  EXPECT_FALSE(facts[1].computed); // only a reduction writes it
  EXPECT_FALSE(facts[2].gradients);
}

TEST(StateGroups, AnAddIntoTheShardMakesItsAddendAndItsSourceGradients) {
  // What a compiled ZeRO-2 plan does with a later micro-batch: the backward
  // writes its gradient, a reduce-scatter moves it into a staging buffer and
  // an in-place add folds that into the shard the optimizer reads. Only the
  // shard is known as a gradient (grad_norm reads it); the add makes the
  // staging buffer one, the reduce-scatter then its source. A kernel that
  // writes a gradient from other inputs (a weight-gradient kernel) does not
  // make its inputs gradients.
  using namespace weft::plan;
  Bundle bundle;
  Program program;
  auto add = [&](int64_t offset, int64_t size) {
    return addBuffer(program, Region::Arena, offset, size);
  };
  BufferRange microBatch = add(0, 128), staging = add(128, 64),
              shard = add(192, 64), norm = add(256, 4), input = add(260, 64);
  Instruction backward = op(Opcode::Kernel, {input}, {microBatch}, "");
  Instruction scatter = op(Opcode::ReduceScatter, {microBatch}, {staging}, "");
  Instruction accumulate = op(Opcode::Kernel, {shard, staging}, {shard}, "");
  Instruction fromInput = op(Opcode::Kernel, {shard, input}, {shard}, "");
  fromInput.reads[1].bytes = 32; // not an element-wise addend of the shard
  Instruction gradNorm = op(Opcode::GradNorm, {shard}, {norm}, "");
  program.streams.push_back(
      {"compute", {backward, scatter, accumulate, fromInput, gradNorm}});
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  ASSERT_EQ(facts.size(), 5u);
  EXPECT_TRUE(facts[0].gradients);  // the micro-batch's gradient
  EXPECT_TRUE(facts[1].gradients);  // the staging buffer
  EXPECT_TRUE(facts[2].gradients);  // the shard
  EXPECT_FALSE(facts[4].gradients); // the backward's input
}

TEST(StateGroups, EveryMemberOfACollectiveCounts) {
  // A gradient bucket reduce-scattered as members: member 1's input is a
  // gradient (grad_norm reads it), so its staging output holds gradients
  // too; a 2-member all_gather whose member 1 gathers a parameter shard
  // writes a gathered parameter, and the shard is what a weights snapshot
  // saves.
  using namespace weft::plan;
  Bundle bundle;
  Program program;
  auto add = [&](Region region, int64_t offset, int64_t size) {
    return addBuffer(program, region, offset, size);
  };
  BufferRange act = add(Region::Arena, 0, 128);        // 0
  BufferRange grad = add(Region::Arena, 128, 128);     // 1
  BufferRange part0 = add(Region::Arena, 256, 64);     // 2
  BufferRange part1 = add(Region::Arena, 320, 64);     // 3
  BufferRange norm = add(Region::Arena, 384, 4);       // 4
  BufferRange other = add(Region::Persistent, 0, 64);  // 5
  BufferRange shard = add(Region::Persistent, 64, 64); // 6
  BufferRange full0 = add(Region::Arena, 512, 128);    // 7
  BufferRange full1 = add(Region::Arena, 640, 128);    // 8
  Instruction backward = op(Opcode::Kernel, {}, {act, grad}, "");
  Instruction gradNorm = op(Opcode::GradNorm, {grad}, {norm}, "");
  Instruction scatter =
      op(Opcode::ReduceScatter, {act, grad}, {part0, part1}, "");
  Instruction gather =
      op(Opcode::AllGather, {other, shard}, {full0, full1}, "");
  program.streams.push_back({"compute", {backward, gradNorm, scatter, gather}});
  Parameter w;
  w.name = "w";
  w.shape = {32};
  w.shards.push_back({0, 6, 0, -1, 0, 0, 2, 32});
  bundle.parameters.push_back(w);
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  ASSERT_EQ(facts.size(), 9u);
  EXPECT_TRUE(facts[1].gradients);
  EXPECT_TRUE(facts[3].gradients); // member 1's output
  EXPECT_FALSE(facts[2].gradients);
  EXPECT_TRUE(facts[8].gathered); // member 1 gathers the shard
  EXPECT_TRUE(facts[8].params);
  EXPECT_FALSE(facts[7].gathered);
  exec::StateGroupLayout layout = exec::weightsSnapshotLayout(bundle, program);
  EXPECT_EQ(layout.buffers, std::vector<int64_t>{6});
}

TEST(StateGroups, LayoutCoalescesRangesAndTheArenaIsOneRange) {
  weft::test::MlpConfig config;
  config.variant = "zero1";
  config.dp = 2;
  plan::Bundle bundle = weft::test::buildMlpBundle(config);
  const plan::Program &program = bundle.programs[0];
  auto layout = exec::stateGroupLayout(bundle, program);
  int64_t persistent = 0;
  for (StateGroup group : exec::allStateGroups()) {
    const exec::StateGroupLayout &g = layout[size_t(group)];
    EXPECT_EQ(g.group, group);
    int64_t sum = 0;
    for (size_t i = 0; i < g.ranges.size(); ++i) {
      sum += g.ranges[i].bytes;
      if (i > 0) { // sorted and disjoint, not touching (else merged)
        EXPECT_GT(g.ranges[i].offset,
                  g.ranges[i - 1].offset + g.ranges[i - 1].bytes);
      }
    }
    EXPECT_EQ(sum, g.bytes);
    if (group != StateGroup::Activations)
      persistent += g.bytes;
  }
  int64_t buffers = 0;
  for (const plan::Buffer &b : program.buffers)
    if (b.region == plan::Region::Persistent)
      buffers += b.size;
  EXPECT_EQ(persistent, buffers); // every persistent byte in one group
  const exec::StateGroupLayout &arena = layout[size_t(StateGroup::Activations)];
  ASSERT_EQ(arena.ranges.size(), 1u);
  EXPECT_EQ(arena.ranges[0].offset, 0);
  EXPECT_EQ(arena.bytes, program.arenaBytes);
}

TEST(StateGroups, ParsesListsAndRejectsUnknownNamesInOneLine) {
  EXPECT_EQ(exec::parseStateGroupList("all").size(), 6u);
  EXPECT_EQ(
      exec::parseStateGroupList("gradients,params"),
      (std::vector<StateGroup>{StateGroup::Gradients, StateGroup::Params}));
  for (const char *bad :
       {"weights", "params,,gradients", "params,params", ""}) {
    try {
      exec::parseStateGroupList(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const exec::Error &error) {
      std::string message = error.what();
      EXPECT_EQ(message.find('\n'), std::string::npos);
      EXPECT_NE(message.find("state group"), std::string::npos) << message;
    }
  }
}

TEST(StateGroups, InspectShowsWhereEachGroupLives) {
  weft::test::MlpConfig config;
  config.variant = "zero1";
  config.dp = 2;
  plan::Bundle bundle = weft::test::buildMlpBundle(config);
  nlohmann::json state = inspect::stateJson(bundle, 1);
  ASSERT_EQ(state["roles"].size(), 1u);
  const nlohmann::json &role = state["roles"][0];
  EXPECT_EQ(role["ranks"], nlohmann::json::array({0, 1}));
  ASSERT_EQ(role["groups"].size(), 6u);
  const nlohmann::json &master = role["groups"][1];
  EXPECT_EQ(master["group"], "master_params");
  EXPECT_EQ(master["buffers"],
            nlohmann::json::array({"wte.master", "w1.master", "w2.master"}));
  const nlohmann::json &arena = role["groups"][4];
  EXPECT_EQ(arena["region"], "arena");
  EXPECT_EQ(arena["offload"], "released, no copy");
  EXPECT_EQ(arena["bytes"], bundle.programs[0].arenaBytes);
  std::string text = inspect::stateText(state);
  EXPECT_NE(text.find("master_params"), std::string::npos) << text;
  EXPECT_THROW(inspect::stateJson(bundle, 7), plan::Error);
}

TEST(StateGroups, HostRegionRangesAreKeptApart) {
  // Optimizer offload (test/unit/plan/TestBundles.h): master, moments and
  // both staging copies in the host region.
  plan::Bundle bundle = plan::test::hostOffloadBundle();
  const plan::Program &program = bundle.programs[0];
  auto groups = groupsByName(bundle);
  EXPECT_EQ(groups["w.master"], "master_params");
  EXPECT_EQ(groups["w.exp_avg"], "optimizer_states");
  EXPECT_EQ(groups["w.grad.host"], "gradients");
  EXPECT_EQ(groups["w.grad"], "gradients"); // the copy's source
  EXPECT_EQ(groups["w.host"], "params");
  EXPECT_EQ(groups["w"], "params");
  auto layout = exec::stateGroupLayout(bundle, program);
  const exec::StateGroupLayout &states =
      layout[size_t(StateGroup::OptimizerStates)];
  EXPECT_EQ(states.bytes, 0); // nothing on the device to offload
  ASSERT_EQ(states.hostRanges.size(), 1u);
  EXPECT_EQ(states.hostRanges[0].offset, 0);
  EXPECT_EQ(states.hostBytes, 512);
  const exec::StateGroupLayout &params = layout[size_t(StateGroup::Params)];
  EXPECT_EQ(params.bytes, 256);     // w
  EXPECT_EQ(params.hostBytes, 256); // w.host
  int64_t device = 0, host = 0;
  for (const exec::StateGroupLayout &g : layout)
    if (g.group != StateGroup::Activations) {
      device += g.bytes;
      host += g.hostBytes;
    }
  EXPECT_EQ(device, program.persistentBytes);
  EXPECT_EQ(host, program.hostBytes);
  // A weights snapshot holds the device working copy, not its host staging
  // copy (the copy moves w.host into w each step).
  exec::StateGroupLayout weights = exec::weightsSnapshotLayout(bundle, program);
  EXPECT_EQ(weights.buffers, (std::vector<int64_t>{0}));
  EXPECT_EQ(weights.hostBytes, 0);
  // weft-inspect state shows the host bytes.
  nlohmann::json state = inspect::stateJson(bundle, 0);
  EXPECT_EQ(state["roles"][0]["host_bytes"], 1280);
  EXPECT_EQ(state["roles"][0]["groups"][2]["host_bytes"], 512);
  std::string text = inspect::stateText(state);
  EXPECT_NE(text.find("arena 512 B, host 1.25 KiB\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("optimizer_states  512 B in host, 1 range(s); offload: "
                      "nothing to move (host memory already)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("params            256 B in persistent, 1 range(s) + "
                      "256 B in host, 1 range(s); offload: copied"),
            std::string::npos)
      << text;
}

TEST(StateGroups, DpReplicasShareAWeightsSnapshotUnlessItIsSharded) {
  // ZeRO-0 over 2 DP ranks: both hold the same weights, so rank 1's
  // snapshot is rank 0's file; with the parameter split over DP each rank
  // writes its own.
  plan::Bundle bundle = weft::plan::test::dataParallelBundle();
  EXPECT_EQ(exec::weightsSnapshotWriters(bundle), (std::vector<int64_t>{0, 0}));
  bundle.parameters[0].shards[0].zeroShards = 2;
  EXPECT_EQ(exec::weightsSnapshotWriters(bundle), (std::vector<int64_t>{0, 1}));
}
