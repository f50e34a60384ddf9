//===- StepScheduler.h - weft-schedule internals ----------------*- C++ -*-===//
//
// The classes behind `weft-schedule` (docs/lowering.md, "Passes"), shared by
// its source files:
//
//   BundleScheduler   module-wide: the stage functions, the mesh, group
//                     families, kernel declarations and parameter
//                     declarations that every role's program shares
//                     (WeftToExec.cpp)
//   RoleScheduler     one role's program: a role is (pipeline rank, TP rank),
//                     shared by all DP replicas. Buffers, the pipeline
//                     schedule with its point-to-point transfers, and the
//                     gradient reductions (WeftToExec.cpp); every weft op
//                     expanded into GEMMs, registry kernels and TP collectives
//                     (LowerOps.cpp)
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_CONVERSION_WEFTTOEXEC_STEPSCHEDULER_H
#define WEFT_CONVERSION_WEFTTOEXEC_STEPSCHEDULER_H

#include "Conversion/WeftToExec/Passes.h"
#include "PipelineSchedule.h"

#include "Weft/IR/WeftOps.h"
#include "WeftExec/IR/WeftExecOps.h"
#include "WeftExec/Transforms/ProgramEdits.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <string>
#include <tuple>

namespace mlir::weft::schedule {

namespace wx = mlir::weftx;
namespace pipeline = ::weft::pipeline;

/// Parameter slots in the flat buffers start at multiples of this many
/// elements (64 bytes), so every parameter is aligned for vector loads.
constexpr int64_t kSlotAlign = 16;

/// A byte range of a weftx buffer: what an L1 tensor is at L2. `type` is
/// the buffer's element type.
struct Slice {
  StringAttr buffer;
  int64_t offset = 0, bytes = 0;
  Type type;

  explicit operator bool() const { return bool(buffer); }
  bool operator==(const Slice &other) const {
    return buffer == other.buffer && offset == other.offset &&
           bytes == other.bytes;
  }
  bool operator!=(const Slice &other) const { return !(*this == other); }
  int64_t elementBytes() const { return type.getIntOrFloatBitWidth() / 8; }
  int64_t elements() const { return bytes / elementBytes(); }
  /// `elements` elements from element `start` (none of an empty slice).
  Slice sub(int64_t start, int64_t elements) const {
    if (!buffer)
      return *this;
    return {buffer, offset + start * elementBytes(), elements * elementBytes(),
            type};
  }
  /// The span of a row-major `rows x cols` matrix with row stride `ld`
  /// starting at element `start` (what the column-major GEMM reads).
  Slice matrix(int64_t start, int64_t rows, int64_t cols, int64_t ld) const {
    return sub(start, (rows - 1) * ld + cols);
  }
};

/// The configuration `weft-attach-mesh` recorded in `weft.parallel`.
struct Parallel {
  int64_t tp = 1, pp = 1, dp = 1, zero = 0, microBatch = 1, gradAccum = 1,
          virtualStages = 1, prefetchDepth = 0, bucketBytes = 0;
  bool sequenceParallel = false;
  std::string recompute = "none", schedule = "1f1b";
  /// Blocks per virtual stage, in stage order (pp x virtual_stages).
  SmallVector<int64_t> layersPerStage;
};

/// The forward and backward function of one virtual pipeline stage.
struct StageFunctions {
  func::FuncOp forward, backward;
  int64_t virtualStage = 0;
};

/// The group families a program may communicate over (weftx's standard
/// families, ProgramEdits.h).
using Family = wx::Family;

/// One contiguous piece of a parameter in a role's flat buffers, with the
/// slice of the global tensor it holds. A parameter is one piece, except a
/// fused [q | k | v] weight or bias split over TP: its rank-local columns are
/// three separate slices of the global tensor, so each becomes a piece (and
/// a `ShardSpec`) of its own, stored as a contiguous [rows, width] matrix.
struct ParamPiece {
  int64_t start = 0;      // first element in the flat buffers
  int64_t elements = 0;   // local elements
  int64_t padded = 0;     // slot size: elements padded for ZeRO-1
  int64_t shardStart = 0; // this rank's ZeRO-1 piece in the shard buffers
  int64_t dim = -1, sliceStart = 0, sliceLength = 0; // the global slice
  int64_t replicaStart = 0; // first element in `params` (ZeRO 0-2: start)
};

/// A parameter as one role holds it.
struct LocalParam {
  ParamOp op; // the first declaration seen in this role
  SmallVector<ParamPiece, 3> pieces;
  /// Used on two pipeline ranks (a tied embedding): the gradients of the
  /// two copies are summed before the optimizer step.
  bool tiedAcrossStages = false;
  /// Replicated but used on sequence shards (sequence parallelism): each TP
  /// rank's gradient is a partial sum over its part of the sequence.
  bool sequencePartial = false;
  /// ZeRO-3: small enough (`persist-threshold`) to stay whole in `params`
  /// on every DP rank, like ZeRO-2, instead of being gathered.
  bool persistent = false;
  /// Elements of this role's copy (all pieces).
  int64_t localElements() const {
    int64_t n = 0;
    for (const ParamPiece &piece : pieces)
      n += piece.elements;
    return n;
  }
  /// Elements of its span in the flat buffers (padded slots).
  int64_t spanElements() const {
    return pieces.back().start + pieces.back().padded - pieces.front().start;
  }
};

/// One column block of a QKV projection: the weight (and bias) slice that
/// produces q, k or v, and where its gradients accumulate.
struct Projection {
  Slice weight, weightGrad, bias, biasGrad;
  int64_t column = 0, width = 0, ld = 0;
};

/// An attention op's forward state: the rotary constant (0 without rotary
/// embeddings), its input projections and (q, k, v, ctx, lse).
struct AttentionState {
  int64_t theta = 0;
  SmallVector<Projection, 3> proj;
  SmallVector<Slice, 5> slices;
};

class BundleScheduler {
public:
  BundleScheduler(ModuleOp module, const WeftScheduleOptions &options)
      : module(module), options(options), ctx(module.getContext()),
        builder(ctx) {}

