//===- StateGroups.cpp - Classifying a program's buffers into groups ------===//

#include "weft/exec/StateGroups.h"
#include "weft/exec/Error.h"

#include <algorithm>

namespace weft::exec {

using plan::Opcode;

std::array<StateGroup, kNumStateGroups> allStateGroups() {
  return {StateGroup::Params,          StateGroup::MasterParams,
          StateGroup::OptimizerStates, StateGroup::Gradients,
          StateGroup::Activations,     StateGroup::Other};
}

std::string_view toString(StateGroup group) {
  switch (group) {
  case StateGroup::Params:
    return "params";
  case StateGroup::MasterParams:
    return "master_params";
  case StateGroup::OptimizerStates:
    return "optimizer_states";
  case StateGroup::Gradients:
    return "gradients";
  case StateGroup::Activations:
    return "activations";
  case StateGroup::Other:
    return "other";
  }
  return "?";
}

std::optional<StateGroup> parseStateGroup(std::string_view text) {
  for (StateGroup group : allStateGroups())
    if (toString(group) == text)
      return group;
  return std::nullopt;
}

std::vector<StateGroup> parseStateGroupList(std::string_view text) {
  if (text == "all") {
    auto all = allStateGroups();
    return {all.begin(), all.end()};
  }
  std::vector<StateGroup> groups;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view name = text.substr(start, comma - start);
    std::optional<StateGroup> group = parseStateGroup(name);
    if (!group)
      throw Error("unknown state group '" + std::string(name) +
                  "' (expected all or a comma list of params, master_params, "
                  "optimizer_states, gradients, activations, other)");
    if (std::find(groups.begin(), groups.end(), *group) != groups.end())
      throw Error("state group '" + std::string(name) + "' is listed twice");
    groups.push_back(*group);
    if (comma == std::string_view::npos)
      return groups;
    start = comma + 1;
  }
}

