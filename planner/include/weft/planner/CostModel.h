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
#include <utility>
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
  /// Fused attention's speed against the GEMM formula over its score and
  /// context products (1: as fast as GEMMs of those shapes).
  double attentionEfficiency = 1.0;

  // Communication: NCCL bus bandwidth as a fraction of the link bandwidth.
  double intraNodeBusEfficiency = 0.75;
  double interNodeBusEfficiency = 0.80;
  /// Groups of at least this many ranks may use a tree (log-latency)
  /// all-reduce; the faster of ring and tree is taken.
  int64_t treeMinRanks = 16;
  /// Share of backward compute that can hide data-parallel reductions and
  /// ZeRO-3 gathers (the rest of the GPU is busy with compute kernels).
  double commOverlapFraction = 0.90;
  /// Gradient reduction bucket (PyTorch DDP / Megatron use 25-40 M elems):
  /// the runtime's communication staging in the memory estimate.
  double dpBucketBytes = 100e6;
  /// The compiled plan's DP buckets (weft-schedule's `bucket_bytes`
  /// default, 25 MiB): how many collectives ZeRO 0-2 issue.
  double planBucketBytes = 25 << 20;

  // Optimizer offload (docs/planner.md, "Optimizer offload").
  /// Host DRAM traffic of the CPU AdamW step per parameter: fp32 master,
  /// gradient, m and v read, master, m and v written.
  double cpuAdamBytesPerParam = 28;
  /// Extra host traffic per parameter in mixed precision: the half gradient
  /// upcast into the fp32 staging buffer (2 + 4) and the half copy of the
  /// updated weight (2).
  double cpuAdamMixedExtraBytesPerParam = 8;
  /// Share of the node's DRAM bandwidth a vectorised CPU AdamW reaches.
  double hostMemoryBandwidthFraction = 0.5;
  /// Parameters one core updates per second when compute-bound (AVX2/512).
  double cpuAdamParamsPerCoreS = 1e8;
  /// fp32 weights per offloaded AdamW bucket (weftc compile's default
  /// bucket_bytes, 25 MiB): each bucket's weights go back to the device
  /// while the next bucket steps.
  double offloadAdamBucketBytes = 25 << 20;
  /// Host bytes per offloaded parameter: fp32 master, m, v and the fp32
  /// gradient staging buffer.
  double hostBytesPerParam = 16;
  /// Share of host DRAM the planner may fill (the OS, data loaders, pinned
  /// staging and the page cache keep the rest).
  double hostMemoryUsableFraction = 0.8;

  // Memory.
  /// CUDA context, cuBLAS and NCCL workspaces held outside the static plan.
  double workspaceBytes = 1.0 * (1 << 30);
  /// Share of GPU memory held back (allocator alignment, kernel libraries'
  /// transient buffers the static plan does not see).
  double memoryMarginFraction = 0.04;
};

/// `constants` with the cluster's measured ones (Cluster::costOverrides) in
/// place of theirs. CostModel and weft-inspect's simulator apply it.
CostConstants withClusterOverrides(CostConstants constants,
                                   const Cluster &cluster);

/// Per-GPU memory of one pipeline stage, bytes.
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;     // AdamW moments m and v (0 when offloaded)
  double masterWeights = 0; // fp32 master weights (0 when offloaded)
  double activations = 0;   // stored activations of in-flight micro-batches
  double recomputeWorkspace = 0; // one layer's backward transients
  double logits = 0;             // fp32 logits/softmax and their gradients
  double zero3Buffers = 0;       // ZeRO-3 gathered parameters (in use + ahead)
  /// ZeRO-2/3: the micro-batch gradients of parameters not yet
  /// reduce-scattered into the persistent shard (a bounded few at a time).
  double gradientBuffer = 0;
  /// Pipeline stage-boundary send/receive buffers (activations out, their
  /// gradients in) of the micro-batches in flight.
  double pipelineBuffers = 0;
  double commBuffers = 0; // gradient reduction buckets
  double workspace = 0;   // CUDA context, cuBLAS/NCCL workspaces
  double total() const;
  /// What a compiled plan places itself (persistent region + arena): model
  /// states, activations, backward workspace, logits, ZeRO-3 buffers, the
  /// ZeRO-2/3 gradient buffer, pipeline boundary buffers; not
  /// the GPU runtime's workspace and communication buckets.
  double staticPlanBytes() const;
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
  double optimizer = 0; // AdamW step (on the CPU when offloaded)
  double offload = 0;   // exposed host<->device gradient/parameter copies
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
  double marginBytes = 0;       // capacity x memoryMarginFraction
  /// Optimizer offload: host bytes per node (every rank of the node's
  /// offloaded state) and what the host may hold; 0 without offload.
  double hostMemoryBytes = 0;
  double usableHostMemoryBytes = 0;
  bool fits = false;         // device and host memory
  double shortfallBytes = 0; // device peak - usable when it does not fit
  double hostShortfallBytes = 0;
};

// --- Closed forms, exposed for tests and explanations. ---

/// Activation bytes one transformer layer keeps for one micro-batch on one
/// TP rank. Eager: Korthikanti et al. 2022 (Megatron-LM, generalised to
/// ffn != 4h, GQA, SwiGLU), a*s*s scores included without recompute. Flash:
/// Weft's compiled plan: 4 [s, b, h] tensors and the op state (none), 2
/// (selective: the grad ops recompute the op state) or 1 (full) [s, b, h]
/// tensors (docs/autodiff.md).
double layerActivationBytes(const ModelSpec &model, int64_t seqLen,
                            int64_t microBatch, int64_t tp,
                            bool sequenceParallel, Recompute recompute,
                            int64_t elementBytes,
                            Attention attention = Attention::Eager);

