//===- CostModel.cpp - Analytic time and memory model ---------------------===//
//
// Notation in comments: s sequence length, b micro-batch, h hidden, a heads,
// f ffn size, t TP, p PP, d DP, v virtual stages, m micro-batches per step,
// e bytes per compute-precision element.
//
//===----------------------------------------------------------------------===//

#include "weft/planner/CostModel.h"
#include "weft/planner/Error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

namespace weft::planner {

double MemoryBreakdown::total() const {
  return weights + gradients + optimizer + masterWeights + activations +
         recomputeWorkspace + logits + zero3Buffers + gradientBuffer +
         pipelineBuffers + commBuffers + workspace;
}

double MemoryBreakdown::staticPlanBytes() const {
  return weights + gradients + optimizer + masterWeights + activations +
         recomputeWorkspace + logits + zero3Buffers + gradientBuffer +
         pipelineBuffers;
}

double TimeBreakdown::total() const {
  return compute + recompute + tpComm + ppComm + dpComm + zeroComm + bubble +
         optimizer + offload;
}

/// Two norms' f32 row statistics (rstd, and the mean for LayerNorm) over
/// `rows` rows.
static double normStatisticsBytes(const ModelSpec &model, double rows) {
  return rows * 2 * (model.rmsNorm ? 4.0 : 8.0);
}

double layerOpStateBytes(const ModelSpec &model, int64_t seqLen,
                         int64_t microBatch, int64_t tp, bool sequenceParallel,
                         int64_t elementBytes) {
  double tokens = double(seqLen) * microBatch;
  double sbh = tokens * model.hiddenSize;
  double h = double(model.hiddenSize);
  double q = double(model.numHeads * model.headDim) / h;
  double kv = double(model.numKvHeads * model.headDim) / h;
  double mlp = (model.gatedMlp ? 3.0 : 2.0) * model.ffnSize / h;
  double lse = double(model.numHeads) * tokens * 4;
  // The norms' rows are sequence-sharded under SP.
  double norms = normStatisticsBytes(
      model, tokens / (sequenceParallel ? double(tp) : 1.0));
  return (sbh * elementBytes * (2 * q + 2 * kv + mlp) + lse) / double(tp) +
         norms;
}

double layerActivationBytes(const ModelSpec &model, int64_t seqLen,
                            int64_t microBatch, int64_t tp,
                            bool sequenceParallel, Recompute recompute,
                            int64_t elementBytes, Attention attention) {
  double sbh = double(seqLen) * microBatch * model.hiddenSize;
  double h = double(model.hiddenSize);
  double e = double(elementBytes);
  double spShard = sequenceParallel ? double(tp) : 1.0;
  if (recompute == Recompute::Full)
    return sbh * e / spShard; // only the layer input
  if (attention == Attention::Flash) {
    // Weft's compiled plan (docs/autodiff.md, "Recompute modes"): flash-style
    // kernels, so a layer saves [b, s, h] tensors: its input, both norm
    // outputs and the residual (none), or its input and the residual
    // (selective). Under SP the norm outputs are saved as the all-gathered,
    // full-sequence inputs of the column-parallel matmuls (WeftToExec's
    // `sp.gather` buffers); input and residual stay sharded. Selective under
    // SP re-runs nothing: the norm outputs are read only through their
    // all-gathers, so the gathered outputs are saved as without recompute
    // (weft-autodiff re-runs norms, not collectives). Without recompute the
    // attention and MLP also keep their op state (docs/autodiff.md, "Op
    // state"); selective's grad ops recompute it.
    if (recompute == Recompute::None)
      return 2 * sbh * e / spShard + 2 * sbh * e +
             layerOpStateBytes(model, seqLen, microBatch, tp, sequenceParallel,
                               elementBytes);
    if (sequenceParallel && tp > 1)
      return 2 * sbh * e / spShard + 2 * sbh * e;
    return 2.0 * sbh * e / spShard;
  }
  // Korthikanti et al. 2022, Sec. 4.1, per layer (e = 2 gives 34sbh + 5as^2b):
  // kept whole on every TP rank unless SP: both norm inputs, the QKV and MLP
  // inputs (4 elements) and two dropout masks (1 byte each);
  double replicated = sbh * (4 * e + 2);
  // split by TP: Q, K, V, attention context and the MLP's hidden activations
  // (input and output of GELU: 2f; SwiGLU keeps gate, up and product: 3f).
  double qRatio = double(model.numHeads * model.headDim) / h;
  double kvRatio = double(model.numKvHeads * model.headDim) / h;
  double mlpRatio = (model.gatedMlp ? 3.0 : 2.0) * model.ffnSize / h;
  double sharded = sbh * e * (2 * qRatio + 2 * kvRatio + mlpRatio);
  double bytes = replicated / spShard + sharded / tp;
  if (recompute == Recompute::None) {
    // Softmax output (e), its dropout mask (1) and dropout output (e) per
    // score: a*s*s*b scores, split by TP over heads.
    double scores = double(model.numHeads) * seqLen * seqLen * microBatch;
    bytes += scores * (2 * e + 1) / tp;
  }
  return bytes;
}

double layerBackwardWorkspaceBytes(const ModelSpec &model, int64_t seqLen,
                                   int64_t microBatch, int64_t tp,
                                   bool sequenceParallel, Recompute recompute,
                                   int64_t elementBytes, Attention attention) {
  if (attention == Attention::Eager) {
    // Megatron: full re-materialises one layer's whole activation set,
    // selective one layer's attention scores; none keeps everything.
    double whole =
        layerActivationBytes(model, seqLen, microBatch, tp, sequenceParallel,
                             Recompute::None, elementBytes, attention);
    if (recompute == Recompute::Full)
      return whole;
    if (recompute == Recompute::Selective)
      return whole - layerActivationBytes(
                         model, seqLen, microBatch, tp, sequenceParallel,
                         Recompute::Selective, elementBytes, attention);
    return 0;
  }
  // Weft's grad ops (WeftToExec), at their peaks: attention_grad holds the
  // recomputed q, k, v, context and lse with dctx, dq, dk, dv; mlp_grad the
  // recomputed up output and activation (or dh), gated: up, gate, dh, dgate,
  // dup; both beside the layer's incoming gradient ([b, s, h]), which the
  // residual branch still needs (the input gradient is allocated once the
  // recomputed state is dead). Without recompute the op state is saved
  // (layerActivationBytes) and only the gradients are new: dctx, dq, dk,
  // dv; gated dgate and dup (dh replaces the saved activation). With full
  // recompute the re-run attention's state is live from the re-run to
  // attention_grad, beside the MLP's backward. Re-run saved tensors come on
  // top: the two norm outputs (selective), three of the four (full), and
  // the re-run norms' row statistics, which wait for their grad ops.
  double sbh = double(seqLen) * microBatch * model.hiddenSize;
  double h = double(model.hiddenSize);
  double e = double(elementBytes);
  double t = double(tp);
  double spShard = sequenceParallel ? t : 1.0;
  double q = double(model.numHeads * model.headDim) / h;
  double kv = double(model.numKvHeads * model.headDim) / h;
  double lse = double(model.numHeads) * seqLen * microBatch * 4 / t;
  double attentionGrad = 2 * (2 * q + 2 * kv) * sbh * e / t + lse;
  double mlpGrad =
      (model.gatedMlp ? 5.0 : 2.0) * model.ffnSize / h * sbh * e / t;
  if (recompute == Recompute::None) {
    // The saved hidden activation dies at the down projection's weight
    // gradient, before dh takes its place; ungated, du overwrites dh.
    attentionGrad = (2 * q + 2 * kv) * sbh * e / t;
    mlpGrad = (model.gatedMlp ? 2.0 : 0.0) * model.ffnSize / h * sbh * e / t;
  } else if (recompute == Recompute::Full) {
    // The re-run attention's op state waits for attention_grad through the
    // MLP's backward.
    mlpGrad += (2 * q + 2 * kv) * sbh * e / t + lse;
  }
  double rerun = recompute == Recompute::None        ? 0.0
                 : recompute == Recompute::Selective ? 2.0
                                                     : 3.0;
  double normStats =
      normStatisticsBytes(model, double(seqLen) * microBatch / spShard);
  if (sequenceParallel && tp > 1) {
    // Under SP the re-run norm outputs are all-gathered (full sequence)
    // before the matmuls that read them, and the gathered copies are what
    // stays live: full re-runs the residual (sharded) and both gathered
    // norm outputs; selective re-runs nothing (layerActivationBytes). The
    // ungated MLP's backward also holds its all-gathered incoming gradient
    // beside u and act(u) (the gated one has released it by its peak).
    double rerunBytes = recompute == Recompute::Full
                            ? sbh * e / spShard + 2 * sbh * e + normStats
                            : 0.0;
    if (recompute == Recompute::Full && !model.gatedMlp)
      mlpGrad += sbh * e;
    return std::max(attentionGrad, mlpGrad) + sbh * e / spShard + rerunBytes;
  }
  return std::max(attentionGrad, mlpGrad) + (1 + rerun) * sbh * e / spShard +
         (rerun > 0 ? normStats : 0.0);
}

double activationsInFlight(Schedule schedule, int64_t pp, int64_t stage,
                           int64_t microBatches, int64_t virtualStages) {
  if (pp == 1)
    return 1; // plain gradient accumulation: one micro-batch at a time
  switch (schedule) {
  case Schedule::GPipe:
    return double(microBatches);
  case Schedule::OneFOneB:
    return double(std::min(microBatches, pp - stage));
  case Schedule::Interleaved: {
    // Megatron-LM's warm-up depth in model chunks, plus the one in steady
    // state; stage 0 holds p + (p-1)/v stage-equivalents (Korthikanti
    // Sec. 4.2).
    int64_t chunks =
        std::min(microBatches * virtualStages,
                 2 * (pp - stage - 1) + (virtualStages - 1) * pp + 1);
    return double(chunks) / virtualStages;
  }
  }
  return 1;
}

double bubbleFraction(Schedule schedule, int64_t pp, int64_t microBatches,
                      int64_t virtualStages) {
  if (pp == 1)
    return 0;
  int64_t v = schedule == Schedule::Interleaved ? virtualStages : 1;
  return double(pp - 1) / double(microBatches * v);
}

StateBytes stateBytesPerParam(Precision precision, int zero, int64_t dp,
                              Offload offload) {
  // Mixed precision: half weights and gradients, fp32 master + Adam m + v.
  // fp32: fp32 weights and gradients, Adam m + v; the weights are the master
  // copy, except that ZeRO-1/2 keep an fp32 copy of this rank's shard for the
  // optimizer. As the compiled plan lays them out (docs/planner.md): ZeRO-1
  // also keeps the reduce-scatter's gradient shard beside the full gradients
  // (in the compute precision), and mixed ZeRO-1/2 the optimizer's rounded
  // half copy of the shard (`params.shard`), which the all-gather reads.
  bool mixed = precision != Precision::FP32;
  double e = mixed ? 2.0 : 4.0;
  StateBytes bytes{e, e, 8.0, mixed ? 4.0 : 0.0};
  if (zero >= 1) {
    bytes.optimizer /= dp;
    bytes.master /= dp;
  }
  if ((zero == 1 || zero == 2) && dp > 1) {
    if (!mixed)
      bytes.master = 4.0 / dp;
    if (zero == 1)
      bytes.gradients += e / dp;
    // The device's copy of the shard the gathers read: a half copy in mixed
    // precision, and an fp32 one with the master on the host (offload).
    if (mixed || offload == Offload::Optimizer)
      bytes.weights += e / dp;
  }
  if (zero >= 2)
    bytes.gradients /= dp;
  if (zero >= 3)
    bytes.weights /= dp;
  if (offload == Offload::Optimizer)
    bytes.optimizer = bytes.master = 0;
  return bytes;
}

GroupSpan spanOfGroup(const Cluster &cluster, int64_t size, int64_t stride) {
  if (size <= 1)
    return GroupSpan{};
  int64_t perNode =
      stride >= cluster.gpusPerNode
          ? 1
          : std::min(size, std::max<int64_t>(1, cluster.gpusPerNode / stride));
  return GroupSpan{size, perNode, (size + perNode - 1) / perNode};
}

CommTime collectiveCost(Collective kind, const Cluster &cluster,
                        const CostConstants &constants, const GroupSpan &span,
                        double bytes) {
  int64_t n = span.size;
  if (n <= 1 || bytes <= 0)
    return {};
  double intraBw =
      cluster.intraNodeBandwidthGBs * 1e9 * constants.intraNodeBusEfficiency;
  double bandwidth = intraBw;
  double intra = cluster.intraNodeLatencyUs * 1e-6;
  double inter = cluster.interNodeLatencyUs * 1e-6;
  double nodes = double(std::max<int64_t>(1, span.nodes));
  if (span.nodes > 1) {
    // Rings cross nodes through the NICs of the group's ranks on each node.
    double nicBw = span.ranksPerNode * cluster.interNodeBandwidthGBs * 1e9 *
                   constants.interNodeBusEfficiency;
    bandwidth = std::min(intraBw, nicBw);
  }
  // Latency as NCCL's tuning model counts it: a ring step costs the latency
  // of the hop it takes, and only the hops between nodes are slow (a
  // reduce-scatter or all-gather takes n-1 steps, nodes-1 of them between
  // nodes; an all-reduce 2(n-1), 2*nodes); a tree climbs n/nodes-1 steps in
  // a node and log2(nodes) between nodes, up and down. Ring and tree move
  // the same bytes per rank, so the faster is the one of lower latency.
  double steps = double(n - 1);
  double perRankShare = steps / n * bytes / bandwidth;
  if (kind != Collective::AllReduce)
    return {(steps - (nodes - 1)) * intra + (nodes - 1) * inter, perRankShare};
  double interSteps = span.nodes > 1 ? std::min(2 * steps, 2 * nodes) : 0;
  double ring = (2 * steps - interSteps) * intra + interSteps * inter;
  double latency = ring;
  if (n >= constants.treeMinRanks)
    latency = std::min(ring, 2 * ((double(n) / nodes - 1) * intra +
                                  std::ceil(std::log2(nodes)) * inter));
  return {latency, 2 * perRankShare};
}

CommTime pointToPointCost(const Cluster &cluster,
                          const CostConstants &constants, bool crossesNodes,
                          double bytes) {
  if (bytes <= 0)
    return {};
  if (crossesNodes)
    return {cluster.interNodeLatencyUs * 1e-6,
            bytes / (cluster.interNodeBandwidthGBs * 1e9 *
                     constants.interNodeBusEfficiency)};
  return {cluster.intraNodeLatencyUs * 1e-6,
          bytes / (cluster.intraNodeBandwidthGBs * 1e9 *
                   constants.intraNodeBusEfficiency)};
}

int64_t ranksSharingHost(const Cluster &cluster) {
  return std::min(cluster.gpusPerNode, cluster.worldSize());
}

double cpuAdamSecondsPerParam(const Cluster &cluster,
                              const CostConstants &constants, bool mixed) {
  const HostSpec &host = *cluster.host;
  double bytesPerParam =
      constants.cpuAdamBytesPerParam +
      (mixed ? constants.cpuAdamMixedExtraBytesPerParam : 0.0);
  double perParam =
      std::max(bytesPerParam / (host.memoryBandwidthGBs * 1e9 *
                                constants.hostMemoryBandwidthFraction),
               1.0 / (double(host.cores) * constants.cpuAdamParamsPerCoreS));
  return double(ranksSharingHost(cluster)) * perParam;
}

// Seconds of one micro-batch on one rank.
struct CostModel::PerMicroBatch {
  double layerForward = 0, layerBackward = 0, layerRecompute = 0;
  double layerTpForward = 0, layerTpBackward = 0, layerTpRecompute = 0;
  double firstStageExtra = 0; // embedding, forward + backward
  double lastStageExtra = 0;  // final norm, LM head and loss
  /// The TP collectives inside the two above (the vocabulary-parallel
  /// lookup's, the head input gradient's): stage time, but TP communication
  /// in the breakdown.
  double firstStageTp = 0, lastStageTp = 0;
  double pointToPoint = 0; // one activation transfer between stages
  /// ZeRO-3: a layer's gathered matrices in the order the forward first
  /// uses them (q|k|v fused or q, k, v; the attention output; gate and up;
  /// down), which is their slot order; the backward uses them in reverse.
  struct GatheredTensor {
    double elements = 0; // rank-local
    double forward = 0;  // compute from its first use to the next one's
    double backward = 0; // the same in the backward (from the next one in
                         // forward order's use to this one's)
  };
  std::vector<GatheredTensor> gatheredTensors;
  double layerTotal() const {
    return layerForward + layerBackward + layerRecompute + layerTpForward +
           layerTpBackward + layerTpRecompute;
  }
};

// Layers per stage: `first` on stage 0, `middle` on stages 1..p-2, `last` on
// stage p-1 (p == 1: everything on `first`).
struct CostModel::Layout {
  int64_t pp = 1;
  int64_t first = 0, middle = 0, last = 0;
  int64_t layersOn(int64_t stage) const {
    if (stage == 0)
      return first;
    return stage == pp - 1 ? last : middle;
  }
};

CostConstants withClusterOverrides(CostConstants constants,
                                   const Cluster &cluster) {
  const CostOverrides &o = cluster.costOverrides;
  constants.matmulPeakFraction =
      o.matmulPeakFraction.value_or(constants.matmulPeakFraction);
  constants.matmulHalfDim = o.matmulHalfDim.value_or(constants.matmulHalfDim);
  constants.memoryBandwidthFraction =
      o.memoryBandwidthFraction.value_or(constants.memoryBandwidthFraction);
  constants.attentionEfficiency =
      o.attentionEfficiency.value_or(constants.attentionEfficiency);
  return constants;
}

CostModel::CostModel(ModelSpec model, Cluster cluster, TrainingConfig training,
                     CostConstants constants)
    : spec(std::move(model)), hardware(std::move(cluster)), train(training),
      consts(withClusterOverrides(constants, hardware)) {
  peak = hardware.peakFlops(train.precision);
  hbm = hardware.gpu.memoryBandwidthGBs * 1e9 * consts.memoryBandwidthFraction;
  elem = computeElementBytes(train.precision);
}

double CostModel::usableMemoryBytes() const {
  return hardware.memoryBytes() * (1 - consts.memoryMarginFraction);
}

double CostModel::modelFlopsPerStep() const {
  return 3 * spec.forwardFlopsPerToken(train.seqLen) *
         double(train.globalBatch) * double(train.seqLen);
}

std::string CostModel::check(const ParallelConfig &c) const {
  std::ostringstream why;
  int64_t world = hardware.worldSize();
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.microBatch < 1 ||
      c.virtualStages < 1)
    why << "TP, PP, DP, micro-batch and virtual stages must be positive";
  else if (c.gradAccum < 1 && c.microBatch * c.dp > train.globalBatch)
    // A fixed micro-batch derives the accumulation from the global batch.
    why << "micro-batch " << c.microBatch << " x DP " << c.dp << " = "
        << c.microBatch * c.dp << " exceeds the global batch "
        << train.globalBatch;
  else if (c.gradAccum < 1)
    why << "accumulation steps must be positive";
  else if (c.tp * c.pp * c.dp != world)
    why << "TP x PP x DP = " << c.tp * c.pp * c.dp << ", but the cluster has "
        << world << " GPUs";
  else if (c.zero < 0 || c.zero > 3)
    why << "ZeRO stage " << c.zero << " does not exist (expected 0-3)";
  else if (spec.numHeads % c.tp != 0)
    why << "TP=" << c.tp << " does not divide " << spec.numHeads
        << " attention heads";
  else if (spec.numKvHeads % c.tp != 0)
    // The lowering splits the KV heads over TP; it does not replicate them.
    why << "TP=" << c.tp << " does not divide " << spec.numKvHeads
        << " KV heads";
  else if (spec.ffnSize % c.tp != 0)
    why << "TP=" << c.tp << " does not divide the FFN size " << spec.ffnSize;
  else if (c.pp > spec.numLayers)
    why << "PP=" << c.pp << " exceeds the " << spec.numLayers << " layers";
  else if (c.microBatch * c.gradAccum * c.dp != train.globalBatch)
    why << "micro-batch " << c.microBatch << " x accumulation " << c.gradAccum
        << " x DP " << c.dp << " != global batch " << train.globalBatch;
  else if (c.sequenceParallel && c.tp == 1)
    why << "sequence parallelism needs TP > 1";
  else if (c.schedule == Schedule::Interleaved &&
           (c.pp == 1 || c.virtualStages < 2))
    why << "the interleaved schedule needs PP > 1 and at least 2 virtual "
           "stages";
  else if (c.schedule != Schedule::Interleaved && c.virtualStages != 1)
    why << "virtual stages need the interleaved schedule";
  else if (c.schedule == Schedule::Interleaved &&
           spec.numLayers % (c.pp * c.virtualStages) != 0)
    why << "interleaved: " << spec.numLayers
        << " layers do not split into PP=" << c.pp << " x " << c.virtualStages
        << " equal chunks";
  else if (c.schedule == Schedule::Interleaved && c.gradAccum % c.pp != 0)
    why << "interleaved: " << c.gradAccum
        << " micro-batches per step are not a multiple of PP=" << c.pp;
  else if (c.zero == 3 && (c.prefetchDepth < 1 || c.bucketBytes <= 0))
    why << "ZeRO-3 needs a prefetch depth >= 1 and a positive bucket size";
  else if (c.offload == Offload::Optimizer && !hardware.host)
    why << "optimizer offload needs the cluster's host description (field "
           "'host')";
  else if (c.offload == Offload::Optimizer && c.dp > 1 && c.zero == 0)
    why << "optimizer offload with DP > 1 needs ZeRO >= 1 (each DP rank "
           "offloads its own optimizer shard, as in DeepSpeed)";
  return why.str();
}

