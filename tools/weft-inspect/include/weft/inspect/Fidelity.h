//===- Fidelity.h - Measured times against the cost model -------*- C++ -*-===//
//
// `weft-inspect BUNDLE fidelity --measured TRACE`: a weft-run trace of one
// rank (`--trace`; on a GPU with --device-times, so an event lasts as long as
// its kernels) set against the simulator's cost of
// every instruction, by cost class and by kind of instruction, and the cost
// model's GPU constants fitted to it (docs/inspect.md, "Fidelity"):
//
//   matmul_peak_fraction, matmul_half_dim  the gemms: for each half dim of
//       a grid the fraction that keeps their total, and the half dim whose
//       log ratios (predicted / measured, weighted by the measured time)
//       spread least around it;
//   attention_efficiency  the fused attention kernels' total, given those;
//   memory_bandwidth_fraction  the total of the other kernels, fills and
//       optimizer steps on the device.
//
// Totals, so the instructions that fill the step decide and the calibrated
// step adds up to the measured one. Instructions the trace notes as run
// elsewhere (run inside a norm), and any measured under 2%
// of their prediction and under 1 us, did not run as themselves: they are
// counted apart and fit nothing; other notes (cuDNN) split their kind. The
// fitted constants go into a cluster file's "cost_constants"
// (planner::CostOverrides), which weftc and weft-inspect then cost with.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_FIDELITY_H
#define WEFT_INSPECT_FIDELITY_H

#include "weft/plan/Bundle.h"
#include "weft/planner/Cluster.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft::inspect {

/// One step of one rank as weft-run's --trace recorded it.
struct MeasuredStep {
  int64_t rank = 0;
  int64_t step = 0;
  struct Time {
    int64_t stream = 0, instruction = 0;
    double seconds = 0;
    double begin = 0, end = 0; // since the trace's origin
    /// weft-run's args.note: how the backend ran it ("epilogue as kernels",
    /// "cuDNN", ...).
    std::string note;
  };
  std::vector<Time> times;
};

/// Reads the events of `step` (nullopt: the trace's last step) from a
/// weft-run trace of `bundle` (Chrome trace events: pid = rank, tid = stream
/// index, args.instruction, args.step, dur in microseconds). Throws
/// plan::Error naming the file and the event for anything that does not fit
/// the bundle.
MeasuredStep readMeasuredTrace(const std::string &path,
                               const plan::Bundle &bundle,
                               std::optional<int64_t> step);

/// The measured step against the cost model on `cluster` (its own
/// cost_constants applied), the fitted constants and the step's cost with
/// them. `trace` and `clusterSource` label the report.
nlohmann::json fidelityJson(const plan::Bundle &bundle,
                            const planner::Cluster &cluster,
                            const std::string &clusterSource,
                            const MeasuredStep &measured,
                            const std::string &trace);
std::string fidelityText(const nlohmann::json &fidelity);

/// `cluster` with the constants fidelityJson fitted as its cost_constants.
planner::Cluster calibratedCluster(planner::Cluster cluster,
                                   const nlohmann::json &fidelity);

} // namespace weft::inspect

#endif // WEFT_INSPECT_FIDELITY_H
