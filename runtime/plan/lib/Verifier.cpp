//===- Verifier.cpp - Symbolic execution of every rank of a plan ----------===//
//
// Two simulations:
//  - GlobalSimulator runs every stream of every rank with rendezvous
//    semantics for collectives and send/recv (a conservative model: a plan
//    that is deadlock-free here is deadlock-free with any buffering) and
//    checks that matched operations agree. The order in which it completes
//    the operations is the runtime's communication order
//    (communicationOrder); checkLaunchOrder replays what each rank then
//    submits and checks that no ranks can wait on each other in it.
//  - LocalChecker runs each role's program once (the checks depend only on
//    the program): it sequentializes the streams honoring events, tracks the
//    happens-before order with vector clocks (one clock per stream, joined
//    at wait_event), byte-level initialization of every buffer, unordered
//    cross-stream accesses, and the live ranges of arena buffers.
//
//===----------------------------------------------------------------------===//

#include "weft/plan/Verifier.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <map>
#include <tuple>

using namespace weft::plan;

namespace {

std::string str(int64_t value) { return std::to_string(value); }

std::string bytesText(int64_t begin, int64_t end) {
  return "bytes [" + str(begin) + ", " + str(end) + ")";
}

using Loc = StreamPosition;

std::string describe(const Program &program, Loc loc) {
  const Stream &stream = program.streams[loc.stream];
  std::string text = "stream " + str(loc.stream) + " '" + stream.name +
                     "' instruction " + str(loc.index);
  const std::string &phase = stream.instructions[loc.index].phase;
  return phase.empty() ? text : text + " (" + phase + ")";
}

std::string bufferText(const Program &program, int64_t buffer) {
  return "buffer " + str(buffer) + " '" + program.buffers[buffer].name + "'";
}

/// Whether two collectives split their count into the same members (both
/// of an opcode with members; otherwise there is nothing to compare).
bool sameMembers(const Instruction &a, const Instruction &b) {
  if (!hasMembers(a.opcode) || !hasMembers(b.opcode))
    return true;
  size_t members = memberCount(a);
  if (memberCount(b) != members)
    return false;
  for (size_t i = 0; i < members; ++i)
    if (memberElements(a, i) != memberElements(b, i))
      return false;
  return true;
}

/// "all_reduce of 64 f32 (sum)"; with `members`, followed by the member
/// split: " in 2 members (32, 32)".
std::string operationText(const Instruction &inst, bool members = false) {
  std::string text = std::string(toString(inst.opcode)) + " of " +
                     str(inst.count) + " " + std::string(toString(inst.dtype));
  if (inst.opcode == Opcode::AllReduce || inst.opcode == Opcode::ReduceScatter)
    text += " (" + std::string(toString(inst.reduce)) + ")";
  if (inst.opcode == Opcode::Broadcast)
    text += " (root " + str(inst.peer) + ")";
  if (members && hasMembers(inst.opcode)) {
    size_t count = memberCount(inst);
    text += " in " + str(int64_t(count)) +
            (count == 1 ? " member (" : " members (");
    for (size_t i = 0; i < count; ++i)
      text += (i ? ", " : "") + str(memberElements(inst, i));
    text += ")";
  }
  return text;
}

//===----------------------------------------------------------------------===//
// Matching and deadlock over all ranks
//===----------------------------------------------------------------------===//

class GlobalSimulator {
public:
  /// With `completions`, appends to [rank] each communication instruction of
  /// the rank as its operation completes (all its ranks have arrived).
  GlobalSimulator(const Bundle &bundle, std::vector<Diagnostic> &diagnostics,
                  std::vector<std::vector<Loc>> *completions = nullptr)
      : bundle(bundle), diagnostics(diagnostics), completions(completions) {}

  void run() {
    int64_t world = bundle.mesh.worldSize();
    for (const GroupFamily &family : bundle.groups)
      groupOfRank.push_back(groupIndexByRank(family, world));
    ranks.resize(world);
    if (completions)
      completions->assign(size_t(world), {});
    for (int64_t rank = 0; rank < world; ++rank) {
      RankState &state = ranks[rank];
      state.program = &bundle.programs[bundle.rankRoles[rank]];
      state.pc.assign(state.program->streams.size(), 0);
      state.arrived.assign(state.program->streams.size(), false);
      state.recorded.assign(state.program->numEvents, false);
      for (size_t s = 0; s < state.program->streams.size(); ++s)
        ready.push_back({rank, int64_t(s)});
    }
    while (!ready.empty() && !fatal) {
      auto [rank, stream] = ready.front();
      ready.pop_front();
      advance(rank, stream);
    }
    if (!fatal)
      reportDeadlock();
  }

private:
  struct RankState {
    const Program *program = nullptr;
    std::vector<size_t> pc;
    std::vector<bool> arrived; // posted to a rendezvous at the current pc
    std::vector<bool> recorded;
    std::map<int64_t, std::vector<int64_t>> eventWaiters;
  };
  struct Arrival {
    int64_t rank;
    int64_t stream;
  };
  struct Rendezvous {
    std::vector<Arrival> arrivals;
    size_t expected = 0;
  };
  /// Collectives: (family, group index, channel, sequence) — each concrete
  /// group of a family meets on its own. Point-to-point: (-1 - source,
  /// destination, channel, sequence); the negative first entry keeps the keys
  /// of both kinds apart.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t>;