double CostModel::gemmSeconds(double m, double n, double k) const {
  auto saturation = [&](double dim) {
    return dim / (dim + consts.matmulHalfDim);
  };
  double efficiency =
      consts.matmulPeakFraction * saturation(m) * saturation(n) * saturation(k);
  return 2 * m * n * k / (peak * efficiency);
}

CostModel::PerMicroBatch CostModel::stageCosts(const ParallelConfig &c) const {
  const ModelSpec &ms = spec;
  double t = double(c.tp);
  double s = double(train.seqLen);
  double tokens = s * c.microBatch;
  double h = double(ms.hiddenSize);
  double e = double(elem);

  // Linear layers: FLOPs from the IR; the GEMM shapes only set efficiency.
  // The compiled plan runs q, k and v as three GEMMs (GPT-2's fused c_attn
  // too: each reads its column block), and SwiGLU's gate and up as two.
  double qkvOut = double(ms.numHeads + 2 * ms.numKvHeads) * ms.headDim / t;
  double attnOut = double(ms.numHeads) * ms.headDim / t;
  double kvOut = double(ms.numKvHeads) * ms.headDim / t;
  double mlpOut = (ms.gatedMlp ? 2.0 : 1.0) * ms.ffnSize / t;
  double qShape = gemmSeconds(tokens, attnOut, h),
         kvShape = gemmSeconds(tokens, kvOut, h);
  double upShape = (ms.gatedMlp ? 2.0 : 1.0) *
                   gemmSeconds(tokens, double(ms.ffnSize) / t, h);
  double shapeSeconds = qShape + 2 * kvShape + gemmSeconds(tokens, h, attnOut) +
                        upShape + gemmSeconds(tokens, h, ms.ffnSize / t);
  double shapeFlops =
      2 * tokens * (h * qkvOut + attnOut * h + h * mlpOut + ms.ffnSize / t * h);
  double linear =
      ms.layerMatmulFlopsPerToken * tokens / t * (shapeSeconds / shapeFlops);

  // Core attention: per (sequence, head) an s x s x headDim score GEMM and an
  // s x headDim x s context GEMM.
  double headsHere = c.microBatch * ms.numHeads / t;
  double attnShapeSeconds = headsHere * (gemmSeconds(s, s, double(ms.headDim)) +
                                         gemmSeconds(s, double(ms.headDim), s));
  double attnShapeFlops = headsHere * 4 * s * s * ms.headDim;
  double attention = ms.layerAttentionFlopsPerTokenPerPosition * s * tokens /
                     t * (attnShapeSeconds / attnShapeFlops) /
                     consts.attentionEfficiency;

  // Elementwise traffic per token, in elements: the kernels of the compiled
  // plan (docs/planner.md, "Time model"), each reading and writing
  // its operands once. The norms, residual adds and the row-parallel biases
  // (after the TP reduction) run on every TP rank unless SP shards them.
  bool flash = train.attention == Attention::Flash;
  double spShard = c.sequenceParallel ? t : 1.0;
  double hs = h / spShard, ffnHere = double(ms.ffnSize) / t;
  double perElement = tokens * e / hbm; // seconds per element per token
  // The fused scale-mask-softmax and attention dropout (eager attention
  // only: flash keeps the scores on chip).
  double softmaxElems = flash ? 0.0 : 4.0 * ms.numHeads * s / t;
  // With epilogues a bias add folds into the GEMM before it when nothing
  // comes between: the column-parallel ones always, the row-parallel ones
  // (attention output, MLP down) only without TP (with it the reduction
  // comes first). The bias gradients fold into their weight gradient's GEMM
  // but for the row-parallel ones under SP (the GEMM reads the gathered
  // gradient, the bias gradient the shard). A tanh GELU after the biased
  // up projection folds too, leaving the pre-activation (aux) written in the
  // forward and read in the backward.
  bool fold = train.gemmEpilogues && ms.linearBias;
  bool foldRow = fold && c.tp == 1;
  bool foldGelu = fold && !ms.gatedMlp && ms.mlpActivation == "gelu_tanh";
  // Per block end (residual add, then norm): 2 in 1 out, then 1 in 1 out;
  // backward: the norm's x, dy -> dx, then the branches' sum. Fused
  // (residual norms) the sum is not read back, and dx neither stored nor
  // read: a, b -> sum, y; x, dy, addend -> sum.
  double blockEndF = (train.residualNorms ? 4 : 5) * hs,
         blockEndB = (train.residualNorms ? 4 : 6) * hs;
  // Bias adds read and write the output (in place, or out of place after
  // the reduction); bias gradients read the output gradient.
  double qkvBias = ms.linearBias && !fold ? qkvOut : 0.0;
  double upBias = ms.linearBias && !fold ? mlpOut : 0.0;
  double rowBias = ms.linearBias && !foldRow ? hs : 0.0; // each of two
  double rowBiasGrad =
      ms.linearBias && !(fold && !c.sequenceParallel) ? hs : 0.0;
  double activationF = ms.gatedMlp ? 3 * ffnHere // act(gate) * up
                       : foldGelu  ? ffnHere     // the aux matrix
                                   : 2 * ffnHere;
  double activationB = ms.gatedMlp ? 5 * ffnHere // g, u, dh -> dg, du
                       : foldGelu  ? ffnHere
                                   : 3 * ffnHere;
  double rotary =
      ms.rotary ? 2 * (attnOut + kvOut) : 0.0; // q and k in place, each pass
  double forwardElems = 2 * blockEndF + 2 * (qkvBias + upBias + 2 * rowBias) +
                        activationF + rotary + softmaxElems;
  double backwardElems = 2 * blockEndB + qkvBias + upBias + 2 * rowBiasGrad +
                         activationB + rotary + 2 * softmaxElems;
  double elementwise = forwardElems * perElement;

  PerMicroBatch costs;
  double forward = linear + attention + elementwise;
  costs.layerForward = forward;
  // Input and weight gradients: twice the forward's GEMMs.
  costs.layerBackward = 2 * (linear + attention) + backwardElems * perElement;
  // Flash attention's backward recomputes the scores: 5 s*s*d GEMMs against
  // the forward's 2 (2.5x, not 2x; Dao 2023).
  if (flash)
    costs.layerBackward += 0.5 * attention;
  if (flash) {
    // Without recompute the grad ops read the op state (docs/autodiff.md,
    // "Op state"). Selective re-runs the norms, which hand their statistics
    // to their grad ops, and the attention and MLP grad ops recompute their
    // op state: the QKV and MLP up/gate GEMMs, the attention forward and
    // the activation. Full re-runs the layer's forward, whose norms and
    // attention hand over their state: only the MLP's is recomputed.
    double qkvLinear = linear * (qShape + 2 * kvShape) / shapeSeconds;
    double upLinear = linear * upShape / shapeSeconds;
    double norms = tokens * 4 * h / spShard * e / hbm;
    double mlpInternals = upLinear + tokens * (ms.gatedMlp ? 3.0 : 2.0) *
                                         ms.ffnSize / t * e / hbm;
    // Full re-runs every op whose result a grad op reads: not the MLP (its
    // grad op recomputes its internals from the saved input) nor the
    // residual add after it (docs/autodiff.md, "Recompute modes").
    double mlpLinear = linear *
                       (upShape + gemmSeconds(tokens, h, ms.ffnSize / t)) /
                       shapeSeconds;
    double mlpForward =
        mlpLinear +
        tokens *
            ((ms.gatedMlp ? 3.0 : 2.0) * ms.ffnSize / t + 3 * h / spShard) * e /
            hbm;
    costs.layerRecompute = c.recompute == Recompute::None ? 0.0
                           : c.recompute == Recompute::Selective
                               ? norms + qkvLinear + attention + mlpInternals
                               : mlpInternals + forward - mlpForward;
  } else if (c.recompute == Recompute::Full) {
    costs.layerRecompute = costs.layerForward;
  } else if (c.recompute == Recompute::Selective) {
    costs.layerRecompute = attention + tokens * softmaxElems * e / hbm;
  }

  // Megatron TP: two all-reduces of the s*b*h activations per pass (with SP:
  // an all-gather and a reduce-scatter each, the same volume).
  GroupSpan tpSpan = spanOfGroup(hardware, c.tp, 1);
  double activationBytes = tokens * h * e;
  double tpGather = c.sequenceParallel
                        ? collectiveTime(Collective::AllGather, hardware,
                                         consts, tpSpan, activationBytes)
                        : 0.0;
  double tpReduce = c.sequenceParallel
                        ? collectiveTime(Collective::ReduceScatter, hardware,
                                         consts, tpSpan, activationBytes)
                        : collectiveTime(Collective::AllReduce, hardware,
                                         consts, tpSpan, activationBytes);
  double tpCollective = tpGather + tpReduce;
  costs.layerTpForward = 2 * tpCollective;
  // The backward's reductions (all-reduce, or SP's reduce-scatter) carry the
  // column-parallel layers' input gradients (q|k|v's and the MLP up
  // projection's); the compiled plan runs them on a `tp` stream
  // (weft-overlap-tp-collectives) under the same layer's weight-gradient
  // GEMM, which does not depend on them. SP's all-gathers (of the output
  // gradients, before the row-parallel layers' GEMMs) stay exposed.
  auto linearOf = [&](double m, double n, double k) {
    return linear * gemmSeconds(m, n, k) / shapeSeconds;
  };
  double qSeconds = linear * qShape / shapeSeconds,
         kvSeconds = linear * kvShape / shapeSeconds;
  double qkvSeconds = qSeconds + 2 * kvSeconds;
  double mlpUpSeconds = linear * upShape / shapeSeconds;
  double overlap = consts.commOverlapFraction;
  double qkvGradCollective =
      tpGather + std::max(0.0, tpReduce - overlap * qkvSeconds);
  double upGradCollective =
      tpGather + std::max(0.0, tpReduce - overlap * mlpUpSeconds);
  costs.layerTpBackward = qkvGradCollective + upGradCollective;
  if (c.recompute == Recompute::Full)
    costs.layerTpRecompute = costs.layerTpForward;

  // ZeRO-3's gathered matrices and the compute between their first uses,
  // which add up to the layer's forward and backward (TP collectives and
  // recompute included). Forward: q|k|v, attention, output projection,
  // residual add and norm, gate, up, activation, down, residual add and
  // norm. The backward meets them in reverse: down, activation, up, gate,
  // norm and residual, output projection, attention, q|k|v, norm and
  // residual; a layer's re-run comes right before its down projection's
  // gradient. GPT-2 fuses q|k|v into one parameter, the others keep three.
  auto seconds = [&](double elements) { return elements * perElement; };
  double softmax = seconds(softmaxElems);
  double attentionBackward = 2 * attention + (flash ? 0.5 * attention : 0.0);
  // (Only ZeRO-3 reads them; the search evaluates many other plans.)
  auto add = [&](double elements, double forwardSeconds,
                 double backwardSeconds) {
    if (c.zero == 3)
      costs.gatheredTensors.push_back(
          {elements, forwardSeconds, backwardSeconds});
  };
  double rerun = costs.layerRecompute + costs.layerTpRecompute;
  // The q|k|v part carries its bias adds and rotary forward, its bias
  // gradients and a block end backward; the output projection its bias, a
  // block end, and backward the attention and rotary; the up projection the
  // activation and its bias, backward the other block end; the down
  // projection its bias, a block end, backward the activation's gradient.
  double qkvF = seconds(2 * qkvBias + rotary) + attention + softmax;
  double qkvB = seconds(qkvBias + blockEndB) + qkvGradCollective + rerun;
  if (ms.family == "gpt2") {
    add(h * qkvOut, qkvSeconds + qkvF, 2 * qkvSeconds + qkvB);
  } else {
    add(h * attnOut, qSeconds, 2 * qSeconds + qkvB);
    add(h * kvOut, kvSeconds, 2 * kvSeconds);
    add(h * kvOut, kvSeconds + qkvF, 2 * kvSeconds);
  }
  double outSeconds = linearOf(tokens, h, attnOut);
  add(attnOut * h, outSeconds + seconds(2 * rowBias + blockEndF) + tpCollective,
      2 * outSeconds + attentionBackward + seconds(rowBiasGrad + rotary) +
          2 * softmax);
  double upSeconds = mlpUpSeconds / (ms.gatedMlp ? 2 : 1);
  double upB = seconds(upBias + blockEndB) + upGradCollective;
  if (ms.gatedMlp)
    add(h * ffnHere, upSeconds, 2 * upSeconds + upB);
  add(h * ffnHere, upSeconds + seconds(2 * upBias + activationF),
      2 * upSeconds + (ms.gatedMlp ? 0.0 : upB));
  double downSeconds = linearOf(tokens, h, ffnHere);
  add(ffnHere * h,
      downSeconds + seconds(2 * rowBias + blockEndF) + tpCollective,
      2 * downSeconds + seconds(rowBiasGrad + activationB));

  // Embedding: gather + position add forward, scatter-add backward (3h
  // elements each way); the vocabulary-parallel lookup ends in one TP
  // collective.
  costs.firstStageTp = tpCollective;
  costs.firstStageExtra = tokens * 6 * h * e / hbm + costs.firstStageTp;
  // Final norm (forward + backward), LM head GEMM (3 passes), vocabulary-
  // parallel cross-entropy, one TP collective for the head input's gradient
  // (what its weight gradient's GEMM does not hide).
  double vocabHere = double(ms.vocabSize) / t;
  double headShapeFlops = 2 * tokens * vocabHere * h;
  double head = ms.headFlopsPerToken * tokens / t *
                (gemmSeconds(tokens, vocabHere, h) / headShapeFlops);
  // The loss reads the logits and writes their gradient over them in
  // their own precision; vocabulary-parallel, its three kernels read them
  // three times (row max, sums, then the gradient).
  double lossPasses = c.tp == 1 ? 2.0 : 4.0;
  // The head input gradient's reduction runs on the tp stream under the
  // head's weight-gradient GEMM (weft-overlap-tp-collectives), as the
  // layers' column-parallel input gradients do.
  costs.lastStageTp =
      std::max(0.0, tpCollective - consts.commOverlapFraction * head);
  costs.lastStageExtra = 3 * head + tokens * 12 * h * e / hbm +
                         tokens * vocabHere * lossPasses * e / hbm +
                         costs.lastStageTp;

  // Stage boundaries carry s*b*h/t (Megatron's scatter/gather optimisation);
  // a boundary crosses nodes when a pipeline spans more than one node.
  bool crossesNodes = c.tp * c.pp > hardware.gpusPerNode;
  costs.pointToPoint =
      pointToPointTime(hardware, consts, crossesNodes, activationBytes / t);
  return costs;
}

