//===- Report.cpp - Tables, explanations and JSON -------------------------===//

#include "weft/planner/Report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

using nlohmann::json;

namespace weft::planner {
namespace {

constexpr double kGiB = 1073741824.0;

std::string format(const char *fmt, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), fmt, value);
  return buffer;
}

std::string gib(double bytes) { return format("%.1f GiB", bytes / kGiB); }

std::string seconds(double s) {
  return s >= 1 ? format("%.3f s", s) : format("%.2f ms", s * 1e3);
}

struct Term {
  const char *name;
  double value;
};

std::vector<Term> timeTerms(const TimeBreakdown &t) {
  return {{"compute", t.compute},       {"recompute", t.recompute},
          {"TP comm", t.tpComm},        {"PP comm", t.ppComm},
          {"DP comm", t.dpComm},        {"ZeRO-3 comm", t.zeroComm},
          {"bubble", t.bubble},         {"optimizer", t.optimizer},
          {"offload copies", t.offload}};
}

std::vector<Term> memoryTerms(const MemoryBreakdown &m) {
  return {{"weights", m.weights},
          {"gradients", m.gradients},
          {"optimizer states", m.optimizer},
          {"master weights", m.masterWeights},
          {"activations", m.activations},
          {"recompute workspace", m.recomputeWorkspace},
          {"logits", m.logits},
          {"ZeRO-3 buffers", m.zero3Buffers},
          {"ZeRO-2/3 live grads", m.gradientBuffer},
          {"pipeline buffers", m.pipelineBuffers},
          {"comm buckets", m.commBuffers},
          {"workspace", m.workspace}};
}

std::string header(const CostModel &model) {
  const Cluster &c = model.cluster();
  const TrainingConfig &t = model.training();
  std::ostringstream os;
  os << "model " << model.model().name << " on " << c.name << " (" << c.nodes
     << "x" << c.gpusPerNode << " " << c.gpu.model << "), global "
     << "batch " << t.globalBatch << " x " << t.seqLen << " tokens, "
     << toString(t.precision) << (t.gemmEpilogues ? ", GEMM epilogues" : "")
     << (t.residualNorms ? ", residual norms" : "") << "\n";
  if (!c.costOverrides.empty()) {
    const CostConstants &k = model.constants();
    std::streamsize precision = os.precision(3);
    os << "measured cost constants (the cluster's cost_constants): GEMMs at "
       << k.matmulPeakFraction << " of peak (half dim " << k.matmulHalfDim
       << "), attention " << k.attentionEfficiency
       << "x the GEMM formula, element-wise kernels at "
       << k.memoryBandwidthFraction << " of HBM bandwidth\n";
    os.precision(precision);
  }
  return os.str();
}

/// A term's name in the breakdown's first column.
std::string padded(std::string name) {
  name.resize(std::max<size_t>(name.size(), 22), ' ');
  return name;
}

std::string percent(double fraction) {
  return format("%.1f%%", 100 * fraction);
}

/// Why the winner does or does not offload its optimizer (issue #8: offload
/// is chosen only when it makes a configuration fit or is faster).
void appendOffload(std::ostringstream &os, const SearchResult &result,
                   const CostModel &model) {
  const Estimate &best = result.plans.front();
  bool on = best.config.offload == Offload::Optimizer;
  os << "optimizer offload: " << (on ? "on" : "off");
  if (!model.cluster().host) {
    os << " (the cluster has no 'host' description)\n";
    return;
  }
  if (!result.offloadSearched) {
    os << " (fixed by --offload)\n";
  } else if (on) {
    const std::optional<Estimate> &other = result.bestWithoutOffload;
    if (!other) {
      double need = result.leanestWithoutOffloadBytes;
      os << " -- nothing fits without it: the leanest plan without offload "
            "needs "
         << gib(need) << " per GPU, " << gib(need - best.usableMemoryBytes)
         << " over\n";
    } else {
      os << " -- " << percent(other->stepTimeS / best.stepTimeS - 1)
         << " faster than the best plan without it ("
         << other->config.describe() << ", " << seconds(other->stepTimeS)
         << ")\n";
    }
  } else {
    const std::optional<Estimate> &other = result.bestWithOffload;
    if (!other)
      os << " -- no offloaded plan fits or is valid here\n";
    else
      os << " -- the best offloaded plan (" << other->config.describe()
         << ") is " << percent(other->stepTimeS / best.stepTimeS - 1)
         << " slower: CPU AdamW " << seconds(other->time.optimizer)
         << ", exposed host copies " << seconds(other->time.offload) << "\n";
  }
  if (on)
    os << "  host memory " << gib(best.hostMemoryBytes) << " per node of "
       << gib(best.usableHostMemoryBytes) << " usable; CPU AdamW "
       << seconds(best.time.optimizer) << ", exposed host copies "
       << seconds(best.time.offload) << " per step\n";
}