  const Instruction &current(int64_t rank, int64_t stream) const {
    const RankState &state = ranks[rank];
    return state.program->streams[stream].instructions[state.pc[stream]];
  }

  std::string where(int64_t rank, int64_t stream) const {
    const RankState &state = ranks[rank];
    return "rank " + str(rank) + " " +
           describe(*state.program, {stream, int64_t(state.pc[stream])});
  }

  /// Streams are matched by name: the runtime opens one communicator per
  /// (concrete group, stream name), so operations issued from different
  /// streams never match each other.
  int64_t channelOf(int64_t rank, int64_t stream) {
    const std::string &name = ranks[rank].program->streams[stream].name;
    return channels.emplace(name, int64_t(channels.size())).first->second;
  }

  void advance(int64_t rank, int64_t stream) {
    RankState &state = ranks[rank];
    const auto &instructions = state.program->streams[stream].instructions;
    while (state.pc[stream] < instructions.size() && !fatal) {
      const Instruction &inst = instructions[state.pc[stream]];
      if (inst.opcode == Opcode::RecordEvent) {
        state.recorded[inst.event] = true;
        for (int64_t waiter : state.eventWaiters[inst.event])
          ready.push_back({rank, waiter});
        state.eventWaiters.erase(inst.event);
      } else if (inst.opcode == Opcode::WaitEvent) {
        if (!state.recorded[inst.event]) {
          state.eventWaiters[inst.event].push_back(stream);
          return;
        }
      } else if (isCollective(inst.opcode) || isPointToPoint(inst.opcode)) {
        if (state.arrived[stream])
          return; // woken spuriously; the rendezvous completes it
        std::optional<Key> key = arrive(rank, stream, inst);
        if (!key)
          return;
        Rendezvous &meeting = rendezvous[*key];
        if (meeting.arrivals.size() < meeting.expected) {
          state.arrived[stream] = true;
          return;
        }
        for (const Arrival &arrival : meeting.arrivals) {
          if (completions)
            (*completions)[size_t(arrival.rank)].push_back(
                {arrival.stream,
                 int64_t(ranks[arrival.rank].pc[arrival.stream])});
          ranks[arrival.rank].arrived[arrival.stream] = false;
          if (arrival.rank != rank || arrival.stream != stream) {
            ++ranks[arrival.rank].pc[arrival.stream];
            ready.push_back({arrival.rank, arrival.stream});
          }
        }
        rendezvous.erase(*key);
      }
      ++state.pc[stream];
    }
  }

  /// Post (rank, stream)'s operation to its rendezvous and check it against
  /// the operations already there. Returns the key, or nullopt after a fatal
  /// error.
  std::optional<Key> arrive(int64_t rank, int64_t stream,
                            const Instruction &inst) {
    const GroupFamily &family = bundle.groups[inst.group];
    int64_t groupIndex = groupOfRank[inst.group][rank];
    if (groupIndex < 0) {
      report(CheckKind::Matching,
             where(rank, stream) + ": " + std::string(toString(inst.opcode)) +
                 " on group family " + str(family.id) +
                 ", which has no group containing rank " + str(rank));
      fatal = true;
      return std::nullopt;
    }
    const std::vector<int64_t> &group = family.groups[groupIndex];
    int64_t channel = channelOf(rank, stream);
    Key key;
    size_t expected;
    if (isCollective(inst.opcode)) {
      // A rank is in one group of the family, so counting per family counts
      // per concrete group.
      int64_t seq = sequence[{rank, family.id, channel, 0}]++;
      key = {family.id, groupIndex, channel, seq};
      expected = group.size();
    } else {
      bool sending = inst.opcode == Opcode::Send;
      int64_t peer = group[inst.peer];
      int64_t source = sending ? rank : peer;
      int64_t destination = sending ? peer : rank;
      int64_t seq =
          sequence[{-1 - source, destination, channel, sending ? 1 : 2}]++;
      key = {-1 - source, destination, channel, seq};
      expected = 2;
    }
    Rendezvous &meeting = rendezvous[key];
    meeting.expected = expected;
    if (!meeting.arrivals.empty())
      checkAgreement(meeting.arrivals.front(), {rank, stream});
    meeting.arrivals.push_back({rank, stream});
    return key;
  }

  void checkAgreement(Arrival first, Arrival next) {
    const Instruction &a = current(first.rank, first.stream);
    const Instruction &b = current(next.rank, next.stream);
    bool p2p = isPointToPoint(a.opcode);
    // Collectives with members must also split `count` alike: member i of
    // one rank meets member i of every other. The message lists the members
    // when the splits differ and one of them has several.
    bool split = !p2p && !sameMembers(a, b);
    bool members = split && (memberCount(a) > 1 || memberCount(b) > 1);
    bool agree =
        p2p ? a.opcode != b.opcode && a.count == b.count && a.dtype == b.dtype
            : a.opcode == b.opcode && a.count == b.count &&
                  a.dtype == b.dtype && a.reduce == b.reduce &&
                  a.peer == b.peer && !split;
    if (agree)
      return;
    std::string what = p2p ? "send/recv pair"
                           : "collective on " + groupText(a.group, first.rank);
    report(CheckKind::Matching, "mismatched " + what + ": " +
                                    where(first.rank, first.stream) + " is " +
                                    operationText(a, members) + " but " +
                                    where(next.rank, next.stream) + " is " +
                                    operationText(b, members));
  }

  /// "group 1 of family 0": the group of family `familyId` that `rank` uses.
  std::string groupText(int64_t familyId, int64_t rank) const {
    return "group " + str(groupOfRank[familyId][rank]) + " of family " +
           str(familyId);
  }

