//===- Simulator.cpp - Discrete-event simulation of a plan's step ---------===//

#include "weft/inspect/Simulator.h"

#include "weft/plan/Epilogue.h"
#include "weft/plan/Error.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <tuple>

namespace weft::inspect {

using plan::Opcode;

bool isComputeOp(Opcode opcode) {
  switch (opcode) {
  case Opcode::Kernel:
  case Opcode::Gemm:
  case Opcode::LoadBatch:
  case Opcode::Copy:
  case Opcode::Fill:
  case Opcode::OptimizerStep:
  case Opcode::GradNorm:
  case Opcode::Clip:
    return true;
  default:
    return false;
  }
}

bool isCommOp(Opcode opcode) {
  return plan::isCollective(opcode) || plan::isPointToPoint(opcode);
}

int64_t hostOperands(const plan::Program &program,
                     const plan::Instruction &inst) {
  auto onHost = [&](const plan::BufferRange &range) {
    return range.buffer >= 0 &&
           range.buffer < int64_t(program.buffers.size()) &&
           program.buffers[range.buffer].region == plan::Region::Host;
  };
  int64_t host = 0;
  for (const auto *ranges : {&inst.reads, &inst.writes})
    host += std::count_if(ranges->begin(), ranges->end(), onHost);
  return host;
}

const plan::Kernel *attentionKernel(const plan::Bundle &bundle,
                                    const plan::Instruction &inst) {
  if (inst.opcode != Opcode::Kernel || inst.kernel < 0 ||
      inst.kernel >= int64_t(bundle.kernels.size()))
    return nullptr;
  const plan::Kernel &kernel = bundle.kernels[size_t(inst.kernel)];
  return kernel.name == "attention_forward" ||
                 kernel.name == "attention_backward"
             ? &kernel
             : nullptr;
}

static planner::Precision precisionOf(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::BF16:
    return planner::Precision::BF16;
  case plan::DType::F16:
    return planner::Precision::FP16;
  default:
    return planner::Precision::FP32;
  }
}

InstructionCosts::InstructionCosts(const plan::Bundle &bundle,
                                   planner::Cluster cluster,
                                   planner::CostConstants constants)
    : bundle(bundle), hardware(std::move(cluster)),
      consts(planner::withClusterOverrides(constants, hardware)) {
  // A group's span follows from where its actual members sit, so any rank
  // order (not just a fixed stride) is costed by the nodes it crosses.
  for (const plan::GroupFamily &family : bundle.groups) {
    groupOfRank.push_back(
        plan::groupIndexByRank(family, int64_t(bundle.rankRoles.size())));
    std::vector<planner::GroupSpan> &familySpans = spans.emplace_back();
    for (const std::vector<int64_t> &group : family.groups) {
      std::map<int64_t, int64_t> perNode;
      for (int64_t rank : group)
        ++perNode[rank / hardware.gpusPerNode];
      int64_t busiest = 1;
      for (const auto &[node, count] : perNode)
        busiest = std::max(busiest, count);
      familySpans.push_back(
          {int64_t(group.size()), busiest, int64_t(perNode.size())});
    }
  }
}

int64_t InstructionCosts::groupOf(const plan::Instruction &inst,
                                  int64_t rank) const {
  int64_t index = rank >= 0 && rank < int64_t(bundle.rankRoles.size())
                      ? groupOfRank[inst.group][rank]
                      : -1;
  if (index < 0)
    throw plan::Error("rank " + std::to_string(rank) +
                      " is in no group of family " +
                      std::to_string(inst.group));
  return index;
}

double InstructionCosts::commBytes(const plan::Instruction &inst) const {
  double bytes = double(inst.count) * plan::elementBytes(inst.dtype);
  if (inst.opcode == Opcode::AllGather || inst.opcode == Opcode::ReduceScatter)
    bytes *= double(bundle.groups[inst.group].groupSize());
  return bytes;
}

static double accessedBytes(const plan::Instruction &inst) {
  double bytes = 0;
  for (const plan::BufferRange &range : inst.reads)
    bytes += double(range.bytes);
  for (const plan::BufferRange &range : inst.writes)
    bytes += double(range.bytes);
  return bytes;
}

