//===- PlanCommand.cpp - `weftc plan` -------------------------------------===//
#include "PlanCommand.h"

#include "weft/planner/Cluster.h"
#include "weft/planner/DeepSpeed.h"
#include "weft/planner/Error.h"
#include "weft/planner/Report.h"
#include "weft/planner/Search.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

using namespace weft;
using namespace weft::planner;

namespace {

/// Runs `parse` on a flag's value, naming the flag in any error.
template <typename Parse>
auto parseFlag(const char *flag, const std::string &value, Parse parse) {
  try {
    return parse(value);
  } catch (const Error &error) {
    throw Error(std::string(flag) + ": " + error.what());
  }
}

Constraints constraintsFrom(const PlanOptions &options) {
  Constraints c;
  c.tp = options.tp;
  c.pp = options.pp;
  c.dp = options.dp;
  if (options.zero) {
    if (*options.zero < 0 || *options.zero > 3)
      throw Error("--zero: expected 0, 1, 2 or 3, got " +
                  std::to_string(*options.zero));
    c.zero = static_cast<int>(*options.zero);
  }
  c.microBatch = options.microBatch;
  c.virtualStages = options.virtualStages;
  c.prefetchDepth = options.prefetchDepth;
  if (options.recompute)
    c.recompute = parseFlag("--recompute", *options.recompute, parseRecompute);
  if (options.schedule)
    c.schedule = parseFlag("--schedule", *options.schedule, parseSchedule);
  if (options.sequenceParallel) {
    if (*options.sequenceParallel != "on" && *options.sequenceParallel != "off")
      throw Error("--sequence-parallel: expected on or off, got '" +
                  *options.sequenceParallel + "'");
    c.sequenceParallel = *options.sequenceParallel == "on";
  }
  if (options.offload && *options.offload != "auto") {
    if (*options.offload != "none" && *options.offload != "optimizer")
      throw Error("--offload: expected none, optimizer or auto, got '" +
                  *options.offload + "'");
    c.offload = parseOffload(*options.offload);
  }
  c.allowTpAcrossNodes = options.allowTpAcrossNodes;
  return c;
}

int64_t required(const std::optional<int64_t> &value, const char *flag) {
  if (!value)
    throw Error(std::string(flag) + " is required");
  return *value;
}

void print(const nlohmann::json &json) { std::cout << json.dump(2) << "\n"; }

int exitCodeOf(const SearchResult &result) {
  return result.outcome == SearchResult::Outcome::NothingFits ? kExitNothingFits
                                                              : kExitOk;
}

/// Batch and sequence length the model and the planner's arithmetic can
/// take: a learned position table bounds the sequence, and tokens per step
/// stay far from int64 overflow in the byte counts derived from them.
void checkBatchShape(const ModelSpec &model, const TrainingConfig &training) {
  constexpr int64_t kMaxTokensPerStep = int64_t(1) << 40;
  if (!model.rotary && model.maxPositions > 0 &&
      training.seqLen > model.maxPositions)
    throw Error("--seq-len " + std::to_string(training.seqLen) +
                " exceeds the model's " + std::to_string(model.maxPositions) +
                " learned positions (n_positions)");
  if (training.globalBatch > 0 &&
      training.seqLen > kMaxTokensPerStep / training.globalBatch)
    throw Error("--global-batch " + std::to_string(training.globalBatch) +
                " x --seq-len " + std::to_string(training.seqLen) +
                " is more than 2^40 tokens per step");
}

/// `--from-deepspeed`: evaluate the DeepSpeed configuration as fixed, then
/// search freely and compare.
int planFromDeepSpeed(const ModelSpec &model, const Cluster &cluster,
                      const PlanOptions &options) {
  DeepSpeedPlan ds =
      loadDeepSpeedConfig(*options.fromDeepSpeed, cluster.worldSize());
  TrainingConfig training{
      ds.globalBatch,
      required(options.seqLen, "--seq-len"),
      ds.precision,
      parseFlag("--attention", options.attention, parseAttention),
      options.gemmEpilogues,
      options.residualNorms,
      options.bucketBytes};
  if (options.globalBatch && *options.globalBatch != ds.globalBatch)
    throw Error(*options.fromDeepSpeed + ": train_batch_size " +
                std::to_string(ds.globalBatch) +
                " differs from --global-batch " +
                std::to_string(*options.globalBatch));
  checkBatchShape(model, training);
  CostModel costModel(model, cluster, training);
  SearchResult given = search(costModel, ds.constraints);
  SearchOptions searchOptions;
  searchOptions.topK = options.top;
  searchOptions.referenceStepTimeS = given.plans.front().stepTimeS;
  SearchResult best =
      search(costModel, constraintsFrom(options), searchOptions);

  const Estimate &ref = given.plans.front();
  if (options.json) {
    print({{"deepspeed", toJson(ref)},
           {"weft", toJson(best)},
           {"speedup", best.plans.empty()
                           ? nlohmann::json(nullptr)
                           : nlohmann::json(ref.stepTimeS /
                                            best.plans.front().stepTimeS)}});
    return exitCodeOf(best);
  }
  std::cout << "DeepSpeed configuration (" << *options.fromDeepSpeed << "):\n"
            << renderTable(given, costModel) << "\n"
            << "Weft's search:\n"
            << (options.explain ? renderExplain(best, costModel)
                                : renderTable(best, costModel));
  if (!best.plans.empty()) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "\nbest Weft plan: %.3f s per step vs %.3f s for the "
                  "DeepSpeed configuration (%.2fx); %lld fitting candidates "
                  "are faster than it%s\n",
                  best.plans.front().stepTimeS, ref.stepTimeS,
                  ref.stepTimeS / best.plans.front().stepTimeS,
                  static_cast<long long>(best.fasterThanReference),
                  ref.fits ? ""
                           : " (the DeepSpeed configuration does not fit)");
    std::cout << line;
  }
  return exitCodeOf(best);
}