  std::string blockedReason(int64_t rank, int64_t stream) const {
    const Instruction &inst = current(rank, stream);
    if (inst.opcode == Opcode::WaitEvent)
      return "waits for event " + str(inst.event) +
             ", whose record_event never executes";
    const std::vector<int64_t> &group =
        bundle.groups[inst.group].groups[groupOfRank[inst.group][rank]];
    if (isPointToPoint(inst.opcode)) {
      int64_t peer = group[inst.peer];
      bool sending = inst.opcode == Opcode::Send;
      return std::string(toString(inst.opcode)) + (sending ? " to" : " from") +
             " rank " + str(peer) + " has no matching " +
             (sending ? "recv" : "send");
    }
    // Members that have not arrived at this collective.
    std::string missing;
    for (int64_t member : group) {
      bool arrived = false;
      const RankState &other = ranks[member];
      for (size_t s = 0; s < other.pc.size() && !arrived; ++s)
        arrived = other.arrived[s] &&
                  other.program->streams[s].name ==
                      ranks[rank].program->streams[stream].name &&
                  current(member, s).group == inst.group;
      if (!arrived)
        missing += (missing.empty() ? "" : ", ") + str(member);
    }
    return std::string(toString(inst.opcode)) + " on " +
           groupText(inst.group, rank) + " waits for rank(s) " + missing;
  }

  void reportDeadlock() {
    std::string message;
    int64_t blocked = 0;
    const int64_t kShown = 8;
    for (size_t rank = 0; rank < ranks.size(); ++rank)
      for (size_t s = 0; s < ranks[rank].pc.size(); ++s) {
        const RankState &state = ranks[rank];
        if (state.pc[s] >= state.program->streams[s].instructions.size())
          continue;
        if (blocked++ < kShown)
          message += (message.empty() ? "" : "; ") + where(rank, s) + ": " +
                     blockedReason(rank, s);
      }
    if (blocked == 0)
      return;
    if (blocked > kShown)
      message += "; and " + str(blocked - kShown) + " more blocked streams";
    report(CheckKind::Deadlock, "deadlock: " + message);
  }

  void report(CheckKind kind, std::string message) {
    diagnostics.push_back({kind, std::move(message)});
  }

  const Bundle &bundle;
  std::vector<Diagnostic> &diagnostics;
  std::vector<std::vector<Loc>> *completions;
  std::vector<RankState> ranks;
  std::deque<Arrival> ready;
  std::map<std::string, int64_t> channels;
  /// [family][rank]: the index of the group the rank uses, -1 if none.
  std::vector<std::vector<int64_t>> groupOfRank;
  std::map<Key, int64_t> sequence;
  std::map<Key, Rendezvous> rendezvous;
  bool fatal = false;
};

//===----------------------------------------------------------------------===//
// Communication order over all ranks
//===----------------------------------------------------------------------===//

/// The union of the ranks' launch orders over the matched operations, and a
/// cycle in it if there is one. In the worst case a GPU runs its launches
/// one at a time in submission order, and a launch finishes once every rank
/// it involves runs it: all finish exactly when this graph has no cycle.
class LaunchOrderGraph {
public:
  LaunchOrderGraph(const Bundle &bundle) : bundle(bundle) {
    for (const GroupFamily &family : bundle.groups)
      groupOfRank.push_back(groupIndexByRank(family, bundle.mesh.worldSize()));
  }

  /// Rank `rank` issues its communication in the order of `issued` (every
  /// instruction or just its communication), each run of `launches`
  /// ([stream]: per instruction, the first instruction of its launch) at
  /// once.
  void addRank(int64_t rank, const std::vector<Loc> &issued,
               const std::vector<std::vector<size_t>> &launches) {
    const Program &program =
        bundle.programs[size_t(bundle.rankRoles[size_t(rank)])];
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> count;
    std::vector<std::pair<int64_t, Loc>> previous, current; // (node, where)
    Loc launch{-1, -1};
    for (Loc loc : issued) {
      const Stream &stream = program.streams[size_t(loc.stream)];
      const Instruction &inst = stream.instructions[size_t(loc.index)];
      if (!isCollective(inst.opcode) && !isPointToPoint(inst.opcode))
        continue;
      // The operation's identity across ranks, as the matching check keys
      // it: a collective by its concrete group, stream name and ordinal; a
      // send or recv by source, destination, stream name and ordinal.
      int64_t channel =
          channels.emplace(stream.name, int64_t(channels.size())).first->second;
      int64_t group = groupOfRank[size_t(inst.group)][size_t(rank)];
      std::tuple<int64_t, int64_t, int64_t, int64_t> key;
      if (isCollective(inst.opcode)) {
        key = {inst.group, group, channel,
               count[{inst.group, group, channel, -1}]++};
      } else {
        int64_t peer = bundle.groups[size_t(inst.group)]
                           .groups[size_t(group)][size_t(inst.peer)];
        bool sending = inst.opcode == Opcode::Send;
        int64_t source = sending ? rank : peer;
        int64_t destination = sending ? peer : rank;
        key = {-1 - source, destination, channel,
               count[{-1 - source, destination, channel, sending}]++};
      }
      auto [node, added] = nodes.emplace(key, int64_t(nodes.size()));
      if (added)
        edges.emplace_back();
      Loc first{loc.stream,
                int64_t(launches[size_t(loc.stream)][size_t(loc.index)])};
      if (first.stream != launch.stream || first.index != launch.index) {
        previous = std::move(current);
        current.clear();
        launch = first;
      }
      // Submitted after every operation of the previous launch.
      for (auto [before, at] : previous)
        edges[size_t(before)].emplace(node->second, Witness{rank, at, loc});
      current.push_back({node->second, loc});
    }
  }

