//===- Categories.cpp - Buffer categories from state groups and uses ------===//

#include "weft/inspect/Categories.h"

#include "weft/exec/StateGroups.h"

namespace weft::inspect {

using exec::StateGroup;

std::array<Category, kNumCategories> allCategories() {
  return {
      Category::Params,      Category::MasterParams, Category::OptimizerStates,
      Category::Gradients,   Category::Activations,  Category::Gathered,
      Category::CommBuckets, Category::Workspace,    Category::Other};
}

std::string_view toString(Category category) {
  switch (category) {
  case Category::Params:
    return "params";
  case Category::MasterParams:
    return "master_params";
  case Category::OptimizerStates:
    return "optimizer_states";
  case Category::Gradients:
    return "gradients";
  case Category::Activations:
    return "activations";
  case Category::Gathered:
    return "gathered";
  case Category::CommBuckets:
    return "comm_buckets";
  case Category::Workspace:
    return "workspace";
  case Category::Other:
    return "other";
  }
  return "?";
}

static Category fromStateGroup(StateGroup group) {
  switch (group) {
  case StateGroup::Params:
    return Category::Params;
  case StateGroup::MasterParams:
    return Category::MasterParams;
  case StateGroup::OptimizerStates:
    return Category::OptimizerStates;
  case StateGroup::Gradients:
    return Category::Gradients;
  case StateGroup::Activations:
    return Category::Activations;
  case StateGroup::Other:
    return Category::Other;
  }
  return Category::Other;
}

std::vector<Category> classifyBuffers(const plan::Bundle &bundle,
                                      const plan::Program &program) {
  // One analysis for both: the state groups and these categories map the
  // same per-buffer facts (exec::analyzeBuffers).
  std::vector<exec::BufferFacts> facts = exec::analyzeBuffers(bundle, program);
  std::vector<Category> categories(facts.size());
  for (size_t b = 0; b < facts.size(); ++b) {
    const exec::BufferFacts &f = facts[b];
    if (!f.arena)
      categories[b] = fromStateGroup(exec::stateGroupOf(f));
    else if (f.gathered)
      categories[b] = Category::Gathered;
    else if (f.gradients)
      categories[b] = f.computed ? Category::Gradients : Category::CommBuckets;
    else if (f.scratch)
      categories[b] = Category::Workspace;
    else
      categories[b] = Category::Activations;
  }
  return categories;
}

} // namespace weft::inspect