  LogicalResult run();

  // --- Shared with the role schedulers ------------------------------------
  /// The declaration of registry kernel `name` specialized to `constants`
  /// (one per specialization, in first-use order).
  FlatSymbolRefAttr kernel(StringRef name, DictionaryAttr constants);
  /// The group family, declared on first use.
  FlatSymbolRefAttr family(Family family);
  /// Records the shard of a parameter that `role` holds.
  void addShard(ParamOp op, wx::ShardAttr shard);
  int64_t rankOf(int64_t dp, int64_t pp, int64_t tp) const {
    return (dp * par.pp + pp) * par.tp + tp;
  }
  int64_t numVirtualStages() const { return par.pp * par.virtualStages; }
  /// The training.loss_scale of the bundle.
  wx::LossScaleAttr lossScale() const;

  ModuleOp module;
  const WeftScheduleOptions &options;
  MLIRContext *ctx;
  Parallel par;
  std::string modelName;
  /// stages[pipeline rank][chunk].
  SmallVector<SmallVector<StageFunctions, 2>> stages;
  /// The dtype of activations, gradients and working parameters.
  Type computeType;
  /// Global names of parameters declared on more than one pipeline rank.
  llvm::StringSet<> tiedAcrossStages;

private:
  LogicalResult findStageFunctions();
  LogicalResult readParallel();
  void declareParameters();
  LogicalResult setBundleAttributes();

  OpBuilder builder;
  wx::MeshOp mesh;
  /// Declared before the first program, in first-use order.
  wx::KernelDeclarations kernels{module};
  llvm::DenseMap<int, FlatSymbolRefAttr> families;
  /// Global parameters in first-declaration order, with every role's shards.
  llvm::MapVector<StringRef, std::pair<ParamOp, SmallVector<Attribute>>>
      parameters;
};

class RoleScheduler {
public:
  RoleScheduler(BundleScheduler &bundle, int64_t stage, int64_t tpRank,
                wx::ProgramOp program);

  LogicalResult run();

private:
  // --- Setup and the step (WeftToExec.cpp) --------------------------------
  LogicalResult declareParameters();
  /// One pipeline task: a stage function's forward or backward for one
  /// micro-batch, with the transfers around it.
  LogicalResult runTask(const pipeline::Task &task);
  LogicalResult bindArguments(const StageFunctions &stage, func::FuncOp func,
                              int64_t microBatch);
  /// The SP and tied-copy gradient sums and the DP gradient sync, one
  /// collective per slot (weft-overlap-grad-sync moves them under the
  /// backward); weft-optimizer appends the step after them. ZeRO-2/3: the
  /// sums on `grads.shard`, after every micro-batch's reduce-scatter.
  void reduceGradients();

