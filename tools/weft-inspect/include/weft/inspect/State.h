//===- State.h - Where each state group of a plan lives ---------*- C++ -*-===//
//
// `weft-inspect BUNDLE state [--rank R] [--json]`: for each role (or the
// role of rank R), the runtime's state groups (weft/exec/StateGroups.h, the
// same classification the runtime offloads by) with their region, bytes,
// buffers and byte ranges, and what an offload does with them.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_STATE_H
#define WEFT_INSPECT_STATE_H

#include "weft/plan/Bundle.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace weft::inspect {

/// Throws plan::Error for a rank outside the world.
nlohmann::json stateJson(const plan::Bundle &bundle,
                         std::optional<int64_t> rank);
std::string stateText(const nlohmann::json &state);

} // namespace weft::inspect

#endif // WEFT_INSPECT_STATE_H
