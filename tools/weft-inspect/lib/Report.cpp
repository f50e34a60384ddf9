//===- Report.cpp - weft-inspect's text and JSON outputs ------------------===//

#include "weft/inspect/Report.h"

#include "weft/plan/Error.h"
#include "weft/plan/Verifier.h"
#include "weft/planner/Error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

namespace weft::inspect {

using nlohmann::json;

//===----------------------------------------------------------------------===//
// Formatting
//===----------------------------------------------------------------------===//

static std::string printf1(const char *format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

std::string formatBytes(double bytes) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? printf1("%.0f B", bytes)
                   : printf1("%.2f ", bytes) + units[unit];
}

std::string formatSeconds(double seconds) {
  double magnitude = std::fabs(seconds);
  if (magnitude >= 1)
    return printf1("%.3f s", seconds);
  if (magnitude >= 1e-3)
    return printf1("%.3f ms", seconds * 1e3);
  return printf1("%.3f us", seconds * 1e6);
}

std::string formatRanks(const std::vector<int64_t> &ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!out.empty())
      out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i)
      out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

static std::vector<int64_t> ranksOf(const plan::Bundle &bundle, int64_t role) {
  std::vector<int64_t> ranks;
  for (size_t rank = 0; rank < bundle.rankRoles.size(); ++rank)
    if (bundle.rankRoles[rank] == role)
      ranks.push_back(int64_t(rank));
  return ranks;
}

//===----------------------------------------------------------------------===//
// Cluster and inspection
//===----------------------------------------------------------------------===//

/// resolveCluster without the note on measured constants.
static planner::Cluster findCluster(const plan::Bundle &bundle,
                                    const std::optional<std::string> &spec,
                                    std::string &source) {
  try {
    if (spec) {
      source = *spec + " (--cluster)";
      return planner::loadCluster(*spec);
    }
    auto recorded = bundle.config.find("cluster");
    if (recorded != bundle.config.end() && recorded->is_string()) {
      source = recorded->get<std::string>() + " (recorded in the bundle)";
      return planner::loadCluster(recorded->get<std::string>());
    }
    if (recorded != bundle.config.end() && recorded->is_object()) {
      planner::Cluster cluster =
          planner::parseCluster(*recorded, "plan.json config.cluster");
      source = cluster.name + " (recorded in the bundle)";
      return cluster;
    }
    int64_t nodes = (bundle.mesh.worldSize() + 7) / 8;
    std::string preset = "dgx-h100-80g:" + std::to_string(nodes);
    source = preset + " (default: the bundle records no cluster)";
    return planner::clusterPreset(preset);
  } catch (const planner::Error &error) {
    // One error type for the driver: a bad cluster is bad input too.
    throw plan::Error(error.what());
  }
}

planner::Cluster resolveCluster(const plan::Bundle &bundle,
                                const std::optional<std::string> &spec,
                                std::string &source) {
  planner::Cluster cluster = findCluster(bundle, spec, source);
  if (!cluster.costOverrides.empty())
    source += ", with its measured cost_constants";
  return cluster;
}

Inspection::Inspection(const plan::Bundle &bundle, planner::Cluster cluster,
                       std::string clusterSource,
                       planner::CostConstants constants)
    : bundle(bundle), clusterSource(std::move(clusterSource)),
      costs(bundle, std::move(cluster), constants),
      timeline(simulate(bundle, costs)),
      stats(analyzeTimeline(bundle, timeline)) {
  for (size_t role = 0; role < bundle.programs.size(); ++role)
    memory.push_back(
        memoryProfile(bundle, bundle.programs[role], timeline.roles[role]));
}

//===----------------------------------------------------------------------===//
// summary
//===----------------------------------------------------------------------===//