CostModel::Layout CostModel::layout(const ParallelConfig &c,
                                    const PerMicroBatch &costs) const {
  Layout result;
  result.pp = c.pp;
  int64_t layers = spec.numLayers;
  if (c.pp == 1) {
    result.first = result.last = layers;
    return result;
  }
  if (c.schedule == Schedule::Interleaved) {
    result.first = result.middle = result.last = layers / c.pp;
    return result;
  }
  // Balance stage time: stages 0 and p-1 also carry the embedding and the
  // head, measured in layer-equivalents; the middle stages hold K layers each
  // and the ends split the rest. Minimise the bottleneck over K.
  double layerTime = costs.layerTotal();
  double firstExtra = costs.firstStageExtra / layerTime;
  double lastExtra = costs.lastStageExtra / layerTime;
  double best = INFINITY;
  int64_t middleStages = c.pp - 2;
  for (int64_t k = std::max<int64_t>(1, layers / c.pp);
       middleStages * k <= layers - 2 && k < best; ++k) {
    int64_t rest = layers - middleStages * k;
    int64_t first = std::clamp<int64_t>(
        std::llround((rest + lastExtra - firstExtra) / 2), 1, rest - 1);
    double bottleneck =
        std::max({double(middleStages > 0 ? k : 0), first + firstExtra,
                  (rest - first) + lastExtra});
    if (bottleneck < best) {
      best = bottleneck;
      result.first = first;
      result.middle = k;
      result.last = rest - first;
    }
    if (middleStages == 0)
      break;
  }
  return result;
}

