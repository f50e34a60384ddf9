//===- Html.cpp - The self-contained HTML report --------------------------===//
//
// Inline SVG and CSS only: no scripts, fonts or links, so the file opens
// offline and renders the same everywhere. Large worlds show the first
// kMaxRows roles (ranks of a role share one timeline).
//
//===----------------------------------------------------------------------===//

#include "weft/inspect/Report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace weft::inspect {

namespace {

constexpr size_t kMaxRows = 64;
constexpr double kChartWidth = 960, kLabelWidth = 220;

std::string escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '&':
      out += "&amp;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::string num(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", value);
  return text;
}

/// The CSS class of an instruction: what the schedule colours it by.
std::string classOf(const plan::Instruction &inst) {
  if (isCommOp(inst.opcode))
    return "comm";
  if (inst.opcode == plan::Opcode::OptimizerStep ||
      inst.opcode == plan::Opcode::GradNorm ||
      inst.opcode == plan::Opcode::Clip)
    return "opt";
  if (inst.phase.rfind("bwd", 0) == 0)
    return "bwd";
  return "fwd";
}

std::vector<int64_t> shownRoles(const Inspection &inspection) {
  std::vector<int64_t> roles;
  for (size_t role = 0; role < inspection.bundle.programs.size(); ++role)
    if (inspection.timeline.roles[role].firstRank >= 0 &&
        roles.size() < kMaxRows)
      roles.push_back(int64_t(role));
  return roles;
}

std::string roleLabel(const Inspection &inspection, int64_t role) {
  int64_t rank = inspection.timeline.roles[role].firstRank;
  return "rank " + std::to_string(rank) + " (role " + std::to_string(role) +
         ", stage " + std::to_string(inspection.bundle.mesh.coordOf(rank).pp) +
         ")";
}

void scheduleSection(const Inspection &inspection, std::ostream &out) {
  const plan::Bundle &bundle = inspection.bundle;
  double step = std::max(inspection.timeline.stepTimeS, 1e-12);
  double scale = kChartWidth / step;
  constexpr double kLane = 14;
  std::vector<int64_t> roles = shownRoles(inspection);
  double height = 24;
  for (int64_t role : roles)
    height += kLane * double(bundle.programs[role].streams.size()) + 6;
  out << "<section id=\"schedule\"><h2>Pipeline schedule per rank</h2>\n"
      << "<p>Simulated step " << escape(formatSeconds(step))
      << ". Forward <span class=\"key fwd\"></span> backward <span "
         "class=\"key bwd\"></span> optimizer <span class=\"key "
         "opt\"></span> communication <span class=\"key comm\"></span> "
         "waiting <span class=\"key wait\"></span></p>\n"
      << "<svg class=\"chart\" width=\"" << num(kLabelWidth + kChartWidth)
      << "\" height=\"" << num(height) << "\">\n";
  double y = 4;
  for (int64_t role : roles) {
    const plan::Program &program = bundle.programs[role];
    const RoleTimeline &timeline = inspection.timeline.roles[role];
    for (size_t s = 0; s < program.streams.size(); ++s) {
      out << "<text x=\"2\" y=\"" << num(y + 11) << "\">"
          << escape((s == 0 ? roleLabel(inspection, role) + " " : "") +
                    program.streams[s].name)
          << "</text>\n";
      const auto &insts = program.streams[s].instructions;
      for (size_t i = 0; i < insts.size(); ++i) {
        const InstTiming &timing = timeline.streams[s][i];
        if (timing.start > timing.arrive)
          out << "<rect class=\"wait\" x=\""
              << num(kLabelWidth + timing.arrive * scale) << "\" y=\"" << num(y)
              << "\" width=\"" << num((timing.start - timing.arrive) * scale)
              << "\" height=\"12\"/>\n";
        if (timing.end <= timing.start)
          continue;
        out << "<rect class=\"op " << classOf(insts[i]) << "\" x=\""
            << num(kLabelWidth + timing.start * scale) << "\" y=\"" << num(y)
            << "\" width=\""
            << num(std::max(0.5, (timing.end - timing.start) * scale))
            << "\" height=\"12\"><title>"
            << escape(std::string(plan::toString(insts[i].opcode)) + " " +
                      insts[i].phase + " " +
                      formatSeconds(timing.end - timing.start))
            << "</title></rect>\n";
      }
      y += kLane;
    }
    y += 6;
  }
  out << "<text x=\"" << num(kLabelWidth) << "\" y=\"" << num(height - 4)
      << "\">0</text><text x=\"" << num(kLabelWidth + kChartWidth - 60)
      << "\" y=\"" << num(height - 4) << "\">" << escape(formatSeconds(step))
      << "</text>\n</svg></section>\n";
}