/// Layers per stage: the config's "layers_per_stage" when recorded, else the
/// distinct "L<n>" tokens of the phase labels of each stage's programs.
static json layersPerStage(const plan::Bundle &bundle) {
  auto recorded = bundle.config.find("layers_per_stage");
  if (recorded != bundle.config.end())
    return *recorded;
  static const std::regex layerToken("(^|[^A-Za-z0-9])L([0-9]+)");
  std::vector<std::set<std::string>> layers(bundle.mesh.pp);
  bool any = false;
  for (size_t rank = 0; rank < bundle.rankRoles.size(); ++rank) {
    const plan::Program &program = bundle.programs[bundle.rankRoles[rank]];
    auto &stage = layers[bundle.mesh.coordOf(int64_t(rank)).pp];
    for (const plan::Stream &stream : program.streams)
      for (const plan::Instruction &inst : stream.instructions)
        for (std::sregex_iterator
                 it(inst.phase.begin(), inst.phase.end(), layerToken),
             end;
             it != end; ++it) {
          stage.insert((*it)[2]);
          any = true;
        }
  }
  if (!any)
    return nullptr;
  json counts = json::array();
  for (const auto &stage : layers)
    counts.push_back(stage.size());
  return counts;
}

json summaryJson(const Inspection &inspection) {
  const plan::Bundle &bundle = inspection.bundle;
  const planner::Cluster &cluster = inspection.costs.cluster();
  const plan::TrainingInfo &training = bundle.training;
  json out;
  out["model"] = {{"name", bundle.model.name}, {"family", bundle.model.family}};
  out["mesh"] = {{"dp", bundle.mesh.dp},
                 {"pp", bundle.mesh.pp},
                 {"tp", bundle.mesh.tp},
                 {"world", bundle.mesh.worldSize()}};
  out["config"] = bundle.config;
  out["training"] = {{"global_batch", training.globalBatch},
                     {"micro_batch", training.microBatch},
                     {"grad_accum", training.gradAccum},
                     {"seq_len", training.seqLen},
                     {"precision", training.precision}};
  out["layers_per_stage"] = layersPerStage(bundle);
  out["cluster"] = {{"source", inspection.clusterSource},
                    {"gpu", cluster.gpu.model},
                    {"memory_bytes", cluster.memoryBytes()}};
  double tokens = double(training.globalBatch * training.seqLen);
  double step = bundle.prediction.stepTimeS;
  out["prediction"] = {{"step_time_s", step},
                       {"mfu", bundle.prediction.mfu},
                       {"tokens_per_s", step > 0 ? tokens / step : 0.0}};
  out["simulated_step_time_s"] = inspection.timeline.stepTimeS;

  int64_t modelElements = 0;
  std::vector<int64_t> heldElements(bundle.programs.size(), 0);
  for (const plan::Parameter &parameter : bundle.parameters) {
    int64_t elements = 1;
    for (int64_t dim : parameter.shape)
      elements *= dim;
    modelElements += elements;
    for (const plan::ShardSpec &shard : parameter.shards)
      heldElements[shard.role] += shard.paddedElements / shard.zeroShards;
  }
  out["model_parameters"] = modelElements;

  json roles = json::array();
  for (const plan::Program &program : bundle.programs) {
    std::vector<int64_t> ranks = ranksOf(bundle, program.role);
    if (ranks.empty())
      continue;
    const MemoryProfile &memory = inspection.memory[program.role];
    json categories = json::object();
    for (Category category : allCategories())
      categories[std::string(toString(category))] =
          memory.peakByCategory[int(category)];
    int64_t planned = program.arenaBytes + program.persistentBytes;
    const auto &predicted = bundle.prediction.peakMemoryBytes;
    roles.push_back(
        {{"role", program.role},
         {"ranks", formatRanks(ranks)},
         {"stage", bundle.mesh.coordOf(ranks.front()).pp},
         {"parameters", heldElements[program.role]},
         {"bytes_at_peak", categories},
         {"persistent_bytes", program.persistentBytes},
         {"arena_bytes", program.arenaBytes},
         {"host_bytes", program.hostBytes},
         {"planned_bytes", planned},
         {"peak_in_use_bytes", memory.peakBytes},
         {"predicted_peak_bytes", size_t(program.role) < predicted.size()
                                      ? json(predicted[program.role])
                                      : json(nullptr)},
         {"capacity_fraction", double(planned) / cluster.memoryBytes()}});
  }
  out["roles"] = roles;
  return out;
}

static std::string padded(const std::string &text, size_t width) {
  return text.size() >= width ? text + " "
                              : text + std::string(width - text.size(), ' ');
}

