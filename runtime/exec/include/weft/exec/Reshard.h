//===- Reshard.h - Checkpoints as global tensors, in any layout -*- C++ -*-===//
//
// A checkpoint holds each rank's persistent region, then its host region
// (optimizer offload): parameter shards (TP slices, ZeRO pieces, working
// copies and fp32 masters) and the AdamW moments beside them. This header
// reads one back as global (unsharded) tensors through the bundle's
// ShardSpecs, and writes global tensors as a checkpoint of another bundle:
// the same model under a different TP/PP/DP/ZeRO layout or precision
// (docs/runtime.md, "Resharding"). weft-export (Export.h) and weft-reshard
// are built on it.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_RESHARD_H
#define WEFT_EXEC_RESHARD_H

#include "weft/exec/Checkpoint.h"
#include "weft/plan/Bundle.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace weft::exec {

/// Where the AdamW moments of parameter bytes [offset, offset + bytes) of
/// `buffer` live. The plan format names no moments: the runtime derives them
/// here, and only here, from the optimizer_step that updates those bytes as
/// its parameter operand (reads[0]): exp_avg and exp_avg_sq are its reads[2]
/// and reads[3], element for element parallel to it (all f32). Bytes that no
/// single optimizer_step covers have no optimizer state (nullopt): they are a
/// working copy derived from a master (bf16/f16 copy, ZeRO's gathered replica).
struct OptimizerStateLocation {
  int64_t expAvgBuffer = -1, expAvgOffset = 0;     // bytes into the buffer
  int64_t expAvgSqBuffer = -1, expAvgSqOffset = 0; // bytes into the buffer
};
std::optional<OptimizerStateLocation>
locateOptimizerState(const plan::Program &program, int64_t buffer,
                     int64_t offset, int64_t bytes);

/// One parameter as a global row-major fp32 tensor (plan shape).
struct GlobalTensor {
  const plan::Parameter *param = nullptr;
  std::vector<float> value;
  std::vector<float> expAvg, expAvgSq; // empty unless read with the moments
};

/// A checkpoint's training state, independent of the layout.
struct GlobalState {
  int64_t step = 0;         // optimizer steps completed
  uint64_t seed = 0;        // the counter-based RNG's whole state
  int64_t dataSamples = 0;  // sequences consumed (step x global batch)
  bool weightsOnly = false; // a weights snapshot: no master, no moments
  /// The dynamic loss scaler's state, when the checkpoint's plan has one.
  std::optional<LossScaleState> lossScale;
  /// The token file trained on, when the manifest records it (carried to
  /// the resharded checkpoint).
  std::optional<DataIdentity> data;
  std::vector<GlobalTensor> tensors; // in bundle parameter order
};

/// Reads checkpoint `stepDir` (D/step-<N> or D/weights-<N>, written for
/// `bundle`, loaded from `bundleDir`) with every check of a resume (manifest,
/// sizes, header fields, checksums). Every ShardSpec of every role is
/// reassembled: TP slices (several per role for a fused tensor), vocabulary
/// padding dropped, ZeRO pieces by DP index. A parameter's value comes from
/// the shards the optimizer updates (the fp32 master) when the checkpoint
/// holds them, else from the working copies. With `moments`, exp_avg and
/// exp_avg_sq are read too (a weights snapshot is then an error). Replicas
/// must agree bit for bit and every element must be covered. Throws Error.
GlobalState readGlobalState(const plan::Bundle &bundle,
                            const std::string &bundleDir,
                            const std::string &stepDir, bool moments);

/// What reshardCheckpoint wrote.
struct ReshardStats {
  std::string dir; // OUT/step-<N>
  int64_t step = 0;
  int64_t ranks = 0;              // rank files written
  int64_t parameters = 0;         // tensors carried
  int64_t elements = 0;           // parameter elements (each with two moments)
  int64_t bytes = 0;              // all rank files
  std::vector<std::string> notes; // training settings that differ
};

/// Converts full checkpoint `stepDir` of bundle `from` into OUT/step-<N> for
/// bundle `to` (same model: parameter names and shapes; same global batch and
/// sequence length, so the data position carries over). Parameters, fp32
/// masters and both AdamW moments go through the global tensors and are
/// written into every ShardSpec of `to` (working copies rounded to their
/// dtype); the step, data position and seed are kept; every other persistent
/// byte starts at zero, as in a fresh session (gradients, loss and norm are
/// rewritten by every step). The files follow the checkpoint protocol
/// (OUT/step-<N>.tmp, manifest, rename, COMPLETE), so weft-run `to`
/// --resume --checkpoint-dir OUT loads them with every check. Nothing is
/// written before the inputs are read and checked; a failure leaves no
/// step-<N> behind. An existing OUT/step-<N> is an error. Throws Error.
ReshardStats reshardCheckpoint(const plan::Bundle &from,
                               const std::string &fromDir,
                               const std::string &stepDir,
                               const plan::Bundle &to, const std::string &toDir,
                               const std::string &outDir);

} // namespace weft::exec

#endif // WEFT_EXEC_RESHARD_H