void memorySection(const Inspection &inspection, std::ostream &out) {
  double step = std::max(inspection.timeline.stepTimeS, 1e-12);
  constexpr double kHeight = 240;
  std::vector<int64_t> roles = shownRoles(inspection);
  int64_t peak = 1;
  for (int64_t role : roles)
    peak = std::max(peak, inspection.memory[role].peakBytes);
  out << "<section id=\"memory\"><h2>Memory over time</h2>\n"
      << "<p>Bytes in use per rank (persistent buffers plus live arena "
         "buffers); the top of the chart is "
      << escape(formatBytes(double(peak))) << ".</p>\n"
      << "<svg class=\"chart\" width=\"" << num(kLabelWidth + kChartWidth)
      << "\" height=\"" << num(kHeight + 20) << "\">\n";
  for (size_t n = 0; n < roles.size(); ++n) {
    const MemoryProfile &profile = inspection.memory[roles[n]];
    auto x = [&](double t) {
      return num(kLabelWidth + t / step * kChartWidth);
    };
    auto y = [&](int64_t bytes) {
      return num(kHeight - double(bytes) / double(peak) * (kHeight - 10));
    };
    std::string points;
    for (size_t i = 0; i < profile.samples.size(); ++i) {
      const MemorySample &sample = profile.samples[i];
      double until =
          i + 1 < profile.samples.size() ? profile.samples[i + 1].time : step;
      points += x(sample.time) + "," + y(sample.bytes) + " " + x(until) + "," +
                y(sample.bytes) + " ";
    }
    int hue = int(n * 47 % 360);
    out << "<polyline class=\"mem\" fill=\"none\" stroke=\"hsl(" << hue
        << ",70%,40%)\" points=\"" << points << "\"><title>"
        << escape(roleLabel(inspection, roles[n]) + ": peak " +
                  formatBytes(double(profile.peakBytes)))
        << "</title></polyline>\n"
        << "<text x=\"2\" y=\"" << num(14 + 14 * double(n % 16))
        << "\" fill=\"hsl(" << hue << ",70%,40%)\">"
        << escape(roleLabel(inspection, roles[n])) << "</text>\n";
  }
  out << "</svg>\n";
  // What the bytes at each rank's peak hold (classifyBuffers).
  out << "<table id=\"memory-categories\"><tr><th>bytes at the peak</th>";
  for (Category category : allCategories())
    out << "<th>" << escape(std::string(toString(category))) << "</th>";
  out << "</tr>";
  for (int64_t role : roles) {
    const MemoryProfile &profile = inspection.memory[role];
    out << "<tr><td>" << escape(roleLabel(inspection, role)) << "</td>";
    for (Category category : allCategories())
      out << "<td>"
          << escape(formatBytes(double(profile.peakByCategory[int(category)])))
          << "</td>";
    out << "</tr>";
  }
  out << "</table></section>\n";
}