static std::string configLine(const json &config) {
  std::string line;
  for (const auto &[key, value] : config.items()) {
    if (key == "cluster" || key == "layers_per_stage")
      continue;
    line += (line.empty() ? "" : " ") + key + "=" +
            (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return line;
}

std::string summaryText(const json &s) {
  std::ostringstream out;
  const json &mesh = s["mesh"], &training = s["training"];
  out << "model: " << s["model"]["name"].get<std::string>() << " ("
      << s["model"]["family"].get<std::string>() << "), "
      << s["model_parameters"].get<int64_t>() << " parameters\n";
  out << "mesh: dp=" << mesh["dp"] << " pp=" << mesh["pp"]
      << " tp=" << mesh["tp"] << " (" << mesh["world"]
      << " ranks; rank = (dp*PP + pp)*TP + tp)\n";
  out << "config: " << configLine(s["config"]) << "\n";
  out << "training: global batch " << training["global_batch"]
      << " = micro-batch " << training["micro_batch"] << " x accumulation "
      << training["grad_accum"] << " x dp " << mesh["dp"] << ", seq "
      << training["seq_len"] << ", " << training["precision"].get<std::string>()
      << "\n";
  if (!s["layers_per_stage"].is_null())
    out << "layers per stage: " << s["layers_per_stage"].dump() << "\n";
  out << "cluster: " << s["cluster"]["source"].get<std::string>() << ", "
      << s["cluster"]["gpu"].get<std::string>() << " "
      << formatBytes(s["cluster"]["memory_bytes"].get<double>()) << "\n";
  const json &prediction = s["prediction"];
  out << "predicted step: "
      << formatSeconds(prediction["step_time_s"].get<double>()) << ", MFU "
      << printf1("%.1f%%", 100 * prediction["mfu"].get<double>()) << ", "
      << printf1("%.0f", prediction["tokens_per_s"].get<double>())
      << " tokens/s (simulated step "
      << formatSeconds(s["simulated_step_time_s"].get<double>()) << ")\n";
  out << "\nmemory per rank (bytes live at the rank's peak; see 'memory "
         "--rank'):\n";
  for (const json &role : s["roles"]) {
    out << "role " << role["role"] << " (stage " << role["stage"] << ", ranks "
        << role["ranks"].get<std::string>() << "): " << role["parameters"]
        << " parameters held\n";
    for (Category category : allCategories()) {
      std::string name(toString(category));
      out << "  " << padded(name, 18)
          << formatBytes(role["bytes_at_peak"][name].get<double>()) << "\n";
    }
    out << "  peak in use "
        << formatBytes(role["peak_in_use_bytes"].get<double>()) << "; planned "
        << formatBytes(role["planned_bytes"].get<double>()) << " (persistent "
        << formatBytes(role["persistent_bytes"].get<double>()) << " + arena "
        << formatBytes(role["arena_bytes"].get<double>()) << ")";
    if (role["host_bytes"].get<int64_t>() > 0)
      out << ", host " << formatBytes(role["host_bytes"].get<double>());
    if (!role["predicted_peak_bytes"].is_null())
      out << ", planner predicted "
          << formatBytes(role["predicted_peak_bytes"].get<double>());
    out << "; "
        << printf1("%.2f%%", 100 * role["capacity_fraction"].get<double>())
        << " of GPU memory\n";
  }
  return out.str();
}

//===----------------------------------------------------------------------===//
// program
//===----------------------------------------------------------------------===//

static std::string rangeText(const plan::Program &program,
                             const plan::BufferRange &range) {
  const plan::Buffer &buffer = program.buffers[range.buffer];
  return buffer.name + "[" + std::to_string(range.offset) + ":" +
         std::to_string(range.offset + range.bytes) + "]";
}

/// "group 1 of family 0": the group of the instruction's family that `rank`
/// uses.
static std::string groupText(const plan::Bundle &bundle,
                             const plan::Instruction &inst, int64_t rank) {
  return "group " +
         std::to_string(plan::findGroupOf(bundle.groups[inst.group], rank)) +
         " of family " + std::to_string(inst.group);
}

/// The operands of `inst` as `rank` executes it (communication resolves the
/// rank's group of the named family).
static std::string operandText(const plan::Bundle &bundle,
                               const plan::Program &program,
                               const plan::Instruction &inst, int64_t rank) {
  std::ostringstream out;
  switch (inst.opcode) {
  case plan::Opcode::Kernel:
    out << bundle.kernels[inst.kernel].name;
    for (int64_t arg : inst.args)
      out << " " << arg;
    break;
  case plan::Opcode::Gemm: {
    const plan::GemmParams &g = inst.gemm;
    out << g.m << "x" << g.n << "x" << g.k << " " << plan::toString(inst.dtype)
        << (g.transA ? " tA" : "") << (g.transB ? " tB" : "")
        << " alpha=" << g.alpha << " beta=" << g.beta;
    if (inst.epilogue != plan::GemmEpilogue::None)
      out << " +" << plan::toString(inst.epilogue);
    break;
  }
  case plan::Opcode::LoadBatch:
    out << "micro-batch " << inst.microbatch;
    break;
  case plan::Opcode::Fill:
    out << inst.value << " " << plan::toString(inst.dtype);
    break;
  case plan::Opcode::AllReduce:
  case plan::Opcode::ReduceScatter:
  case plan::Opcode::AllGather:
  case plan::Opcode::Broadcast: {
    const std::vector<int64_t> &group =
        *plan::resolveGroup(bundle, inst.group, rank);
    out << inst.count << " x " << plan::toString(inst.dtype);
    if (inst.opcode == plan::Opcode::AllReduce ||
        inst.opcode == plan::Opcode::ReduceScatter)
      out << " " << plan::toString(inst.reduce);
    if (inst.opcode == plan::Opcode::Broadcast)
      out << " root " << group[inst.peer];
    // A coalesced collective: one launch of several independent members.
    if (plan::memberCount(inst) > 1)
      out << " (" << plan::memberCount(inst) << " members)";
    out << " on " << groupText(bundle, inst, rank) << " ("
        << plan::toString(bundle.groups[inst.group].kind) << ": "
        << formatRanks(group) << ")";
    break;
  }
  case plan::Opcode::Send:
  case plan::Opcode::Recv:
    out << inst.count << " x " << plan::toString(inst.dtype)
        << (inst.opcode == plan::Opcode::Send ? " to" : " from") << " rank "
        << (*plan::resolveGroup(bundle, inst.group, rank))[inst.peer] << " ("
        << groupText(bundle, inst, rank) << ")";
    break;
  case plan::Opcode::RecordEvent:
  case plan::Opcode::WaitEvent:
    out << "event " << inst.event;
    break;
  case plan::Opcode::OptimizerStep:
    out << inst.count << " x " << plan::toString(inst.dtype);
    break;
  case plan::Opcode::GradNorm:
  case plan::Opcode::Clip:
    out << plan::toString(inst.dtype);
    break;
  case plan::Opcode::Copy:
  case plan::Opcode::Release:
    break;
  }
  auto list = [&](const char *label,
                  const std::vector<plan::BufferRange> &ranges) {
    if (ranges.empty())
      return;
    out << (out.tellp() > 0 ? "  " : "") << label;
    for (const plan::BufferRange &range : ranges)
      out << " " << rangeText(program, range);
  };
  list("reads", inst.reads);
  list("writes", inst.writes);
  return out.str();
}

json programJson(const plan::Bundle &bundle, int64_t rank,
                 const std::optional<std::string> &stream, bool issueOrder) {
  plan::RankProgram view = plan::expandRankProgram(bundle, rank);
  const plan::Program &program = *view.program;
  bool found = !stream;
  for (const plan::Stream &current : program.streams)
    found = found || current.name == *stream;
  // The rank's communication order; none where the plan's operations never
  // all meet (verify says why).
  std::vector<std::vector<plan::StreamPosition>> orders =
      plan::communicationOrder(bundle);
  const std::vector<plan::StreamPosition> *order =
      orders.empty() ? nullptr : &orders[size_t(rank)];
  std::vector<std::vector<int64_t>> turn = plan::turnsOf(
      program, order ? *order : std::vector<plan::StreamPosition>{});
  std::vector<plan::StreamPosition> listed;
  if (issueOrder) {
    listed = plan::hostIssueOrder(program, order);
  } else {
    for (size_t s = 0; s < program.streams.size(); ++s)
      for (size_t i = 0; i < program.streams[s].instructions.size(); ++i)
        listed.push_back({int64_t(s), int64_t(i)});
  }
  json instructions = json::array();
  for (size_t k = 0; k < listed.size(); ++k) {
    auto [s, i] = listed[k];
    const plan::Stream &current = program.streams[size_t(s)];
    if (stream && current.name != *stream)
      continue;
    const plan::Instruction &inst = current.instructions[size_t(i)];
    json entry = {{"stream", current.name},
                  {"index", i},
                  {"op", plan::toString(inst.opcode)},
                  {"operands", operandText(bundle, program, inst, rank)},
                  {"phase", inst.phase}};
    if (turn[size_t(s)][size_t(i)] >= 0)
      entry["turn"] = turn[size_t(s)][size_t(i)];
    if (issueOrder)
      entry["issue"] = k;
    instructions.push_back(std::move(entry));
  }
  if (!found) {
    std::string names;
    for (const plan::Stream &s : program.streams)
      names += (names.empty() ? "'" : ", '") + s.name + "'";
    throw plan::Error("rank " + std::to_string(rank) + " has no stream '" +
                      *stream + "' (its streams: " + names + ")");
  }
  return {
      {"rank", rank},
      {"role", view.role},
      {"coord",
       {{"dp", view.coord.dp}, {"pp", view.coord.pp}, {"tp", view.coord.tp}}},
      {"streams", program.streams.size()},
      {"instructions", instructions}};
}

std::string programText(const json &p) {
  std::ostringstream out;
  const json &coord = p["coord"];
  out << "rank " << p["rank"] << " (role " << p["role"] << ", dp "
      << coord["dp"] << " pp " << coord["pp"] << " tp " << coord["tp"]
      << "): " << p["instructions"].size() << " instructions\n";
  auto right = [](int64_t value, size_t width) {
    std::string text = std::to_string(value);
    return std::string(text.size() < width ? width - text.size() : 0, ' ') +
           text;
  };
  for (const json &inst : p["instructions"]) {
    if (inst.contains("issue"))
      out << right(inst["issue"].get<int64_t>(), 6) << "  ";
    out << right(inst["index"].get<int64_t>(), 5) << "  "
        << padded(inst["stream"].get<std::string>(), 13)
        << padded(inst["op"].get<std::string>(), 15)
        << inst["operands"].get<std::string>();
    if (!inst["phase"].get<std::string>().empty())
      out << "  ; " << inst["phase"].get<std::string>();
    if (inst.contains("turn"))
      out << "  [communication " << inst["turn"].get<int64_t>() << "]";
    out << "\n";
  }
  return out.str();
}

//===----------------------------------------------------------------------===//
// memory
//===----------------------------------------------------------------------===//

json memoryJson(const Inspection &inspection, int64_t rank) {
  const plan::Bundle &bundle = inspection.bundle;
  int64_t role = plan::rankToRole(bundle, rank);
  const plan::Program &program = bundle.programs[role];
  const MemoryProfile &profile = inspection.memory[role];
  const RoleTimeline &timeline = inspection.timeline.roles[role];

  json live = json::array();
  for (int64_t id : profile.liveAtPeak) {
    const plan::Buffer &buffer = program.buffers[id];
    live.push_back({{"buffer", id},
                    {"name", buffer.name},
                    {"region", plan::toString(buffer.region)},
                    {"bytes", buffer.size},
                    {"category", toString(profile.categories[size_t(id)])}});
  }
  // What runs when the peak is reached: the instructions in progress then.
  json running = json::array();
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const auto &insts = program.streams[s].instructions;
    for (size_t i = 0; i < insts.size(); ++i) {
      const InstTiming &timing = timeline.streams[s][i];
      if (timing.start <= profile.peakTime && timing.end > profile.peakTime)
        running.push_back({{"stream", program.streams[s].name},
                           {"index", i},
                           {"op", plan::toString(insts[i].opcode)},
                           {"phase", insts[i].phase}});
    }
  }
  json samples = json::array();
  for (const MemorySample &sample : profile.samples)
    samples.push_back({{"time_s", sample.time}, {"bytes", sample.bytes}});
  const auto &predicted = bundle.prediction.peakMemoryBytes;
  return {{"rank", rank},
          {"role", role},
          {"step_time_s", inspection.timeline.stepTimeS},
          {"persistent_bytes", profile.persistentBytes},
          {"planned_bytes", program.arenaBytes + program.persistentBytes},
          {"host_bytes", program.hostBytes},
          {"predicted_peak_bytes", size_t(role) < predicted.size()
                                       ? json(predicted[role])
                                       : json(nullptr)},
          {"peak_bytes", profile.peakBytes},
          {"peak_time_s", profile.peakTime},
          {"running_at_peak", running},
          {"live_at_peak", live},
          {"samples", samples}};
}

std::string memoryText(const json &m) {
  std::ostringstream out;
  double step = m["step_time_s"].get<double>();
  double peak = m["peak_bytes"].get<double>();
  out << "rank " << m["rank"] << " (role " << m["role"]
      << "): memory in use over the simulated step of " << formatSeconds(step)
      << "\n";
  // Rebuild the step function to take the largest value in each row.
  MemoryProfile profile;
  for (const json &sample : m["samples"])
    profile.samples.push_back(
        {sample["time_s"].get<double>(), sample["bytes"].get<int64_t>()});
  constexpr int kRows = 20, kWidth = 50;
  double rowTime = step > 0 ? step / kRows : 1;
  double peakTime = m["peak_time_s"].get<double>();
  for (int row = 0; row < kRows; ++row) {
    double from = row * rowTime, to = (row + 1) * rowTime;
    double bytes = double(maxBytesIn(profile, from, to));
    int bar = peak > 0 ? int(std::lround(kWidth * bytes / peak)) : 0;
    out << padded(formatSeconds(from), 11) << "|" << std::string(bar, '#')
        << std::string(kWidth - bar, ' ') << "| " << formatBytes(bytes);
    if (peakTime >= from && (peakTime < to || row == kRows - 1))
      out << "  <- peak";
    out << "\n";
  }
  out << "peak: " << formatBytes(peak) << " at " << formatSeconds(peakTime)
      << " (planned persistent + arena "
      << formatBytes(m["planned_bytes"].get<double>());
  if (!m["predicted_peak_bytes"].is_null())
    out << ", planner predicted "
        << formatBytes(m["predicted_peak_bytes"].get<double>());
  out << ")\n";
  if (m["host_bytes"].get<int64_t>() > 0)
    out << "host region: " << formatBytes(m["host_bytes"].get<double>())
        << " of host memory (optimizer offload), not counted above\n";
  for (const json &inst : m["running_at_peak"])
    out << "  running: " << inst["stream"].get<std::string>() << " #"
        << inst["index"] << " " << inst["op"].get<std::string>() << " ("
        << inst["phase"].get<std::string>() << ")\n";
  out << "live at the peak:\n";
  for (const json &buffer : m["live_at_peak"])
    out << "  " << padded(buffer["name"].get<std::string>(), 24)
        << padded(buffer["region"].get<std::string>(), 11)
        << padded(buffer["category"].get<std::string>(), 18)
        << formatBytes(buffer["bytes"].get<double>()) << "\n";
  return out.str();
}

//===----------------------------------------------------------------------===//
// timeline
//===----------------------------------------------------------------------===//

static json explainDifference(const Inspection &inspection, double planned) {
  const TimelineStats &stats = inspection.stats;
  const RoleStats &slowest = stats.roles[stats.slowestRole];
  double simulated = stats.stepTimeS;
  json lines = json::array();
  double ratio = planned > 0 ? simulated / planned - 1 : 0;
  if (std::fabs(ratio) <= 0.05)
    lines.push_back("the simulation agrees with the planner within 5%");
  else
    lines.push_back(
        printf1("the simulated step is %.1f%% ", 100 * std::fabs(ratio)) +
        (ratio > 0 ? "longer" : "shorter") + " than the planner's closed form");
  double exposed = 0;
  std::string worst;
  double worstSeconds = 0;
  for (const auto &[kind, seconds] : slowest.exposedByKind) {
    exposed += seconds;
    if (seconds > worstSeconds) {
      worst = kind;
      worstSeconds = seconds;
    }
  }
  std::string breakdown =
      "the step ends on rank " +
      std::to_string(inspection.timeline.roles[stats.slowestRole].firstRank) +
      " (stage " + std::to_string(slowest.stage) + "): compute " +
      formatSeconds(slowest.computeBusy) + ", exposed communication " +
      formatSeconds(exposed);
  if (!worst.empty())
    breakdown += " (mostly " + worst + " " + formatSeconds(worstSeconds) + ")";
  breakdown += ", idle " + formatSeconds(slowest.idle);
  lines.push_back(breakdown);
  lines.push_back(
      "the simulator costs the instructions the bundle contains with the "
      "planner's per-operation formulas and overlaps exactly what the "
      "streams and events allow; the planner's closed form assumes 90% of "
      "forward/backward hides ZeRO 0-2 traffic, follows ZeRO-3's gather "
      "pipeline and the TP reductions under the weight gradients, and "
      "charges a bubble of (PP-1)/v stage times and blocking pipeline "
      "transfers");
  return lines;
}

json timelineJson(const Inspection &inspection) {
  const TimelineStats &stats = inspection.stats;
  const plan::Bundle &bundle = inspection.bundle;
  double planned = bundle.prediction.stepTimeS;
  const RoleStats &slowest = stats.roles[stats.slowestRole];
  json stages = json::array();
  for (double idle : stats.idleByStage)
    stages.push_back(idle);
  return {{"cluster", inspection.clusterSource},
          {"simulated_step_time_s", stats.stepTimeS},
          {"planned_step_time_s", planned},
          {"difference_fraction",
           planned > 0 ? stats.stepTimeS / planned - 1 : 0.0},
          {"exposed_comm_s", stats.exposedByKind},
          {"bubble_s_by_stage", stages},
          {"slowest",
           {{"rank", inspection.timeline.roles[stats.slowestRole].firstRank},
            {"role", stats.slowestRole},
            {"stage", slowest.stage},
            {"compute_s", slowest.computeBusy},
            {"comm_s", slowest.commBusy},
            {"exposed_comm_s", slowest.exposedByKind},
            {"idle_s", slowest.idle}}},
          {"explanation", explainDifference(inspection, planned)}};
}

std::string timelineText(const json &t) {
  std::ostringstream out;
  double simulated = t["simulated_step_time_s"].get<double>();
  out << "cluster: " << t["cluster"].get<std::string>() << "\n";
  out << "simulated step: " << formatSeconds(simulated)
      << "; planner's prediction: "
      << formatSeconds(t["planned_step_time_s"].get<double>())
      << printf1(" (%+.1f%%)\n", 100 * t["difference_fraction"].get<double>());
  out << "exposed communication per kind (mean over ranks):\n";
  if (t["exposed_comm_s"].empty())
    out << "  none\n";
  for (const auto &[kind, seconds] : t["exposed_comm_s"].items())
    out << "  " << padded(kind, 24) << formatSeconds(seconds.get<double>())
        << "\n";
  out << "bubble per stage (idle: neither computing nor transferring; mean "
         "over the stage's ranks):\n";
  int stage = 0;
  for (const json &idle : t["bubble_s_by_stage"]) {
    out << "  stage " << stage++ << ": " << formatSeconds(idle.get<double>())
        << printf1(" (%.1f%% of the step)\n",
                   simulated > 0 ? 100 * idle.get<double>() / simulated : 0);
  }
  out << "why the two differ:\n";
  for (const json &line : t["explanation"])
    out << "  - " << line.get<std::string>() << "\n";
  return out.str();
}

//===----------------------------------------------------------------------===//
// trace
//===----------------------------------------------------------------------===//

json traceJson(const Inspection &inspection) {
  const plan::Bundle &bundle = inspection.bundle;
  json events = json::array();
  for (size_t rank = 0; rank < bundle.rankRoles.size(); ++rank) {
    int64_t role = bundle.rankRoles[rank];
    const plan::Program &program = bundle.programs[role];
    const RoleTimeline &timeline = inspection.timeline.roles[role];
    plan::MeshCoord coord = bundle.mesh.coordOf(int64_t(rank));
    std::string name =
        "rank " + std::to_string(rank) + " (role " + std::to_string(role) +
        ", dp " + std::to_string(coord.dp) + " pp " + std::to_string(coord.pp) +
        " tp " + std::to_string(coord.tp) + ")";
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", rank},
                      {"args", {{"name", name}}}});
    events.push_back({{"ph", "M"},
                      {"name", "process_sort_index"},
                      {"pid", rank},
                      {"args", {{"sort_index", rank}}}});
    for (size_t s = 0; s < program.streams.size(); ++s) {
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", s},
                        {"args", {{"name", program.streams[s].name}}}});
      const auto &insts = program.streams[s].instructions;
      for (size_t i = 0; i < insts.size(); ++i) {
        const InstTiming &timing = timeline.streams[s][i];
        const plan::Instruction &inst = insts[i];
        if (timing.start > timing.arrive)
          events.push_back(
              {{"ph", "X"},
               {"name", "wait"},
               {"cat", "wait"},
               {"pid", rank},
               {"tid", s},
               {"ts", timing.arrive * 1e6},
               {"dur", (timing.start - timing.arrive) * 1e6},
               {"args", {{"for", plan::toString(inst.opcode)}, {"index", i}}}});
        if (timing.end <= timing.start)
          continue; // events and releases take no time
        std::string label = inst.opcode == plan::Opcode::Kernel
                                ? bundle.kernels[inst.kernel].name
                                : std::string(plan::toString(inst.opcode));
        events.push_back({{"ph", "X"},
                          {"name", label},
                          {"cat", isCommOp(inst.opcode) ? "comm" : "compute"},
                          {"pid", rank},
                          {"tid", s},
                          {"ts", timing.start * 1e6},
                          {"dur", (timing.end - timing.start) * 1e6},
                          {"args", {{"phase", inst.phase}, {"index", i}}}});
      }
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"source", "weft-inspect (simulated)"},
            {"cluster", inspection.clusterSource},
            {"step_time_s", inspection.timeline.stepTimeS}}}};
}