  /// "" or a one-line description of a cycle.
  std::string cycle() const {
    // Kahn's algorithm; what it cannot reach lies on a cycle or behind one,
    // and each such node has such a predecessor.
    size_t n = edges.size();
    std::vector<int64_t> indegree(n, 0);
    std::vector<std::vector<std::pair<int64_t, const Witness *>>> into(n);
    for (size_t a = 0; a < n; ++a)
      for (const auto &[b, witness] : edges[a]) {
        ++indegree[size_t(b)];
        into[size_t(b)].push_back({int64_t(a), &witness});
      }
    std::vector<int64_t> ready;
    for (size_t a = 0; a < n; ++a)
      if (indegree[a] == 0)
        ready.push_back(int64_t(a));
    while (!ready.empty()) {
      int64_t a = ready.back();
      ready.pop_back();
      for (const auto &[b, witness] : edges[size_t(a)])
        if (--indegree[size_t(b)] == 0)
          ready.push_back(b);
    }
    int64_t at = -1;
    for (size_t a = 0; a < n && at < 0; ++a)
      if (indegree[a] > 0)
        at = int64_t(a);
    if (at < 0)
      return "";
    // Walk predecessors until a node repeats: from there, a cycle
    // (reversed).
    std::vector<const Witness *> walk;
    std::map<int64_t, size_t> seen;
    while (!seen.count(at)) {
      seen[at] = walk.size();
      for (const auto &[from, witness] : into[size_t(at)])
        if (indegree[size_t(from)] > 0) {
          walk.push_back(witness);
          at = from;
          break;
        }
    }
    std::vector<const Witness *> cycle(walk.begin() + long(seen[at]),
                                       walk.end());
    std::reverse(cycle.begin(), cycle.end());
    const size_t kShown = 4;
    std::string message = "communication order: " + str(int64_t(cycle.size())) +
                          " operations are submitted in orders that can "
                          "wait on each other: ";
    for (size_t i = 0; i < cycle.size() && i < kShown; ++i) {
      const Witness &w = *cycle[i];
      const Program &program =
          bundle.programs[size_t(bundle.rankRoles[size_t(w.rank)])];
      message += (i ? "; " : "") + std::string("rank ") + str(w.rank) +
                 " issues " + operationAt(program, w.before) + " before " +
                 operationAt(program, w.after);
    }
    if (cycle.size() > kShown)
      message += "; and " + str(int64_t(cycle.size() - kShown)) + " more";
    return message;
  }

private:
  /// Rank `rank` submits the operation at `before` ahead of the one at
  /// `after` (positions in its role's program).
  struct Witness {
    int64_t rank;
    Loc before, after;
  };

  static std::string operationAt(const Program &program, Loc loc) {
    const Instruction &inst =
        program.streams[size_t(loc.stream)].instructions[size_t(loc.index)];
    return std::string(toString(inst.opcode)) + " at " + describe(program, loc);
  }

  const Bundle &bundle;
  std::vector<std::vector<int64_t>> groupOfRank;
  std::map<std::string, int64_t> channels;
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> nodes;
  /// [node]: successor -> the first rank seen submitting it after node.
  std::vector<std::map<int64_t, Witness>> edges;
};

/// [stream][instruction]: the first instruction of its launch, by
/// communicationBuckets(program, stream, order).
std::vector<std::vector<size_t>> launchesOf(const Program &program,
                                            const std::vector<Loc> *order) {
  std::vector<std::vector<size_t>> launches;
  for (size_t s = 0; s < program.streams.size(); ++s) {
    std::vector<size_t> launch(program.streams[s].instructions.size());
    for (size_t i = 0; i < launch.size(); ++i)
      launch[i] = i;
    for (auto [first, last] : communicationBuckets(program, s, order))
      for (size_t i = first; i < last; ++i)
        launch[i] = first;
    launches.push_back(std::move(launch));
  }
  return launches;
}

/// What the runtime issues, checked (verify()'s Order kind): every rank's
/// hostIssueOrder in `order` ([rank], communicationOrder's) issues its whole
/// program, and the ranks' launches can all finish.
void checkLaunchOrder(const Bundle &bundle,
                      const std::vector<std::vector<Loc>> &order,
                      std::vector<Diagnostic> &diagnostics) {
  LaunchOrderGraph graph(bundle);
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const Program &program = bundle.programs[size_t(bundle.rankRoles[rank])];
    std::vector<Loc> issued = hostIssueOrder(program, &order[rank]);
    size_t total = 0;
    for (const Stream &stream : program.streams)
      total += stream.instructions.size();
    if (issued.size() < total) {
      diagnostics.push_back(
          {CheckKind::Order, "communication order: rank " + str(int64_t(rank)) +
                                 " cannot issue its communication in the "
                                 "order of the whole plan (" +
                                 str(int64_t(issued.size())) + " of " +
                                 str(int64_t(total)) +
                                 " instructions issued)"});
      return;
    }
    graph.addRank(int64_t(rank), issued, launchesOf(program, &order[rank]));
  }
  if (std::string cycle = graph.cycle(); !cycle.empty())
    diagnostics.push_back({CheckKind::Order, cycle});
}

