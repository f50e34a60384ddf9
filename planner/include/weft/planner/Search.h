//===- Search.h - Exhaustive, pruned search over parallel plans -*- C++ -*-===//
//
// Enumerates TP x PP x DP x ZeRO x micro-batch x recompute x SP x schedule
// x optimizer offload (x ZeRO-3 prefetch depth and bucket size), honouring
// any fixed dimension. Plans within `tieTolerance` of each other's step time
// are ranked simplest first (no offload, lower ZeRO stage, less recompute,
// fewer pipeline stages, ...): the model cannot tell them apart.
// Memory is checked before time; within one (TP, PP, ZeRO, SP, schedule,
// recompute) family the micro-batch rises until memory runs out, since
// activation memory never shrinks with a larger micro-batch.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_SEARCH_H
#define WEFT_PLANNER_SEARCH_H

#include "weft/planner/CostModel.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace weft::planner {

/// A (ZeRO, TP, PP) region in which no configuration fits; `neededBytes` is
/// the leanest configuration's peak per GPU.
struct RejectedRegion {
  int zero = 0;
  int64_t tp = 1;
  int64_t pp = 1;
  double neededBytes = 0;
  double usableBytes = 0;
};

struct SearchOptions {
  int topK = 5;
  /// When set, count the fitting candidates faster than this step time (to
  /// rank a reference configuration among the planner's candidates).
  std::optional<double> referenceStepTimeS;
  /// Step times within this fraction count as a tie (the model's noise); the
  /// simpler configuration ranks first (docs/planner.md, "Tie-breaking").
  double tieTolerance = 0.005;
};

/// Lexicographic simplicity key, smaller is simpler: offload, ZeRO stage,
/// recompute, PP, virtual stages, TP, SP.
std::array<int64_t, 7> complexityKey(const ParallelConfig &config);

/// `plans` sorted by step time, re-ranked: each position takes the simplest
/// plan within `tolerance` of the fastest one left; at most `limit` kept.
std::vector<Estimate> rankWithTies(std::vector<Estimate> plans,
                                   double tolerance, size_t limit);

struct SearchResult {
  enum class Outcome {
    Found,       // plans[0] is the fastest plan that fits
    Fixed,       // every dimension was fixed: plans[0] is that plan, fitting
                 // or not
    NothingFits, // plans is empty; closest is the smallest shortfall
  };
  Outcome outcome = Outcome::NothingFits;
  std::vector<Estimate> plans; // fastest first, distinct configurations
  std::optional<Estimate> closest;
  std::vector<std::string> remedies; // what would make something fit
  std::vector<RejectedRegion> rejected;
  /// Optimizer offload, for the explanation: whether the search tried both
  /// settings, the best fitting plan of each, and the smallest device peak
  /// of any configuration without offload.
  bool offloadSearched = false;
  std::optional<Estimate> bestWithoutOffload, bestWithOffload;
  double leanestWithoutOffloadBytes = 0;
  int64_t configsEvaluated = 0; // memory-checked configurations
  int64_t timeEvaluations = 0;  // of which fully timed
  int64_t candidatesFitting = 0;
  int64_t fasterThanReference = 0;
  double searchTimeS = 0;
};

/// Throws Error for invalid inputs (non-positive batch or sequence, a fixed
/// dimension no configuration can satisfy, a world size the model and batch
/// cannot be split over).
SearchResult search(const CostModel &model, const Constraints &constraints,
                    const SearchOptions &options = {});

} // namespace weft::planner

#endif // WEFT_PLANNER_SEARCH_H
