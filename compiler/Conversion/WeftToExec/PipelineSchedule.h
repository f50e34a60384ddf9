//===- PipelineSchedule.h - Pipeline task order per stage ------*- C++ -*-===//
//
// Which forward and backward passes (model chunk, micro-batch) one pipeline
// rank runs in a training step, in order, for the GPipe, 1F1B and
// interleaved 1F1B schedules. Plain C++ (no MLIR) so it is unit-tested on its
// own; `weft-schedule` turns each task into the stage function's
// instructions and the point-to-point transfers around it.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_CONVERSION_WEFTTOEXEC_PIPELINESCHEDULE_H
#define WEFT_CONVERSION_WEFTTOEXEC_PIPELINESCHEDULE_H

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace weft::pipeline {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

/// `gpipe`, `1f1b` or `interleaved` (the spellings of weft.parallel).
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);

/// One forward or backward pass of one model chunk on one micro-batch.
struct Task {
  int64_t chunk = 0;
  int64_t microBatch = 0;
  bool backward = false;

  bool operator==(const Task &other) const {
    return chunk == other.chunk && microBatch == other.microBatch &&
           backward == other.backward;
  }
};

/// The tasks pipeline rank `rank` of `stages` runs in one step, in order:
/// every (chunk, micro-batch) forward before its backward, forwards of a
/// chunk in micro-batch order, and backwards likewise.
///
/// - GPipe: all forwards, then all backwards.
/// - 1F1B: `stages - rank - 1` warm-up forwards, then alternating one forward
///   and one backward, then the remaining backwards (at most
///   `stages - rank` micro-batches in flight).
/// - Interleaved (Megatron's interleaved 1F1B, `chunks` >= 2 model chunks per
///   rank, `microBatches` a multiple of `stages`): forwards visit the chunks
///   in groups of `stages` micro-batches, backwards the chunks in reverse;
///   `(stages - rank - 1) * 2 + (chunks - 1) * stages` warm-up forwards (all
///   of them when `microBatches == stages`).
///
/// GPipe and 1F1B take `chunks == 1`. Violated preconditions yield an empty
/// order.
std::vector<Task> pipelineOrder(ScheduleKind kind, int64_t stages,
                                int64_t chunks, int64_t microBatches,
                                int64_t rank);

} // namespace weft::pipeline

#endif // WEFT_CONVERSION_WEFTTOEXEC_PIPELINESCHEDULE_H