  // --- ZeRO-2/3 gradients (WeftToExec.cpp) --------------------------------
  /// ZeRO-2/3 keep only this rank's shard of the gradients across
  /// micro-batches (DeepSpeed's partitioned gradients): each parameter's
  /// gradient of one micro-batch is an arena buffer, reduce-scattered into
  /// `grads.shard` (and added to what earlier micro-batches left there) on
  /// the `reducescatter` stream as soon as the backward has finished it.
  bool reducesEveryMicroBatch() const { return zero >= 2; }
  /// The gradient buffer of `params[param]` in the current micro-batch,
  /// created (and zeroed on compute) on first use.
  Slice microBatchGrad(size_t param);
  /// After backward task `task`: reduce-scatters the micro-batch gradients
  /// no later task of the micro-batch writes, each behind its last writer
  /// (one reduce-scatter per gradient, its pieces the members).
  void reduceFinishedGrads(const pipeline::Task &task);
  /// Bounds the gradient bytes live on compute (`max-live-grad-bytes`):
  /// before a gradient buffer is zeroed, compute waits for the reduce-scatter
  /// of the oldest ones whose last writer came earlier.
  void boundLiveGrads();
  /// Merges the reduce-scatters of one backward task's gradients that follow
  /// each other on `reducescatter` into buckets (one coalesced
  /// reduce-scatter of at most `gradBucketBytes` behind the latest writer),
  /// never past a reduction compute waits for.
  void coalesceGradReductions();
  /// ZeRO-3: the all-gathers of the parameters the task just lowered reads
  /// (`pendingGathers`), on the `allgather` stream in first-use order, each
  /// waited for before its first use and released after its last; gather k
  /// waits until compute has begun using gather k - prefetch depth.
  void scheduleGathers(Operation *taskBegin);
  /// ZeRO-3: an arena buffer for the gathered parameter (its pieces laid
  /// out as in the flat buffers); the gather itself is scheduled after the
  /// task by `scheduleGathers`.
  Slice gatheredParameter(LocalParam &param);
  /// A side stream (created on first use).
  wx::StreamOp sideStream(StringRef name);
  /// Sends `slice` to pipeline rank `peer` once `compute` has produced it,
  /// on this rank's stream for `direction` ("fwd": activations, "bwd":
  /// their gradients).
  void send(Slice slice, int64_t peer, StringRef direction);
  /// Receives `elements` from pipeline rank `peer` into a new buffer, on the
  /// peer's stream for `direction`; `compute` waits for it.
  Slice receive(StringRef name, int64_t elements, int64_t peer,
                StringRef direction);
  /// The stream of the `direction` transfers that pipeline rank `sender`
  /// sends (created on first use).
  wx::StreamOp p2pStream(StringRef direction, int64_t sender);

  // --- Buffers, kernels, instructions -------------------------------------
  Slice newBuffer(StringRef name, int64_t elements, wx::Region region,
                  Type type);
  /// An activation or activation gradient: the plan's compute dtype.
  Slice activation(StringRef name, int64_t elements) {
    return newBuffer(name, elements, wx::Region::arena, computeType);
  }
  /// Per-row statistics the backward reads again (norm mean and rstd,
  /// attention log-sum-exp, the vocabulary-parallel loss's row max and
  /// sums): fp32 whatever the compute dtype, as in mixed-precision
  /// training frameworks.
  Slice statistic(StringRef name, int64_t elements) {
    return newBuffer(name, elements, wx::Region::arena, f32);
  }
  wx::RangeAttr range(const Slice &slice);
  ArrayAttr ranges(ArrayRef<Slice> slices);
  StringAttr phase() { return builder.getStringAttr(phaseLabel); }
  void launch(StringRef kernel,
              ArrayRef<std::pair<StringRef, int64_t>> constants,
              ArrayRef<Slice> reads, ArrayRef<Slice> writes);
  /// Row-major C[m,n] (+)= op(A) op(B), emitted as the column-major GEMM of
  /// the transposes (operands and m/n swapped).
  void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, Slice a,
            int64_t lda, Slice b, int64_t ldb, Slice c, int64_t ldc,
            bool accumulate);
  /// The event recorded right after `op` (on its stream, labelled `phase`),
  /// recorded on first request.
  int64_t eventAfter(Operation *op, StringAttr phase);
  /// Sums `in` over the TP group into a fresh buffer, or into `in` itself.
  Slice tpAllReduce(Slice in, StringRef name, bool inPlace = false);