std::optional<double>
InstructionCosts::hostSeconds(const plan::Instruction &inst,
                              int64_t rank) const {
  if (!hardware.host || rank < 0 || rank >= int64_t(bundle.rankRoles.size()) ||
      bundle.rankRoles[rank] >= int64_t(bundle.programs.size()))
    return std::nullopt;
  const plan::Program &program = bundle.programs[bundle.rankRoles[rank]];
  size_t host = size_t(hostOperands(program, inst)),
         total = inst.reads.size() + inst.writes.size();
  if (host == 0)
    return std::nullopt;
  const planner::HostSpec &spec = *hardware.host;
  if (inst.opcode == Opcode::Copy && host < total)
    return double(inst.reads[0].bytes) / (spec.pinnedBandwidthGBs * 1e9);
  if (inst.opcode == Opcode::OptimizerStep && inst.reads.size() >= 2) {
    const plan::BufferRange &grad = inst.reads[1];
    bool half = grad.buffer >= 0 &&
                grad.buffer < int64_t(program.buffers.size()) &&
                program.buffers[grad.buffer].dtype != plan::DType::F32;
    return double(inst.count) *
           planner::cpuAdamSecondsPerParam(hardware, consts, half);
  }
  // clip, fill or a host-to-host copy: DRAM-bound, the node's DRAM shared
  // by its ranks as in the planner.
  return accessedBytes(inst) * double(planner::ranksSharingHost(hardware)) /
         (spec.memoryBandwidthGBs * 1e9 * consts.hostMemoryBandwidthFraction);
}

double InstructionCosts::gemmSeconds(double m, double n, double k,
                                     plan::DType dtype) const {
  auto sat = [&](double dim) { return dim / (dim + consts.matmulHalfDim); };
  double rate = hardware.peakFlops(precisionOf(dtype)) *
                consts.matmulPeakFraction * sat(m) * sat(n) * sat(k);
  return 2.0 * m * n * k / rate;
}

std::optional<double>
InstructionCosts::attentionSeconds(const plan::Instruction &inst,
                                   int64_t rank) const {
  const plan::Kernel *found = attentionKernel(bundle, inst);
  if (!found || inst.writes.empty())
    return std::nullopt;
  const plan::Kernel &kernel = *found;
  bool forward = kernel.name == "attention_forward";
  auto constant = [&](const char *name) {
    auto it = kernel.constants.find(name);
    return it == kernel.constants.end() ? 0.0 : double(it->second);
  };
  double s = constant("seq"), d = constant("head_dim");
  double heads = constant("batch") * constant("heads");
  // The GEMMs' precision: the dtype of what the kernel writes.
  plan::DType dtype = plan::DType::F32;
  const plan::BufferRange &out = inst.writes[0];
  if (rank >= 0 && rank < int64_t(bundle.rankRoles.size()) &&
      bundle.rankRoles[rank] < int64_t(bundle.programs.size())) {
    const plan::Program &program = bundle.programs[bundle.rankRoles[rank]];
    if (out.buffer >= 0 && out.buffer < int64_t(program.buffers.size()))
      dtype = program.buffers[size_t(out.buffer)].dtype;
  }
  // As the planner's core attention: per (sequence, head) an s x s x d score
  // GEMM and an s x d x s context GEMM; the (flash) backward 2.5 times that
  // (five GEMMs against two, the scores recomputed).
  double seconds = heads *
                   (gemmSeconds(s, s, d, dtype) + gemmSeconds(s, d, s, dtype)) /
                   consts.attentionEfficiency;
  return forward ? seconds : 2.5 * seconds;
}

std::optional<LinkUse> InstructionCosts::linkUse(const plan::Instruction &inst,
                                                 int64_t rank) const {
  auto collective = [&](planner::Collective kind) -> LinkUse {
    const planner::GroupSpan &span = spans[inst.group][groupOf(inst, rank)];
    return {
        span.nodes > 1 ? Link::InterNode : Link::IntraNode,
        planner::collectiveCost(kind, hardware, consts, span, commBytes(inst))};
  };
  switch (inst.opcode) {
  case Opcode::AllReduce:
    return collective(planner::Collective::AllReduce);
  case Opcode::ReduceScatter:
    return collective(planner::Collective::ReduceScatter);
  case Opcode::AllGather:
  case Opcode::Broadcast:
    // A pipelined ring broadcast moves the buffer over every link once, like
    // an all-gather of the same bytes.
    return collective(planner::Collective::AllGather);
  case Opcode::Send:
  case Opcode::Recv: {
    int64_t peer =
        bundle.groups[inst.group].groups[groupOf(inst, rank)][inst.peer];
    bool crossesNodes =
        peer / hardware.gpusPerNode != rank / hardware.gpusPerNode;
    return LinkUse{crossesNodes ? Link::InterNode : Link::IntraNode,
                   planner::pointToPointCost(hardware, consts, crossesNodes,
                                             commBytes(inst))};
  }
  default:
    return std::nullopt;
  }
}