void appendNothingFits(std::ostringstream &os, const SearchResult &result) {
  const Estimate &closest = *result.closest;
  os << "nothing fits: smallest shortfall " << gib(closest.shortfallBytes)
     << " (" << closest.config.describe() << " needs "
     << gib(closest.peakMemoryBytes) << " per GPU, "
     << gib(closest.usableMemoryBytes) << " usable)\n";
  for (const std::string &remedy : result.remedies)
    os << "  try: " << remedy << "\n";
}

} // namespace

std::vector<std::string> describeRejected(const SearchResult &result) {
  std::map<std::pair<int, int64_t>, std::vector<const RejectedRegion *>>
      byZeroPp;
  for (const RejectedRegion &region : result.rejected)
    byZeroPp[{region.zero, region.pp}].push_back(&region);
  std::vector<std::string> lines;
  for (const auto &[key, regions] : byZeroPp) {
    std::vector<int64_t> tps;
    double needed = INFINITY, usable = 0;
    for (const RejectedRegion *region : regions) {
      tps.push_back(region->tp);
      needed = std::min(needed, region->neededBytes);
      usable = region->usableBytes;
    }
    std::sort(tps.begin(), tps.end());
    // TP degrees are tried as 1, 2, 4, ...: a rejected prefix reads "TP<=n".
    bool prefix = tps.front() == 1;
    for (size_t i = 1; i < tps.size(); ++i)
      prefix &= tps[i] == 2 * tps[i - 1];
    std::ostringstream os;
    os << "ZeRO-" << key.first << ", PP=" << key.second << ", TP";
    if (prefix && tps.size() > 1) {
      os << "<=" << tps.back();
    } else {
      for (size_t i = 0; i < tps.size(); ++i)
        os << (i ? "," : "=") << tps[i];
    }
    os << ": needs " << gib(needed) << " per GPU, " << gib(needed - usable)
       << " over";
    lines.push_back(os.str());
  }
  return lines;
}

std::string renderTable(const SearchResult &result, const CostModel &model) {
  std::ostringstream os;
  os << header(model);
  if (result.outcome == SearchResult::Outcome::NothingFits) {
    appendNothingFits(os, result);
    return os.str();
  }
  char line[256];
  std::snprintf(line, sizeof(line), "%-3s %-66s %10s %11s %9s %6s %21s\n", "#",
                "config", "step", "tokens/s", "TFLOP/s", "MFU",
                "memory/GPU (usable)");
  os << line;
  int rank = 1;
  for (const Estimate &plan : result.plans) {
    std::string memory = gib(plan.peakMemoryBytes) + " (" +
                         format("%.1f", plan.usableMemoryBytes / kGiB) + ")";
    if (!plan.fits)
      memory += " !";
    std::snprintf(line, sizeof(line),
                  "%-3d %-66s %10s %11.0f %9.1f %5.1f%% %21s\n", rank++,
                  plan.config.describe().c_str(),
                  seconds(plan.stepTimeS).c_str(), plan.tokensPerS,
                  plan.modelTflopsPerGpu, plan.mfu * 100, memory.c_str());
    os << line;
  }
  if (result.outcome == SearchResult::Outcome::Fixed && !result.plans[0].fits) {
    os << "does not fit: " << gib(result.plans[0].shortfallBytes) << " over\n";
    for (const std::string &remedy : result.remedies)
      os << "  try: " << remedy << "\n";
  }
  os << result.configsEvaluated << " configurations evaluated in "
     << format("%.3f", result.searchTimeS) << " s\n";
  return os.str();
}

