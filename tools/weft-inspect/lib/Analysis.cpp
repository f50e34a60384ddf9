//===- Analysis.cpp - Memory liveness and timeline statistics -------------===//

#include "weft/inspect/Analysis.h"

#include <algorithm>
#include <limits>

namespace weft::inspect {

MemoryProfile memoryProfile(const plan::Program &program,
                            const RoleTimeline &timeline) {
  size_t numBuffers = program.buffers.size();
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<double> first(numBuffers, kNever), last(numBuffers, -kNever);
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const auto &insts = program.streams[s].instructions;
    for (size_t i = 0; i < insts.size(); ++i) {
      const InstTiming &timing = timeline.streams[s][i];
      auto touch = [&](const plan::BufferRange &range) {
        first[range.buffer] = std::min(first[range.buffer], timing.start);
        last[range.buffer] = std::max(last[range.buffer], timing.end);
      };
      std::for_each(insts[i].reads.begin(), insts[i].reads.end(), touch);
      std::for_each(insts[i].writes.begin(), insts[i].writes.end(), touch);
    }
  }

  MemoryProfile profile;
  struct Change {
    double time;
    int64_t delta;
  };
  std::vector<Change> changes;
  for (const plan::Buffer &buffer : program.buffers) {
    if (buffer.region == plan::Region::Persistent) {
      profile.persistentBytes += buffer.size;
    } else if (buffer.region == plan::Region::Host) {
      profile.hostBytes += buffer.size; // host memory: not in the profile
    } else if (last[buffer.id] > first[buffer.id]) {
      changes.push_back({first[buffer.id], buffer.size});
      changes.push_back({last[buffer.id], -buffer.size});
    }
  }
  // At equal times frees come first: a buffer whose last use ends when
  // another's first use starts does not coexist with it.
  std::sort(changes.begin(), changes.end(),
            [](const Change &a, const Change &b) {
              return a.time != b.time ? a.time < b.time : a.delta < b.delta;
            });
  int64_t bytes = profile.persistentBytes;
  profile.samples.push_back({0, bytes});
  profile.peakBytes = bytes;
  for (size_t i = 0; i < changes.size(); ++i) {
    bytes += changes[i].delta;
    if (i + 1 < changes.size() && changes[i + 1].time == changes[i].time)
      continue;
    if (profile.samples.back().time == changes[i].time)
      profile.samples.back().bytes = bytes;
    else
      profile.samples.push_back({changes[i].time, bytes});
    if (bytes > profile.peakBytes) {
      profile.peakBytes = bytes;
      profile.peakTime = changes[i].time;
    }
  }
  for (const plan::Buffer &buffer : program.buffers) {
    bool live = buffer.region == plan::Region::Persistent ||
                (buffer.region == plan::Region::Arena &&
                 first[buffer.id] <= profile.peakTime &&
                 last[buffer.id] > profile.peakTime);
    if (!live)
      continue;
    profile.liveAtPeak.push_back(buffer.id);
  }
  return profile;
}

MemoryProfile memoryProfile(const plan::Bundle &bundle,
                            const plan::Program &program,
                            const RoleTimeline &timeline) {
  MemoryProfile profile = memoryProfile(program, timeline);
  profile.categories = classifyBuffers(bundle, program);
  for (int64_t id : profile.liveAtPeak)
    profile.peakByCategory[int(profile.categories[size_t(id)])] +=
        program.buffers[size_t(id)].size;
  return profile;
}

int64_t maxBytesIn(const MemoryProfile &profile, double from, double to) {
  int64_t most = 0;
  for (size_t i = 0; i < profile.samples.size(); ++i) {
    double until = i + 1 < profile.samples.size()
                       ? profile.samples[i + 1].time
                       : std::numeric_limits<double>::infinity();
    if (profile.samples[i].time < to && until > from)
      most = std::max(most, profile.samples[i].bytes);
  }
  return most;
}

std::string commKind(const plan::Bundle &bundle,
                     const plan::Instruction &inst) {
  std::string op = plan::isPointToPoint(inst.opcode)
                       ? "send_recv"
                       : std::string(plan::toString(inst.opcode));
  return op + "/" + std::string(plan::toString(bundle.groups[inst.group].kind));
}