double InstructionCosts::seconds(const plan::Instruction &inst,
                                 int64_t rank) const {
  // Bytes per second a device's memory-bound pass reaches.
  double hbm =
      hardware.gpu.memoryBandwidthGBs * 1e9 * consts.memoryBandwidthFraction;
  switch (inst.opcode) {
  case Opcode::Gemm: {
    const plan::GemmParams &g = inst.gemm;
    // An epilogue's own operands (the bias, the aux matrix written or read,
    // the bias gradient) cross HBM once more, after the product's tiles.
    double epilogueBytes = 0;
    for (size_t r = plan::productReads(inst); r < inst.reads.size(); ++r)
      epilogueBytes += double(inst.reads[r].bytes);
    for (size_t w = 1; w < inst.writes.size(); ++w)
      epilogueBytes += double(inst.writes[w].bytes);
    return gemmSeconds(double(g.m), double(g.n), double(g.k), inst.dtype) +
           epilogueBytes / hbm;
  }
  case Opcode::Kernel:
  case Opcode::LoadBatch:
  case Opcode::Copy:
  case Opcode::Fill:
  case Opcode::OptimizerStep:
  case Opcode::GradNorm:
  case Opcode::Clip:
    if (std::optional<double> host = hostSeconds(inst, rank))
      return *host;
    // Memory-bound: every byte the instruction touches crosses HBM once;
    // attention is bound by its GEMMs' FLOPs too.
    return std::max(accessedBytes(inst) / hbm,
                    attentionSeconds(inst, rank).value_or(0.0));
  case Opcode::AllReduce:
  case Opcode::ReduceScatter:
  case Opcode::AllGather:
  case Opcode::Broadcast:
  case Opcode::Send:
  case Opcode::Recv:
    return linkUse(inst, rank)->time.total();
  case Opcode::RecordEvent:
  case Opcode::WaitEvent:
  case Opcode::Release:
    return 0;
  }
  return 0;
}

namespace {

/// A stream of one role, as the event queue sees it.
struct StreamRef {
  int64_t role;
  int64_t stream;
};

/// Operations that have arrived at one rendezvous.
struct Rendezvous {
  int64_t arrived = 0;
  std::vector<StreamRef> members;
};

// Collectives: (meeting, channel, sequence, -1), where a meeting is a group
// family together with the set of roles that meet in it. Point-to-point:
// (source role, destination role, channel, sequence) with the first slot set
// to -2 - source so the two kinds of key never collide.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

/// A collective or send/recv under way. Its bytes cross `link` of every
/// member role, shared evenly with the other transfers crossing the same
/// link of a member (the busiest member sets the pace); then its latency
/// passes, which nothing shares.
struct Transfer {
  std::vector<StreamRef> members;
  std::vector<int64_t> roles; // distinct
  Link link = Link::IntraNode;
  double start = 0;
  double latency = 0;
  double remaining = 0; // seconds of bytes left at the link's full rate,
  double updated = 0;   // as of this time
  double rate = 1;      // share of the link
  uint64_t version = 0; // of the rate: older BytesDone entries are stale
};

/// When a transfer's bytes will all be across at its current rate.
struct BytesDone {
  double time = 0;
  uint64_t order = 0;
  int64_t transfer = -1;
  uint64_t version = 0;
  bool operator>(const BytesDone &other) const {
    return std::tie(time, order) > std::tie(other.time, other.order);
  }
};

/// Something that happens at `time`: a stream may go on (transfer < 0), or
/// a transfer's latency has passed. Ties run in the order scheduled.
struct Wakeup {
  double time = 0;
  uint64_t order = 0;
  StreamRef ref{-1, -1};
  int64_t transfer = -1;
  bool operator>(const Wakeup &other) const {
    return std::tie(time, order) > std::tie(other.time, other.order);
  }
};

class Simulation {
public:
  Simulation(const plan::Bundle &bundle, const InstructionCosts &costs)
      : bundle(bundle), costs(costs) {}

  Timeline run();

private:
  struct RoleState {
    std::vector<size_t> pc;
    std::vector<double> clock;
    std::vector<bool> arrived; // waiting at a rendezvous or for a transfer
    std::vector<double> eventTime;
    std::vector<std::vector<int64_t>> eventWaiters;
    std::map<std::tuple<int64_t, int64_t, int64_t>, int64_t> sequence;
  };

