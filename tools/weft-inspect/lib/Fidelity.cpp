//===- Fidelity.cpp - Measured instruction times against the model --------===//

#include "weft/inspect/Fidelity.h"

#include "weft/inspect/Report.h"
#include "weft/inspect/Simulator.h"
#include "weft/plan/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace weft::inspect {

using nlohmann::json;
using plan::Opcode;

//===----------------------------------------------------------------------===//
// Reading a trace
//===----------------------------------------------------------------------===//

namespace {

/// An integer field of a trace event, or an error naming it.
int64_t integerField(const json &object, const char *key,
                     const std::string &where) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer())
    throw plan::Error(where + ": field '" + key + "' must be an integer" +
                      (it == object.end() ? std::string(" (missing)")
                                          : ", got " + it->dump()));
  return it->get<int64_t>();
}

double nonNegativeField(const json &object, const char *key,
                        const std::string &where) {
  auto it = object.find(key);
  double value = it != object.end() && it->is_number()
                     ? it->get<double>()
                     : std::numeric_limits<double>::quiet_NaN();
  if (!(value >= 0) || !std::isfinite(value))
    throw plan::Error(where + ": field '" + key +
                      "' must be a non-negative number" +
                      (it == object.end() ? std::string(" (missing)")
                                          : ", got " + it->dump()));
  return value;
}

} // namespace

MeasuredStep readMeasuredTrace(const std::string &path,
                               const plan::Bundle &bundle,
                               std::optional<int64_t> step) {
  std::error_code ec;
  std::ifstream file(path);
  if (!file || std::filesystem::is_directory(path, ec))
    throw plan::Error(path + ": cannot read the trace");
  json root = json::parse(file, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    throw plan::Error(path + ": invalid JSON");
  auto events = root.is_object() ? root.find("traceEvents") : root.end();
  if (!root.is_object() || events == root.end() || !events->is_array())
    throw plan::Error(path +
                      ": not a weft-run trace (no \"traceEvents\" array)");

  struct Event {
    int64_t pid, stream, instruction, step;
    double begin, seconds;
    std::string streamName, note;
    size_t index;
  };
  std::vector<Event> all;
  all.reserve(events->size());
  for (size_t i = 0; i < events->size(); ++i) {
    const json &e = (*events)[i];
    std::string where = path + ": traceEvents[" + std::to_string(i) + "]";
    if (!e.is_object())
      throw plan::Error(where + ": must be an object");
    // Metadata ("ph": "M", names of processes and threads) times nothing.
    if (auto phase = e.find("ph");
        phase != e.end() && phase->is_string() && *phase != "X")
      continue;
    auto args = e.find("args");
    if (args == e.end() || !args->is_object())
      throw plan::Error(where + ": field 'args' must be an object");
    Event event;
    event.pid = integerField(e, "pid", where);
    event.stream = integerField(e, "tid", where);
    event.instruction = integerField(*args, "instruction", where + " args");
    event.step = integerField(*args, "step", where + " args");
    event.begin = nonNegativeField(e, "ts", where) * 1e-6;
    event.seconds = nonNegativeField(e, "dur", where) * 1e-6;
    if (auto name = args->find("stream");
        name != args->end() && name->is_string())
      event.streamName = name->get<std::string>();
    if (auto note = args->find("note");
        note != args->end() && note->is_string())
      event.note = note->get<std::string>();
    event.index = i;
    all.push_back(std::move(event));
  }

  if (all.empty())
    throw plan::Error(path + ": the trace has no events");
  MeasuredStep measured;
  measured.rank = all.front().pid;
  int64_t first = all.front().step, last = first;
  for (const Event &event : all) {
    if (event.pid != measured.rank)
      throw plan::Error(path + ": events of ranks " +
                        std::to_string(measured.rank) + " and " +
                        std::to_string(event.pid) +
                        " (weft-run writes one trace per rank)");
    first = std::min(first, event.step);
    last = std::max(last, event.step);
  }
  measured.step = step.value_or(last);
  const plan::Program &program =
      bundle.programs[size_t(plan::rankToRole(bundle, measured.rank))];
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const Event &event : all) {
    if (event.step != measured.step)
      continue;
    std::string where =
        path + ": traceEvents[" + std::to_string(event.index) + "]";
    if (event.stream < 0 || size_t(event.stream) >= program.streams.size())
      throw plan::Error(where + ": stream " + std::to_string(event.stream) +
                        " is not one of rank " + std::to_string(measured.rank) +
                        "'s " + std::to_string(program.streams.size()) +
                        " streams (a trace of another bundle?)");
    const plan::Stream &stream = program.streams[size_t(event.stream)];
    if (!event.streamName.empty() && event.streamName != stream.name)
      throw plan::Error(where + ": stream " + std::to_string(event.stream) +
                        " is '" + stream.name + "' in the bundle, '" +
                        event.streamName +
                        "' in the trace (a trace of another bundle?)");
    if (event.instruction < 0 ||
        size_t(event.instruction) >= stream.instructions.size())
      throw plan::Error(where + ": instruction " +
                        std::to_string(event.instruction) + " of stream '" +
                        stream.name + "' is not in the bundle (it has " +
                        std::to_string(stream.instructions.size()) +
                        "; a trace of another bundle?)");
    if (!seen.insert({event.stream, event.instruction}).second)
      throw plan::Error(where + ": instruction " +
                        std::to_string(event.instruction) + " of stream '" +
                        stream.name + "' appears twice in step " +
                        std::to_string(measured.step));
    measured.times.push_back({event.stream, event.instruction, event.seconds,
                              event.begin, event.begin + event.seconds,
                              event.note});
  }
  if (measured.times.empty())
    throw plan::Error(path + ": no events of step " +
                      std::to_string(measured.step) + " (the trace has steps " +
                      std::to_string(first) + " to " + std::to_string(last) +
                      ")");
  return measured;
}