  // --- Values -------------------------------------------------------------
  Slice lookup(Value value) { return values.lookup(value); }
  int64_t width(Value value) {
    return cast<RankedTensorType>(value.getType()).getShape().back();
  }
  int64_t rows() const { return par.microBatch * options.seqLen; }
  /// Elements of an activation ([batch, seq, ...] with dynamic batch and
  /// sequence; this rank's part of the sequence if it is sequence-sharded)
  /// or of a static tensor.
  int64_t elementsOf(Value value);
  /// Rows of an activation: its elements over its last dimension.
  int64_t rowsOf(Value value) { return elementsOf(value) / width(value); }
  LocalParam *paramOf(Value value);
  /// Whether `slice` lies in a parameter gradient buffer.
  bool isParamGrad(const Slice &slice) const {
    return slice && (slice.buffer == gradsBuf.buffer ||
                     microBatchGradBuffers.contains(slice.buffer));
  }
  /// The gradient slot of a parameter value, or failure.
  FailureOr<Slice> gradOf(Value param);
  /// Binds each result of a grad op whose forward operand is a parameter to
  /// that parameter's gradient slot (results follow the float operands).
  void bindParameterGrads(Operation *gradOp);
  /// The parameter whose gradient `grad` (a bias gradient) is: followed
  /// through additions to the function's results or a layer's yield.
  LocalParam *parameterReceiving(Value grad);