std::vector<BufferFacts> analyzeBuffers(const plan::Bundle &bundle,
                                        const plan::Program &program) {
  const size_t n = program.buffers.size();
  std::vector<BufferFacts> facts(n);
  for (size_t b = 0; b < n; ++b)
    facts[b].arena = program.buffers[b].region == plan::Region::Arena;

  // Read by an all_gather: a parameter so read is a shard with a separate
  // (gathered) working copy.
  std::vector<bool> allGathered(n, false);
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions)
      if (inst.opcode == Opcode::AllGather)
        for (const plan::BufferRange &range : inst.reads) // every member
          allGathered[size_t(range.buffer)] = true;

  // Direct facts, one instruction at a time. Per buffer also: the one
  // instruction touching it (release aside), if only one does, and whether
  // it is read and written.
  constexpr int64_t kNone = -1, kMany = -2;
  std::vector<int64_t> onlyUser(n, kNone);
  std::vector<bool> read(n, false), written(n, false);
  int64_t index = 0;
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions) {
      ++index;
      if (inst.opcode == Opcode::Release)
        continue;
      auto use = [&](const plan::BufferRange &range) {
        int64_t &user = onlyUser[size_t(range.buffer)];
        user = user == kNone || user == index ? index : kMany;
      };
      bool reduction = inst.opcode == Opcode::AllReduce ||
                       inst.opcode == Opcode::ReduceScatter;
      for (const plan::BufferRange &range : inst.reads) {
        use(range);
        read[size_t(range.buffer)] = true;
      }
      for (const plan::BufferRange &range : inst.writes) {
        use(range);
        written[size_t(range.buffer)] = true;
        if (inst.opcode != Opcode::Copy && inst.opcode != Opcode::Fill &&
            !reduction)
          facts[size_t(range.buffer)].computed = true;
      }
      if (inst.opcode == Opcode::OptimizerStep && inst.reads.size() >= 4) {
        facts[size_t(inst.reads[2].buffer)].optimizerState = true;
        facts[size_t(inst.reads[3].buffer)].optimizerState = true;
        size_t param = size_t(inst.reads[0].buffer);
        if (inst.writes.size() >= 4 || allGathered[param])
          facts[param].masterParams = true;
        else
          facts[param].params = true;
        if (inst.writes.size() >= 4)
          facts[size_t(inst.writes[3].buffer)].params = true;
        facts[size_t(inst.reads[1].buffer)].gradients = true;
      } else if (inst.opcode == Opcode::GradNorm) {
        for (const plan::BufferRange &range : inst.reads)
          facts[size_t(range.buffer)].gradients = true;
      } else if (inst.opcode == Opcode::Clip) {
        for (const plan::BufferRange &range : inst.writes)
          facts[size_t(range.buffer)].gradients = true;
      }
    }
  for (size_t b = 0; b < n; ++b)
    facts[b].scratch = onlyUser[b] >= 0 && read[b] && written[b];
  for (const plan::Parameter &param : bundle.parameters)
    for (const plan::ShardSpec &shard : param.shards)
      if (shard.role == program.role && shard.buffer >= 0 &&
          size_t(shard.buffer) < n)
        facts[size_t(shard.buffer)].params = true;

  // Gathered copies of parameters, and the sources of gradients (what a
  // reduction, a copy or an in-place add turns into one, and what a
  // gradient is reduce-scattered into), to a fixed point (chains are short:
  // shard -> gathered; gradient -> bucket -> shard).
  auto holdsParams = [&](size_t b) {
    return (facts[b].params || facts[b].masterParams) &&
           !facts[b].optimizerState;
  };
  // A kernel adding a same-sized range into its output in place (reads
  // {out, addend}, writes {out}): ZeRO-2/3 add a later micro-batch's
  // reduce-scattered staging buffer into the shard that way.
  auto addendOf =
      [](const plan::Instruction &inst) -> const plan::BufferRange * {
    if (inst.opcode != Opcode::Kernel || inst.reads.size() != 2 ||
        inst.writes.size() != 1)
      return nullptr;
    const plan::BufferRange &out = inst.writes[0];
    for (size_t i = 0; i < 2; ++i)
      if (inst.reads[i] == out && inst.reads[1 - i].bytes == out.bytes &&
          inst.reads[1 - i].buffer != out.buffer)
        return &inst.reads[1 - i];
    return nullptr;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const plan::Stream &stream : program.streams)
      for (const plan::Instruction &inst : stream.instructions) {
        if (const plan::BufferRange *addend = addendOf(inst))
          if (facts[size_t(inst.writes[0].buffer)].gradients &&
              !facts[size_t(addend->buffer)].gradients) {
            facts[size_t(addend->buffer)].gradients = true;
            changed = true;
          }
        bool feeds = inst.opcode == Opcode::AllReduce ||
                     inst.opcode == Opcode::ReduceScatter ||
                     inst.opcode == Opcode::Copy;
        if (!feeds && inst.opcode != Opcode::AllGather)
          continue;
        // Input i to output i: a copy's one pair, or each member of a
        // collective.
        size_t pairs = std::min(inst.reads.size(), inst.writes.size());
        for (size_t m = 0; m < pairs; ++m) {
          size_t in = size_t(inst.reads[m].buffer),
                 out = size_t(inst.writes[m].buffer);
          if (inst.opcode == Opcode::AllGather && holdsParams(in) &&
              !facts[out].gathered) {
            facts[out].gathered = facts[out].params = true;
            changed = true;
          }
          if (feeds && facts[out].gradients && !facts[in].gradients) {
            facts[in].gradients = true;
            changed = true;
          }
          // A reduce-scatter of gradients into a staging buffer (ZeRO-2/3's
          // later micro-batches, added to the shard).
          if (inst.opcode == Opcode::ReduceScatter && facts[in].gradients &&
              !facts[out].gradients) {
            facts[out].gradients = true;
            changed = true;
          }
        }
      }
  }
  return facts;
}

StateGroup stateGroupOf(const BufferFacts &f) {
  if (f.arena)
    return StateGroup::Activations;
  if (f.optimizerState)
    return StateGroup::OptimizerStates;
  if (f.masterParams)
    return StateGroup::MasterParams;
  if (f.params)
    return StateGroup::Params;
  if (f.gradients)
    return StateGroup::Gradients;
  return StateGroup::Other;
}

std::vector<StateGroup> classifyStateGroups(const plan::Bundle &bundle,
                                            const plan::Program &program) {
  std::vector<BufferFacts> facts = analyzeBuffers(bundle, program);
  std::vector<StateGroup> groups(facts.size());
  for (size_t b = 0; b < facts.size(); ++b)
    groups[b] = stateGroupOf(facts[b]);
  return groups;
}

namespace {
/// Sorts and coalesces `g.ranges` and sums them into `g.bytes`.
void coalesce(StateGroupLayout &g) {
  auto merge = [](std::vector<ByteRange> &ranges, int64_t &total) {
    std::sort(ranges.begin(), ranges.end(),
              [](const ByteRange &a, const ByteRange &b) {
                return a.offset < b.offset;
              });
    std::vector<ByteRange> merged;
    for (const ByteRange &r : ranges) {
      if (!merged.empty() &&
          r.offset <= merged.back().offset + merged.back().bytes)
        merged.back().bytes =
            std::max(merged.back().offset + merged.back().bytes,
                     r.offset + r.bytes) -
            merged.back().offset;
      else
        merged.push_back(r);
    }
    ranges = std::move(merged);
    total = 0;
    for (const ByteRange &r : ranges)
      total += r.bytes;
  };
  merge(g.ranges, g.bytes);
  merge(g.hostRanges, g.hostBytes);
}

/// Adds `buffer` to the ranges of its region (arena buffers have none of
/// their own: Activations covers the whole arena).
void addRange(StateGroupLayout &g, const plan::Buffer &buffer) {
  if (buffer.region == plan::Region::Persistent)
    g.ranges.push_back({buffer.offset, buffer.size});
  else if (buffer.region == plan::Region::Host)
    g.hostRanges.push_back({buffer.offset, buffer.size});
}
} // namespace

