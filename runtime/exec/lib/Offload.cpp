//===- Offload.cpp - Moving a rank's state groups between device and host -===//
//
// A group's ranges are packed, in offset order, into one host allocation;
// the device copy is then decommitted (released and made to fault, or
// NaN-poisoned where a page is shared with other state), so a step that
// reads offloaded state cannot go unnoticed. Every operation either
// completes or leaves the state where it was: the host copy is made before
// the device bytes are released, and dropped only after they are restored.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/Checkpoint.h"
#include "weft/exec/Error.h"
#include "weft/exec/Session.h"

#include <algorithm>
#include <cstring>

namespace weft::exec {

std::string_view toString(Residency residency) {
  switch (residency) {
  case Residency::Device:
    return "device";
  case Residency::Pageable:
    return "host-pageable";
  case Residency::Pinned:
    return "host-pinned";
  case Residency::Released:
    return "released";
  case Residency::Host:
    return "host";
  }
  return "?";
}

Residency Session::where(StateGroup group) const {
  // A group the plan keeps wholly in its host region (optimizer offload)
  // lives on the host whatever offload() is asked.
  const StateGroupLayout &g = layout_[size_t(group)];
  if (g.bytes == 0 && g.hostBytes > 0)
    return Residency::Host;
  return groups_[size_t(group)].where;
}

const StateGroupLayout &Session::layout(StateGroup group) const {
  return layout_[size_t(group)];
}

int64_t Session::deviceBytesInUse() const {
  return backend_->deviceBytesInUse();
}

int64_t Session::workspaceBytes() const { return backend_->workspaceBytes(); }
int64_t Session::deviceBytesAllocated() const {
  return backend_->deviceBytesAllocated();
}

void Session::requireResident(const char *what) const {
  std::string step = "step " + std::to_string(completedSteps_ + 1);
  if (!stateLost_.empty())
    throw Error("rank " + std::to_string(rank_) + ": cannot " + what + " " +
                step + ": " + stateLost_);
  for (StateGroup group : allStateGroups()) {
    const GroupState &state = groups_[size_t(group)];
    if (state.where != Residency::Device && layout_[size_t(group)].bytes > 0)
      throw Error("rank " + std::to_string(rank_) + ": cannot " + what + " " +
                  step + ": state group '" + std::string(toString(group)) +
                  "' is " + std::string(toString(state.where)) +
                  "; reload it first");
  }
}

OffloadReport Session::offload(StateGroup group, HostMemoryKind kind) {
  double start = MPI_Wtime();
  GroupState &state = groups_[size_t(group)];
  const StateGroupLayout &g = layout_[size_t(group)];
  OffloadReport report;
  report.group = group;
  report.before = where(group);
  report.groupBytes = g.bytes;
  report.deviceBytesBefore = backend_->deviceBytesInUse();
  std::string who = "rank " + std::to_string(rank_) + ": offload of '" +
                    std::string(toString(group)) + "'";
  if (!stateLost_.empty())
    throw Error(who + ": " + stateLost_);
  if (group == StateGroup::Activations && stepInProgress_)
    throw Error(who + ": the arena is live during step " +
                std::to_string(completedSteps_ + 1) +
                "; offload activations between steps");
  // Nothing may write (or read) the bytes once they are copied: complete
  // every collective and transfer this rank has in flight.
  report.drained = drain();
  // Only device bytes move: the group's host-region ranges (optimizer
  // offload) are host memory already and stay where they are.
  if (report.before == Residency::Host) {
    // Nothing on the device to move.
  } else if (state.where == Residency::Device && g.bytes == 0) {
    state.where = group == StateGroup::Activations ? Residency::Released
                  : kind == HostMemoryKind::Pinned ? Residency::Pinned
                                                   : Residency::Pageable;
  } else if (state.where == Residency::Device) {
    if (group == StateGroup::Activations) {
      for (const ByteRange &r : g.ranges)
        backend_->decommit(arena_ + r.offset, r.bytes);
      state.where = Residency::Released;
    } else {
      // The previous offload's buffer is kept for reuse (allocating and
      // first-touching host memory costs more than the copy).
      HostBuffer host = std::move(state.host);
      report.hostReused = host.bytes() == g.bytes && host.kind() == kind;
      if (!report.hostReused) {
        host = HostBuffer(g.bytes, kind); // may throw: nothing changed yet
        Backend *backend = backend_.get();
        if (kind == HostMemoryKind::Pinned &&
            backend->registerHostMemory(host.data(), host.bytes()))
          host.onRelease([backend](std::byte *data) {
            backend->unregisterHostMemory(data);
          });
      }
      double copyStart = MPI_Wtime();
      int64_t at = 0;
      for (const ByteRange &r : g.ranges) {
        backend_->copyToHost(host.data() + at, persistent_ + r.offset, r.bytes);
        at += r.bytes;
      }
      report.copySeconds = MPI_Wtime() - copyStart;
      size_t released = 0;
      try {
        for (; released < g.ranges.size(); ++released)
          backend_->decommit(persistent_ + g.ranges[released].offset,
                             g.ranges[released].bytes);
      } catch (const Error &) {
        // Put back what was released (the failed range is left usable by
        // decommit); the group stays on the device.
        at = 0;
        for (size_t i = 0; i <= released && i < g.ranges.size(); ++i) {
          const ByteRange &r = g.ranges[i];
          if (i < released)
            backend_->recommit(persistent_ + r.offset, r.bytes);
          backend_->copyToDevice(persistent_ + r.offset, host.data() + at,
                                 r.bytes);
          at += r.bytes;
        }
        throw;
      }
      state.host = std::move(host);
      state.where = kind == HostMemoryKind::Pinned ? Residency::Pinned
                                                   : Residency::Pageable;
      report.bytesMoved = g.bytes;
    }
  }
  report.after = where(group);
  report.deviceBytesAfter = backend_->deviceBytesInUse();
  report.seconds = MPI_Wtime() - start;
  return report;
}

OffloadReport Session::reload(StateGroup group) {
  double start = MPI_Wtime();
  GroupState &state = groups_[size_t(group)];
  const StateGroupLayout &g = layout_[size_t(group)];
  OffloadReport report;
  report.group = group;
  report.reload = true;
  report.before = where(group);
  report.groupBytes = g.bytes;
  report.deviceBytesBefore = backend_->deviceBytesInUse();
  if (state.where == Residency::Released) {
    for (const ByteRange &r : g.ranges) {
      backend_->recommit(arena_ + r.offset, r.bytes);
      // Arena contents are undefined at a step's start: keep them NaN.
      backend_->poison(arena_ + r.offset, r.bytes);
    }
  } else if (state.where != Residency::Device) {
    for (const ByteRange &r : g.ranges)
      backend_->recommit(persistent_ + r.offset, r.bytes);
    double copyStart = MPI_Wtime();
    int64_t at = 0;
    for (const ByteRange &r : g.ranges) {
      backend_->copyToDevice(persistent_ + r.offset, state.host.data() + at,
                             r.bytes);
      at += r.bytes;
    }
    report.copySeconds = MPI_Wtime() - copyStart;
    // The host buffer stays allocated for the next offload of the group
    // (releaseHostBuffers() frees it); its bytes are stale from now on.
    report.bytesMoved = g.bytes;
  }
  state.where = Residency::Device;
  report.after = where(group);
  report.deviceBytesAfter = backend_->deviceBytesInUse();
  report.seconds = MPI_Wtime() - start;
  return report;
}

int64_t Session::releaseHostBuffers() {
  int64_t freed = 0;
  for (GroupState &state : groups_)
    if (state.where == Residency::Device) {
      freed += state.host.bytes();
      state.host = HostBuffer();
    }
  return freed;
}

PayloadPieces Session::persistentPieces(int64_t offset, int64_t bytes) const {
  struct Offloaded {
    int64_t offset, bytes;
    const std::byte *host;
  };
  std::vector<Offloaded> offloaded;
  for (StateGroup group : allStateGroups()) {
    const GroupState &state = groups_[size_t(group)];
    if (state.where != Residency::Pageable && state.where != Residency::Pinned)
      continue;
    int64_t at = 0;
    for (const ByteRange &r : layout_[size_t(group)].ranges) {
      offloaded.push_back({r.offset, r.bytes, state.host.data() + at});
      at += r.bytes;
    }
  }
  std::sort(offloaded.begin(), offloaded.end(),
            [](const Offloaded &a, const Offloaded &b) {
              return a.offset < b.offset;
            });
  PayloadPieces pieces;
  int64_t cursor = offset, end = offset + bytes;
  for (const Offloaded &o : offloaded) {
    int64_t from = std::max(cursor, o.offset),
            to = std::min(end, o.offset + o.bytes);
    if (from >= to)
      continue;
    if (from > cursor)
      pieces.push_back({persistent_ + cursor, from - cursor});
    pieces.push_back({o.host + (from - o.offset), to - from});
    cursor = to;
  }
  if (cursor < end)
    pieces.push_back({persistent_ + cursor, end - cursor});
  return pieces;
}

CheckpointStats Session::loadCheckpoint(const std::string &dir) {
  if (stepInProgress_)
    throw Error("rank " + std::to_string(rank_) +
                ": loadCheckpoint during step " +
                std::to_string(completedSteps_ + 1));
  drain();
  std::string failure;
  int touched = 0; // the payload read began: the old state is gone
  CheckpointStats stats;
  try {
    // The state is being replaced: offloaded copies are simply dropped.
    for (StateGroup group : allStateGroups()) {
      GroupState &state = groups_[size_t(group)];
      if (state.where == Residency::Device)
        continue;
      std::byte *base = group == StateGroup::Activations ? arena_ : persistent_;
      for (const ByteRange &r : layout_[size_t(group)].ranges) {
        backend_->recommit(base + r.offset, r.bytes);
        if (group == StateGroup::Activations)
          backend_->poison(base + r.offset, r.bytes);
      }
      state.host = HostBuffer();
      state.where = Residency::Device;
    }
    stats = readCheckpointLocally(dir, &touched);
  } catch (const std::exception &error) {
    failure = error.what();
  }
  MPI_Allreduce(MPI_IN_PLACE, &touched, 1, MPI_INT, MPI_MAX, statsComm());
  try {
    agree(failure, statsComm());
  } catch (const Error &error) {
    if (touched)
      stateLost_ =
          std::string("a checkpoint load failed (") + error.what() + ")";
    throw;
  }
  stateLost_.clear();
  return stats;
}

} // namespace weft::exec