double CostModel::stageParams(const Layout &layout, int64_t stage) const {
  double params = double(layout.layersOn(stage)) * spec.layerParams;
  if (stage == 0)
    params += spec.embeddingParams;
  if (stage == layout.pp - 1) {
    params += spec.headParams;
    // A tied head on a separate stage keeps its own copy of the embedding.
    if (spec.tiedHead && layout.pp > 1)
      params += double(spec.vocabSize) * spec.hiddenSize;
  }
  return params;
}

double CostModel::rankParams(const Layout &layout, int64_t stage,
                             int64_t tp) const {
  double params = stageParams(layout, stage);
  if (tp == 1)
    return params;
  // Megatron TP (and Weft's weft-partition-tensor) keeps the norms, the
  // row-parallel biases (attention output, MLP down) and learned position
  // embeddings whole on every TP rank; everything else is split.
  double h = double(spec.hiddenSize);
  double norm = spec.rmsNorm ? h : 2 * h;
  double replicated = double(layout.layersOn(stage)) *
                      (2 * norm + (spec.linearBias ? 2 * h : 0.0));
  if (stage == 0 && !spec.rotary)
    replicated += double(spec.maxPositions) * h;
  if (stage == layout.pp - 1)
    replicated += norm;
  replicated = std::min(replicated, params);
  return (params - replicated) / double(tp) + replicated;
}

