//===- TestBundles.h - Small valid bundles for the plan tests ---*- C++ -*-===//
//
// Each builder returns a bundle that verifies cleanly; tests corrupt one
// field at a time and expect one precise diagnostic.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TEST_UNIT_PLAN_TESTBUNDLES_H
#define WEFT_TEST_UNIT_PLAN_TESTBUNDLES_H

#include "weft/plan/Bundle.h"

#include <map>
#include <string>

namespace weft::plan::test {

inline BufferRange whole(const Program &program, int64_t buffer) {
  return {buffer, 0, program.buffers[buffer].size};
}

inline Instruction op(Opcode opcode, std::vector<BufferRange> reads,
                      std::vector<BufferRange> writes, std::string phase) {
  Instruction inst;
  inst.opcode = opcode;
  inst.reads = std::move(reads);
  inst.writes = std::move(writes);
  inst.phase = std::move(phase);
  return inst;
}

inline Instruction kernel(int64_t id, std::vector<BufferRange> reads,
                          std::vector<BufferRange> writes, std::string phase) {
  Instruction inst =
      op(Opcode::Kernel, std::move(reads), std::move(writes), std::move(phase));
  inst.kernel = id;
  return inst;
}

inline Instruction comm(Opcode opcode, int64_t group, int64_t count,
                        std::vector<BufferRange> reads,
                        std::vector<BufferRange> writes, std::string phase,
                        int64_t peer = -1) {
  Instruction inst =
      op(opcode, std::move(reads), std::move(writes), std::move(phase));
  inst.group = group;
  inst.count = count;
  inst.peer = peer;
  return inst;
}

inline Instruction event(Opcode opcode, int64_t id, std::string phase) {
  Instruction inst = op(opcode, {}, {}, std::move(phase));
  inst.event = id;
  return inst;
}

inline Buffer buffer(int64_t id, std::string name, Region region,
                     int64_t offset, int64_t size, DType dtype = DType::F32) {
  Buffer out;
  out.id = id;
  out.name = std::move(name);
  out.region = region;
  out.offset = offset;
  out.size = size;
  out.dtype = dtype;
  out.alignment = 64;
  return out;
}

/// Appends kernel `name` with the next id, its source `kernels/<name>.cu`
/// holding `text`.
inline void addKernel(Bundle &bundle, const std::string &name,
                      std::map<std::string, int64_t> constants,
                      const std::string &text) {
  Kernel kernel;
  kernel.id = int64_t(bundle.kernels.size());
  kernel.name = name;
  kernel.source = "kernels/" + name + ".cu";
  kernel.constants = std::move(constants);
  bundle.files[kernel.source] = text;
  bundle.kernels.push_back(std::move(kernel));
}

/// Metadata shared by every test bundle; the mesh is set by the caller.
inline Bundle baseBundle(Mesh mesh, int64_t roles) {
  Bundle bundle;
  bundle.model = {"tiny", "gpt2"};
  bundle.mesh = mesh;
  bundle.training.seqLen = 16;
  bundle.training.precision = "fp32";
  bundle.training.microBatch = 1;
  bundle.training.gradAccum = 1;
  bundle.training.globalBatch = mesh.dp;
  bundle.training.lr = 6e-4;
  bundle.training.warmupSteps = 10;
  bundle.training.decaySteps = 1000;
  bundle.training.minLr = 6e-5;
  bundle.training.weightDecay = 0.1;
  bundle.training.beta2 = 0.95;
  bundle.training.gradClip = 1.0;
  bundle.prediction.stepTimeS = 0.125;
  bundle.prediction.mfu = 0.4;
  bundle.prediction.peakMemoryBytes.assign(roles, 4096);
  bundle.config = {{"tp", mesh.tp},
                   {"pp", mesh.pp},
                   {"dp", mesh.dp},
                   {"zero", 0},
                   {"schedule", "1f1b"}};
  addKernel(bundle, "embed", {{"hidden", 16}, {"vocab", 64}},
            "// embed kernel\n");
  return bundle;
}

/// Data parallel over 2 ranks: forward, backward into a persistent gradient,
/// gradient all-reduce, AdamW step. One role shared by both ranks.
inline Bundle dataParallelBundle() {
  Bundle bundle = baseBundle({2, 1, 1}, 1);
  bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 0};
  Program program;
  program.numEvents = 0;
  program.arenaBytes = 512;
  program.persistentBytes = 1024;
  program.buffers = {buffer(0, "w", Region::Persistent, 0, 256),
                     buffer(1, "w.grad", Region::Persistent, 256, 256),
                     buffer(2, "act", Region::Arena, 0, 256),
                     buffer(3, "tokens", Region::Arena, 256, 64),
                     buffer(4, "w.exp_avg", Region::Persistent, 512, 256),
                     buffer(5, "w.exp_avg_sq", Region::Persistent, 768, 256)};
  const Program &p = program;
  Instruction gemm =
      op(Opcode::Gemm, {whole(p, 2), whole(p, 2)}, {whole(p, 1)}, "bwd");
  gemm.gemm = {true, false, 8, 8, 8, 8, 8, 8, 1.0, 0.0};
  Instruction optimizer =
      op(Opcode::OptimizerStep,
         {whole(p, 0), whole(p, 1), whole(p, 4), whole(p, 5)},
         {whole(p, 0), whole(p, 4), whole(p, 5)}, "adamw");
  optimizer.count = 64;
  program.streams.push_back(
      {"compute",
       {op(Opcode::LoadBatch, {}, {whole(p, 3)}, "data"),
        kernel(0, {whole(p, 3), whole(p, 0)}, {whole(p, 2)}, "fwd"), gemm,
        comm(Opcode::AllReduce, 0, 64, {whole(p, 1)}, {whole(p, 1)}, "bwd"),
        optimizer}});
  bundle.programs.push_back(program);

