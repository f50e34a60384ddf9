//===- PipelineSchedule.cpp - The order of pipeline tasks per stage -------===//
#include "PipelineSchedule.h"

#include <algorithm>

namespace weft::pipeline {

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  if (name == "gpipe")
    return ScheduleKind::GPipe;
  if (name == "1f1b")
    return ScheduleKind::OneFOneB;
  if (name == "interleaved")
    return ScheduleKind::Interleaved;
  return std::nullopt;
}

namespace {

/// Warm-up forwards, then one forward and one backward at a time, then the
/// remaining backwards; `forward(k)` and `backward(k)` give the k-th of each.
template <typename ForwardFn, typename BackwardFn>
std::vector<Task> oneForwardOneBackward(int64_t total, int64_t warmup,
                                        ForwardFn forward,
                                        BackwardFn backward) {
  std::vector<Task> order;
  order.reserve(2 * total);
  for (int64_t k = 0; k < warmup; ++k)
    order.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k)
    order.push_back(backward(k));
  return order;
}

} // namespace

std::vector<Task> pipelineOrder(ScheduleKind kind, int64_t stages,
                                int64_t chunks, int64_t microBatches,
                                int64_t rank) {
  if (stages < 1 || chunks < 1 || microBatches < 1 || rank < 0 ||
      rank >= stages)
    return {};
  if (kind != ScheduleKind::Interleaved) {
    if (chunks != 1)
      return {};
    auto forward = [](int64_t k) { return Task{0, k, false}; };
    auto backward = [](int64_t k) { return Task{0, k, true}; };
    int64_t warmup = kind == ScheduleKind::GPipe
                         ? microBatches
                         : std::min(stages - rank - 1, microBatches);
    return oneForwardOneBackward(microBatches, warmup, forward, backward);
  }

  // Interleaved: the k-th forward of a rank runs micro-batch
  // (k / (stages * chunks)) * stages + k % stages of chunk (k / stages) %
  // chunks; backwards walk the chunks in reverse.
  if (microBatches % stages != 0)
    return {};
  int64_t total = microBatches * chunks;
  auto microBatchOf = [&](int64_t k) {
    return k / (stages * chunks) * stages + k % stages;
  };
  auto forward = [&](int64_t k) {
    return Task{k / stages % chunks, microBatchOf(k), false};
  };
  auto backward = [&](int64_t k) {
    return Task{chunks - 1 - k / stages % chunks, microBatchOf(k), true};
  };
  int64_t warmup =
      microBatches == stages
          ? total
          : std::min((stages - rank - 1) * 2 + (chunks - 1) * stages, total);
  return oneForwardOneBackward(total, warmup, forward, backward);
}

} // namespace weft::pipeline