//===----------------------------------------------------------------------===//
// verify and diff
//===----------------------------------------------------------------------===//

json verifyJson(const plan::VerifyResult &result) {
  json diagnostics = json::array();
  for (const plan::Diagnostic &diagnostic : result.diagnostics)
    diagnostics.push_back({{"kind", plan::toString(diagnostic.kind)},
                           {"message", diagnostic.message}});
  return {{"ok", result.ok()}, {"diagnostics", diagnostics}};
}

std::string verifyText(const json &verdict) {
  if (verdict["ok"].get<bool>())
    return "ok: the plan verifies (matching, deadlock, communication order, "
           "events, initialization, races, memory, operands)\n";
  std::ostringstream out;
  out << verdict["diagnostics"].size() << " diagnostic(s):\n";
  for (const json &diagnostic : verdict["diagnostics"])
    out << diagnostic["kind"].get<std::string>() << ": "
        << diagnostic["message"].get<std::string>() << "\n";
  return out.str();
}

json diffJson(const std::vector<DiffEntry> &entries) {
  json differences = json::array();
  for (const DiffEntry &entry : entries)
    differences.push_back({{"section", entry.section},
                           {"item", entry.item},
                           {"before", entry.before},
                           {"after", entry.after}});
  return {{"identical", entries.empty()}, {"differences", differences}};
}

std::string diffText(const json &diff) {
  if (diff["identical"].get<bool>())
    return "no differences\n";
  std::ostringstream out;
  std::string section;
  for (const json &entry : diff["differences"]) {
    if (entry["section"].get<std::string>() != section) {
      section = entry["section"].get<std::string>();
      out << section << ":\n";
    }
    out << "  " << padded(entry["item"].get<std::string>(), 28)
        << entry["before"].get<std::string>() << " -> "
        << entry["after"].get<std::string>() << "\n";
  }
  return out.str();
}

} // namespace weft::inspect
