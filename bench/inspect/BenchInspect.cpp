//===- BenchInspect.cpp - Simulation speed of a 1024-rank plan ------------===//
//
// Builds a GPipe plan over TP8 x PP16 x DP8 = 1024 ranks (one program per
// rank, 6 layers per stage, 16 micro-batches) and times the simulation, the
// timeline statistics and the memory profiles that `weft-inspect timeline`
// and `summary` compute. Exit status 1 if they take 10 s or more.
//
//===----------------------------------------------------------------------===//

#include "InspectBundles.h"

#include "weft/inspect/Analysis.h"
#include "weft/inspect/Simulator.h"

#include <chrono>
#include <cstdio>

using namespace weft;
using Clock = std::chrono::steady_clock;

static double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int main() {
  Clock::time_point start = Clock::now();
  plan::Bundle bundle = inspect::test::gpipeBundle(8, 16, 8, 16, 6);
  double build = secondsSince(start);
  size_t instructions = 0;
  for (const plan::Program &program : bundle.programs)
    for (const plan::Stream &stream : program.streams)
      instructions += stream.instructions.size();

  start = Clock::now();
  inspect::InstructionCosts costs(bundle,
                                  planner::clusterPreset("dgx-h100-80g:128"));
  inspect::Timeline timeline = inspect::simulate(bundle, costs);
  inspect::TimelineStats stats = inspect::analyzeTimeline(bundle, timeline);
  int64_t peak = 0;
  for (size_t role = 0; role < bundle.programs.size(); ++role)
    peak = std::max(peak, inspect::memoryProfile(bundle.programs[role],
                                                 timeline.roles[role])
                              .peakBytes);
  double simulate = secondsSince(start);

  std::printf("plan: TP8 PP16 DP8 (1024 ranks, %zu roles), %zu instructions "
              "(built in %.2f s)\n",
              bundle.programs.size(), instructions, build);
  std::printf("simulate + analyze + memory: %.3f s (%.0f instructions/s); "
              "simulated step %.3f s, bubble on stage 0 %.3f s, peak %lld B\n",
              simulate, double(instructions) / simulate, timeline.stepTimeS,
              stats.idleByStage[0], static_cast<long long>(peak));
  if (simulate >= 10) {
    std::printf("FAIL: over the 10 s budget\n");
    return 1;
  }
  return 0;
}