namespace {
/// Rows of a rank's vocabulary shard, and columns of its logits, as the
/// lowering pads them (the Weft dialect's vocabShardRows): the vocabulary
/// padded to a multiple of TP and each shard to a multiple of 8 rows where
/// every rank keeps a word; with TP 1 the logits' rows are padded to 8.
double vocabShardRows(int64_t vocab, int64_t tp) {
  int64_t rows = (vocab + tp - 1) / tp;
  int64_t aligned = (rows + 7) / 8 * 8;
  return double((tp - 1) * aligned < vocab ? aligned : rows);
}

/// The vector parameters of one layer, rank-local under TP: the norms and
/// the linear biases (column-parallel ones split, row-parallel ones whole).
std::vector<double> layerVectors(const ModelSpec &spec, int64_t tp) {
  double h = double(spec.hiddenSize);
  std::vector<double> vectors(spec.rmsNorm ? 2 : 4, h);
  if (spec.linearBias) {
    vectors.push_back(double(spec.numHeads + 2 * spec.numKvHeads) *
                      spec.headDim / tp);
    vectors.push_back(h);
    for (int i = 0; i < (spec.gatedMlp ? 2 : 1); ++i)
      vectors.push_back(double(spec.ffnSize) / tp);
    vectors.push_back(h);
  }
  return vectors;
}

/// The matrices of one layer, rank-local under TP: q, k, v, the attention
/// output, the MLP's up (and gate) and down projections.
std::vector<double> layerMatrices(const ModelSpec &spec, int64_t tp) {
  double h = double(spec.hiddenSize), d = double(spec.headDim);
  double q = double(spec.numHeads) * d * h / double(tp);
  double kv = double(spec.numKvHeads) * d * h / double(tp);
  double mlp = double(spec.ffnSize) * h / double(tp);
  std::vector<double> matrices = {q, kv, kv, q, mlp, mlp};
  if (spec.gatedMlp)
    matrices.push_back(mlp);
  return matrices;
}

/// Collective calls of a rank's bucketed gradients as weft-schedule cuts
/// them: buckets of whole slots, so a tensor larger than a bucket is a call
/// of its own and the smaller ones share buckets of `bucket` elements;
/// `layers` layers and the `extra` tensors (embedding, head, final norm).
double bucketCalls(const ModelSpec &spec, int64_t tp, double layers,
                   const std::vector<double> &extra, double bucket) {
  double calls = 0, small = 0;
  auto add = [&](double elements, double count) {
    if (elements > bucket)
      calls += count;
    else
      small += elements * count;
  };
  for (double m : layerMatrices(spec, tp))
    add(m, layers);
  for (double v : layerVectors(spec, tp))
    add(v, layers);
  for (double e : extra)
    add(e, 1);
  return std::max(1.0, calls + std::ceil(small / bucket));
}

/// ZeRO-3's gather units of one layer in the order a pass uses them: each
/// unit's gather, the compute from its first use to the next unit's, and
/// (backward) the reduce-scatter of its gradients after that compute.
struct GatherPass {
  std::vector<double> gather, compute, scatter;
};

/// The seconds a pass over `layers` repetitions of `pass` takes beyond its
/// compute (docs/planner.md, "ZeRO-3"): unit k's gather starts once gather
/// k-1 is done and compute has begun using unit k - depth (the compiled
/// plan's prefetch); compute begins using unit k once that gather is done and
/// unit k-1's compute has run. The reduce-scatters run on a stream of their
/// own, each after its unit's compute, and may end after the compute does.
double exposedGathers(const GatherPass &pass, int64_t layers, int64_t depth) {
  // When compute began using each of the last `depth` units (a ring).
  std::vector<double> use(size_t(std::max<int64_t>(1, depth)), 0.0);
  double gathered = 0, computed = 0, scattered = 0, layerCompute = 0;
  for (double seconds : pass.compute)
    layerCompute += seconds;
  size_t units = pass.gather.size(), k = 0;
  // The times relative to `computed` after the previous layer: once a layer
  // leaves them as the one before did, every later layer repeats it (the
  // recurrence is max-plus, invariant under a shift of all times).
  std::vector<double> state, before;
  double previous = 0;
  for (int64_t layer = 0; layer < layers; ++layer) {
    for (size_t u = 0; u < units; ++u, ++k) {
      double &slot = use[k % use.size()]; // unit k - depth's, then k's
      double start = k >= use.size() ? std::max(gathered, slot) : gathered;
      gathered = start + pass.gather[u];
      slot = std::max(gathered, computed);
      computed = slot + pass.compute[u];
      if (!pass.scatter.empty())
        scattered = std::max(scattered, computed) + pass.scatter[u];
    }
    state.assign({gathered - computed,
                  pass.scatter.empty() ? 0.0 : scattered - computed});
    for (double time : use)
      state.push_back(time - computed);
    double step = computed - previous;
    previous = computed;
    bool repeats = state.size() == before.size();
    for (size_t i = 0; repeats && i < state.size(); ++i)
      repeats = std::abs(state[i] - before[i]) <=
                1e-12 * std::max(1.0, std::abs(computed));
    if (repeats) {
      double rest = double(layers - layer - 1) * step;
      computed += rest;
      scattered += rest;
      break;
    }
    std::swap(state, before);
  }
  return std::max(computed, scattered) - double(layers) * layerCompute;
}

/// weft-schedule's default persist-threshold for a rank of `stage`.
double persistThreshold(const ModelSpec &spec, bool endStage, int64_t tp) {
  double h = double(spec.hiddenSize);
  double qkv = double(spec.numHeads + 2 * spec.numKvHeads) * spec.headDim * h;
  double largest = std::max(qkv, double(spec.ffnSize) * h) / double(tp);
  if (endStage)
    // The vocabulary-parallel table's rows (padded); whole with TP 1.
    largest = std::max(largest, (tp == 1 ? double(spec.vocabSize)
                                         : vocabShardRows(spec.vocabSize, tp)) *
                                    h);
  return std::min(100000.0, std::floor(largest / 64));
}
} // namespace

