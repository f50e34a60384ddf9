//===- Search.h - Exhaustive, pruned search over parallel plans -*- C++ -*-===//
//
// Enumerates TP x PP x DP x ZeRO x micro-batch x recompute x SP x schedule
// (x ZeRO-3 prefetch depth and bucket size), honouring any fixed dimension.
// Memory is checked before time; within one (TP, PP, ZeRO, SP, schedule,
// recompute) family the micro-batch rises until memory runs out, since
// activation memory never shrinks with a larger micro-batch.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_SEARCH_H
#define WEFT_PLANNER_SEARCH_H

#include "weft/planner/CostModel.h"

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
};

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