  // --- Ops (LowerOps.cpp) -------------------------------------------------
  LogicalResult lowerBlock(Block &block);
  /// The body of a weft.block_grad: the re-run forward ops (recompute), then
  /// the grad ops; under ZeRO-3 the parameters both read are gathered once
  /// for each.
  LogicalResult lowerBlockGradBody(Block &body);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerEmbedding(EmbeddingOp op);
  LogicalResult lowerVocabEmbedding(VocabEmbeddingOp op);
  LogicalResult lowerPositionEmbedding(PositionEmbeddingOp op);
  LogicalResult lowerLayerNorm(LayerNormOp op);
  LogicalResult lowerRmsNorm(RMSNormOp op);
  template <typename AttentionLikeOp>
  LogicalResult lowerAttention(AttentionLikeOp op);
  LogicalResult lowerMlp(MLPOp op);
  /// Whether only the fused loss (cross_entropy, its grad) reads `logits`,
  /// here or in a backward function that restores them.
  bool onlyTheLossReads(Value logits);
  /// onlyTheLossReads by logits value: every micro-batch asks again.
  llvm::DenseMap<Value, bool> onlyTheLossReadsCache;
  LogicalResult lowerLmHead(LMHeadOp op);
  LogicalResult lowerAddF(arith::AddFOp op);
  LogicalResult lowerBiasAdd(BiasAddOp op);
  LogicalResult lowerEmbeddingGrad(EmbeddingGradOp op);
  LogicalResult lowerVocabEmbeddingGrad(VocabEmbeddingGradOp op);
  LogicalResult lowerPositionEmbeddingGrad(PositionEmbeddingGradOp op);
  LogicalResult lowerLayerNormGrad(LayerNormGradOp op);
  LogicalResult lowerRmsNormGrad(RMSNormGradOp op);
  template <typename AttentionLikeGradOp>
  LogicalResult lowerAttentionGrad(AttentionLikeGradOp op);
  LogicalResult lowerMlpGrad(MLPGradOp op);
  LogicalResult lowerLmHeadGrad(LMHeadGradOp op);
  LogicalResult lowerBiasGrad(BiasGradOp op);
  /// Where the loss kernel writes the logits' gradient: in place when only
  /// the loss reads the logits.
  Slice logitsGradient(Value logits, int64_t elements);
  LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp op);
  LogicalResult
  lowerVocabParallelCrossEntropyGrad(VocabParallelCrossEntropyGradOp op);
  LogicalResult lowerAllReduce(Operation *op, Value input, Value result);
  /// Sequence parallelism: all_gather, reduce_scatter and all_slice along
  /// the sequence (dimension 1) over the TP group.
  LogicalResult lowerSequenceCollective(Operation *op);
  LogicalResult checkReturn(func::ReturnOp op);

  /// Layer norm forward into fresh buffers: (y, mean, rstd).
  std::array<Slice, 3> layerNormForward(Value x, Value w, Value b,
                                        double epsilon);
  /// RMSNorm forward into fresh buffers: (y, rstd).
  std::array<Slice, 2> rmsNormForward(Value x, Value w, double epsilon);
  FailureOr<SmallVector<Projection, 3>>
  projections(Operation *op, ValueRange weights, ValueRange biases,
              int64_t heads, int64_t kvHeads, int64_t headDim);
  /// The rotary base of a causal attention op as the registry's integer
  /// `theta` constant, 0 without rotary embeddings.
  FailureOr<int64_t> rotaryTheta(Operation *op, bool causal,
                                 std::optional<APFloat> ropeTheta);
  /// Rotary embedding (`kernel` is rotary_forward or rotary_backward) of
  /// `heads` heads in place.
  void rotate(StringRef kernel, Slice x, int64_t heads, int64_t headDim,
              int64_t theta);
  /// q, k, v = x W_j (+ b_j), rotated by `theta` if non-zero, then the
  /// attention core: (q, k, v, ctx, lse).
  SmallVector<Slice, 5> attentionForward(Slice x, int64_t hidden,
                                         ArrayRef<Projection> proj,
                                         int64_t heads, int64_t kvHeads,
                                         int64_t headDim, int64_t theta);
  /// The forward state of an attention op or its grad op: the `saved` slices
  /// (a grad op's state operands) when given, else recomputed from the same
  /// operands.
  template <typename AttentionLikeOp>
  FailureOr<AttentionState> attentionState(AttentionLikeOp op,
                                           ValueRange saved);
  /// The MLP's hidden state from x: u = x up (+ bu), g = x gate (gated only),
  /// h = act(u) or act(g) u. Returns (u, g, h).
  std::array<Slice, 3> mlpForward(Slice x, int64_t hidden, int64_t ffn,
                                  Value up, Value upBias, Value gate,
                                  int64_t act);
  /// The registry's `act` code, or -1.
  static int64_t activationCode(StringRef name);
  /// The first vocabulary word of this TP rank's shard of `localVocab` words.
  int64_t vocabStart(int64_t localVocab) const { return tpRank * localVocab; }

  BundleScheduler &bundle;
  const Parallel &par;
  const WeftScheduleOptions &options;
  MLIRContext *ctx;
  OpBuilder builder;
  Type f32;
  /// Activations, gradients and the parameters' working copy: f32, bf16 or
  /// f16 (the `precision` option). Master weights and moments are f32.
  Type computeType;
  bool mixedPrecision() const { return computeType != f32; }
  int64_t stage, tpRank;
  bool lastStage;

  wx::ProgramOp program;
  wx::StreamOp compute;
  llvm::StringMap<wx::StreamOp> sideStreams;
  std::string phaseLabel;
  llvm::StringMap<int64_t> bufferNames;
  int64_t numEvents = 0;

  SmallVector<LocalParam> params; // declaration order, unique names
  llvm::StringMap<size_t> paramIndex;
  /// The ZeRO stage this role runs (0 without DP) and the DP ranks the
  /// optimizer state is split over: dp with ZeRO 1-3, else 1.
  int64_t zero = 0, zeroShards = 1;
  /// Elements of the full flat buffers and of the optimizer's buffers (the
  /// shard buffers with ZeRO-1, the full ones otherwise).
  int64_t flatElements = 0, stateElements = 0;
  Slice paramsBuf, gradsBuf, loss;
  /// The optimizer's fp32 weights and its gradients: this rank's shards with
  /// ZeRO 1-3, else the full flat buffers (`paramsBuf` itself for an fp32
  /// plan without ZeRO).
  Slice master, gradShards;
  /// What the parameter all-gathers read (ZeRO 1-3): the optimizer's
  /// low-precision copy of this rank's shard (`optimizer_step` writes[3]) in
  /// a mixed-precision plan, else `master`.
  Slice gatherSource;

  // --- Per micro-batch state ----------------------------------------------
  int64_t microBatch = 0;
  llvm::DenseMap<int64_t, std::pair<Slice, Slice>> batches; // tokens, targets
  /// (virtual stage, micro-batch) -> the activation received for the
  /// forward, and the gradient received for the backward.
  std::map<std::pair<int64_t, int64_t>, Slice> receivedActivation,
      receivedGradient;
  /// (forward function, micro-batch, slot) -> the saved activation and
  /// whether it is sequence-sharded.
  std::map<std::tuple<std::string, int64_t, int64_t>, std::pair<Slice, bool>>
      saved;
  llvm::DenseMap<Value, Slice> values;
  /// Logits (and their gradient over them) stored with rows padded past the
  /// vocabulary (lowerLmHead): (buffer, offset) -> the row stride. Keyed by
  /// slice, since the backward reads them through weft.restore.
  std::map<std::pair<std::string, int64_t>, int64_t> paddedLogits;
  /// The row stride of logits `slice` of `vocab` words.
  int64_t logitsRowStride(const Slice &slice, int64_t vocab) const {
    auto it = paddedLogits.find({slice.buffer.str(), slice.offset});
    return it == paddedLogits.end() ? vocab : it->second;
  }
  /// Records that logits `slice` has rows `stride` apart (or forgets an
  /// earlier slice's padding there when they are packed).
  void notePaddedLogits(const Slice &slice, int64_t stride, int64_t vocab) {
    std::pair<std::string, int64_t> key = {slice.buffer.str(), slice.offset};
    if (stride != vocab)
      paddedLogits[key] = stride;
    else
      paddedLogits.erase(key);
  }
  /// Activations that hold this TP rank's part of the sequence (sequence
  /// parallelism): row-wise ops keep the property, the sequence collectives
  /// set or clear it.
  llvm::DenseSet<Value> sequenceSharded;
  /// ZeRO-3: this task's gathered parameters (name -> the value's slice),
  /// the gathers not yet scheduled, and every scheduled gather's "compute
  /// has begun using it" event, in gather order.
  llvm::StringMap<Slice> gathered;
  SmallVector<std::pair<LocalParam *, Slice>> pendingGathers;
  SmallVector<int64_t> gatherUsedEvents;
  /// ZeRO-3 gather units: a bucket of slot-neighbouring parameters used in
  /// a row is gathered together if it holds at most this many bytes.
  int64_t gatherBucketBytes = 0;
  /// The bound on gathered-and-not-yet-released bytes.
  int64_t liveGatherBound = 0;
  /// Gathered buffers issued on `allgather` and not yet known released
  /// there: bytes and the compute `release` that frees them.
  SmallVector<std::pair<int64_t, Operation *>> liveGathers;
  /// The function being lowered (for weft.save).
  func::FuncOp currentFunction;
  /// The last compute instruction before the previous pipeline task (its
  /// receives wait for compute to pass it).
  Operation *previousTaskBegin = nullptr;
  /// The events eventAfter recorded.
  llvm::DenseMap<Operation *, int64_t> recordedAfter;
  /// The pipeline task being lowered (counting from 1), and the sends not
  /// yet waited for by compute: (task, event recorded after the send).
  int64_t taskIndex = 0;
  SmallVector<std::pair<int64_t, int64_t>> pendingSends;

  // --- ZeRO-2/3 gradients ---------------------------------------------------
  /// One parameter's gradient in one micro-batch: its buffer, the `fill`
  /// that zeroes it, its last writer on compute and the last instruction
  /// on `reducescatter` that reduces it into the shard (a reduce-scatter,
  /// or after the first micro-batch the add from `part`).
  struct MicroBatchGrad {
    size_t param;
    Slice slice, part;
    Operation *fill = nullptr, *lastWriter = nullptr, *reduction = nullptr;
    /// Its reduce-scatter and its first instruction on `reducescatter` (the
    /// wait for its last writer, or the reduce-scatter), and the backward
    /// task (counting from 1) after which it is reduced.
    Operation *scatter = nullptr, *firstOnStream = nullptr;
    int64_t task = 0;
  };
  /// In creation order (the order of their fills on compute).
  SmallVector<MicroBatchGrad> microBatchGrads;
  /// (parameter, micro-batch) -> index in `microBatchGrads`, and the last
  /// backward task (counting from 1) whose chunk uses the parameter.
  std::map<std::pair<size_t, int64_t>, size_t> microBatchGradIndex;
  std::map<std::pair<size_t, int64_t>, int64_t> lastBackwardTask;
  llvm::DenseSet<StringAttr> microBatchGradBuffers;
  /// Parameter indices each chunk's functions use.
  SmallVector<SmallVector<size_t>> chunkParams;
  /// Per parameter: whether a reduce-scatter already wrote its shard (later
  /// ones go to a buffer of their own and are added).
  SmallVector<bool> shardReduced;
  /// The last of the last-writer events `reducescatter` waits for.
  int64_t lastGradSyncWait = -1;
  bool inBackward = false;
  int64_t liveGradBound = 0;
  /// The reductions boundLiveGrads makes compute wait for.
  llvm::DenseSet<Operation *> waitedReductions;
  /// Per-micro-batch reduce-scatter buckets: at most this many gradient bytes.
  int64_t gradBucketBytes = 0;
};

} // namespace mlir::weft::schedule

#endif // WEFT_CONVERSION_WEFTTOEXEC_STEPSCHEDULER_H