std::string renderExplain(const SearchResult &result, const CostModel &model) {
  std::ostringstream os;
  os << header(model);
  if (result.outcome == SearchResult::Outcome::NothingFits) {
    appendNothingFits(os, result);
  } else {
    const Estimate &best = result.plans.front();
    bool fixed = result.outcome == SearchResult::Outcome::Fixed;
    os << (fixed ? "plan: " : "best plan: ") << best.config.describe() << "\n";
    os << "  layers per stage:";
    for (int64_t layers : best.layersPerStage)
      os << ' ' << layers;
    os << "\n";
    if (best.config.zero == 3)
      os << "  ZeRO-3 prefetch: " << best.config.prefetchDepth
         << " bucket(s) of " << format("%.0f", best.config.bucketBytes / 1e6)
         << " MB\n";
    appendOffload(os, result, model);
    os << "  " << seconds(best.stepTimeS) << " per step, "
       << format("%.0f", best.tokensPerS) << " tokens/s, "
       << format("%.1f", best.modelTflopsPerGpu) << " model TFLOP/s per GPU, "
       << format("%.1f%%", best.mfu * 100) << " MFU\n";
    os << "time per step:\n";
    for (const Term &term : timeTerms(best.time))
      os << "  " << padded(term.name) << format("%10.4f s", term.value)
         << format("  %5.1f%%\n", 100 * term.value / best.stepTimeS);
    os << "memory per GPU (stage " << best.peakStage << ", the most loaded):\n";
    for (const Term &term : memoryTerms(best.memory))
      os << "  " << padded(term.name)
         << format("%8.2f GiB\n", term.value / kGiB);
    os << "  total " << gib(best.peakMemoryBytes) << " of "
       << gib(best.usableMemoryBytes) << " usable ("
       << (best.fits ? "fits" : gib(best.shortfallBytes) + " over") << ")\n";
    if (fixed && !best.fits)
      for (const std::string &remedy : result.remedies)
        os << "  try: " << remedy << "\n";

    if (result.plans.size() > 1)
      os << "why the runner-ups lose:\n";
    std::vector<Term> bestTerms = timeTerms(best.time);
    for (size_t i = 1; i < result.plans.size(); ++i) {
      const Estimate &other = result.plans[i];
      std::vector<Term> deltas = timeTerms(other.time);
      for (size_t k = 0; k < deltas.size(); ++k)
        deltas[k].value -= bestTerms[k].value;
      std::sort(deltas.begin(), deltas.end(),
                [](const Term &a, const Term &b) { return a.value > b.value; });
      os << "  #" << i + 1 << ' ' << other.config.describe() << ": "
         << format("%+.1f%%", 100 * (other.stepTimeS / best.stepTimeS - 1));
      const char *separator = " (";
      for (size_t k = 0; k < 2 && deltas[k].value > 0; ++k) {
        os << separator << deltas[k].name << ' '
           << format("%+.3f s", deltas[k].value);
        separator = ", ";
      }
      os << (separator[0] == ',' ? ")" : "");
      if (other.stepTimeS < best.stepTimeS)
        os << " -- a tie within the model's noise; #1 is simpler";
      os << "\n";
    }
  }
  std::vector<std::string> rejected = describeRejected(result);
  if (!rejected.empty()) {
    os << "rejected (out of memory even at micro-batch 1 with full recompute "
          "where free):\n";
    const size_t shown = 12;
    for (size_t i = 0; i < rejected.size() && i < shown; ++i)
      os << "  " << rejected[i] << "\n";
    if (rejected.size() > shown)
      os << "  ... and " << rejected.size() - shown << " more regions\n";
  }
  os << result.configsEvaluated << " configurations evaluated ("
     << result.timeEvaluations << " timed) in "
     << format("%.3f", result.searchTimeS) << " s\n";
  return os.str();
}