std::pair<double, double> CostModel::largestGradients(const ParallelConfig &c,
                                                      bool endStage) const {
  // A layer matrix (the fused q|k|v or an MLP matrix), and on the end
  // stages the vocabulary-parallel embedding or head.
  double h = double(spec.hiddenSize);
  double qkv = double(spec.numHeads + 2 * spec.numKvHeads) * spec.headDim * h;
  double layerMatrix = std::max(qkv, double(spec.ffnSize) * h) / c.tp;
  double largest = layerMatrix;
  if (endStage)
    largest = std::max(largest, double(spec.vocabSize) * h / c.tp);
  return {largest, layerMatrix};
}

double CostModel::liveGradientBytes(const ParallelConfig &c, bool endStage,
                                    double params, double elem) const {
  auto [largest, second] = largestGradients(c, endStage);
  double parts = c.gradAccum > 1 ? 1.0 + 1.0 / double(c.dp) : 1.0;
  return std::min(params, largest + 3 * second) * elem * parts;
}

double CostModel::zero3PersistentParams(const Layout &layout, int64_t stage,
                                        int64_t tp) const {
  double threshold =
      persistThreshold(spec, stage == 0 || stage == layout.pp - 1, tp);
  double persisted = 0;
  for (double v : layerVectors(spec, tp))
    if (v <= threshold)
      persisted += v * double(layout.layersOn(stage));
  double norm = double(spec.hiddenSize);
  if (stage == layout.pp - 1 && norm <= threshold)
    persisted += spec.rmsNorm ? norm : 2 * norm;
  return persisted;
}

int64_t CostModel::zero3GatheredVectorsPerLayer(int64_t tp) const {
  double threshold = persistThreshold(spec, false, tp);
  int64_t vectors = 0;
  for (double v : layerVectors(spec, tp))
    if (v > threshold)
      ++vectors;
  return vectors;
}

MemoryBreakdown CostModel::stageMemory(const ParallelConfig &c,
                                       const Layout &layout,
                                       int64_t stage) const {
  MemoryBreakdown memory;
  double params = rankParams(layout, stage, c.tp);
  StateBytes state =
      stateBytesPerParam(train.precision, c.zero, c.dp, c.offload);
  memory.weights = params * state.weights;
  memory.gradients = params * state.gradients;
  memory.optimizer = params * state.optimizer;
  memory.masterWeights = params * state.master;
  if (c.zero == 3 && c.dp > 1)
    // The persistent small parameters stay whole (weft-schedule's
    // persist-threshold), beside their share of the shards.
    memory.weights += zero3PersistentParams(layout, stage, c.tp) * elem;

  Attention attn = train.attention;
  double perLayer =
      layerActivationBytes(spec, train.seqLen, c.microBatch, c.tp,
                           c.sequenceParallel, c.recompute, elem, attn);
  double inFlight = activationsInFlight(c.schedule, c.pp, stage, c.gradAccum,
                                        c.virtualStages);
  memory.activations = perLayer * layout.layersOn(stage) * inFlight;
  // Backward works on one layer at a time (see layerBackwardWorkspaceBytes).
  memory.recomputeWorkspace =
      layerBackwardWorkspaceBytes(spec, train.seqLen, c.microBatch, c.tp,
                                  c.sequenceParallel, c.recompute, elem, attn);
  double tokens = double(train.seqLen) * c.microBatch;
  double savedMicroBatches =
      (c.pp > 1 && c.schedule == Schedule::GPipe) ? double(c.gradAccum) : 1.0;
  if (attn == Attention::Flash && stage == 0)
    memory.activations += 4 * tokens * inFlight; // int32 token ids
  if (stage == layout.pp - 1) {
    double logitElems = tokens * vocabShardRows(spec.vocabSize, c.tp);
    if (attn == Attention::Eager) {
      // s*b*V/t logits: the fp32 softmax saved for backward (one
      // micro-batch, or all of them under GPipe), plus one half-precision
      // logits buffer and its fp32 gradient while the loss runs.
      memory.logits = logitElems * (4 * savedMicroBatches + elem + 4);
    } else {
      // Weft: the saved last-layer output, final-norm output, logits and
      // int32 targets; the loss kernel writes the logits' gradient over the
      // logits, except the vocabulary-parallel one (TP), whose gradient is
      // another buffer (docs/lowering.md).
      // Under SP the last-layer output is sequence-sharded and the final
      // norm's output all-gathered (full sequence).
      double hiddenBytes = tokens * spec.hiddenSize * elem;
      memory.logits =
          savedMicroBatches *
              (logitElems * elem +
               hiddenBytes * (1 + 1 / (c.sequenceParallel ? double(c.tp) : 1)) +
               4 * tokens) +
          (c.tp > 1 ? logitElems * elem : 0.0);
      // A micro-batch's layer backward starts once its own loss-phase
      // tensors are freed; under GPipe the others' stay saved beside it.
      // The loss phase itself holds the head's input gradient beside the
      // logits' gradient, written over the logits (the peak when the layer
      // backward keeps little, as without recompute, where the layers' op
      // state is saved); under TP the logits are freed by then and their
      // gradient buffer is already counted.
      double headGrad = c.tp > 1 ? 0.0 : hiddenBytes;
      memory.recomputeWorkspace =
          std::max(headGrad, memory.recomputeWorkspace -
                                 memory.logits / savedMicroBatches);
    }
  }
  auto [largest, layerMatrix] =
      largestGradients(c, stage == 0 || stage == layout.pp - 1);
  if (c.dp > 1 && c.zero >= 2) {
    // ZeRO-2/3 reduce-scatter each parameter's gradient of every
    // micro-batch into the persistent shard once the backward has finished
    // it (an arena buffer per parameter and micro-batch); compute starts a
    // new one only while the live ones stay within weft-schedule's
    // `max-live-grad-bytes`.
    memory.gradientBuffer = liveGradientBytes(
        c, stage == 0 || stage == layout.pp - 1, params, elem);
  }
  if (c.zero == 3 && c.dp > 1) {
    // ZeRO-3 gathers parameter by parameter into the arena, at most
    // `prefetch_depth` gathers ahead of the one in use, each released after
    // its last use in the phase (weft-schedule's default live bound leaves
    // room for the largest and depth + 1 layer matrices). The peak: the
    // largest tensor in use with `depth` layer matrices gathered ahead, and
    // where one stage holds a tied embedding from the embedding to the head
    // (PP = 1), the table beside the matrix in use and those ahead.
    double depth = double(std::max<int64_t>(1, c.prefetchDepth));
    bool tableHeld = spec.tiedHead && layout.pp == 1 && largest > layerMatrix;
    memory.zero3Buffers =
        (largest + (depth + (tableHeld ? 1.0 : 0.0)) * layerMatrix) * elem;
  }
  // The GPU runtime's communication staging, beside the static plan: ZeRO-3
  // prefetches `prefetch_depth` all-gather buckets of `bucket_bytes` (what
  // the time model's prefetch coverage assumes); otherwise the gradient
  // reduction buckets, one filling and one in flight.
  if (c.dp > 1)
    memory.commBuffers = c.zero == 3 ? double(c.prefetchDepth) * c.bucketBytes
                                     : 2 * consts.dpBucketBytes;
  if (layout.pp > 1) {
    // Stage-boundary buffers of the compiled schedule: a receive is posted
    // once compute has begun the previous task and compute waits for a send
    // two tasks later (docs/lowering.md, "Pipeline transfers"), so only a
    // few boundary tensors are live at once, whatever the micro-batch
    // count: two on each side of a boundary (the one being received or sent
    // and the next), [b, s, h] each (split by TP under SP). Fitted to the
    // compiled plans (docs/planner.md, "Memory fidelity").
    double unit = tokens * spec.hiddenSize * elem /
                  (c.sequenceParallel ? double(c.tp) : 1.0);
    bool end = stage == 0 || stage == layout.pp - 1;
    double count = end ? 2 : 4;
    memory.pipelineBuffers = count * unit;
  }
  memory.workspace = consts.workspaceBytes;
  return memory;
}

