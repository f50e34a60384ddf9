//===- Analysis.h - Memory liveness and timeline statistics -----*- C++ -*-===//
//
// Both read a simulated Timeline: an arena buffer is live from the start of
// the first instruction that touches it to the end of the last one (its last
// read or its release); persistent buffers are live throughout.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_ANALYSIS_H
#define WEFT_INSPECT_ANALYSIS_H

#include "weft/inspect/Categories.h"
#include "weft/inspect/Simulator.h"

#include <array>
#include <map>
#include <string>
#include <vector>

namespace weft::inspect {

/// Bytes in use from `time` until the next sample's time.
struct MemorySample {
  double time = 0;
  int64_t bytes = 0;
};

struct MemoryProfile {
  int64_t persistentBytes = 0; // sum of the persistent buffers
  int64_t hostBytes = 0; // the host region (optimizer offload): not device
  std::vector<MemorySample> samples; // step function, starting at time 0
  int64_t peakBytes = 0;
  double peakTime = 0;
  std::vector<int64_t> liveAtPeak;  // buffer ids, persistent ones included
  std::vector<Category> categories; // by buffer id (classifyBuffers)
  std::array<int64_t, kNumCategories> peakByCategory{};
};

/// The profile of `program` (a program of `bundle`), with its categories.
MemoryProfile memoryProfile(const plan::Bundle &bundle,
                            const plan::Program &program,
                            const RoleTimeline &timeline);
/// Liveness only: `categories` empty, `peakByCategory` all zero.
MemoryProfile memoryProfile(const plan::Program &program,
                            const RoleTimeline &timeline);

/// The largest bytes in use during [from, to) of a profile.
int64_t maxBytesIn(const MemoryProfile &profile, double from, double to);

/// "all_reduce/tp", "send_recv/pp": the opcode (send and recv together) and
/// the kind of group it runs on.
std::string commKind(const plan::Bundle &bundle, const plan::Instruction &inst);

struct RoleStats {
  int64_t stage = 0;
  double computeBusy = 0; // union of compute instructions
  double commBusy = 0;    // union of transfers (waiting excluded)
  std::map<std::string, double> exposedByKind; // transfer time outside compute
  double idle = 0; // step time not covered by compute or transfers
};

struct TimelineStats {
  double stepTimeS = 0;
  std::vector<RoleStats> roles;                // by role id
  std::map<std::string, double> exposedByKind; // mean over ranks
  std::vector<double> idleByStage; // mean over the stage's ranks (bubble)
  int64_t slowestRole = 0;         // its last instruction ends the step
};

TimelineStats analyzeTimeline(const plan::Bundle &bundle,
                              const Timeline &timeline);

} // namespace weft::inspect

#endif // WEFT_INSPECT_ANALYSIS_H