//===----------------------------------------------------------------------===//
// Per-role checks: events, initialization, races, memory
//===----------------------------------------------------------------------===//

enum class ByteState { Uninitialized, Written, Released };

/// A value for every byte of [0, size) as a map of disjoint segments keyed
/// by their first byte: the state of a buffer's bytes, or which arena buffer
/// last held them.
template <typename Value> class SegmentMap {
public:
  struct Segment {
    int64_t end;
    Value value;
  };

  SegmentMap(int64_t size, Value value) : size(size) {
    segments[0] = {size, value};
  }

  void assign(int64_t begin, int64_t end, Value value) {
    split(begin);
    split(end);
    segments.erase(segments.lower_bound(begin), segments.lower_bound(end));
    segments[begin] = {end, value};
  }

  /// The first segment meeting [begin, end) whose value `pred` takes.
  template <typename Pred>
  std::optional<std::pair<int64_t, Segment>> first(int64_t begin, int64_t end,
                                                   Pred pred) const {
    auto it = std::prev(segments.upper_bound(begin));
    for (; it != segments.end() && it->first < end; ++it)
      if (pred(it->second.value))
        return *it;
    return std::nullopt;
  }

private:
  void split(int64_t at) {
    if (at >= size || segments.count(at))
      return;
    auto it = std::prev(segments.upper_bound(at));
    segments[at] = it->second;
    it->second.end = at;
  }

  int64_t size;
  std::map<int64_t, Segment> segments;
};

struct ByteInfo {
  ByteState state;
  Loc loc; // the release, for Released
};
using ByteMap = SegmentMap<ByteInfo>;

using VectorClock = std::vector<int64_t>;

class LocalChecker {
public:
  LocalChecker(const Bundle &bundle, int64_t role,
               std::vector<Diagnostic> &diagnostics)
      : bundle(bundle), program(bundle.programs[role]),
        diagnostics(diagnostics) {
    for (size_t rank = 0; rank < bundle.rankRoles.size(); ++rank)
      if (bundle.rankRoles[rank] == role)
        roleRanks.push_back(rank);
    prefix =
        "role " + str(role) + " (rank" + (roleRanks.size() == 1 ? " " : "s ");
    for (size_t i = 0; i < roleRanks.size() && i < 4; ++i)
      prefix += (i ? ", " : "") + str(roleRanks[i]);
    if (roleRanks.size() > 4)
      prefix += ", ... " + str(roleRanks.size()) + " in all";
    prefix += "): ";
  }

  void run() {
    checkRegions();
    if (!checkEventsRecorded())
      return; // the simulation below would stall at the unmatched wait
    simulate();
    checkLiveOverlap();
  }

private:
  struct Access {
    int64_t begin, end;
    int64_t stream;
    int64_t clock;
    bool write;
    Loc loc;
  };
  /// A buffer's accesses that may still race, by first byte: an access
  /// looks only at those that can overlap it (begin within the longest
  /// access of its end), not at every earlier one -- a step's batch buffer
  /// read slice by slice by thousands of micro-batches made that quadratic.
  struct AccessHistory {
    std::multimap<int64_t, Access> byBegin;
    int64_t longest = 0;
  };
  struct Liveness {
    bool accessed = false;
    int64_t firstSeq = 0;
    Loc first, last;
    VectorClock maxClock; // per stream: latest access on that stream
    VectorClock minVC;    // component-wise minimum over all accesses' clocks
  };

  void report(CheckKind kind, const std::string &message) {
    diagnostics.push_back({kind, prefix + message});
  }

  void checkRegions() {
    for (const Buffer &buffer : program.buffers) {
      int64_t capacity = buffer.region == Region::Arena ? program.arenaBytes
                         : buffer.region == Region::Host
                             ? program.hostBytes
                             : program.persistentBytes;
      if (buffer.offset + buffer.size > capacity)
        report(CheckKind::Memory,
               bufferText(program, buffer.id) + " " +
                   bytesText(buffer.offset, buffer.offset + buffer.size) +
                   " lies outside the " + std::string(toString(buffer.region)) +
                   " region of " + str(capacity) + " bytes");
    }
    // Persistent and host buffers are live for the whole run: no overlap
    // at all.
    for (Region region : {Region::Persistent, Region::Host})
      forEachOverlap(region, [&](const Buffer &a, const Buffer &b) {
        report(CheckKind::Memory, std::string(toString(region)) + " buffers " +
                                      str(a.id) + " '" + a.name + "' and " +
                                      str(b.id) + " '" + b.name + "' overlap");
      });
  }

  template <typename Fn> void forEachOverlap(Region region, Fn fn) const {
    std::vector<const Buffer *> sorted;
    for (const Buffer &buffer : program.buffers)
      if (buffer.region == region)
        sorted.push_back(&buffer);
    std::sort(sorted.begin(), sorted.end(),
              [](const Buffer *a, const Buffer *b) {
                return std::tie(a->offset, a->id) < std::tie(b->offset, b->id);
              });
    for (size_t i = 0; i < sorted.size(); ++i)
      for (size_t j = i + 1;
           j < sorted.size() &&
           sorted[j]->offset < sorted[i]->offset + sorted[i]->size;
           ++j)
        fn(*sorted[i], *sorted[j]);
  }