  Parameter w;
  w.name = "h.0.mlp.w";
  w.shape = {8, 8};
  w.init = {"normal", 0.02};
  w.hfName = "transformer.h.0.mlp.c_fc.weight";
  w.hfTransposed = true;
  w.shards.push_back({0, 0, 0, -1, 0, 0, 1, 64});
  bundle.parameters.push_back(w);
  return bundle;
}

/// dataParallelBundle() with optimizer offload: the fp32 master weights,
/// both AdamW moments and the staging copies of the gradient and of the
/// updated weights live in the host region; the step copies the gradient to
/// the host, runs AdamW there and copies the weights back.
inline Bundle hostOffloadBundle() {
  Bundle bundle = dataParallelBundle();
  Program &program = bundle.programs[0];
  program.persistentBytes = 512;
  program.hostBytes = 1280;
  program.buffers[4] = buffer(4, "w.exp_avg", Region::Host, 0, 256);
  program.buffers[5] = buffer(5, "w.exp_avg_sq", Region::Host, 256, 256);
  program.buffers.push_back(buffer(6, "w.master", Region::Host, 512, 256));
  program.buffers.push_back(buffer(7, "w.grad.host", Region::Host, 768, 256));
  program.buffers.push_back(buffer(8, "w.host", Region::Host, 1024, 256));
  const Program &p = program;
  std::vector<Instruction> &compute = program.streams[0].instructions;
  Instruction optimizer =
      op(Opcode::OptimizerStep,
         {whole(p, 6), whole(p, 7), whole(p, 4), whole(p, 5)},
         {whole(p, 6), whole(p, 4), whole(p, 5), whole(p, 8)}, "adamw");
  optimizer.count = 64;
  compute.back() = op(Opcode::Copy, {whole(p, 1)}, {whole(p, 7)}, "adamw");
  compute.push_back(optimizer);
  compute.push_back(op(Opcode::Copy, {whole(p, 8)}, {whole(p, 0)}, "adamw"));
  bundle.parameters[0].shards.push_back({0, 6, 0, -1, 0, 0, 1, 64});
  return bundle;
}

/// A 2-stage pipeline: stage 0 sends activations forward, stage 1 sends the
/// activation gradient back.
inline Bundle pipelineBundle() {
  Bundle bundle = baseBundle({1, 2, 1}, 2);
  bundle.groups.push_back({0, GroupKind::PP, {{0, 1}}});
  bundle.rankRoles = {0, 1};
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.arenaBytes = 512;
    program.persistentBytes = 256;
    program.buffers = {buffer(0, "w", Region::Persistent, 0, 256),
                       buffer(1, "act", Region::Arena, 0, 128),
                       buffer(2, "act.grad", Region::Arena, 128, 128),
                       buffer(3, "tokens", Region::Arena, 256, 64)};
    const Program &p = program;
    std::vector<Instruction> insts;
    if (role == 0) {
      insts = {op(Opcode::LoadBatch, {}, {whole(p, 3)}, "data"),
               kernel(0, {whole(p, 3), whole(p, 0)}, {whole(p, 1)}, "fwd"),
               comm(Opcode::Send, 0, 32, {whole(p, 1)}, {}, "fwd", 1),
               comm(Opcode::Recv, 0, 32, {}, {whole(p, 2)}, "bwd", 1)};
    } else {
      insts = {comm(Opcode::Recv, 0, 32, {}, {whole(p, 1)}, "fwd", 0),
               kernel(0, {whole(p, 1), whole(p, 0)}, {whole(p, 2)}, "bwd"),
               comm(Opcode::Send, 0, 32, {whole(p, 2)}, {}, "bwd", 0)};
    }
    program.streams.push_back({"compute", insts});
    bundle.programs.push_back(program);
  }
  return bundle;
}