TrainingConfig trainingFrom(const ModelSpec &model,
                            const PlanOptions &options) {
  TrainingConfig training{
      required(options.globalBatch, "--global-batch"),
      required(options.seqLen, "--seq-len"),
      parseFlag("--precision", options.precision, parsePrecision),
      parseFlag("--attention", options.attention, parseAttention),
      options.gemmEpilogues,
      options.residualNorms,
      options.bucketBytes};
  checkBatchShape(model, training);
  return training;
}

int planImpl(const ModelSpec &model, const PlanOptions &options) {
  Cluster cluster = loadCluster(options.cluster);
  if (options.fromDeepSpeed)
    return planFromDeepSpeed(model, cluster, options);
  CostModel costModel(model, cluster, trainingFrom(model, options));
  SearchOptions searchOptions;
  searchOptions.topK = options.top;
  SearchResult result =
      search(costModel, constraintsFrom(options), searchOptions);
  if (options.json)
    print(toJson(result, costModel));
  else
    std::cout << (options.explain ? renderExplain(result, costModel)
                                  : renderTable(result, costModel));
  return exitCodeOf(result);
}

} // namespace

int weft::selectPlan(const ModelSpec &model, const PlanOptions &options,
                     Estimate &chosen, std::string &clusterJson) {
  try {
    Cluster cluster = loadCluster(options.cluster);
    clusterJson = toJson(cluster).dump();
    CostModel costModel(model, cluster, trainingFrom(model, options));
    Constraints constraints = constraintsFrom(options);
    if (!constraints.offload)
      constraints.offload = Offload::None;
    if (*constraints.offload == Offload::Optimizer && !cluster.host)
      throw Error("--offload optimizer: " + options.cluster +
                  " has no host description (field 'host')");
    SearchResult result = search(costModel, constraints);
    if (result.plans.empty()) {
      std::cerr << "weftc: error: no plan fits; run `weftc plan` with the "
                   "same flags for the shortfall and remedies\n";
      return kExitNothingFits;
    }
    chosen = result.plans.front();
    return kExitOk;
  } catch (const Error &error) {
    std::cerr << "weftc: error: " << error.what() << "\n";
    return kExitBadInput;
  }
}

int weft::runPlan(const ModelSpec &model, const PlanOptions &options) {
  try {
    return planImpl(model, options);
  } catch (const Error &error) {
    std::cerr << "weftc: error: " << error.what() << "\n";
    return kExitBadInput;
  }
}