  bool checkEventsRecorded() {
    std::vector<bool> recorded(program.numEvents, false);
    for (const Stream &stream : program.streams)
      for (const Instruction &inst : stream.instructions)
        if (inst.opcode == Opcode::RecordEvent)
          recorded[inst.event] = true;
    bool ok = true;
    for (size_t s = 0; s < program.streams.size(); ++s)
      for (size_t i = 0; i < program.streams[s].instructions.size(); ++i) {
        const Instruction &inst = program.streams[s].instructions[i];
        if (inst.opcode == Opcode::WaitEvent && !recorded[inst.event]) {
          report(CheckKind::Event, describe(program, {int64_t(s), int64_t(i)}) +
                                       ": wait_event " + str(inst.event) +
                                       " has no record_event in this program");
          ok = false;
        }
      }
    return ok;
  }

  /// Whether some rank of this role is the root of broadcast `inst` (the root
  /// sends the contents of its buffer, so it reads it).
  bool isBroadcastRoot(const Instruction &inst) const {
    for (int64_t rank : roleRanks) {
      const std::vector<int64_t> *group =
          resolveGroup(bundle, inst.group, rank);
      if (group && groupIndexOf(*group, rank) == inst.peer)
        return true;
    }
    return false;
  }

  void simulate() {
    size_t numStreams = program.streams.size();
    clocks.assign(numStreams, VectorClock(numStreams, 0));
    eventClocks.assign(program.numEvents, VectorClock());
    for (const Buffer &buffer : program.buffers) {
      bytes.emplace_back(buffer.size, ByteInfo{buffer.region != Region::Arena
                                                   ? ByteState::Written
                                                   : ByteState::Uninitialized,
                                               {}});
      Liveness live;
      live.maxClock.assign(numStreams, 0);
      live.minVC.assign(numStreams, std::numeric_limits<int64_t>::max());
      liveness.push_back(std::move(live));
    }
    accesses.resize(program.buffers.size());

    // The streams in the order a host issues them (round-robin, honoring
    // events). Collectives do not block here (the global simulation checks
    // them); any interleaving that honors events gives the same
    // happens-before order.
    for (Loc loc : hostIssueOrder(program))
      execute(program.streams[loc.stream].instructions[loc.index], loc);
  }

  void execute(const Instruction &inst, Loc loc) {
    VectorClock &clock = clocks[loc.stream];
    ++clock[loc.stream];
    if (inst.opcode == Opcode::WaitEvent) {
      const VectorClock &recorded = eventClocks[inst.event];
      for (size_t s = 0; s < clock.size(); ++s)
        clock[s] = std::max(clock[s], recorded[s]);
    } else if (inst.opcode == Opcode::RecordEvent) {
      eventClocks[inst.event] = clock;
    }
    ++sequence;

    std::vector<BufferRange> reads = inst.reads;
    if (inst.opcode == Opcode::Broadcast && isBroadcastRoot(inst))
      reads.push_back(inst.writes[0]);
    for (auto range = reads.begin(); range != reads.end(); ++range) {
      // A range read twice (a gemm's A and B) is one uninitialized read.
      if (std::find(reads.begin(), range, *range) == range)
        checkInitialized(*range, loc);
      access(*range, loc, /*write=*/false);
    }
    for (const BufferRange &range : inst.writes) {
      access(range, loc, /*write=*/true);
      bytes[range.buffer].assign(range.offset, range.offset + range.bytes,
                                 {inst.opcode == Opcode::Release
                                      ? ByteState::Released
                                      : ByteState::Written,
                                  loc});
    }
  }

  void checkInitialized(const BufferRange &range, Loc loc) {
    auto bad = bytes[range.buffer].first(
        range.offset, range.offset + range.bytes,
        [](const ByteInfo &info) { return info.state != ByteState::Written; });
    if (!bad)
      return;
    int64_t begin = std::max(bad->first, range.offset);
    int64_t end = std::min(bad->second.end, range.offset + range.bytes);
    std::string what = describe(program, loc) + ": reads " +
                       bufferText(program, range.buffer) + " " +
                       bytesText(begin, end);
    if (bad->second.value.state == ByteState::Released)
      report(CheckKind::Init, what + " after their release at " +
                                  describe(program, bad->second.value.loc));
    else
      report(CheckKind::Init, what + " before they are written");
  }

  /// Race detection: an earlier access on another stream that conflicts
  /// (one of the two writes) must happen before this one, i.e. this stream's
  /// clock must have seen it through an event chain.
  void access(const BufferRange &range, Loc loc, bool write) {
    const VectorClock &clock = clocks[loc.stream];
    Access next{range.offset, range.offset + range.bytes,
                loc.stream,   clock[loc.stream],
                write,        loc};
    AccessHistory &history = accesses[range.buffer];
    for (auto it = history.byBegin.lower_bound(next.begin - history.longest);
         it != history.byBegin.end() && it->first < next.end; ++it) {
      const Access &prior = it->second;
      bool ordered =
          prior.stream == next.stream || clock[prior.stream] >= prior.clock;
      if (ordered || !(prior.write || write) || prior.end <= next.begin ||
          next.end <= prior.begin)
        continue;
      report(CheckKind::Race,
             describe(program, loc) + (write ? ": writes " : ": reads ") +
                 bufferText(program, range.buffer) + " " +
                 bytesText(std::max(prior.begin, next.begin),
                           std::min(prior.end, next.end)) +
                 (prior.write ? " written" : " read") + " by " +
                 describe(program, prior.loc) + " with no event ordering them");
      break;
    }
    // An earlier access covered and ordered before this one can no longer
    // race with anything this one does not race with: drop it.
    for (auto it = history.byBegin.lower_bound(next.begin);
         it != history.byBegin.end() && it->first < next.end;) {
      const Access &prior = it->second;
      bool ordered =
          prior.stream == next.stream || clock[prior.stream] >= prior.clock;
      if (ordered && (write || !prior.write) && prior.end <= next.end)
        it = history.byBegin.erase(it);
      else
        ++it;
    }
    history.byBegin.emplace(next.begin, next);
    history.longest = std::max(history.longest, next.end - next.begin);

    if (program.buffers[range.buffer].region != Region::Arena)
      return;
    Liveness &live = liveness[range.buffer];
    if (!live.accessed) {
      live.accessed = true;
      live.firstSeq = sequence;
      live.first = loc;
    }
    live.last = loc;
    live.maxClock[loc.stream] =
        std::max(live.maxClock[loc.stream], clock[loc.stream]);
    for (size_t s = 0; s < clock.size(); ++s)
      live.minVC[s] = std::min(live.minVC[s], clock[s]);
  }

