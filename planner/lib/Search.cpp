//===- Search.cpp - Pruned exhaustive search over parallel plans ----------===//

#include "weft/planner/Search.h"
#include "weft/planner/Error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

namespace weft::planner {
namespace {

std::vector<int64_t> divisorsOf(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0)
      continue;
    small.push_back(i);
    if (i != n / i)
      large.push_back(n / i);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

template <typename T>
std::vector<T> fixedOr(const std::optional<T> &fixed, std::vector<T> all) {
  if (fixed)
    return {*fixed};
  return all;
}

// ZeRO-3 tuning grid: prefetch depth in buckets, and bucket sizes around
// DeepSpeed's default stage3_prefetch_bucket_size (5e7 elements = 100 MB).
const std::vector<int64_t> kPrefetchDepths = {1, 2, 4};
const std::vector<int64_t> kBucketBytes = {25'000'000, 100'000'000,
                                           400'000'000};

struct ScheduleChoice {
  Schedule schedule;
  int64_t virtualStages;
};

std::vector<ScheduleChoice> scheduleChoices(const Constraints &fixed,
                                            int64_t pp, int64_t layers) {
  if (pp == 1 && !fixed.schedule)
    return {{Schedule::OneFOneB, 1}}; // no pipeline: the schedule is moot
  std::vector<ScheduleChoice> choices;
  for (Schedule schedule :
       fixedOr<Schedule>(fixed.schedule, {Schedule::GPipe, Schedule::OneFOneB,
                                          Schedule::Interleaved})) {
    if (schedule != Schedule::Interleaved) {
      choices.push_back({schedule, 1});
      continue;
    }
    std::vector<int64_t> depths;
    if (fixed.virtualStages)
      depths = {*fixed.virtualStages};
    else if (layers % pp == 0)
      for (int64_t v : divisorsOf(layers / pp))
        if (v >= 2)
          depths.push_back(v);
    for (int64_t v : depths)
      choices.push_back({schedule, v});
  }
  return choices;
}

/// Keeps the `capacity` fastest estimates, sorted. The search keeps more
/// than it reports so that tie-breaking sees every near-tie of the winner.
class Leaderboard {
public:
  explicit Leaderboard(size_t capacity) : capacity(capacity) {}
  void offer(Estimate estimate) {
    if (plans.size() == capacity &&
        estimate.stepTimeS >= plans.back().stepTimeS)
      return;
    auto at = std::upper_bound(plans.begin(), plans.end(), estimate.stepTimeS,
                               [](double time, const Estimate &plan) {
                                 return time < plan.stepTimeS;
                               });
    plans.insert(at, std::move(estimate));
    if (plans.size() > capacity)
      plans.pop_back();
  }
  std::vector<Estimate> plans;

private:
  size_t capacity;
};

std::string gib(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << bytes / 1073741824.0 << " GiB";
  return os.str();
}

std::vector<std::string> remediesFor(const Estimate &closest,
                                     const CostModel &model) {
  std::vector<std::string> remedies;
  const ParallelConfig &c = closest.config;
  const MemoryBreakdown &memory = closest.memory;
  if (c.zero < 3 && c.dp > 1)
    remedies.push_back("ZeRO-3 shards weights, gradients and optimizer state "
                       "over the DP group");
  if (c.recompute != Recompute::Full)
    remedies.push_back("full recompute keeps only each layer's input");
  if (c.microBatch > 1)
    remedies.push_back("a smaller micro-batch shrinks activations and logits");
  if (c.tp > 1 && !c.sequenceParallel)
    remedies.push_back(
        "sequence parallelism splits the replicated activations");
  if (c.offload == Offload::None && model.cluster().host)
    remedies.push_back("optimizer offload (--offload optimizer) moves the "
                       "AdamW moments and master weights to host memory");
  // Model states shrink with the world size under ZeRO-3; the rest does not.
  const Cluster &cluster = model.cluster();
  double states = 16.0 * model.model().totalParams;
  double perGpuRest =
      memory.total() - memory.weights - memory.gradients - memory.optimizer;
  double room = closest.usableMemoryBytes - perGpuRest;
  std::ostringstream more;
  more << "more GPUs";
  if (room > 0) {
    int64_t gpus = int64_t(std::ceil(states / room));
    int64_t nodes = (gpus + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
    if (nodes > cluster.nodes)
      more << " (about " << nodes << " nodes of " << cluster.gpusPerNode
           << " to hold the " << gib(states) << " of model states)";
  }
  more << ", or GPUs with more than " << gib(closest.peakMemoryBytes)
       << " usable";
  remedies.push_back(more.str());
  return remedies;
}

} // namespace

std::array<int64_t, 7> complexityKey(const ParallelConfig &c) {
  return {int64_t(c.offload), c.zero, int64_t(c.recompute),       c.pp,
          c.virtualStages,    c.tp,   int64_t(c.sequenceParallel)};
}

std::vector<Estimate> rankWithTies(std::vector<Estimate> plans,
                                   double tolerance, size_t limit) {
  std::stable_sort(plans.begin(), plans.end(),
                   [](const Estimate &a, const Estimate &b) {
                     return a.stepTimeS < b.stepTimeS;
                   });
  std::vector<Estimate> ranked;
  std::vector<bool> taken(plans.size(), false);
  size_t first = 0; // fastest plan not yet ranked
  while (ranked.size() < limit && first < plans.size()) {
    double within = plans[first].stepTimeS * (1 + tolerance);
    size_t pick = first;
    for (size_t i = first + 1; i < plans.size() && plans[i].stepTimeS <= within;
         ++i)
      if (!taken[i] &&
          complexityKey(plans[i].config) < complexityKey(plans[pick].config))
        pick = i;
    taken[pick] = true;
    ranked.push_back(std::move(plans[pick]));
    while (first < plans.size() && taken[first])
      ++first;
  }
  return ranked;
}

SearchResult search(const CostModel &model, const Constraints &fixed,
                    const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  const ModelSpec &spec = model.model();
  const Cluster &cluster = model.cluster();
  const TrainingConfig &training = model.training();
  if (training.globalBatch <= 0)
    throw Error("global batch must be positive, got " +
                std::to_string(training.globalBatch));
  if (training.seqLen <= 0)
    throw Error("sequence length must be positive, got " +
                std::to_string(training.seqLen));
  if (options.topK < 1)
    throw Error("top-K must be positive, got " + std::to_string(options.topK));

  SearchResult result;
  int64_t world = cluster.worldSize();
  Leaderboard leaderboard(size_t(options.topK) + 256);
  std::vector<Offload> offloads =
      fixed.offload  ? std::vector<Offload>{*fixed.offload}
      : cluster.host ? std::vector<Offload>{Offload::None, Offload::Optimizer}
                     : std::vector<Offload>{Offload::None};
  result.offloadSearched = offloads.size() > 1;
  result.leanestWithoutOffloadBytes = INFINITY;
  // Every mode is a distinct trade: with flash attention selective drops the
  // op state and two of a layer's four saved tensors (docs/autodiff.md).
  std::vector<Recompute> recomputes =
      fixed.recompute
          ? std::vector<Recompute>{*fixed.recompute}
          : std::vector<Recompute>{Recompute::None, Recompute::Selective,
                                   Recompute::Full};
  struct RegionState {
    bool anyFits = false;
    double leanest = INFINITY;
  };
  std::map<std::tuple<int, int64_t, int64_t>, RegionState> regions;
  std::string lastInvalid;
  int64_t validConfigs = 0;

  // A configuration is evaluated with the ZeRO-3 prefetch settings (left
  // free) the search would pick: the fastest variant that fits, else the
  // grid's first corner (the leanest).
  auto fastestVariant = [&](ParallelConfig config) {
    std::vector<int64_t> depths = {config.prefetchDepth},
                         buckets = {config.bucketBytes};
    if (config.zero == 3) {
      depths = fixedOr(fixed.prefetchDepth, kPrefetchDepths);
      buckets = fixedOr(fixed.bucketBytes, kBucketBytes);
    }
    std::optional<Estimate> best;
    for (int64_t depth : depths)
      for (int64_t bucket : buckets) {
        config.prefetchDepth = depth;
        config.bucketBytes = bucket;
        Estimate estimate = model.evaluate(config);
        bool first = depth == depths.front() && bucket == buckets.front();
        if (!first && estimate.peakMemoryBytes > estimate.usableMemoryBytes)
          continue;
        if (!best || first || estimate.stepTimeS < best->stepTimeS)
          best = std::move(estimate);
      }
    return *best;
  };

  auto considerClosest = [&](const ParallelConfig &config, double peak) {
    if (result.closest && peak >= result.closest->peakMemoryBytes)
      return;
    result.closest = fastestVariant(config);
  };

  // Evaluates one configuration (tuning the ZeRO-3 knobs left free); returns
  // false when even its leanest variant does not fit.
  auto tryConfig = [&](ParallelConfig config) -> bool {
    std::vector<int64_t> depths = {0}, buckets = {0};
    if (config.zero == 3) {
      depths = fixedOr(fixed.prefetchDepth, kPrefetchDepths);
      buckets = fixedOr(fixed.bucketBytes, kBucketBytes);
    }
    config.prefetchDepth = depths.front();
    config.bucketBytes = buckets.front();
    if (std::string why = model.check(config); !why.empty()) {
      lastInvalid = why;
      return true; // invalid, not memory-bound: keep growing the micro-batch
    }
    ++validConfigs;
    ++result.configsEvaluated;
    RegionState &region = regions[{config.zero, config.tp, config.pp}];
    double leanPeak = model.peakMemoryBytes(config);
    if (config.offload == Offload::None)
      result.leanestWithoutOffloadBytes =
          std::min(result.leanestWithoutOffloadBytes, leanPeak);
    if (leanPeak > model.usableMemoryBytes()) {
      region.leanest = std::min(region.leanest, leanPeak);
      considerClosest(config, leanPeak);
      return false;
    }
    // Host memory does not depend on the micro-batch either.
    if (model.hostMemoryBytes(config) > model.usableHostMemoryBytes())
      return false;
    region.anyFits = true;
    std::optional<Estimate> best;
    for (int64_t depth : depths) {
      for (int64_t bucket : buckets) {
        config.prefetchDepth = depth;
        config.bucketBytes = bucket;
        if (depth != depths.front() || bucket != buckets.front()) {
          ++result.configsEvaluated;
          if (model.peakMemoryBytes(config) > model.usableMemoryBytes())
            continue;
        }
        ++result.timeEvaluations;
        Estimate estimate = model.evaluate(config);
        if (!best || estimate.stepTimeS < best->stepTimeS)
          best = std::move(estimate);
      }
    }
    ++result.candidatesFitting;
    if (options.referenceStepTimeS &&
        best->stepTimeS < *options.referenceStepTimeS)
      ++result.fasterThanReference;
    std::optional<Estimate> &bestOfKind = config.offload == Offload::None
                                              ? result.bestWithoutOffload
                                              : result.bestWithOffload;
    if (!bestOfKind || best->stepTimeS < bestOfKind->stepTimeS)
      bestOfKind = *best;
    leaderboard.offer(std::move(*best));
    return true;
  };

  if (fixed.allFixed()) {
    ParallelConfig config;
    config.tp = *fixed.tp;
    config.pp = *fixed.pp;
    config.dp = fixed.dp ? *fixed.dp : world / (config.tp * config.pp);
    config.zero = *fixed.zero;
    config.microBatch = *fixed.microBatch;
    config.gradAccum =
        fixed.gradAccum
            ? *fixed.gradAccum
            : training.globalBatch /
                  std::max<int64_t>(1, config.microBatch * config.dp);
    config.recompute = *fixed.recompute;
    config.schedule = fixed.schedule ? *fixed.schedule : Schedule::OneFOneB;
    config.virtualStages =
        config.schedule == Schedule::Interleaved ? *fixed.virtualStages : 1;
    config.sequenceParallel = fixed.sequenceParallel.value_or(false);
    for (Offload offload : offloads) {
      config.offload = offload;
      tryConfig(config);
    }
    if (validConfigs == 0)
      throw Error("fixed configuration " + config.describe() + ": " +
                  lastInvalid);
    result.outcome = SearchResult::Outcome::Fixed;
    if (!leaderboard.plans.empty()) {
      result.plans = rankWithTies(std::move(leaderboard.plans),
                                  options.tieTolerance, size_t(options.topK));
    } else {
      // Nothing fits: report the configuration as described (without
      // offload unless asked for); the remedies mention offload.
      if (offloads.front() == Offload::None && offloads.size() > 1) {
        config.offload = Offload::None;
        config.prefetchDepth = fixed.prefetchDepth.value_or(
            config.zero == 3 ? kPrefetchDepths.front() : 0);
        config.bucketBytes = fixed.bucketBytes.value_or(
            config.zero == 3 ? kBucketBytes.front() : 0);
        result.closest = fastestVariant(config);
      }
      result.plans.push_back(*result.closest);
      result.remedies = remediesFor(*result.closest, model);
    }
    result.searchTimeS =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return result;
  }

  std::vector<int64_t> tps;
  for (int64_t tp : fixedOr<int64_t>(fixed.tp, divisorsOf(world)))
    if (fixed.tp || fixed.allowTpAcrossNodes || tp <= cluster.gpusPerNode)
      tps.push_back(tp);

  // Why the loops below skipped a layout before costing it: the reason to
  // give when no layout was even tried (fixed dimensions that cannot work).
  // The reason of the latest check wins: its layout got furthest.
  std::string lastSkipped;
  int lastSkippedCheck = -1;
  auto skip = [&](int check, const std::string &why) {
    if (check >= lastSkippedCheck) {
      lastSkipped = why;
      lastSkippedCheck = check;
    }
    return true;
  };
  for (int64_t tp : tps) {
    if (world % tp != 0 &&
        skip(0, "TP=" + std::to_string(tp) + " does not divide the " +
                    std::to_string(world) + " GPUs"))
      continue;
    for (int64_t pp : fixedOr<int64_t>(fixed.pp, divisorsOf(world / tp))) {
      if ((world / tp) % pp != 0 &&
          skip(1, "TP=" + std::to_string(tp) + " x PP=" + std::to_string(pp) +
                      " does not divide the " + std::to_string(world) +
                      " GPUs"))
        continue;
      if (pp > spec.numLayers &&
          skip(2, "PP=" + std::to_string(pp) + " exceeds the " +
                      std::to_string(spec.numLayers) + " layers"))
        continue;
      int64_t dp = world / (tp * pp);
      if (fixed.dp && *fixed.dp != dp &&
          skip(3,
               "DP=" + std::to_string(*fixed.dp) + ", but " +
                   std::to_string(world) + " GPUs / (TP=" + std::to_string(tp) +
                   " x PP=" + std::to_string(pp) + ") = " + std::to_string(dp)))
        continue;
      if (training.globalBatch % dp != 0 &&
          skip(4, "DP=" + std::to_string(dp) +
                      " does not divide the global batch " +
                      std::to_string(training.globalBatch)))
        continue;
      std::vector<int64_t> microBatches;
      int64_t perReplica = training.globalBatch / dp;
      for (int64_t mb : divisorsOf(perReplica))
        if ((!fixed.microBatch || mb == *fixed.microBatch) &&
            (!fixed.gradAccum || perReplica / mb == *fixed.gradAccum))
          microBatches.push_back(mb);
      if (microBatches.empty())
        skip(5, "no micro-batch" +
                    (fixed.microBatch ? " " + std::to_string(*fixed.microBatch)
                                      : std::string()) +
                    (fixed.gradAccum
                         ? " with " + std::to_string(*fixed.gradAccum) +
                               " accumulation steps"
                         : std::string()) +
                    " divides the per-replica batch " +
                    std::to_string(perReplica) + " (global batch " +
                    std::to_string(training.globalBatch) +
                    " / DP=" + std::to_string(dp) + ")");
      // Without data parallelism every ZeRO stage is plain training.
      std::vector<int> zeros =
          fixedOr<int>(fixed.zero, dp == 1 ? std::vector<int>{0}
                                           : std::vector<int>{0, 1, 2, 3});
      std::vector<bool> sps = fixedOr<bool>(
          fixed.sequenceParallel,
          tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false});
      for (int zero : zeros)
        for (bool sp : sps)
          for (ScheduleChoice schedule :
               scheduleChoices(fixed, pp, spec.numLayers))
            for (Recompute recompute : recomputes)
              for (Offload offload : offloads)
                for (int64_t mb : microBatches) {
                  ParallelConfig config;
                  config.tp = tp;
                  config.pp = pp;
                  config.dp = dp;
                  config.zero = zero;
                  config.microBatch = mb;
                  config.gradAccum = perReplica / mb;
                  config.recompute = recompute;
                  config.schedule = schedule.schedule;
                  config.virtualStages = schedule.virtualStages;
                  config.sequenceParallel = sp;
                  config.offload = offload;
                  // Memory never shrinks with a larger micro-batch.
                  if (!tryConfig(config))
                    break;
                }
    }
  }
  if (validConfigs == 0) {
    std::ostringstream why;
    why << "no valid plan for " << world << " GPUs (" << cluster.nodes << "x"
        << cluster.gpusPerNode << "), global batch " << training.globalBatch
        << ", " << spec.numHeads << " heads, " << spec.numLayers << " layers";
    if (!lastInvalid.empty())
      why << ": " << lastInvalid;
    else if (!lastSkipped.empty())
      why << ": " << lastSkipped;
    throw Error(why.str());
  }

  for (const auto &[key, region] : regions)
    if (!region.anyFits)
      result.rejected.push_back({std::get<0>(key), std::get<1>(key),
                                 std::get<2>(key), region.leanest,
                                 model.usableMemoryBytes()});
  result.plans = rankWithTies(std::move(leaderboard.plans),
                              options.tieTolerance, size_t(options.topK));
  if (result.plans.empty()) {
    result.outcome = SearchResult::Outcome::NothingFits;
    result.remedies = remediesFor(*result.closest, model);
  } else {
    result.outcome = SearchResult::Outcome::Found;
  }
  result.searchTimeS =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

} // namespace weft::planner