double CostModel::usableHostMemoryBytes() const {
  return hardware.host ? hardware.host->memoryGib * 1073741824.0 *
                             consts.hostMemoryUsableFraction
                       : 0;
}

double CostModel::hostMemoryBytes(const ParallelConfig &c) const {
  if (c.offload != Offload::Optimizer)
    return 0;
  // Every rank on the node offloads its own (ZeRO-sharded) optimizer state;
  // the heaviest stage is an upper bound for the node's ranks.
  Layout stages = layout(c, stageCosts(c));
  double rankParams = 0;
  for (int64_t stage : {int64_t(0), int64_t(1), c.pp - 1})
    if (stage < c.pp)
      rankParams = std::max(rankParams, this->rankParams(stages, stage, c.tp));
  double optimizerParams = c.zero >= 1 ? rankParams / c.dp : rankParams;
  return optimizerParams * double(ranksSharingHost(hardware)) *
         consts.hostBytesPerParam;
}

std::vector<MemoryBreakdown>
CostModel::memoryByStage(const ParallelConfig &c) const {
  if (std::string why = check(c); !why.empty())
    throw Error("invalid plan " + c.describe() + ": " + why);
  Layout stages = layout(c, stageCosts(c));
  std::vector<MemoryBreakdown> memory;
  for (int64_t stage = 0; stage < c.pp; ++stage)
    memory.push_back(stageMemory(c, stages, stage));
  return memory;
}

double CostModel::peakMemoryBytes(const ParallelConfig &c) const {
  Layout stages = layout(c, stageCosts(c));
  double peakBytes = stageMemory(c, stages, 0).total();
  if (c.pp > 2)
    peakBytes = std::max(peakBytes, stageMemory(c, stages, 1).total());
  if (c.pp > 1)
    peakBytes = std::max(peakBytes, stageMemory(c, stages, c.pp - 1).total());
  return peakBytes;
}