void overlapSection(const Inspection &inspection, std::ostream &out) {
  double step = std::max(inspection.timeline.stepTimeS, 1e-12);
  std::vector<int64_t> roles = shownRoles(inspection);
  constexpr double kRow = 18;
  out << "<section id=\"overlap\"><h2>Compute and communication "
         "overlap</h2>\n<p>Per rank: compute <span class=\"key "
         "fwd\"></span> communication hidden under compute <span "
         "class=\"key hidden\"></span> exposed communication <span "
         "class=\"key comm\"></span> idle <span class=\"key "
         "wait\"></span></p>\n"
      << "<svg class=\"chart\" width=\"" << num(kLabelWidth + kChartWidth)
      << "\" height=\"" << num(kRow * double(roles.size()) + 8) << "\">\n";
  for (size_t n = 0; n < roles.size(); ++n) {
    const RoleStats &stats = inspection.stats.roles[roles[n]];
    double exposed = 0;
    for (const auto &entry : stats.exposedByKind)
      exposed += entry.second;
    double hidden = std::max(0.0, stats.commBusy - exposed);
    std::pair<const char *, double> parts[] = {{"fwd", stats.computeBusy},
                                               {"hidden", hidden},
                                               {"comm", exposed},
                                               {"wait", stats.idle}};
    double y = 4 + kRow * double(n), x = kLabelWidth;
    out << "<text x=\"2\" y=\"" << num(y + 11) << "\">"
        << escape(roleLabel(inspection, roles[n])) << "</text>\n";
    for (const auto &[cls, seconds] : parts) {
      double width = seconds / step * kChartWidth;
      out << "<rect class=\"op " << cls << "\" x=\"" << num(x) << "\" y=\""
          << num(y) << "\" width=\"" << num(width) << "\" height=\"12\"><title>"
          << cls << " " << escape(formatSeconds(seconds))
          << "</title></rect>\n";
      x += width;
    }
  }
  out << "</svg></section>\n";
}

} // namespace

std::string htmlReport(const Inspection &inspection) {
  const plan::Bundle &bundle = inspection.bundle;
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta "
         "charset=\"utf-8\">\n<title>weft-inspect: "
      << escape(bundle.model.name) << "</title>\n<style>\n"
      << "body{font-family:sans-serif;margin:16px}"
         "svg.chart{border:1px solid #ccc;font-size:11px}"
         ".fwd{fill:#4c78a8;background:#4c78a8}"
         ".bwd{fill:#54a24b;background:#54a24b}"
         ".opt{fill:#b279a2;background:#b279a2}"
         ".comm{fill:#f58518;background:#f58518}"
         ".hidden{fill:#fdd0a2;background:#fdd0a2}"
         ".wait{fill:#d0d0d0;background:#d0d0d0}"
         ".key{display:inline-block;width:12px;height:12px}"
         "td,th{padding:2px 8px;text-align:left}\n"
      << "</style></head><body>\n<h1>Plan of " << escape(bundle.model.name)
      << " (" << escape(bundle.model.family) << ")</h1>\n"
      << "<table id=\"summary\">"
      << "<tr><th>mesh</th><td>dp " << bundle.mesh.dp << " &times; pp "
      << bundle.mesh.pp << " &times; tp " << bundle.mesh.tp << " ("
      << bundle.mesh.worldSize() << " ranks)</td></tr>"
      << "<tr><th>config</th><td>" << escape(bundle.config.dump())
      << "</td></tr>"
      << "<tr><th>cluster</th><td>" << escape(inspection.clusterSource)
      << "</td></tr>"
      << "<tr><th>planner's step</th><td>"
      << escape(formatSeconds(bundle.prediction.stepTimeS)) << "</td></tr>"
      << "<tr><th>simulated step</th><td>"
      << escape(formatSeconds(inspection.timeline.stepTimeS)) << "</td></tr>"
      << "</table>\n";
  size_t shown = shownRoles(inspection).size(), total = 0;
  for (const RoleTimeline &role : inspection.timeline.roles)
    total += role.firstRank >= 0;
  if (shown < total)
    out << "<p>Showing the first " << shown << " of " << total
        << " roles.</p>\n";
  scheduleSection(inspection, out);
  memorySection(inspection, out);
  overlapSection(inspection, out);
  out << "</body></html>\n";
  return out.str();
}

} // namespace weft::inspect
