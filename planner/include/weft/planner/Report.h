//===- Report.h - Human and JSON renderings of a search result --*- C++ -*-===//
//
// renderTable: ranked plans (config, step time, tokens/s, model TFLOP/s per
// GPU, MFU, peak memory vs usable). renderExplain: the winner's time and
// memory breakdown, why each runner-up loses, rejected regions, and remedies
// when nothing fits. toJson: the machine-readable form (docs/planner.md).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_REPORT_H
#define WEFT_PLANNER_REPORT_H

#include "weft/planner/Search.h"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace weft::planner {

std::string renderTable(const SearchResult &result, const CostModel &model);
std::string renderExplain(const SearchResult &result, const CostModel &model);
nlohmann::json toJson(const Estimate &estimate);
nlohmann::json toJson(const SearchResult &result);
/// toJson(result) with every plan's per-stage memory breakdown added
/// ("memory_by_stage": [{"stage", "memory_bytes": {...}}]).
nlohmann::json toJson(const SearchResult &result, const CostModel &model);
/// "ZeRO-0, PP=1, TP<=2: needs 41.3 GiB per GPU, 9.3 GiB over" lines, one per
/// (ZeRO, PP) with its rejected TP degrees merged.
std::vector<std::string> describeRejected(const SearchResult &result);

} // namespace weft::planner

#endif // WEFT_PLANNER_REPORT_H