namespace {

json memoryJson(const MemoryBreakdown &m) {
  return json{{"weights", int64_t(m.weights)},
              {"gradients", int64_t(m.gradients)},
              {"optimizer", int64_t(m.optimizer)},
              {"master_weights", int64_t(m.masterWeights)},
              {"activations", int64_t(m.activations)},
              {"recompute_workspace", int64_t(m.recomputeWorkspace)},
              {"logits", int64_t(m.logits)},
              {"zero3_buffers", int64_t(m.zero3Buffers)},
              {"gradient_buffer", int64_t(m.gradientBuffer)},
              {"pipeline_buffers", int64_t(m.pipelineBuffers)},
              {"comm_buffers", int64_t(m.commBuffers)},
              {"workspace", int64_t(m.workspace)},
              {"static_plan_bytes", int64_t(m.staticPlanBytes())}};
}

} // namespace

json toJson(const Estimate &e) {
  const ParallelConfig &c = e.config;
  const TimeBreakdown &t = e.time;
  json memory = memoryJson(e.memory);
  json out{{"tp", c.tp},
           {"pp", c.pp},
           {"dp", c.dp},
           {"zero", c.zero},
           {"micro_batch", c.microBatch},
           {"grad_accum", c.gradAccum},
           {"recompute", toString(c.recompute)},
           {"schedule", toString(c.schedule)},
           {"virtual_stages", c.virtualStages},
           {"sequence_parallel", c.sequenceParallel},
           {"prefetch_depth", c.prefetchDepth},
           {"bucket_bytes", c.bucketBytes},
           {"offload", toString(c.offload)},
           {"layers_per_stage", e.layersPerStage},
           {"step_time_s", e.stepTimeS},
           {"tokens_per_s", e.tokensPerS},
           {"model_tflops_per_gpu", e.modelTflopsPerGpu},
           {"mfu", e.mfu},
           {"peak_memory_bytes", int64_t(e.peakMemoryBytes)},
           {"usable_memory_bytes", int64_t(e.usableMemoryBytes)},
           {"host_memory_bytes", int64_t(e.hostMemoryBytes)},
           {"usable_host_memory_bytes", int64_t(e.usableHostMemoryBytes)},
           {"peak_stage", e.peakStage},
           {"fits", e.fits},
           {"shortfall_bytes", int64_t(e.shortfallBytes)},
           {"breakdown",
            {{"time_s",
              {{"compute", t.compute},
               {"recompute", t.recompute},
               {"tp_comm", t.tpComm},
               {"pp_comm", t.ppComm},
               {"dp_comm", t.dpComm},
               {"zero_comm", t.zeroComm},
               {"bubble", t.bubble},
               {"optimizer", t.optimizer},
               {"offload", t.offload}}},
             {"memory_bytes", memory}}}};
  out["breakdown"]["memory_bytes"]["margin"] = int64_t(e.marginBytes);
  return out;
}

json toJson(const SearchResult &result) {
  json plans = json::array();
  for (const Estimate &plan : result.plans)
    plans.push_back(toJson(plan));
  const char *outcome = "found";
  if (result.outcome == SearchResult::Outcome::Fixed)
    outcome = "fixed";
  else if (result.outcome == SearchResult::Outcome::NothingFits)
    outcome = "nothing_fits";
  json out{{"plans", plans},
           {"configs_evaluated", result.configsEvaluated},
           {"search_time_s", result.searchTimeS},
           {"outcome", outcome},
           {"rejected", describeRejected(result)},
           {"remedies", result.remedies}};
  if (result.outcome == SearchResult::Outcome::NothingFits)
    out["closest"] = toJson(*result.closest);
  return out;
}

json toJson(const SearchResult &result, const CostModel &model) {
  json out = toJson(result);
  for (size_t i = 0; i < result.plans.size(); ++i) {
    json stages = json::array();
    int64_t stage = 0;
    for (const MemoryBreakdown &m : model.memoryByStage(result.plans[i].config))
      stages.push_back({{"stage", stage++}, {"memory_bytes", memoryJson(m)}});
    out["plans"][i]["memory_by_stage"] = stages;
  }
  return out;
}

} // namespace weft::planner