//===----------------------------------------------------------------------===//
// Fitting the constants
//===----------------------------------------------------------------------===//

namespace {

enum class CostClass { Gemm, Attention, MemoryBound, Communication, Other };
constexpr CostClass kClasses[] = {CostClass::Gemm, CostClass::Attention,
                                  CostClass::MemoryBound,
                                  CostClass::Communication, CostClass::Other};

const char *className(CostClass c) {
  switch (c) {
  case CostClass::Gemm:
    return "gemm";
  case CostClass::Attention:
    return "attention";
  case CostClass::MemoryBound:
    return "memory-bound";
  case CostClass::Communication:
    return "communication";
  case CostClass::Other:
    return "other";
  }
  return "other";
}

/// Instructions measured under this share of their prediction (and under
/// kSkippedSeconds) did not run as themselves.
constexpr double kSkippedShare = 0.02, kSkippedSeconds = 1e-6;

struct Row {
  const plan::Instruction *inst;
  CostClass cls;
  std::string kind;
  double measured, predicted, calibrated = 0;
  bool skipped = false;
};

/// Rows summed: a class, a kind, or the skipped ones.
struct Totals {
  int64_t count = 0;
  double measured = 0, predicted = 0, calibrated = 0;
  void add(const Row &row) {
    ++count;
    measured += row.measured;
    predicted += row.predicted;
    calibrated += row.calibrated;
  }
  json toJson() const {
    return {{"count", count},
            {"measured_s", measured},
            {"predicted_s", predicted},
            {"calibrated_s", calibrated}};
  }
};

const plan::Kernel *kernelOf(const plan::Bundle &bundle,
                             const plan::Instruction &inst) {
  return inst.opcode == Opcode::Kernel && inst.kernel >= 0 &&
                 size_t(inst.kernel) < bundle.kernels.size()
             ? &bundle.kernels[size_t(inst.kernel)]
             : nullptr;
}

CostClass classify(const plan::Bundle &bundle, const plan::Program &program,
                   const plan::Instruction &inst) {
  if (isCommOp(inst.opcode))
    return CostClass::Communication;
  if (inst.opcode == Opcode::Gemm)
    return CostClass::Gemm;
  if (attentionKernel(bundle, inst))
    return CostClass::Attention;
  bool device = hostOperands(program, inst) == 0;
  if (kernelOf(bundle, inst))
    return device ? CostClass::MemoryBound : CostClass::Other;
  bool memoryBound =
      inst.opcode == Opcode::Fill || inst.opcode == Opcode::OptimizerStep ||
      inst.opcode == Opcode::GradNorm || inst.opcode == Opcode::Clip;
  return memoryBound && device ? CostClass::MemoryBound : CostClass::Other;
}

std::string kindOf(const plan::Bundle &bundle, const plan::Program &program,
                   const plan::Instruction &inst) {
  std::string kind(plan::toString(inst.opcode));
  if (const plan::Kernel *kernel = kernelOf(bundle, inst))
    return kind + " " + kernel->name;
  if (inst.opcode == Opcode::Gemm) {
    const plan::GemmParams &g = inst.gemm;
    kind += " " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
            std::to_string(g.k) + " " + std::string(plan::toString(inst.dtype));
  }
  if (hostOperands(program, inst) > 0)
    kind += " (host)";
  return kind;
}

/// Over the rows of class `cls` that ran: log(sum predicted / sum
/// measured), the shift of the log time that keeps their total, and, with
/// `spread`, the measured-time-weighted squared error of the log ratios
/// around it (how well one factor explains every row).
template <typename Predict>
double logShift(const std::vector<Row> &rows, CostClass cls, Predict predict,
                int64_t &count, double *spread = nullptr) {
  double measured = 0, predicted = 0;
  count = 0;
  std::vector<std::pair<double, double>> terms; // weight, log ratio
  for (const Row &row : rows) {
    if (row.cls != cls || row.skipped || row.measured <= 0)
      continue;
    double p = predict(row);
    if (!(p > 0))
      continue;
    terms.push_back({row.measured, std::log(p / row.measured)});
    measured += row.measured;
    predicted += p;
    ++count;
  }
  double shift = count ? std::log(predicted / measured) : 0;
  if (spread) {
    *spread = 0;
    for (const auto &[weight, ratio] : terms)
      *spread += weight * (ratio - shift) * (ratio - shift);
  }
  return shift;
}

struct Fitted {
  const char *name;
  double before, after;
  int64_t instructions = 0;
  bool clamped = false;
};

double clampTo(double value, double low, double high, bool &clamped) {
  double result = std::clamp(value, low, high);
  clamped = result != value;
  return result;
}

} // namespace