  void advance(StreamRef ref);
  Key rendezvousKey(StreamRef ref, const plan::Instruction &inst,
                    int64_t &expected);
  void schedule(double time, StreamRef ref, int64_t transfer = -1);
  void begin(const plan::Instruction &inst, StreamRef last,
             std::vector<StreamRef> members);
  void finish(int64_t transfer);
  /// The bytes of transfer `id` are all across: its link is free for the
  /// others, its latency starts.
  void bytesDone(int64_t id);
  /// The rates of the transfers on the links of `transfer`'s roles, after
  /// one started or finished sharing them.
  void shareLinks(const Transfer &transfer);
  [[noreturn]] void reportStuck() const;

  const plan::Bundle &bundle;
  const InstructionCosts &costs;
  std::vector<int64_t> rankRoles;
  /// A collective's meeting as seen from one role: the group of the family
  /// that holds the role's first rank, as the set of roles in it.
  struct Meeting {
    int64_t id = -1;    // distinct per (family, set of roles)
    int64_t roles = 0;  // how many distinct roles meet
    int64_t group = -1; // index of the concrete group in the family
  };
  std::vector<std::vector<Meeting>> meetings; // [role][family]
  std::map<std::string, int64_t> channels;
  std::vector<std::vector<int64_t>> channelOf; // [role][stream]
  std::vector<RoleState> states;
  std::map<Key, Rendezvous> pending;
  std::priority_queue<Wakeup, std::vector<Wakeup>, std::greater<Wakeup>>
      wakeups;
  uint64_t scheduled = 0;
  double now = 0;
  std::map<int64_t, Transfer> transfers; // by id
  int64_t nextTransfer = 0;
  /// [role][link]: the transfers whose bytes are crossing it.
  std::vector<std::array<std::vector<int64_t>, 2>> onLink;
  std::priority_queue<BytesDone, std::vector<BytesDone>,
                      std::greater<BytesDone>>
      bytesDoneAt;
  Timeline timeline;
};

Key Simulation::rendezvousKey(StreamRef ref, const plan::Instruction &inst,
                              int64_t &expected) {
  RoleState &state = states[ref.role];
  int64_t channel = channelOf[ref.role][ref.stream];
  const Meeting &meeting = meetings[ref.role][inst.group];
  if (meeting.group < 0)
    throw plan::Error(
        "rank " + std::to_string(timeline.roles[ref.role].firstRank) +
        " is in no group of family " + std::to_string(inst.group) +
        " (run 'weft-inspect BUNDLE verify')");
  if (plan::isCollective(inst.opcode)) {
    expected = meeting.roles;
    int64_t seq = state.sequence[{meeting.id, channel, -1}]++;
    return {meeting.id, channel, seq, -1};
  }
  expected = 2;
  const std::vector<int64_t> &group =
      bundle.groups[inst.group].groups[meeting.group];
  int64_t peerRole = rankRoles[group[inst.peer]];
  bool send = inst.opcode == Opcode::Send;
  int64_t source = send ? ref.role : peerRole;
  int64_t destination = send ? peerRole : ref.role;
  // Sender and receiver keep separate counters even when they share a role.
  int64_t seq =
      state.sequence[{-2 - source, destination * 2 + send, channel}]++;
  return {-2 - source, destination, channel, seq};
}

void Simulation::schedule(double time, StreamRef ref, int64_t transfer) {
  wakeups.push({time, scheduled++, ref, transfer});
}

void Simulation::shareLinks(const Transfer &changed) {
  std::vector<int64_t> affected;
  for (int64_t role : changed.roles) {
    const std::vector<int64_t> &ids = onLink[role][size_t(changed.link)];
    affected.insert(affected.end(), ids.begin(), ids.end());
  }
  std::sort(affected.begin(), affected.end());
  affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
  for (int64_t id : affected) {
    Transfer &transfer = transfers.at(id);
    size_t busiest = 1;
    for (int64_t role : transfer.roles)
      busiest = std::max(busiest, onLink[role][size_t(transfer.link)].size());
    double rate = 1.0 / double(busiest);
    if (rate == transfer.rate && transfer.version > 0)
      continue;
    transfer.remaining = std::max(
        0.0, transfer.remaining - transfer.rate * (now - transfer.updated));
    transfer.updated = now;
    transfer.rate = rate;
    bytesDoneAt.push(
        {now + transfer.remaining / rate, scheduled++, id, ++transfer.version});
  }
}

void Simulation::bytesDone(int64_t id) {
  const Transfer &transfer = transfers.at(id);
  for (int64_t role : transfer.roles) {
    std::vector<int64_t> &ids = onLink[role][size_t(transfer.link)];
    ids.erase(std::find(ids.begin(), ids.end(), id));
  }
  shareLinks(transfer);
  schedule(now + transfer.latency, {-1, -1}, id);
}

void Simulation::begin(const plan::Instruction &inst, StreamRef last,
                       std::vector<StreamRef> members) {
  LinkUse use = *costs.linkUse(inst, timeline.roles[last.role].firstRank);
  int64_t id = nextTransfer++;
  Transfer &transfer = transfers[id];
  for (StreamRef member : members)
    if (std::find(transfer.roles.begin(), transfer.roles.end(), member.role) ==
        transfer.roles.end())
      transfer.roles.push_back(member.role);
  transfer.members = std::move(members);
  transfer.link = use.link;
  transfer.start = now;
  transfer.latency = use.time.latency;
  transfer.remaining = use.time.transfer;
  if (transfer.remaining <= 0) {
    schedule(now + transfer.latency, {-1, -1}, id);
    return;
  }
  transfer.updated = now;
  for (int64_t role : transfer.roles)
    onLink[role][size_t(transfer.link)].push_back(id);
  shareLinks(transfer);
}

void Simulation::finish(int64_t id) {
  Transfer &transfer = transfers.at(id);
  for (StreamRef member : transfer.members) {
    RoleState &state = states[member.role];
    InstTiming &done = timeline.roles[member.role]
                           .streams[member.stream][state.pc[member.stream]];
    done.start = transfer.start;
    done.end = now;
    state.clock[member.stream] = now;
    ++state.pc[member.stream];
    state.arrived[member.stream] = false;
    schedule(now, member);
  }
  transfers.erase(id);
}

void Simulation::advance(StreamRef ref) {
  RoleState &state = states[ref.role];
  const plan::Stream &stream = bundle.programs[ref.role].streams[ref.stream];
  std::vector<InstTiming> &timings =
      timeline.roles[ref.role].streams[ref.stream];
  size_t &pc = state.pc[ref.stream];
  double &clock = state.clock[ref.stream];
  int64_t rank = timeline.roles[ref.role].firstRank;
  // Instructions that touch no link run ahead of simulated time (their
  // durations are fixed); a transfer starts only once `now` reaches it, so
  // the transfers sharing a link are known when its rate is set.
  while (pc < stream.instructions.size()) {
    const plan::Instruction &inst = stream.instructions[pc];
    InstTiming &timing = timings[pc];
    if (inst.opcode == Opcode::WaitEvent) {
      double recorded = state.eventTime[inst.event];
      if (recorded < 0) {
        state.eventWaiters[inst.event].push_back(ref.stream);
        return;
      }
      timing = {clock, std::max(clock, recorded), std::max(clock, recorded)};
    } else if (isCommOp(inst.opcode)) {
      if (state.arrived[ref.stream])
        return; // waiting for its partners or its bytes
      if (clock > now) {
        schedule(clock, ref);
        return;
      }
      int64_t expected = 0;
      Key key = rendezvousKey(ref, inst, expected);
      Rendezvous &meeting = pending[key];
      meeting.members.push_back(ref);
      timing.arrive = clock;
      state.arrived[ref.stream] = true;
      if (++meeting.arrived < expected)
        return;
      std::vector<StreamRef> members = std::move(meeting.members);
      pending.erase(key);
      begin(inst, ref, std::move(members));
      return;
    } else {
      double end = clock + costs.seconds(inst, rank);
      timing = {clock, clock, end};
      if (inst.opcode == Opcode::RecordEvent) {
        state.eventTime[inst.event] = clock;
        for (int64_t waiter : state.eventWaiters[inst.event])
          schedule(clock, {ref.role, waiter});
        state.eventWaiters[inst.event].clear();
      }
    }
    clock = timing.end;
    ++pc;
  }
}

void Simulation::reportStuck() const {
  for (size_t role = 0; role < states.size(); ++role) {
    const plan::Program &program = bundle.programs[role];
    for (size_t s = 0; s < program.streams.size(); ++s) {
      size_t pc = states[role].pc[s];
      if (pc >= program.streams[s].instructions.size())
        continue;
      const plan::Instruction &inst = program.streams[s].instructions[pc];
      throw plan::Error("simulation cannot finish: rank " +
                        std::to_string(timeline.roles[role].firstRank) +
                        " stream " + std::to_string(s) + " '" +
                        program.streams[s].name + "' instruction " +
                        std::to_string(pc) + " (" + inst.phase +
                        "): " + std::string(plan::toString(inst.opcode)) +
                        " never proceeds (run 'weft-inspect BUNDLE verify')");
    }
  }
  throw plan::Error("simulation cannot finish");
}

Timeline Simulation::run() {
  rankRoles = bundle.rankRoles;
  size_t numRoles = bundle.programs.size();
  timeline.roles.resize(numRoles);
  states.resize(numRoles);
  channelOf.resize(numRoles);
  onLink.resize(numRoles);
  for (int64_t rank = int64_t(rankRoles.size()) - 1; rank >= 0; --rank)
    timeline.roles[rankRoles[rank]].firstRank = rank;
  std::map<std::pair<int64_t, std::set<int64_t>>, int64_t> meetingIds;
  meetings.resize(numRoles);
  for (size_t role = 0; role < numRoles; ++role) {
    for (const plan::GroupFamily &family : bundle.groups) {
      Meeting &meeting = meetings[role].emplace_back();
      meeting.group = plan::findGroupOf(family, timeline.roles[role].firstRank);
      if (meeting.group < 0)
        continue;
      std::set<int64_t> roles;
      for (int64_t rank : family.groups[meeting.group])
        roles.insert(rankRoles[rank]);
      meeting.roles = int64_t(roles.size());
      meeting.id = meetingIds
                       .emplace(std::pair{family.id, std::move(roles)},
                                int64_t(meetingIds.size()))
                       .first->second;
    }
  }
  for (size_t role = 0; role < numRoles; ++role) {
    const plan::Program &program = bundle.programs[role];
    RoleState &state = states[role];
    size_t numStreams = program.streams.size();
    state.pc.assign(numStreams, 0);
    state.clock.assign(numStreams, 0);
    state.arrived.assign(numStreams, false);
    state.eventTime.assign(program.numEvents, -1);
    state.eventWaiters.resize(program.numEvents);
    for (size_t s = 0; s < numStreams; ++s) {
      const plan::Stream &stream = program.streams[s];
      timeline.roles[role].streams.emplace_back(stream.instructions.size());
      channelOf[role].push_back(
          channels.emplace(stream.name, int64_t(channels.size()))
              .first->second);
      // Roles no rank runs take no part in the step.
      if (timeline.roles[role].firstRank < 0)
        state.pc[s] = stream.instructions.size();
      else
        schedule(0, {int64_t(role), int64_t(s)});
    }
  }
  // Time order: the next wakeup, or the next transfer whose bytes are all
  // across (at a tie the transfer first, so it does not share its last
  // instant with one starting then).
  while (true) {
    // Entries from before a rate change are stale (the transfer may have
    // finished since).
    while (!bytesDoneAt.empty()) {
      auto it = transfers.find(bytesDoneAt.top().transfer);
      if (it != transfers.end() &&
          it->second.version == bytesDoneAt.top().version)
        break;
      bytesDoneAt.pop();
    }
    if (!bytesDoneAt.empty() &&
        (wakeups.empty() || bytesDoneAt.top().time <= wakeups.top().time)) {
      BytesDone done = bytesDoneAt.top();
      bytesDoneAt.pop();
      now = done.time;
      bytesDone(done.transfer);
      continue;
    }
    if (wakeups.empty())
      break;
    Wakeup wakeup = wakeups.top();
    wakeups.pop();
    now = wakeup.time;
    if (wakeup.transfer >= 0)
      finish(wakeup.transfer);
    else
      advance(wakeup.ref);
  }
  for (size_t role = 0; role < numRoles; ++role) {
    const plan::Program &program = bundle.programs[role];
    RoleTimeline &out = timeline.roles[role];
    for (size_t s = 0; s < program.streams.size(); ++s) {
      if (states[role].pc[s] < program.streams[s].instructions.size())
        reportStuck();
      for (const InstTiming &timing : out.streams[s])
        out.end = std::max(out.end, timing.end);
    }
    timeline.stepTimeS = std::max(timeline.stepTimeS, out.end);
  }
  return std::move(timeline);
}

} // namespace

Timeline simulate(const plan::Bundle &bundle, const InstructionCosts &costs) {
  return Simulation(bundle, costs).run();
}

} // namespace weft::inspect
