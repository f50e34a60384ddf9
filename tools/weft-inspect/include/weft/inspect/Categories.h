//===- Categories.h - What each buffer of a plan holds ----------*- C++ -*-===//
//
// The plan format records a buffer's region but not its purpose. The
// categories map the runtime's per-buffer facts (weft::exec::analyzeBuffers,
// the one analysis behind its state groups): a persistent buffer's category
// is its state group; the arena, one state group for the runtime, is split
// by the same facts (docs/inspect.md, "Buffer categories"). No rule of its
// own lives here, and names are never read.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_CATEGORIES_H
#define WEFT_INSPECT_CATEGORIES_H

#include "weft/plan/Bundle.h"

#include <array>
#include <string_view>
#include <vector>

namespace weft::inspect {

enum class Category {
  // Persistent: the state group of the same name.
  Params,          // working weights
  MasterParams,    // fp32 master weights (the ZeRO shard of the weights)
  OptimizerStates, // exp_avg, exp_avg_sq
  Gradients,       // parameter gradients, persistent or before reduction
  // Arena (state group "activations"), split by use.
  Activations, // activations and activation gradients
  Gathered,    // parameters gathered by an all_gather (ZeRO-3, prefetch)
  CommBuckets, // gradients copied into a staging buffer for a reduction
  Workspace,   // scratch read and written by a single instruction
  // Persistent: the state group "other" (loss, grad-norm scalar).
  Other,
};
inline constexpr int kNumCategories = 9;

/// Every category, in report order.
std::array<Category, kNumCategories> allCategories();
/// "params", "master_params", "optimizer_states", "gradients",
/// "activations", "gathered", "comm_buckets", "workspace", "other".
std::string_view toString(Category category);

/// The category of every buffer of `program` (indexed by buffer id), from
/// exec::analyzeBuffers:
///  - a persistent buffer: its state group (exec::stateGroupOf);
///  - an arena buffer, first match wins:
///    1. Gathered: written by an all_gather whose input holds parameters
///       (a params or master_params buffer, or another gathered buffer);
///    2. Gradients or CommBuckets: it holds parameter gradients: a range
///       optimizer_step reads as the gradient, grad_norm reads or clip
///       writes, or (transitively) the input of an all_reduce,
///       reduce_scatter or copy whose output holds gradients. CommBuckets
///       when only copies, fills and reductions write it (a staging buffer),
///       Gradients when anything else does (the unsharded gradient the
///       backward accumulates under ZeRO-2/3);
///    3. Workspace: one instruction both reads and writes it and no other
///       touches it (release aside): scratch within an instruction;
///    4. Activations otherwise.
std::vector<Category> classifyBuffers(const plan::Bundle &bundle,
                                      const plan::Program &program);

} // namespace weft::inspect

#endif // WEFT_INSPECT_CATEGORIES_H
