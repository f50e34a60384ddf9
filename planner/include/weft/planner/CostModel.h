//===- CostModel.h - Analytic time and memory model of one plan -*- C++ -*-===//
//
// Closed-form estimates of step time and per-GPU memory for one
// ParallelConfig. Rank order (TP fastest, then PP, then DP):
//   rank = ((dp_idx * PP) + pp_idx) * TP + tp_idx
// so TP groups are consecutive ranks (inside a node when TP <= GPUs per node),
// PP neighbours are TP ranks apart and DP groups are strided by TP * PP.
// Formulas and the provenance of every constant are in docs/planner.md.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PLANNER_COSTMODEL_H
#define WEFT_PLANNER_COSTMODEL_H

#include "weft/planner/Cluster.h"
#include "weft/planner/Config.h"
#include "weft/planner/ModelSpec.h"

#include <cstdint>
#include <string>
#include <vector>

namespace weft::planner {

/// Every calibratable number of the model. Defaults and their sources are
/// documented in docs/planner.md ("Constants").
struct CostConstants {
  // Compute: a GEMM of shape MxNxK runs at
  //   peak * matmulPeakFraction * sat(M) * sat(N) * sat(K),
  //   sat(d) = d / (d + matmulHalfDim),
  // so small per-GPU matrices (large TP, small heads) lose efficiency.
  double matmulPeakFraction = 0.76;
  double matmulHalfDim = 96;
  /// Share of HBM bandwidth that elementwise kernels (norms, softmax,
  /// dropout, activations, optimizer) achieve.
  double memoryBandwidthFraction = 0.75;

  // Communication: NCCL bus bandwidth as a fraction of the link bandwidth.
  double intraNodeBusEfficiency = 0.75;
  double interNodeBusEfficiency = 0.80;
  /// Groups of at least this many ranks may use a tree (log-latency)
  /// all-reduce; the faster of ring and tree is taken.
  int64_t treeMinRanks = 16;
  /// Share of backward compute that can hide data-parallel reductions and
  /// ZeRO-3 gathers (the rest of the GPU is busy with compute kernels).
  double commOverlapFraction = 0.90;
  /// Gradient reduction bucket (PyTorch DDP / Megatron use 25-40 M elems).
  double dpBucketBytes = 100e6;

  // Optimizer: fused AdamW traffic per parameter (see docs).
  double optimizerBytesPerParam = 32;

  // Memory.
  /// CUDA context, cuBLAS and NCCL workspaces held outside the static plan.
  double workspaceBytes = 1.0 * (1 << 30);
  /// Share of GPU memory held back (allocator alignment, kernel libraries'
  /// transient buffers the static plan does not see).
  double memoryMarginFraction = 0.04;
};

/// Per-GPU memory of one pipeline stage, bytes.
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0; // stored activations of in-flight micro-batches
  double recomputeWorkspace = 0; // one layer re-materialised in backward
  double logits = 0;             // fp32 logits/softmax and their gradients
  double zero3Buffers = 0;       // gathered parameters + prefetch buckets
  double commBuffers = 0;        // gradient reduction buckets
  double workspace = 0;
  double total() const;
};

/// Contributions to one optimizer step, seconds; they sum to the step time.
struct TimeBreakdown {
  double compute = 0;   // forward + backward of the bottleneck stage
  double recompute = 0; // extra forward work of activation recomputation
  double tpComm = 0;    // exposed tensor-parallel collectives
  double ppComm = 0;    // pipeline point-to-point transfers
  double dpComm = 0;    // exposed data-parallel gradient/param collectives
  double zeroComm = 0;  // exposed ZeRO-3 gathers and reduce-scatters
  double bubble = 0;    // pipeline fill and drain
  double optimizer = 0; // AdamW step
  double total() const;
};

struct Estimate {
  ParallelConfig config;
  std::vector<int64_t> layersPerStage;
  TimeBreakdown time;
  MemoryBreakdown memory; // of the most loaded stage
  int64_t peakStage = 0;
  double stepTimeS = 0;
  double tokensPerS = 0;
  double modelTflopsPerGpu = 0; // model FLOPs (no recompute) per GPU
  double mfu = 0;
  double peakMemoryBytes = 0;
  double usableMemoryBytes = 0; // capacity minus the margin
  bool fits = false;
  double shortfallBytes = 0; // peak - usable when it does not fit
};