StateGroupLayout weightsSnapshotLayout(const plan::Bundle &bundle,
                                       const plan::Program &program) {
  std::vector<BufferFacts> facts = analyzeBuffers(bundle, program);
  std::vector<bool> saved(facts.size(), false);
  for (size_t b = 0; b < facts.size(); ++b)
    saved[b] = facts[b].params && !facts[b].gathered &&
               !facts[b].masterParams && !facts[b].optimizerState;
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions)
      if (inst.opcode == plan::Opcode::AllGather)
        for (size_t m = 0; m < std::min(inst.reads.size(), inst.writes.size());
             ++m) // every member
          if (facts[size_t(inst.writes[m].buffer)].gathered)
            saved[size_t(inst.reads[m].buffer)] = true;
  // A host staging copy of saved device weights (optimizer offload writes
  // the updated weights to host memory and copies them to the device).
  for (const plan::Stream &stream : program.streams)
    for (const plan::Instruction &inst : stream.instructions)
      if (inst.opcode == plan::Opcode::Copy && !inst.reads.empty() &&
          !inst.writes.empty() &&
          program.buffers[size_t(inst.reads[0].buffer)].region ==
              plan::Region::Host &&
          program.buffers[size_t(inst.writes[0].buffer)].region ==
              plan::Region::Persistent &&
          saved[size_t(inst.writes[0].buffer)])
        saved[size_t(inst.reads[0].buffer)] = false;
  StateGroupLayout layout;
  layout.group = StateGroup::Params;
  for (size_t b = 0; b < facts.size(); ++b) {
    const plan::Buffer &buffer = program.buffers[b];
    if (!saved[b] || buffer.region == plan::Region::Arena)
      continue;
    layout.buffers.push_back(int64_t(b));
    addRange(layout, buffer);
  }
  coalesce(layout);
  return layout;
}

std::array<StateGroupLayout, kNumStateGroups>
stateGroupLayout(const plan::Bundle &bundle, const plan::Program &program) {
  std::array<StateGroupLayout, kNumStateGroups> layout;
  for (StateGroup group : allStateGroups()) {
    layout[size_t(group)].group = group;
    layout[size_t(group)].region = group == StateGroup::Activations
                                       ? plan::Region::Arena
                                       : plan::Region::Persistent;
  }
  std::vector<StateGroup> groups = classifyStateGroups(bundle, program);
  for (size_t b = 0; b < groups.size(); ++b) {
    const plan::Buffer &buffer = program.buffers[b];
    StateGroupLayout &g = layout[size_t(groups[b])];
    g.buffers.push_back(int64_t(b));
    addRange(g, buffer);
  }
  if (program.arenaBytes > 0)
    layout[size_t(StateGroup::Activations)].ranges = {{0, program.arenaBytes}};
  for (StateGroupLayout &g : layout)
    coalesce(g);
  return layout;
}

std::vector<int64_t> weightsSnapshotWriters(const plan::Bundle &bundle) {
  // Whether each role's snapshot is the same on every DP replica.
  std::vector<bool> replicated(bundle.programs.size(), true);
  for (const plan::Program &program : bundle.programs) {
    StateGroupLayout layout = weightsSnapshotLayout(bundle, program);
    for (const plan::Parameter &param : bundle.parameters)
      for (const plan::ShardSpec &shard : param.shards)
        if (shard.role == program.role && shard.zeroShards > 1 &&
            std::binary_search(layout.buffers.begin(), layout.buffers.end(),
                               shard.buffer))
          replicated[size_t(program.role)] = false;
  }
  std::vector<int64_t> writers(size_t(bundle.mesh.worldSize()));
  for (int64_t rank = 0; rank < int64_t(writers.size()); ++rank) {
    plan::MeshCoord coord = bundle.mesh.coordOf(rank);
    int64_t replica = bundle.mesh.rankOf({0, coord.pp, coord.tp});
    int64_t role = bundle.rankRoles.at(size_t(rank));
    bool shared = replicated[size_t(role)] &&
                  bundle.rankRoles.at(size_t(replica)) == role;
    writers[size_t(rank)] = shared ? replica : rank;
  }
  return writers;
}

} // namespace weft::exec
