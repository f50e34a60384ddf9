//===- Categories.h - What each buffer of a plan holds ----------*- C++ -*-===//
//
// Format version 1 records a buffer's region but not its purpose, so the
// category is derived from the region and the name conventions of the
// lowering (docs/inspect.md, "Buffer categories").
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_INSPECT_CATEGORIES_H
#define WEFT_INSPECT_CATEGORIES_H

#include "weft/plan/Bundle.h"

#include <array>
#include <string_view>

namespace weft::inspect {

enum class Category {
  Weights,
  Gradients,
  OptimizerStates,
  Activations,
  Gathered, // ZeRO-3 gathered parameters and prefetch buffers
  CommBuckets,
  Workspace,
};
inline constexpr int kNumCategories = 7;

/// Every category, in report order.
std::array<Category, kNumCategories> allCategories();
std::string_view toString(Category category);
Category classifyBuffer(const plan::Buffer &buffer);

} // namespace weft::inspect

#endif // WEFT_INSPECT_CATEGORIES_H