// --- Closed forms, exposed for tests and explanations. ---

/// Activation bytes one transformer layer keeps for one micro-batch on one
/// TP rank (Korthikanti et al. 2022, generalised to ffn != 4h, GQA, SwiGLU).
double layerActivationBytes(const ModelSpec &model, int64_t seqLen,
                            int64_t microBatch, int64_t tp,
                            bool sequenceParallel, Recompute recompute,
                            int64_t elementBytes);

/// Micro-batches whose activations stage `stage` holds at its peak, in units
/// of the stage's full set of layers (interleaving holds fractions).
double activationsInFlight(Schedule schedule, int64_t pp, int64_t stage,
                           int64_t microBatches, int64_t virtualStages);

/// Pipeline bubble relative to the ideal time: (pp-1) / (m * v).
double bubbleFraction(Schedule schedule, int64_t pp, int64_t microBatches,
                      int64_t virtualStages);

/// Bytes per parameter held on each rank for weights, gradients and
/// optimizer state under ZeRO `zero` over `dp` ranks.
struct StateBytes {
  double weights, gradients, optimizer;
};
StateBytes stateBytesPerParam(Precision precision, int zero, int64_t dp);

/// Where a communication group's ranks sit: `size` ranks, `ranksPerNode` of
/// them per node, spanning `nodes` nodes.
struct GroupSpan {
  int64_t size = 1;
  int64_t ranksPerNode = 1;
  int64_t nodes = 1;
};
/// Span of a group of `size` ranks spaced `stride` apart in rank order.
GroupSpan spanOfGroup(const Cluster &cluster, int64_t size, int64_t stride);

enum class Collective { AllReduce, AllGather, ReduceScatter };
/// Alpha-beta time of a collective over `bytes` (the full, unsharded
/// buffer). Ring, or tree for large groups, whichever is faster.
double collectiveTime(Collective kind, const Cluster &cluster,
                      const CostConstants &constants, const GroupSpan &span,
                      double bytes);
double pointToPointTime(const Cluster &cluster, const CostConstants &constants,
                        bool crossesNodes, double bytes);

/// The cost model of one (model, cluster, training) triple.
class CostModel {
public:
  CostModel(ModelSpec model, Cluster cluster, TrainingConfig training,
            CostConstants constants = {});

  /// Empty when `config` is a valid plan here, else why it is not.
  std::string check(const ParallelConfig &config) const;
  /// Peak per-GPU memory over stages (cheaper than evaluate; for pruning).
  double peakMemoryBytes(const ParallelConfig &config) const;
  /// Full estimate; throws Error when check() fails.
  Estimate evaluate(const ParallelConfig &config) const;

  double usableMemoryBytes() const;
  /// 3 x forward FLOPs of one global batch (model FLOPs, no recompute).
  double modelFlopsPerStep() const;

  const ModelSpec &model() const { return spec; }
  const Cluster &cluster() const { return hardware; }
  const TrainingConfig &training() const { return train; }
  const CostConstants &constants() const { return consts; }

private:
  struct PerMicroBatch;
  struct Layout;
  PerMicroBatch stageCosts(const ParallelConfig &config) const;
  Layout layout(const ParallelConfig &config, const PerMicroBatch &costs) const;
  MemoryBreakdown stageMemory(const ParallelConfig &config,
                              const Layout &layout, int64_t stage) const;
  double stageParams(const Layout &layout, int64_t stage) const;
  double gemmSeconds(double m, double n, double k) const;

  ModelSpec spec;
  Cluster hardware;
  TrainingConfig train;
  CostConstants consts;
  double peak;  // FLOP/s of the compute precision
  double hbm;   // achieved bytes/s of elementwise kernels
  int64_t elem; // bytes per compute-precision element
};

} // namespace weft::planner

#endif // WEFT_PLANNER_COSTMODEL_H
