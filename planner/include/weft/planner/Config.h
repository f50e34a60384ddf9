//===- Config.h - Training configuration and the parallel plan --*- C++ -*-===//
//
// TrainingConfig is what the user asks for (batch, sequence, precision),
// ParallelConfig is one point of the search space, and Constraints fixes any
// subset of its dimensions (an unset optional leaves the dimension free).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_CONFIG_H
#define WEFT_PLANNER_CONFIG_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace weft::planner {

/// bf16/fp16: mixed precision (half-precision weights, gradients and
/// activations, fp32 master weights and AdamW moments). fp32: everything fp32.
enum class Precision { BF16, FP16, FP32 };
/// Activation recomputation (Korthikanti et al. 2022): none, selective (core
/// attention only), full (only each layer's input is kept).
enum class Recompute { None, Selective, Full };
/// Pipeline schedule: GPipe (all forwards, then all backwards), 1F1B
/// (PipeDream-Flush), interleaved 1F1B with virtual stages (Megatron-LM).
enum class Schedule { GPipe, OneFOneB, Interleaved };
/// Optimizer-state offload (ZeRO-Offload, Ren et al. 2021): none, or the
/// AdamW moments and fp32 master weights in host memory with the AdamW step on
/// the CPU (gradients go device->host, updated parameters host->device).
enum class Offload { None, Optimizer };
/// Attention implementation, for activation memory and softmax traffic:
/// flash (fused kernel: keeps q, k, v, the context and one fp32 log-sum-exp
/// per row and head; no a*s*s score tensors) or eager (Megatron-LM of
/// 2021-22: softmax output, dropout mask and dropout output per score).
enum class Attention { Flash, Eager };

std::string_view toString(Precision precision);
std::string_view toString(Recompute recompute);
std::string_view toString(Schedule schedule);
std::string_view toString(Offload offload);
std::string_view toString(Attention attention);
/// Parse "bf16|fp16|fp32", "none|selective|full", "gpipe|1f1b|interleaved",
/// "none|optimizer", "flash|eager"; throw Error naming the value and the
/// accepted spellings otherwise.
Precision parsePrecision(std::string_view text);
Recompute parseRecompute(std::string_view text);
Schedule parseSchedule(std::string_view text);
Offload parseOffload(std::string_view text);
Attention parseAttention(std::string_view text);

/// Bytes of one activation/weight element in the compute precision.
int64_t computeElementBytes(Precision precision);

struct TrainingConfig {
  int64_t globalBatch = 0; // sequences per optimizer step
  int64_t seqLen = 0;
  Precision precision = Precision::BF16;
  /// How attention is computed (an implementation property of the training
  /// code, not a search dimension: flash is never worse).
  Attention attention = Attention::Flash;
  /// Bias adds, the tanh GELU after a biased up projection (and its
  /// backward) and bias gradients run in their GEMMs' epilogues (`weftc
  /// compile --gemm-epilogues`); otherwise as kernels of their own.
  bool gemmEpilogues = false;
  /// Each residual add runs inside the norm next to it, the forward's in
  /// the norm after it and the backward's in the norm backward before it,
  /// which stores no dx (`weftc compile --residual-norms`).
  bool residualNorms = false;
  /// The compiled plan's ZeRO 0-2 bucket size in bytes (`weftc compile
  /// --bucket-bytes`: DP gradient all-reduces and reduce-scatters, ZeRO-1/2
  /// parameter all-gathers, offloaded AdamW buckets); 0: the default,
  /// CostConstants::planBucketBytes.
  int64_t bucketBytes = 0;
};

/// One fully specified plan. Invariants (checked by checkParallelConfig):
/// tp * pp * dp == world size, microBatch * gradAccum * dp == global batch.
struct ParallelConfig {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  int zero = 0; // ZeRO stage over the DP group: 0, 1, 2, 3
  int64_t microBatch = 1;
  int64_t gradAccum = 1; // micro-batches per step and DP rank
  Recompute recompute = Recompute::None;
  Schedule schedule = Schedule::OneFOneB;
  int64_t virtualStages = 1; // model chunks per pipeline rank (interleaved)
  bool sequenceParallel = false;
  int64_t prefetchDepth = 0; // ZeRO-3: all-gather buckets issued ahead
  int64_t bucketBytes = 0;   // ZeRO-3: all-gather bucket size
  Offload offload = Offload::None;

  /// Compact one-line form, e.g. "TP=8 PP=8 DP=1 ZeRO-0 mb=1 ga=64 ...".
  std::string describe() const;
};

/// Any set field fixes that dimension of the search.
struct Constraints {
  std::optional<int64_t> tp, pp, dp;
  std::optional<int> zero;
  std::optional<int64_t> microBatch, gradAccum;
  std::optional<Recompute> recompute;
  std::optional<Schedule> schedule;
  std::optional<int64_t> virtualStages;
  std::optional<bool> sequenceParallel;
  std::optional<int64_t> prefetchDepth, bucketBytes;
  /// Unset: searched where the cluster describes its hosts, else none.
  std::optional<Offload> offload;
  /// Let TP groups span nodes (off: TP <= GPUs per node, the usual choice).
  bool allowTpAcrossNodes = false;

  /// True when the constraints pin exactly one configuration (up to the
  /// ZeRO-3 prefetch settings and an unset offload, which the search still
  /// tunes). gradAccum and dp follow from the others; virtual stages matter
  /// only when interleaved.
  bool allFixed() const;
};

} // namespace weft::planner

#endif // WEFT_PLANNER_CONFIG_H