/// PP 2 x DP 2 (rank = dp * 2 + pp): the two DP replicas of each stage share
/// one program. Family 0 holds the PP groups [0, 1] and [2, 3], so the
/// send/recv of replica 0 and replica 1 resolve to different groups; family 1
/// holds the DP groups [0, 2] and [1, 3] for the gradient all-reduce.
inline Bundle pipelineDataParallelBundle() {
  Bundle bundle = baseBundle({2, 2, 1}, 2);
  bundle.groups.push_back({0, GroupKind::PP, {{0, 1}, {2, 3}}});
  bundle.groups.push_back({1, GroupKind::DP, {{0, 2}, {1, 3}}});
  bundle.rankRoles = {0, 1, 0, 1};
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.arenaBytes = 512;
    program.persistentBytes = 512;
    program.buffers = {buffer(0, "w", Region::Persistent, 0, 256),
                       buffer(1, "w.grad", Region::Persistent, 256, 256),
                       buffer(2, "act", Region::Arena, 0, 128),
                       buffer(3, "act.grad", Region::Arena, 128, 128),
                       buffer(4, "tokens", Region::Arena, 256, 64)};
    const Program &p = program;
    std::vector<Instruction> insts;
    if (role == 0) {
      insts = {op(Opcode::LoadBatch, {}, {whole(p, 4)}, "data"),
               kernel(0, {whole(p, 4), whole(p, 0)}, {whole(p, 2)}, "fwd"),
               comm(Opcode::Send, 0, 32, {whole(p, 2)}, {}, "fwd", 1),
               comm(Opcode::Recv, 0, 32, {}, {whole(p, 3)}, "bwd", 1),
               kernel(0, {whole(p, 3), whole(p, 4)}, {whole(p, 1)}, "bwd")};
    } else {
      insts = {comm(Opcode::Recv, 0, 32, {}, {whole(p, 2)}, "fwd", 0),
               kernel(0, {whole(p, 2), whole(p, 0)}, {whole(p, 3)}, "bwd"),
               comm(Opcode::Send, 0, 32, {whole(p, 3)}, {}, "bwd", 0),
               kernel(0, {whole(p, 2), whole(p, 3)}, {whole(p, 1)}, "bwd")};
    }
    insts.push_back(comm(Opcode::AllReduce, 1, 64, {whole(p, 1)}, {whole(p, 1)},
                         "grad sync"));
    program.streams.push_back({"compute", insts});
    bundle.programs.push_back(program);
  }
  return bundle;
}

/// ZeRO-3 over 2 ranks: the all-gather of a weight shard runs on its own
/// stream; compute waits on the event, uses the gathered weight and releases
/// it.
inline Bundle zero3Bundle() {
  Bundle bundle = baseBundle({2, 1, 1}, 1);
  bundle.config["zero"] = 3;
  bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 0};
  Program program;
  program.numEvents = 1;
  program.arenaBytes = 640;
  program.persistentBytes = 128;
  program.buffers = {buffer(0, "w.shard", Region::Persistent, 0, 128),
                     buffer(1, "w.full", Region::Arena, 0, 256),
                     buffer(2, "act", Region::Arena, 256, 256),
                     buffer(3, "tokens", Region::Arena, 512, 64)};
  const Program &p = program;
  program.streams.push_back(
      {"compute",
       {op(Opcode::LoadBatch, {}, {whole(p, 3)}, "data"),
        event(Opcode::WaitEvent, 0, "fwd L0"),
        kernel(0, {whole(p, 3), whole(p, 1)}, {whole(p, 2)}, "fwd L0"),
        op(Opcode::Release, {}, {whole(p, 1)}, "fwd L0")}});
  program.streams.push_back({"allgather",
                             {comm(Opcode::AllGather, 0, 32, {whole(p, 0)},
                                   {whole(p, 1)}, "gather L0"),
                              event(Opcode::RecordEvent, 0, "gather L0")}});
  bundle.programs.push_back(program);
  return bundle;
}

