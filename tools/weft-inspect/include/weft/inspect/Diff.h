//===- Diff.h - What differs between two plan bundles -----------*- C++ -*-===//
#ifndef WEFT_INSPECT_DIFF_H
#define WEFT_INSPECT_DIFF_H

#include "weft/plan/Bundle.h"

#include <string>
#include <vector>

namespace weft::inspect {

/// One difference; `before`/`after` are "-" where a side lacks the item.
struct DiffEntry {
  std::string section; // model, mesh, training, config, prediction, memory,
                       // state, instructions, collectives
  std::string item;    // e.g. "zero", "ranks 0-3", "all_reduce/dp bytes"
  std::string before;
  std::string after;
};

/// Differences in configuration, prediction, planned memory per rank
/// (persistent + arena), persistent bytes by category ("state": params,
/// master_params, optimizer_states, gradients, other; classifyBuffers),
/// instruction counts by opcode and collective counts and bytes by kind
/// (these three summed over all ranks), in that order.
std::vector<DiffEntry> diffBundles(const plan::Bundle &a,
                                   const plan::Bundle &b);

} // namespace weft::inspect

#endif // WEFT_INSPECT_DIFF_H