json fidelityJson(const plan::Bundle &bundle, const planner::Cluster &cluster,
                  const std::string &clusterSource,
                  const MeasuredStep &measured, const std::string &trace) {
  int64_t rank = measured.rank;
  const plan::Program &program =
      bundle.programs[size_t(plan::rankToRole(bundle, rank))];
  InstructionCosts costs(bundle, cluster);
  const planner::CostConstants &base = costs.constants();

  std::vector<Row> rows;
  double spanBegin = std::numeric_limits<double>::infinity(), spanEnd = 0;
  for (const MeasuredStep::Time &time : measured.times) {
    const plan::Instruction &inst = program.streams[size_t(time.stream)]
                                        .instructions[size_t(time.instruction)];
    Row row{&inst, classify(bundle, program, inst),
            kindOf(bundle, program, inst), time.seconds,
            costs.seconds(inst, rank)};
    bool modelled = row.cls == CostClass::Gemm ||
                    row.cls == CostClass::Attention ||
                    row.cls == CostClass::MemoryBound;
    row.skipped = modelled && row.predicted > 0 &&
                  row.measured < kSkippedShare * row.predicted &&
                  row.measured < kSkippedSeconds;
    if (!time.note.empty())
      row.kind += " [" + time.note + "]";
    rows.push_back(std::move(row));
    spanBegin = std::min(spanBegin, time.begin);
    spanEnd = std::max(spanEnd, time.end);
  }

  // The cluster with candidate constants (the bundle's reference outlives
  // every InstructionCosts made here).
  auto costsWith = [&](const planner::CostOverrides &overrides) {
    planner::Cluster candidate = cluster;
    candidate.costOverrides = overrides;
    return InstructionCosts(bundle, std::move(candidate));
  };
  auto predictWith = [&](const InstructionCosts &with) {
    return
        [&with, rank](const Row &row) { return with.seconds(*row.inst, rank); };
  };

  planner::CostOverrides fitted = cluster.costOverrides;
  std::vector<Fitted> report;
  // GEMMs: the half dim on a grid, the peak fraction in closed form.
  {
    Fitted fraction{"matmul_peak_fraction", base.matmulPeakFraction,
                    base.matmulPeakFraction};
    Fitted halfDim{"matmul_half_dim", base.matmulHalfDim, base.matmulHalfDim};
    double bestError = std::numeric_limits<double>::infinity();
    std::vector<double> grid = {base.matmulHalfDim};
    for (double h = 0; h <= 512; h += 16)
      grid.push_back(h);
    for (double h : grid) {
      planner::CostOverrides candidate = fitted;
      candidate.matmulHalfDim = h;
      candidate.matmulPeakFraction = base.matmulPeakFraction;
      InstructionCosts with = costsWith(candidate);
      int64_t count = 0;
      double error = 0;
      double shift =
          logShift(rows, CostClass::Gemm, predictWith(with), count, &error);
      if (count == 0)
        break;
      if (error < bestError - 1e-12) {
        bestError = error;
        halfDim.after = h;
        fraction.after = base.matmulPeakFraction * std::exp(shift);
        fraction.instructions = halfDim.instructions = count;
      }
    }
    if (fraction.instructions > 0) {
      fraction.after = clampTo(fraction.after, 1e-6, 1.0, fraction.clamped);
      fitted.matmulPeakFraction = fraction.after;
      fitted.matmulHalfDim = halfDim.after;
    }
    report.push_back(fraction);
    report.push_back(halfDim);
  }
  // Attention, over the fitted GEMM formula. An attention kernel costs the
  // larger of its bytes and its FLOPs (only the latter scale with the
  // efficiency): a few fixed-point rounds settle the total.
  {
    Fitted efficiency{"attention_efficiency", base.attentionEfficiency,
                      base.attentionEfficiency};
    double current = 1.0;
    for (int round = 0; round < 16; ++round) {
      planner::CostOverrides candidate = fitted;
      candidate.attentionEfficiency = current;
      InstructionCosts with = costsWith(candidate);
      double shift = logShift(rows, CostClass::Attention, predictWith(with),
                              efficiency.instructions);
      if (efficiency.instructions == 0)
        break;
      double next = clampTo(current * std::exp(shift), 1e-6,
                            planner::CostOverrides::kMaxAttentionEfficiency,
                            efficiency.clamped);
      bool settled = std::abs(next / current - 1) < 1e-12;
      current = next;
      if (settled)
        break;
    }
    if (efficiency.instructions > 0) {
      efficiency.after = current;
      fitted.attentionEfficiency = efficiency.after;
    }
    report.push_back(efficiency);
  }
  // Memory-bound instructions.
  {
    Fitted bandwidth{"memory_bandwidth_fraction", base.memoryBandwidthFraction,
                     base.memoryBandwidthFraction};
    InstructionCosts with = costsWith(fitted);
    double shift = logShift(rows, CostClass::MemoryBound, predictWith(with),
                            bandwidth.instructions);
    if (bandwidth.instructions > 0) {
      bandwidth.after =
          clampTo(with.constants().memoryBandwidthFraction * std::exp(shift),
                  1e-6, 1.0, bandwidth.clamped);
      fitted.memoryBandwidthFraction = bandwidth.after;
    }
    report.push_back(bandwidth);
  }

  InstructionCosts calibrated = costsWith(fitted);
  for (Row &row : rows)
    row.calibrated = calibrated.seconds(*row.inst, rank);

  json out;
  out["trace"] = trace;
  out["rank"] = rank;
  out["step"] = measured.step;
  out["cluster"] = clusterSource;
  out["instructions"] = rows.size();
  size_t programSize = 0;
  for (const plan::Stream &stream : program.streams)
    programSize += stream.instructions.size();
  out["program_instructions"] = programSize;
  out["measured_span_s"] = spanEnd > spanBegin ? spanEnd - spanBegin : 0.0;

  Totals all, skipped;
  std::map<CostClass, Totals> byClass;
  std::map<std::string, std::pair<CostClass, Totals>> byKindName;
  for (const Row &row : rows) {
    if (row.skipped) {
      skipped.add(row);
      continue;
    }
    all.add(row);
    byClass[row.cls].add(row);
    auto &[cls, kind] = byKindName[row.kind];
    cls = row.cls;
    kind.add(row);
  }
  json classes = json::array();
  for (CostClass cls : kClasses)
    if (auto it = byClass.find(cls); it != byClass.end()) {
      json c = it->second.toJson();
      c["class"] = className(cls);
      classes.push_back(std::move(c));
    }
  out["classes"] = classes;
  out["skipped"] = {{"count", skipped.count},
                    {"measured_s", skipped.measured},
                    {"predicted_s", skipped.predicted}};
  out["measured_s"] = all.measured + skipped.measured;
  out["predicted_s"] = all.predicted + skipped.predicted;
  out["calibrated_s"] = all.calibrated;

  // By kind, the ones that took longest first.
  std::vector<json> byKind;
  for (const auto &[name, entry] : byKindName) {
    json k = entry.second.toJson();
    k["kind"] = name;
    k["class"] = className(entry.first);
    byKind.push_back(std::move(k));
  }
  std::stable_sort(
      byKind.begin(), byKind.end(), [](const json &a, const json &b) {
        return a["measured_s"].get<double>() > b["measured_s"].get<double>();
      });
  out["kinds"] = byKind;

  json constants = json::array(), overrides = json::object();
  for (const Fitted &f : report) {
    constants.push_back({{"name", f.name},
                         {"before", f.before},
                         {"fitted", f.after},
                         {"instructions", f.instructions},
                         {"clamped", f.clamped}});
    if (f.instructions > 0)
      overrides[f.name] = f.after;
  }
  out["constants"] = constants;
  out["cost_constants"] = overrides;

  // The whole step simulated with the cluster's constants and the fitted.
  out["simulated_step_s"] = simulate(bundle, costs).stepTimeS;
  out["calibrated_simulated_step_s"] = simulate(bundle, calibrated).stepTimeS;
  return out;
}