/// TP 2 (ranks 0 and 1, one role each) as the lowering makes it: the two
/// programs are alike but for a vocabulary-parallel kernel whose kernel id
/// differs (vocab_start is a kernel constant), a sequence-parallel slice copy
/// at a TP-dependent offset and a grad_norm that reads more on TP rank 0.
/// Stored as one program for roles [0, 1] with those three per role.
inline Bundle tensorParallelBundle() {
  Bundle bundle = baseBundle({1, 1, 2}, 2);
  bundle.groups.push_back({0, GroupKind::TP, {{0, 1}}});
  bundle.rankRoles = {0, 1};
  Kernel shard1 = bundle.kernels[0];
  shard1.id = 1;
  shard1.name = "embed.vocab1";
  shard1.constants["vocab_start"] = 32;
  bundle.kernels.push_back(shard1);
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.arenaBytes = 512;
    program.persistentBytes = 256;
    program.buffers = {buffer(0, "w", Region::Persistent, 0, 256),
                       buffer(1, "act", Region::Arena, 0, 256),
                       buffer(2, "act.slice", Region::Arena, 256, 128),
                       buffer(3, "tokens", Region::Arena, 384, 64),
                       buffer(4, "norm", Region::Arena, 448, 4)};
    const Program &p = program;
    Instruction gemm =
        op(Opcode::Gemm, {whole(p, 2), whole(p, 2)}, {whole(p, 2)}, "fwd");
    gemm.gemm = {false, true, 4, 4, 8, 4, 4, 4, 0.5, 0.0};
    Instruction fill = op(Opcode::Fill, {}, {whole(p, 1)}, "zero");
    fill.value = -0.25;
    std::vector<BufferRange> normReads = {whole(p, 2)};
    if (role == 0)
      normReads.insert(normReads.begin(), whole(p, 0));
    program.streams.push_back(
        {"compute",
         {op(Opcode::LoadBatch, {}, {whole(p, 3)}, "data"),
          kernel(role, {whole(p, 3), whole(p, 0)}, {whole(p, 1)}, "fwd"),
          comm(Opcode::AllReduce, 0, 64, {whole(p, 1)}, {whole(p, 1)}, "fwd"),
          op(Opcode::Copy, {{1, role * 128, 128}}, {whole(p, 2)}, "fwd sp"),
          gemm, op(Opcode::GradNorm, normReads, {whole(p, 4)}, "norm"), fill}});
    bundle.programs.push_back(program);
  }
  return bundle;
}

/// Coalesced (multi-member) collectives over DP 2, one role per rank (the
/// in-place all_gather member reads the rank's own block, so the two
/// programs differ there and are stored as one with that instruction per
/// role): a 3-member reduce_scatter of three gradients (8 + 4 + 4 f32 per
/// rank), a 2-member all_gather whose member 1 is in place (8 + 4), and a
/// 2-member in-place all_reduce of two slices of one buffer (4 + 8).
inline Bundle coalescedBundle() {
  Bundle bundle = baseBundle({2, 1, 1}, 2);
  bundle.groups.push_back({0, GroupKind::DP, {{0, 1}}});
  bundle.rankRoles = {0, 1};
  for (int64_t role = 0; role < 2; ++role) {
    Program program;
    program.role = role;
    program.persistentBytes = 576;
    program.buffers = {buffer(0, "g0", Region::Persistent, 0, 64),
                       buffer(1, "g1", Region::Persistent, 64, 32),
                       buffer(2, "g2", Region::Persistent, 128, 32),
                       buffer(3, "s0", Region::Persistent, 192, 32),
                       buffer(4, "s1", Region::Persistent, 256, 16),
                       buffer(5, "s2", Region::Persistent, 320, 16),
                       buffer(6, "full0", Region::Persistent, 384, 64),
                       buffer(7, "full1", Region::Persistent, 448, 32),
                       buffer(8, "sum", Region::Persistent, 512, 48)};
    const Program &p = program;
    program.streams.push_back(
        {"compute",
         {comm(Opcode::ReduceScatter, 0, 16,
               {whole(p, 0), whole(p, 1), whole(p, 2)},
               {whole(p, 3), whole(p, 4), whole(p, 5)}, "grad sync"),
          comm(Opcode::AllGather, 0, 12, {whole(p, 3), {7, role * 16, 16}},
               {whole(p, 6), whole(p, 7)}, "gather"),
          comm(Opcode::AllReduce, 0, 12, {{8, 0, 16}, {8, 16, 32}},
               {{8, 0, 16}, {8, 16, 32}}, "sum")}});
    bundle.programs.push_back(program);
  }
  return bundle;
}

} // namespace weft::plan::test

#endif // WEFT_TEST_UNIT_PLAN_TESTBUNDLES_H