  /// Every access of `a` happens strictly before every access of `b`. Strict:
  /// one instruction touching both (an input aliasing an output) conflicts.
  static bool livesBefore(const Liveness &a, const Liveness &b) {
    for (size_t s = 0; s < a.maxClock.size(); ++s)
      if (a.maxClock[s] > 0 && b.minVC[s] <= a.maxClock[s])
        return false;
    return true;
  }

  /// Arena buffers sharing bytes must live one after the other. Checking
  /// every overlapping pair is quadratic in the buffers one offset is
  /// reused for (a step of thousands of micro-batches), so the buffers are
  /// visited in the order they are first accessed, each checked against the
  /// latest earlier buffer on each of its bytes only: "lives before" is
  /// transitive (through a buffer that is accessed), so if every such
  /// neighbour pair is ordered, every overlapping pair is, and a pair that
  /// is not is a real overlap.
  void checkLiveOverlap() {
    std::vector<const Buffer *> order;
    for (const Buffer &buffer : program.buffers)
      if (buffer.region == Region::Arena && buffer.size > 0 &&
          liveness[buffer.id].accessed)
        order.push_back(&buffer);
    std::sort(order.begin(), order.end(),
              [&](const Buffer *a, const Buffer *b) {
                return std::tie(liveness[a->id].firstSeq, a->id) <
                       std::tie(liveness[b->id].firstSeq, b->id);
              });
    // Arena bytes -> the buffer that last held them (-1: none yet).
    SegmentMap<int64_t> held(std::numeric_limits<int64_t>::max(), -1);
    for (const Buffer *late : order) {
      int64_t begin = late->offset, end = late->offset + late->size;
      std::vector<int64_t> earlier;
      held.first(begin, end, [&](int64_t buffer) {
        if (buffer >= 0 &&
            std::find(earlier.begin(), earlier.end(), buffer) == earlier.end())
          earlier.push_back(buffer);
        return false; // every segment
      });
      held.assign(begin, end, late->id);
      for (int64_t id : earlier) {
        const Buffer &early = program.buffers[size_t(id)];
        if (livesBefore(liveness[early.id], liveness[late->id]))
          continue;
        report(CheckKind::Memory,
               "arena " + bufferText(program, early.id) + " and " +
                   bufferText(program, late->id) + " overlap in " +
                   bytesText(std::max(early.offset, begin),
                             std::min(early.offset + early.size, end)) +
                   " while both are live: '" + late->name +
                   "' is first accessed at " +
                   describe(program, liveness[late->id].first) +
                   ", not after the last access of '" + early.name + "' at " +
                   describe(program, liveness[early.id].last));
      }
    }
  }

  const Bundle &bundle;
  const Program &program;
  std::vector<Diagnostic> &diagnostics;
  std::vector<int64_t> roleRanks;
  std::string prefix;

  std::vector<VectorClock> clocks; // per stream
  std::vector<VectorClock> eventClocks;
  std::vector<ByteMap> bytes;
  std::vector<AccessHistory> accesses;
  std::vector<Liveness> liveness;
  int64_t sequence = 0;
};

} // namespace

std::string_view weft::plan::toString(CheckKind kind) {
  switch (kind) {
  case CheckKind::Structure:
    return "structure";
  case CheckKind::Matching:
    return "matching";
  case CheckKind::Deadlock:
    return "deadlock";
  case CheckKind::Event:
    return "event";
  case CheckKind::Init:
    return "init";
  case CheckKind::Race:
    return "race";
  case CheckKind::Memory:
    return "memory";
  case CheckKind::Order:
    return "order";
  case CheckKind::Operands:
    return "operands";
  }
  return "?";
}

void VerifyResult::throwIfFailed() const {
  if (!diagnostics.empty())
    throw Error(diagnostics.front().message);
}

VerifyResult weft::plan::verify(const Bundle &bundle) {
  VerifyResult result;
  for (const StructuralError &error : checkStructure(bundle))
    result.diagnostics.push_back(
        {CheckKind::Structure, error.path + ": " + error.reason});
  if (!result.ok())
    return result;
  std::vector<std::vector<Loc>> order;
  GlobalSimulator(bundle, result.diagnostics, &order).run();
  if (result.ok()) {
    checkLaunchOrder(bundle, order, result.diagnostics);
    result.communicationOrder = std::move(order);
  }
  for (size_t role = 0; role < bundle.programs.size(); ++role)
    LocalChecker(bundle, role, result.diagnostics).run();
  return result;
}