planner::Cluster calibratedCluster(planner::Cluster cluster,
                                   const json &fidelity) {
  // Through the cluster schema: one mapping of names to constants, and the
  // parser's range checks.
  json file = planner::toJson(cluster);
  file["cost_constants"].update(fidelity.at("cost_constants"));
  return planner::parseCluster(file, "the fitted cluster");
}

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

namespace {

std::string milliseconds(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds * 1e3);
  return text;
}

std::string ratio(double measured, double predicted) {
  if (!(predicted > 0))
    return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f", measured / predicted);
  return text;
}

std::string padded(std::string text, size_t width, bool right = true) {
  if (text.size() >= width)
    return text;
  std::string pad(width - text.size(), ' ');
  return right ? pad + text : text + pad;
}

} // namespace

std::string fidelityText(const json &f) {
  std::ostringstream os;
  os << "rank " << f["rank"].get<int64_t>() << ", step "
     << f["step"].get<int64_t>() << " of " << f["trace"].get<std::string>()
     << " against the cost model on " << f["cluster"].get<std::string>()
     << "\n";
  os << "measured: " << f["instructions"].get<int64_t>() << " of "
     << f["program_instructions"].get<int64_t>() << " instructions, "
     << milliseconds(f["measured_s"].get<double>())
     << " ms in all (the step's span "
     << milliseconds(f["measured_span_s"].get<double>()) << " ms)\n";
  auto header = [&](const char *first, size_t width) {
    os << "  " << padded(first, width, false) << padded("count", 6)
       << padded("measured ms", 13) << padded("predicted ms", 14)
       << padded("calibrated ms", 15) << padded("measured/predicted", 20)
       << "\n";
  };
  auto line = [&](const json &row, const std::string &label, size_t width) {
    os << "  " << padded(label, width, false)
       << padded(std::to_string(row["count"].get<int64_t>()), 6)
       << padded(milliseconds(row["measured_s"].get<double>()), 13)
       << padded(milliseconds(row["predicted_s"].get<double>()), 14)
       << padded(milliseconds(row["calibrated_s"].get<double>()), 15)
       << padded(ratio(row["measured_s"].get<double>(),
                       row["predicted_s"].get<double>()),
                 20)
       << "\n";
  };
  header("class", 15);
  for (const json &c : f["classes"])
    line(c, c["class"].get<std::string>(), 15);
  const json &skipped = f["skipped"];
  if (skipped["count"].get<int64_t>() > 0)
    os << "skipped: " << skipped["count"].get<int64_t>()
       << " instructions not run as themselves (measured under 2% of their "
          "prediction): "
       << milliseconds(skipped["predicted_s"].get<double>())
       << " ms predicted, fitted to nothing\n";
  const json &kinds = f["kinds"];
  size_t shown = std::min<size_t>(kinds.size(), 15);
  size_t width = 12;
  for (size_t i = 0; i < shown; ++i)
    width = std::max(width, kinds[i]["kind"].get<std::string>().size() + 2);
  os << "by kind (the " << shown << " that took longest):\n";
  header("kind", width);
  for (size_t i = 0; i < shown; ++i)
    line(kinds[i], kinds[i]["kind"].get<std::string>(), width);
  os << "fitted cost constants (each keeps its class's measured total):\n";
  for (const json &c : f["constants"]) {
    std::string name = c["name"].get<std::string>();
    int64_t n = c["instructions"].get<int64_t>();
    char values[96];
    std::snprintf(values, sizeof(values), "%.4g -> %.4g",
                  c["before"].get<double>(), c["fitted"].get<double>());
    os << "  " << padded(name, 27, false)
       << (n > 0 ? std::string(values) + " (" + std::to_string(n) +
                       " instructions" +
                       (c["clamped"].get<bool>() ? ", clamped to its range"
                                                 : "") +
                       ")"
                 : std::string("not fitted (nothing of its class measured)"))
       << "\n";
  }
  os << "summed instruction times: measured "
     << milliseconds(f["measured_s"].get<double>()) << " ms, predicted "
     << milliseconds(f["predicted_s"].get<double>()) << " ms, calibrated "
     << milliseconds(f["calibrated_s"].get<double>()) << " ms\n";
  os << "simulated step: " << milliseconds(f["simulated_step_s"].get<double>())
     << " ms with the cluster's constants, "
     << milliseconds(f["calibrated_simulated_step_s"].get<double>())
     << " ms with the fitted ones\n";
  return os.str();
}

} // namespace weft::inspect