Estimate CostModel::evaluate(const ParallelConfig &c) const {
  if (std::string why = check(c); !why.empty())
    throw Error("invalid plan " + c.describe() + ": " + why);
  PerMicroBatch costs = stageCosts(c);
  Layout stages = layout(c, costs);

  Estimate est;
  est.config = c;
  for (int64_t stage = 0; stage < c.pp; ++stage)
    est.layersPerStage.push_back(stages.layersOn(stage));

  // Memory: the stages that can be the most loaded (first: deepest in-flight
  // queue and the embedding; second: most in flight among middle stages;
  // last: head and logits).
  for (int64_t stage : {int64_t(0), int64_t(1), c.pp - 1}) {
    if (stage >= c.pp)
      continue;
    MemoryBreakdown memory = stageMemory(c, stages, stage);
    if (stage == 0 || memory.total() > est.memory.total()) {
      est.memory = memory;
      est.peakStage = stage;
    }
  }
  est.peakMemoryBytes = est.memory.total();
  est.usableMemoryBytes = usableMemoryBytes();
  est.marginBytes = hardware.memoryBytes() * consts.memoryMarginFraction;
  est.shortfallBytes =
      std::max(0.0, est.peakMemoryBytes - est.usableMemoryBytes);
  if (c.offload == Offload::Optimizer) {
    est.hostMemoryBytes = hostMemoryBytes(c);
    est.usableHostMemoryBytes = usableHostMemoryBytes();
    est.hostShortfallBytes =
        std::max(0.0, est.hostMemoryBytes - est.usableHostMemoryBytes);
  }
  est.fits = est.shortfallBytes == 0 && est.hostShortfallBytes == 0;

  // Time: the slowest stage sets the pipeline's pace.
  int64_t slowest = 0;
  double slowestTime = 0;
  for (int64_t stage : {int64_t(0), int64_t(1), c.pp - 1}) {
    if (stage >= c.pp)
      continue;
    double extra = (stage == 0 ? costs.firstStageExtra : 0) +
                   (stage == c.pp - 1 ? costs.lastStageExtra : 0);
    double time = stages.layersOn(stage) * costs.layerTotal() + extra;
    if (time > slowestTime) {
      slowestTime = time;
      slowest = stage;
    }
  }
  double m = double(c.gradAccum);
  double layers = double(stages.layersOn(slowest));
  double extra = slowestTime - layers * costs.layerTotal();
  double extraTp = (slowest == 0 ? costs.firstStageTp : 0) +
                   (slowest == c.pp - 1 ? costs.lastStageTp : 0);
  TimeBreakdown &time = est.time;
  time.compute = m * (layers * (costs.layerForward + costs.layerBackward) +
                      extra - extraTp);
  time.recompute = m * layers * costs.layerRecompute;
  time.tpComm = m * (layers * (costs.layerTpForward + costs.layerTpBackward +
                               costs.layerTpRecompute) +
                     extraTp);
  time.bubble = bubbleFraction(c.schedule, c.pp, c.gradAccum, c.virtualStages) *
                m * slowestTime;
  if (c.pp > 1) {
    // Each micro-batch enters and leaves every model chunk once per direction
    // (blocking transfers), plus the fill of the pipeline.
    int64_t v = c.schedule == Schedule::Interleaved ? c.virtualStages : 1;
    time.ppComm = (2 * m * v + 2 * (c.pp - 1)) * costs.pointToPoint;
  }

  // Data parallelism.
  double rankParams = this->rankParams(stages, slowest, c.tp);
  double overlap = consts.commOverlapFraction;
  double forwardWindow = overlap * layers * costs.layerForward;
  double backwardWindow =
      overlap * layers * (costs.layerBackward + costs.layerRecompute);
  GroupSpan dpSpan = spanOfGroup(hardware, c.dp, c.tp * c.pp);
  // The part of the last backward that DP collectives already occupy
  // (optimizer offload's gradient copies share what is left).
  double reduceBusy = 0;
  // `calls` DP collectives moving `bytes` in all: the bytes once, the
  // latency of every call.
  auto inCalls = [&](Collective kind, double bytes, double calls) {
    CommTime one = collectiveCost(kind, hardware, consts, dpSpan, bytes);
    return CommTime{calls * one.latency, one.transfer};
  };
  // The vocabulary table (this TP rank's rows) and the learned position
  // table, in elements: on the first stage the embedding's backward
  // completes their gradients last.
  double table = double(spec.vocabSize) * spec.hiddenSize / c.tp;
  double positions =
      spec.rotary ? 0.0 : double(spec.maxPositions) * spec.hiddenSize;
  // weftc compile --bucket-bytes, else the lowering's default.
  const double planBucketBytes = train.bucketBytes > 0
                                     ? double(train.bucketBytes)
                                     : consts.planBucketBytes;
  if (c.dp > 1 && c.zero < 3) {
    double gradBytes = rankParams * elem;
    // The compiled plan's calls: buckets of `bucket_bytes` (ZeRO-0
    // all-reduces, ZeRO-1 coalesced reduce-scatters and all-gathers);
    // ZeRO-2 reduce-scatters every micro-batch in buckets weft-schedule
    // cuts where compute waits to bound the live gradients (the largest
    // plus three times the second largest): about every 1.25 x the second
    // largest, at least one per backward task.
    std::vector<double> extra;
    if (slowest == 0)
      extra = {table, positions};
    if (slowest == c.pp - 1) {
      extra.push_back(double(spec.hiddenSize) * (spec.rmsNorm ? 1 : 2));
      if (!spec.tiedHead || c.pp > 1)
        extra.push_back(table);
    }
    auto callsOf = [&](double bucketBytes) {
      return bucketCalls(spec, c.tp, layers, extra, bucketBytes / elem);
    };
    double buckets = callsOf(planBucketBytes);
    double calls = buckets;
    if (c.zero == 2) {
      bool endStage = slowest == 0 || slowest == c.pp - 1;
      double gradBucket = std::min(
          planBucketBytes, 1.25 * largestGradients(c, endStage).second * elem);
      double chunks =
          c.schedule == Schedule::Interleaved ? double(c.virtualStages) : 1.0;
      calls = std::max(chunks, callsOf(gradBucket));
    }
    Collective reduce =
        c.zero == 0 ? Collective::AllReduce : Collective::ReduceScatter;
    double reduceTime = inCalls(reduce, gradBytes, calls).total();
    reduceBusy = std::min(reduceTime, backwardWindow);
    // Buckets reduce while backward continues; the last one cannot hide,
    // nor, on the first stage, the token and position tables' gradients,
    // which the embedding's backward completes last.
    double tail = 1 / calls;
    if (slowest == 0)
      tail =
          std::max(tail, std::min(1.0, (table + positions) * elem / gradBytes));
    double exposed = std::max(reduceTime * tail, reduceTime - backwardWindow);
    time.dpComm = exposed;
    // ZeRO-2 keeps only its gradient shard, so every micro-batch reduces;
    // all but the last reduce under the next micro-batch's forward.
    if (c.zero == 2)
      time.dpComm += (m - 1) * std::max(0.0, exposed - forwardWindow);
    if (c.zero >= 1) {
      // Updated parameter shards are all-gathered under the next forward,
      // in order of first use, each waited for right before it: the first
      // (on the first stage the token and position tables) hides under
      // nothing.
      double gather =
          inCalls(Collective::AllGather, rankParams * elem, buckets).total();
      double first = slowest == 0 ? (table + positions) * elem
                                  : std::min(planBucketBytes, gradBytes);
      double firstGather = inCalls(Collective::AllGather, first, 1).total();
      time.dpComm += std::max(firstGather, gather - forwardWindow);
    }
  } else if (c.dp > 1) {
    // ZeRO-3: every layer's units are gathered before their first use in
    // the forward and again in the backward, `prefetch_depth` units ahead
    // of compute, and their gradients reduce-scattered after the backward
    // used them. The small persistent parameters are not gathered; vectors
    // over the persistence threshold are gathered with the q|k|v unit. In
    // backward the gathers share the links' bandwidth with the
    // reduce-scatters on the other stream (each waits out its own latency).
    // Compute hides transfers at `overlap` of its speed.
    int64_t depth = std::max<int64_t>(1, c.prefetchDepth);
    // Gather units as weft-schedule forms them: a tensor, or neighbours
    // used one after the other, each at most a quarter of the limit and
    // together at most the limit, `bucket_bytes` capped at the stage's
    // second largest gathered parameter. Only the forward's order runs
    // through slot order, so the backward gathers tensor by tensor.
    const std::vector<PerMicroBatch::GatheredTensor> &tensors =
        costs.gatheredTensors;
    double matrix = 0;
    for (const PerMicroBatch::GatheredTensor &tensor : tensors)
      matrix = std::max(matrix, tensor.elements);
    bool firstStage = slowest == 0, lastStage = slowest == c.pp - 1;
    std::vector<double> gathered = {matrix, matrix};
    if (firstStage)
      gathered.insert(gathered.end(), {table, positions});
    if (lastStage && !spec.tiedHead)
      gathered.push_back(table);
    std::sort(gathered.begin(), gathered.end(), std::greater<double>());
    double limit = std::min(double(c.bucketBytes), gathered[1] * elem);
    // Vectors over the persistence threshold: gathered with the first unit
    // (their calls' latency; their bytes are few).
    double vectorCalls = double(zero3GatheredVectorsPerLayer(c.tp));
    auto bytesOf = [&](const PerMicroBatch::GatheredTensor &tensor) {
      return tensor.elements * elem;
    };
    GatherPass forward, backward;
    for (size_t k = 0; k < tensors.size();) {
      double bytes = bytesOf(tensors[k]), compute = tensors[k].forward;
      size_t next = k + 1;
      while (next < tensors.size() && 4 * bytes <= limit &&
             4 * bytesOf(tensors[next]) <= limit &&
             bytes + bytesOf(tensors[next]) <= limit) {
        bytes += bytesOf(tensors[next]);
        compute += tensors[next++].forward;
      }
      double calls = 1 + (k == 0 ? vectorCalls : 0.0);
      forward.gather.push_back(
          inCalls(Collective::AllGather, bytes, calls).total());
      forward.compute.push_back(overlap * compute);
      k = next;
    }
    for (size_t k = tensors.size(); k-- > 0;) {
      double bytes = bytesOf(tensors[k]);
      double calls = 1 + (k == 0 ? vectorCalls : 0.0);
      CommTime gather = inCalls(Collective::AllGather, bytes, calls);
      CommTime scatter = inCalls(Collective::ReduceScatter, bytes, calls);
      // The gathers share the links' bandwidth with the reduce-scatters on
      // the other stream while both transfer, and each waits out its own
      // calls' latency: a transfer is slowed by the share of the time the
      // other stream is transferring (its transfer over its total), all of it
      // when both are bandwidth-bound, little when latency dominates.
      auto busy = [](const CommTime &t) {
        return t.total() > 0 ? t.transfer / t.total() : 0.0;
      };
      double seconds = gather.total() + gather.transfer * busy(scatter);
      // With full recompute the re-run attention gathers its parameters
      // again (weft-schedule gathers per phase), before the down
      // projection's gradient.
      if (c.recompute == Recompute::Full && k + 1 == tensors.size())
        for (size_t a = 0; a + (spec.gatedMlp ? 3 : 2) < tensors.size(); ++a)
          seconds +=
              inCalls(Collective::AllGather, bytesOf(tensors[a]), 1).total();
      backward.gather.push_back(seconds);
      backward.compute.push_back(overlap * tensors[k].backward);
      backward.scatter.push_back(scatter.total() +
                                 scatter.transfer * busy(gather));
    }
    int64_t passLayers = int64_t(layers);
    time.zeroComm = m * (exposedGathers(forward, passLayers, depth) +
                         exposedGathers(backward, passLayers, depth));
    // The step's edges on the first stage: nothing runs before the token
    // and position tables' gathers, nor beside their gradients'
    // reduce-scatters after the embedding's backward.
    if (firstStage) {
      double threshold = persistThreshold(spec, true, c.tp);
      double edge = table + (positions > threshold ? positions : 0.0);
      double calls = positions > threshold ? 2 : 1;
      time.zeroComm +=
          inCalls(Collective::AllGather, edge * elem, calls).total() +
          inCalls(Collective::ReduceScatter, edge * elem, calls).total();
    }
  }

  double optimizerParams = c.zero >= 1 ? rankParams / c.dp : rankParams;
  if (c.offload == Offload::Optimizer) {
    // ZeRO-Offload as Weft lowers it (docs/lowering.md, "Optimizer
    // offload"): this rank's gradients (its shard under ZeRO >= 1, in the
    // compute precision) go to the host slot by slot during the last
    // backward; the CPU runs AdamW, which clips each gradient on its way
    // in, once every gradient has arrived (the clip needs the global norm),
    // in buckets of fp32 weights, and each bucket's updated half/fp32
    // parameters go back while the next bucket steps. The last gradient
    // bucket and the last weight bucket never hide.
    const HostSpec &host = *hardware.host;
    double copyBytes = optimizerParams * elem;
    double copy = copyBytes / (host.pinnedBandwidthGBs * 1e9);
    double buckets = std::max(1.0, std::ceil(copyBytes / consts.dpBucketBytes));
    double backwardLeft = std::max(0.0, backwardWindow - reduceBusy);
    // All ranks of a node share its CPU: memory-bound or compute-bound.
    time.optimizer = optimizerParams *
                     cpuAdamSecondsPerParam(hardware, consts,
                                            train.precision != Precision::FP32);
    double adamBuckets =
        std::max(1.0, std::ceil(optimizerParams * 4 /
                                (train.bucketBytes > 0
                                     ? double(train.bucketBytes)
                                     : consts.offloadAdamBucketBytes)));
    double adamWindow = time.optimizer * (adamBuckets - 1) / adamBuckets;
    time.offload = std::max(copy / buckets, copy - backwardLeft) +
                   std::max(copy / adamBuckets, copy - adamWindow);
  } else {
    // The optimizer-phase passes over HBM as the compiled plan runs them
    // (planner.md, "Time model"): AdamW reads the fp32 weights (the master
    // copy when mixed), the gradient and both moments and writes the three
    // fp32 tensors back, plus the compute-precision weights when mixed
    // (the clip is a factor inside AdamW, not a pass of its own); the
    // global gradient norm reads the gradients; each step zero-fills the
    // gradients no GEMM writes first (weft-fold-zero-fills: not the layers'
    // matrices nor, on the last stage, the head's): ZeRO 0/1 once, at the
    // step's start; ZeRO-2/3 in every micro-batch's backward, and the shard
    // once, summed here (the compute stream runs them either way).
    bool mixed = train.precision != Precision::FP32;
    double adamBytes = 24 + elem + (mixed ? elem : 0);
    double matrices = layers * spec.layerMatmulFlopsPerToken / 2 / c.tp +
                      (slowest == c.pp - 1 ? table : 0.0);
    double unfolded = std::max(0.0, rankParams - matrices);
    double filled = c.zero >= 2 && c.dp > 1
                        ? optimizerParams + unfolded * double(c.gradAccum)
                        : unfolded;
    time.optimizer =
        (optimizerParams * (adamBytes + elem) + filled * elem) / hbm;
  }

  est.stepTimeS = time.total();
  double tokens = double(train.globalBatch) * train.seqLen;
  est.tokensPerS = tokens / est.stepTimeS;
  double world = double(hardware.worldSize());
  est.modelTflopsPerGpu = modelFlopsPerStep() / est.stepTimeS / world / 1e12;
  est.mfu = modelFlopsPerStep() / (est.stepTimeS * world * peak);
  return est;
}

} // namespace weft::planner
