//===- Report.h - weft-inspect's outputs ------------------------*- C++ -*-===//
//
// Each subcommand builds JSON (what --json prints) and renders its text form
// from that JSON, so the two never disagree. The trace and the HTML report
// are rendered from the simulated timeline.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_REPORT_H
#define WEFT_INSPECT_REPORT_H

#include "weft/inspect/Analysis.h"
#include "weft/inspect/Diff.h"
#include "weft/inspect/Simulator.h"
#include "weft/plan/Verifier.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace weft::inspect {

/// The cluster to cost a bundle on: `spec` (a file or preset) when given,
/// else the bundle's config "cluster" (a preset name, file or cluster
/// object), else dgx-h100-80g with enough nodes for the world. `source`
/// says which was taken (and ", with its measured cost_constants" when the
/// cluster carries them).
planner::Cluster resolveCluster(const plan::Bundle &bundle,
                                const std::optional<std::string> &spec,
                                std::string &source);

/// A bundle with its simulated step and derived statistics.
struct Inspection {
  Inspection(const plan::Bundle &bundle, planner::Cluster cluster,
             std::string clusterSource, planner::CostConstants constants = {});

  const plan::Bundle &bundle;
  std::string clusterSource;
  InstructionCosts costs;
  Timeline timeline;
  TimelineStats stats;
  std::vector<MemoryProfile> memory; // by role
};

nlohmann::json summaryJson(const Inspection &inspection);
std::string summaryText(const nlohmann::json &summary);

/// `stream` limits the listing to one stream (by name); throws plan::Error
/// for an unknown rank or stream. Each communication instruction carries its
/// `turn`, its place in the rank's communication order (plan::
/// communicationOrder, what weft-run issues it in). With `issueOrder` the
/// instructions are listed as weft-run issues them (plan::hostIssueOrder in
/// that order), each with its `issue` position (weft-run --trace's
/// args.issue).
nlohmann::json programJson(const plan::Bundle &bundle, int64_t rank,
                           const std::optional<std::string> &stream,
                           bool issueOrder = false);
std::string programText(const nlohmann::json &program);

nlohmann::json memoryJson(const Inspection &inspection, int64_t rank);
std::string memoryText(const nlohmann::json &memory);

nlohmann::json timelineJson(const Inspection &inspection);
std::string timelineText(const nlohmann::json &timeline);

/// Chrome trace-event JSON: one process per rank, one thread per stream.
nlohmann::json traceJson(const Inspection &inspection);

/// One self-contained HTML page (inline SVG and CSS, no scripts, no links).
std::string htmlReport(const Inspection &inspection);

nlohmann::json verifyJson(const plan::VerifyResult &result);
std::string verifyText(const nlohmann::json &verdict);

nlohmann::json diffJson(const std::vector<DiffEntry> &entries);
std::string diffText(const nlohmann::json &diff);

std::string formatBytes(double bytes);
std::string formatSeconds(double seconds);
/// "0-3, 8" for {0, 1, 2, 3, 8}.
std::string formatRanks(const std::vector<int64_t> &ranks);

} // namespace weft::inspect

#endif // WEFT_INSPECT_REPORT_H