namespace {
struct Interval {
  double begin, end;
};

/// Sorted, disjoint cover of `intervals`.
std::vector<Interval> unite(std::vector<Interval> intervals) {
  std::sort(
      intervals.begin(), intervals.end(),
      [](const Interval &a, const Interval &b) { return a.begin < b.begin; });
  std::vector<Interval> merged;
  for (const Interval &next : intervals) {
    if (next.end <= next.begin)
      continue;
    if (!merged.empty() && next.begin <= merged.back().end)
      merged.back().end = std::max(merged.back().end, next.end);
    else
      merged.push_back(next);
  }
  return merged;
}

double length(const std::vector<Interval> &disjoint) {
  double total = 0;
  for (const Interval &interval : disjoint)
    total += interval.end - interval.begin;
  return total;
}

/// Length of `interval` covered by the sorted disjoint `cover`.
double covered(const std::vector<Interval> &cover, Interval interval) {
  auto it =
      std::upper_bound(cover.begin(), cover.end(), interval.begin,
                       [](double t, const Interval &c) { return t < c.end; });
  double total = 0;
  for (; it != cover.end() && it->begin < interval.end; ++it)
    total +=
        std::min(it->end, interval.end) - std::max(it->begin, interval.begin);
  return total;
}
} // namespace

TimelineStats analyzeTimeline(const plan::Bundle &bundle,
                              const Timeline &timeline) {
  TimelineStats stats;
  stats.stepTimeS = timeline.stepTimeS;
  stats.roles.resize(bundle.programs.size());
  std::vector<int64_t> ranksOfRole(bundle.programs.size(), 0);
  for (int64_t role : bundle.rankRoles)
    ++ranksOfRole[role];
  std::vector<double> stageRanks(bundle.mesh.pp, 0);
  stats.idleByStage.assign(bundle.mesh.pp, 0);
  double world = double(bundle.rankRoles.size());

  for (size_t role = 0; role < bundle.programs.size(); ++role) {
    const RoleTimeline &roleTimeline = timeline.roles[role];
    if (roleTimeline.firstRank < 0)
      continue;
    const plan::Program &program = bundle.programs[role];
    RoleStats &out = stats.roles[role];
    out.stage = bundle.mesh.coordOf(roleTimeline.firstRank).pp;
    std::vector<Interval> compute, comm;
    std::vector<std::pair<std::string, Interval>> transfers;
    for (size_t s = 0; s < program.streams.size(); ++s) {
      const auto &insts = program.streams[s].instructions;
      for (size_t i = 0; i < insts.size(); ++i) {
        const InstTiming &timing = roleTimeline.streams[s][i];
        Interval span{timing.start, timing.end};
        if (isComputeOp(insts[i].opcode)) {
          compute.push_back(span);
        } else if (isCommOp(insts[i].opcode)) {
          comm.push_back(span);
          transfers.push_back({commKind(bundle, insts[i]), span});
        }
      }
    }
    std::vector<Interval> computeCover = unite(compute);
    out.computeBusy = length(computeCover);
    out.commBusy = length(unite(comm));
    for (const auto &[kind, span] : transfers)
      out.exposedByKind[kind] +=
          span.end - span.begin - covered(computeCover, span);
    compute.insert(compute.end(), comm.begin(), comm.end());
    out.idle = timeline.stepTimeS - length(unite(compute));

    double weight = double(ranksOfRole[role]);
    for (const auto &[kind, seconds] : out.exposedByKind)
      stats.exposedByKind[kind] += seconds * weight / world;
    stats.idleByStage[out.stage] += out.idle * weight;
    stageRanks[out.stage] += weight;
    if (roleTimeline.end >= timeline.roles[stats.slowestRole].end)
      stats.slowestRole = int64_t(role);
  }
  for (size_t stage = 0; stage < stageRanks.size(); ++stage)
    if (stageRanks[stage] > 0)
      stats.idleByStage[stage] /= stageRanks[stage];
  return stats;
}

} // namespace weft::inspect