/// The op state one layer keeps without recompute on one TP rank
/// (docs/autodiff.md, "Op state"): Q, K, V and the attention context, the
/// MLP's up, gate (gated) and hidden activation in the element size, the
/// attention's per-row log-sum-exp and the norms' row statistics in f32.
double layerOpStateBytes(const ModelSpec &model, int64_t seqLen,
                         int64_t microBatch, int64_t tp, bool sequenceParallel,
                         int64_t elementBytes);

/// Transient bytes of one layer's backward beyond the saved activations:
/// eager, the re-materialised layer (full) or scores (selective); flash,
/// Weft's grad ops' recomputed op-internal state and gradients.
double layerBackwardWorkspaceBytes(const ModelSpec &model, int64_t seqLen,
                                   int64_t microBatch, int64_t tp,
                                   bool sequenceParallel, Recompute recompute,
                                   int64_t elementBytes, Attention attention);

/// Micro-batches whose activations stage `stage` holds at its peak, in units
/// of the stage's full set of layers (interleaving holds fractions).
double activationsInFlight(Schedule schedule, int64_t pp, int64_t stage,
                           int64_t microBatches, int64_t virtualStages);

/// Pipeline bubble relative to the ideal time: (pp-1) / (m * v).
double bubbleFraction(Schedule schedule, int64_t pp, int64_t microBatches,
                      int64_t virtualStages);

/// Bytes per parameter held on each GPU for weights, gradients, AdamW moments
/// and fp32 master weights under ZeRO `zero` over `dp` ranks, as weft-schedule
/// lays out the persistent region (the ZeRO-1/2 shards of the gradient and,
/// in mixed precision, of the rounded half weights count as gradients and
/// weights); with optimizer offload the moments and master weights live in
/// host memory instead.
struct StateBytes {
  double weights, gradients, optimizer, master;
};
StateBytes stateBytesPerParam(Precision precision, int zero, int64_t dp,
                              Offload offload = Offload::None);

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
/// A transfer's time as its two alpha-beta terms: the hops' latency, and the
/// bytes over the link bandwidth (what concurrent transfers on the same links
/// share: weft-inspect's simulator).
struct CommTime {
  double latency = 0;
  double transfer = 0;
  double total() const { return latency + transfer; }
};
/// Alpha-beta time of a collective over `bytes` (the full, unsharded
/// buffer). Ring, or tree for large groups, whichever is faster.
CommTime collectiveCost(Collective kind, const Cluster &cluster,
                        const CostConstants &constants, const GroupSpan &span,
                        double bytes);
CommTime pointToPointCost(const Cluster &cluster,
                          const CostConstants &constants, bool crossesNodes,
                          double bytes);
inline double collectiveTime(Collective kind, const Cluster &cluster,
                             const CostConstants &constants,
                             const GroupSpan &span, double bytes) {
  return collectiveCost(kind, cluster, constants, span, bytes).total();
}
inline double pointToPointTime(const Cluster &cluster,
                               const CostConstants &constants,
                               bool crossesNodes, double bytes) {
  return pointToPointCost(cluster, constants, crossesNodes, bytes).total();
}
/// Optimizer offload's host side (docs/planner.md, "Optimizer offload"): the
/// ranks sharing one node's CPU and DRAM, and the seconds of the CPU AdamW
/// per parameter of one rank (memory- or compute-bound, the node shared by
/// those ranks); `mixed`: a half-precision gradient and weight copy.
/// Requires `cluster.host`.
int64_t ranksSharingHost(const Cluster &cluster);
double cpuAdamSecondsPerParam(const Cluster &cluster,
                              const CostConstants &constants, bool mixed);

/// The cost model of one (model, cluster, training) triple.
class CostModel {
public:
  CostModel(ModelSpec model, Cluster cluster, TrainingConfig training,
            CostConstants constants = {});

  /// Empty when `config` is a valid plan here, else why it is not.
  std::string check(const ParallelConfig &config) const;
  /// Peak per-GPU memory over stages (cheaper than evaluate; for pruning).
  double peakMemoryBytes(const ParallelConfig &config) const;
  /// Memory of every pipeline stage, stage 0 first (evaluate keeps only the
  /// most loaded one).
  std::vector<MemoryBreakdown>
  memoryByStage(const ParallelConfig &config) const;
  /// Host bytes per node of an offloaded configuration (0 without offload).
  double hostMemoryBytes(const ParallelConfig &config) const;
  double usableHostMemoryBytes() const;
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
  /// Parameters on one TP rank of `stage`: split ones / tp + replicated.
  double rankParams(const Layout &layout, int64_t stage, int64_t tp) const;
  /// ZeRO-3: the parameters a rank of `stage` keeps whole instead of
  /// gathering them (weft-schedule's persist-threshold default: vectors of
  /// at most min(100000, largest parameter / 64) rank-local elements).
  double zero3PersistentParams(const Layout &layout, int64_t stage,
                               int64_t tp) const;
  /// ZeRO-3: the vector parameters of one layer over the persistence
  /// threshold, gathered rather than kept whole.
  int64_t zero3GatheredVectorsPerLayer(int64_t tp) const;
  /// weft-schedule's default `max-live-grad-bytes` for a ZeRO-2/3 rank
  /// holding `params` parameters (of an end stage or not): the largest
  /// gradient plus three times the second largest, with accumulation each with
  /// its reduce-scatter output (1/DP of it); `elem` bytes per element.
  double liveGradientBytes(const ParallelConfig &c, bool endStage,
                           double params, double elem) const;
  /// The largest and second-largest parameter (elements) of a rank: the
  /// vocabulary-parallel embedding or head on an end stage, a layer matrix.
  std::pair<double, double> largestGradients(const ParallelConfig &c,
                                             bool endStage) const;
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
