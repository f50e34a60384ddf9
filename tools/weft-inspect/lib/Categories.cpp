//===- Categories.cpp - Buffer categories from names and regions ----------===//

#include "weft/inspect/Categories.h"

#include <string>

namespace weft::inspect {

std::array<Category, kNumCategories> allCategories() {
  return {Category::Weights,     Category::Gradients, Category::OptimizerStates,
          Category::Activations, Category::Gathered,  Category::CommBuckets,
          Category::Workspace};
}

std::string_view toString(Category category) {
  switch (category) {
  case Category::Weights:
    return "weights";
  case Category::Gradients:
    return "gradients";
  case Category::OptimizerStates:
    return "optimizer_states";
  case Category::Activations:
    return "activations";
  case Category::Gathered:
    return "gathered";
  case Category::CommBuckets:
    return "comm_buckets";
  case Category::Workspace:
    return "workspace";
  }
  return "?";
}

static bool contains(const std::string &name, std::string_view part) {
  return name.find(part) != std::string::npos;
}

Category classifyBuffer(const plan::Buffer &buffer) {
  const std::string &name = buffer.name;
  // Optimizer state first: "w.exp_avg" must not match a weight rule.
  if (contains(name, "exp_avg") || contains(name, "master") ||
      contains(name, "optim"))
    return Category::OptimizerStates;
  if (contains(name, "bucket"))
    return Category::CommBuckets;
  if (contains(name, "workspace") || contains(name, "scratch"))
    return Category::Workspace;
  // Activation gradients ("act.grad") live with the activations.
  bool arena = buffer.region == plan::Region::Arena;
  if (arena && contains(name, "act"))
    return Category::Activations;
  if (contains(name, "grad"))
    return Category::Gradients;
  if (!arena)
    return Category::Weights;
  if (contains(name, ".full") || contains(name, "gather") ||
      contains(name, "prefetch"))
    return Category::Gathered;
  return Category::Activations;
}

} // namespace weft::inspect