std::vector<std::vector<int64_t>>
weft::plan::turnsOf(const Program &program,
                    const std::vector<StreamPosition> &order) {
  std::vector<std::vector<int64_t>> turn;
  for (const Stream &stream : program.streams)
    turn.emplace_back(stream.instructions.size(), -1);
  for (size_t k = 0; k < order.size(); ++k)
    turn[size_t(order[k].stream)][size_t(order[k].index)] = int64_t(k);
  return turn;
}

std::vector<StreamPosition>
weft::plan::hostIssueOrder(const Program &program,
                           const std::vector<StreamPosition> *communication) {
  std::vector<std::vector<int64_t>> position;
  if (communication)
    position = turnsOf(program, *communication);
  int64_t nextCommunication = 0;
  std::vector<StreamPosition> order;
  std::vector<size_t> pc(program.streams.size(), 0);
  std::vector<bool> recorded(size_t(std::max<int64_t>(program.numEvents, 0)));
  for (bool moved = true; moved;) {
    moved = false;
    for (size_t s = 0; s < program.streams.size(); ++s) {
      const std::vector<Instruction> &insts = program.streams[s].instructions;
      for (; pc[s] < insts.size(); ++pc[s], moved = true) {
        const Instruction &inst = insts[pc[s]];
        bool known = inst.event >= 0 && inst.event < int64_t(recorded.size());
        if (inst.opcode == Opcode::WaitEvent &&
            !(known && recorded[size_t(inst.event)]))
          break; // until another stream records it
        if (communication) {
          int64_t at = position[s][pc[s]];
          if (at >= 0 && at != nextCommunication)
            break; // until the communication listed before it is issued
          nextCommunication += at >= 0;
        }
        if (inst.opcode == Opcode::RecordEvent && known)
          recorded[size_t(inst.event)] = true;
        order.push_back({int64_t(s), int64_t(pc[s])});
      }
    }
  }
  return order;
}

std::vector<std::vector<StreamPosition>>
weft::plan::communicationOrder(const Bundle &bundle) {
  std::vector<Diagnostic> diagnostics;
  std::vector<std::vector<Loc>> order;
  GlobalSimulator(bundle, diagnostics, &order).run();
  if (!diagnostics.empty())
    return {};
  return order;
}

std::vector<std::pair<size_t, size_t>>
weft::plan::communicationBuckets(const Program &program, size_t stream,
                                 const std::vector<StreamPosition> *order) {
  std::vector<std::pair<size_t, size_t>> buckets =
      communicationBuckets(program.streams[stream]);
  if (!order)
    return buckets;
  std::vector<int64_t> position(program.streams[stream].instructions.size(),
                                -1);
  for (size_t k = 0; k < order->size(); ++k)
    if ((*order)[k].stream == int64_t(stream))
      position[size_t((*order)[k].index)] = int64_t(k);
  std::vector<std::pair<size_t, size_t>> runs;
  for (auto [first, last] : buckets)
    for (size_t i = first; i < last;) {
      size_t j = i + 1;
      while (j < last && position[j] >= 0 && position[j] == position[j - 1] + 1)
        ++j;
      if (j - i >= 2 && position[i] >= 0)
        runs.emplace_back(i, j);
      i = j;
    }
  return runs;
}

std::string weft::plan::launchOrderCycle(
    const Bundle &bundle,
    const std::vector<std::vector<StreamPosition>> &issued,
    const std::vector<std::vector<StreamPosition>> *order) {
  LaunchOrderGraph graph(bundle);
  for (size_t rank = 0; rank < issued.size(); ++rank)
    graph.addRank(int64_t(rank), issued[rank],
                  launchesOf(bundle.programs[size_t(bundle.rankRoles[rank])],
                             order ? &(*order)[rank] : nullptr));
  return graph.cycle();
}

std::vector<std::vector<std::vector<int64_t>>>
weft::plan::completedBefore(const Program &program) {
  size_t streams = program.streams.size(), instructions = 0;
  std::map<int64_t, int64_t> records;
  for (const Stream &stream : program.streams) {
    instructions += stream.instructions.size();
    for (const Instruction &inst : stream.instructions)
      if (inst.opcode == Opcode::RecordEvent && ++records[inst.event] > 1)
        return {}; // which record a wait means is not fixed
  }
  std::vector<StreamPosition> order = hostIssueOrder(program);
  if (order.size() < instructions)
    return {}; // a wait no record satisfies: no order is known
  std::vector<std::vector<std::vector<int64_t>>> completed(streams);
  for (size_t s = 0; s < streams; ++s)
    completed[s].resize(program.streams[s].instructions.size());
  std::vector<std::vector<int64_t>> clock(streams,
                                          std::vector<int64_t>(streams, 0));
  std::map<int64_t, std::vector<int64_t>> recorded; // event -> snapshot
  for (auto [s, index] : order) {
    const Instruction &inst = program.streams[s].instructions[index];
    if (inst.opcode == Opcode::WaitEvent)
      for (size_t t = 0; t < streams; ++t)
        clock[s][t] = std::max(clock[s][t], recorded[inst.event][t]);
    // In order on its own stream: everything before has finished.
    clock[s][s] = index;
    completed[s][index] = clock[s];
    if (inst.opcode == Opcode::RecordEvent)
      recorded[inst.event] = clock[s];
  }
  return completed;
}
