//===- WeftToExec.cpp - weft-schedule: L1 training functions to weftx -----===//
//
// Schedules one optimizer step of a differentiated stage function as a weftx
// program (docs/lowering.md, step 7). Every L1 tensor becomes a byte range:
// parameters, gradients and AdamW moments slots of flat persistent buffers
// (with ZeRO-1, the moments and master weights hold this DP rank's pieces),
// activations one arena buffer per value and micro-batch. Each weft op
// expands into GEMMs and launches of the runtime's registry kernels with the
// exact operand order of docs/runtime.md.
//
//===----------------------------------------------------------------------===//
#include "Conversion/WeftToExec/Passes.h"

#include "Weft/IR/WeftOps.h"
#include "WeftExec/IR/WeftExecDialect.h"
#include "WeftExec/IR/WeftExecOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <cmath>

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTSCHEDULE
#include "Conversion/WeftToExec/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;
namespace wx = mlir::weftx;

/// JSON as the scalar/dictionary attributes weftx.config holds.
static Attribute jsonToAttribute(Builder &builder,
                                 const llvm::json::Value &value) {
  if (const llvm::json::Object *object = value.getAsObject()) {
    SmallVector<NamedAttribute> entries;
    for (const auto &[key, item] : *object)
      entries.push_back(
          builder.getNamedAttr(key, jsonToAttribute(builder, item)));
    return builder.getDictionaryAttr(entries);
  }
  if (std::optional<bool> flag = value.getAsBoolean())
    return builder.getBoolAttr(*flag);
  if (std::optional<int64_t> integer = value.getAsInteger())
    return builder.getI64IntegerAttr(*integer);
  if (std::optional<double> number = value.getAsNumber())
    return builder.getF64FloatAttr(*number);
  if (std::optional<StringRef> text = value.getAsString())
    return builder.getStringAttr(*text);
  return builder.getStringAttr(llvm::formatv("{0}", value).str());
}

namespace {

constexpr int64_t kF32Bytes = 4;
/// Parameter slots in the flat buffers start at multiples of this many
/// elements (64 bytes), so every parameter is aligned for vector loads.
constexpr int64_t kSlotAlign = 16;

/// A byte range of a weftx buffer: what an L1 tensor is at L2.
struct Slice {
  StringAttr buffer;
  int64_t offset = 0, bytes = 0;

  bool operator==(const Slice &other) const {
    return buffer == other.buffer && offset == other.offset &&
           bytes == other.bytes;
  }
  /// `elements` f32 elements from element `start`.
  Slice sub(int64_t start, int64_t elements) const {
    return {buffer, offset + start * kF32Bytes, elements * kF32Bytes};
  }
  /// The span of a row-major `rows x cols` matrix with row stride `ld`
  /// starting at element `start` (what the column-major GEMM reads).
  Slice matrix(int64_t start, int64_t rows, int64_t cols, int64_t ld) const {
    return sub(start, (rows - 1) * ld + cols);
  }
};

/// The configuration `weft-attach-mesh` recorded in `weft.parallel`.
struct Parallel {
  int64_t tp = 1, pp = 1, dp = 1, zero = 0, microBatch = 1, gradAccum = 1;
  std::string recompute = "none";
};

/// Where a parameter lives in the flat buffers, in elements: its slot of the
/// full parameter and gradient buffers, padded to `padded` elements, and the
/// start of this rank's `padded / zeroShards` piece in the ZeRO-1 shard
/// buffers.
struct FlatSlot {
  int64_t start = 0, padded = 0, shardStart = 0;
};

/// One column block of a (possibly fused) QKV projection: the weight (and
/// bias) slice that produces q, k or v.
struct Projection {
  Value weight, bias;
  int64_t column = 0, width = 0, ld = 0;
};

/// An attention op's forward state: the rotary constant (0 without rotary
/// embeddings), its input projections and (q, k, v, ctx, lse).
struct AttentionState {
  int64_t theta = 0;
  SmallVector<Projection, 3> proj;
  SmallVector<Slice, 5> slices;
};

class StepScheduler {
public:
  StepScheduler(ModuleOp module, const WeftScheduleOptions &options)
      : module(module), options(options), ctx(module.getContext()),
        builder(ctx), f32(Float32Type::get(ctx)) {}

  LogicalResult run();

private:
  // --- Setup -------------------------------------------------------------
  LogicalResult findFunctions();
  LogicalResult readParallel();
  void declareParameters();
  /// Gradient sync, clipping, AdamW and (ZeRO-1) the parameter all-gather.
  void optimizerStep();

  // --- Buffers, kernels, instructions -------------------------------------
  Slice newBuffer(StringRef name, int64_t elements, wx::Region region,
                  Type type);
  Slice activation(StringRef name, int64_t elements) {
    return newBuffer(name, elements, wx::Region::arena, f32);
  }
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

  // --- Values -------------------------------------------------------------
  Slice lookup(Value value) { return values.lookup(value); }
  int64_t width(Value value) {
    return cast<RankedTensorType>(value.getType()).getShape().back();
  }
  int64_t rows() const { return par.microBatch * options.seqLen; }
  /// Binds each result of a grad op whose forward operand is a parameter to
  /// that parameter's gradient slot (results follow the float operands).
  void bindParameterGrads(Operation *gradOp);
  FailureOr<Slice> gradOf(Value param);

  // --- Ops ----------------------------------------------------------------
  LogicalResult lowerBlock(Block &block);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerEmbedding(EmbeddingOp op);
  LogicalResult lowerLayerNorm(LayerNormOp op);
  LogicalResult lowerRmsNorm(RMSNormOp op);
  LogicalResult lowerAttention(AttentionOp op);
  LogicalResult lowerMlp(MLPOp op);
  LogicalResult lowerLmHead(LMHeadOp op);
  LogicalResult lowerAddF(arith::AddFOp op);
  LogicalResult lowerEmbeddingGrad(EmbeddingGradOp op);
  LogicalResult lowerLayerNormGrad(LayerNormGradOp op);
  LogicalResult lowerRmsNormGrad(RMSNormGradOp op);
  LogicalResult lowerAttentionGrad(AttentionGradOp op);
  LogicalResult lowerMlpGrad(MLPGradOp op);
  LogicalResult lowerLmHeadGrad(LMHeadGradOp op);
  LogicalResult lowerCrossEntropyGrad(CrossEntropyGradOp op);
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
  /// The forward state of `op` (weft.attention or weft.attention_grad, which
  /// recomputes it from the same operands).
  template <typename AttentionLikeOp>
  FailureOr<AttentionState> attentionState(AttentionLikeOp op) {
    FailureOr<int64_t> theta =
        rotaryTheta(op, op.getCausal(), op.getRopeTheta());
    if (failed(theta))
      return failure();
    auto proj =
        projections(op, op.getQkvWeights(), op.getQkvBiases(), op.getNumHeads(),
                    op.getNumKvHeads(), op.getHeadDim());
    if (failed(proj))
      return failure();
    AttentionState state{*theta, std::move(*proj), {}};
    state.slices = attentionForward(
        lookup(op.getInput()), width(op.getInput()), state.proj,
        op.getNumHeads(), op.getNumKvHeads(), op.getHeadDim(), state.theta);
    return state;
  }
  /// The MLP's hidden state from x: u = x up (+ bu), g = x gate (gated only),
  /// h = act(u) or act(g) u. Returns (u, g, h).
  std::array<Slice, 3> mlpForward(Slice x, int64_t hidden, int64_t ffn,
                                  Value up, Value upBias, Value gate,
                                  int64_t act);
  /// The registry's `act` code, or -1.
  static int64_t activationCode(StringRef name);

  ModuleOp module;
  const WeftScheduleOptions &options;
  MLIRContext *ctx;
  OpBuilder builder;
  Type f32;
  Parallel par;
  std::string modelName;
  func::FuncOp forward, backward;

  wx::ProgramOp program;
  wx::StreamOp compute;
  Operation *firstStream = nullptr;
  std::string phaseLabel;
  llvm::StringMap<int64_t> bufferNames, kernelNames;
  llvm::DenseMap<std::pair<StringAttr, DictionaryAttr>, StringAttr> kernels;

  SmallVector<ParamOp> params; // forward declaration order, unique names
  SmallVector<FlatSlot> slots; // parallel to `params`
  llvm::StringMap<Slice> paramSlot, gradSlot;
  /// DP ranks the optimizer state is split over: dp with ZeRO-1, else 1.
  int64_t zeroShards = 1;
  /// Elements of the full flat buffers and of the optimizer's buffers (the
  /// shard buffers with ZeRO-1, the full ones otherwise).
  int64_t flatElements = 0, stateElements = 0;
  Slice paramsBuf, gradsBuf, expAvg, expAvgSq, loss, sumsq, tokens, targets;
  /// The optimizer's fp32 weights and gradients: this rank's shards with
  /// ZeRO-1, else `paramsBuf` and `gradsBuf`.
  Slice master, gradShards;

  llvm::DenseMap<Value, Slice> values;
  llvm::DenseMap<int64_t, Slice> saved; // slot -> buffer, this micro-batch
};

LogicalResult StepScheduler::findFunctions() {
  for (auto func : module.getOps<func::FuncOp>()) {
    if (!func->hasAttr("weft.pipeline_stage"))
      continue;
    if (func.getName().ends_with("_backward"))
      continue;
    if (forward)
      return module.emitError("weft-schedule: PP > 1 is not lowered yet (more "
                              "than one stage function)");
    forward = func;
  }
  if (!forward)
    return module.emitError("weft-schedule: no stage function; run weft-lower "
                            "and weft-autodiff first");
  modelName = forward.getName().str();
  if (auto stage =
          forward->getAttrOfType<DictionaryAttr>("weft.pipeline_stage"))
    if (auto model = stage.getAs<StringAttr>("model"))
      modelName = model.str();
  backward = module.lookupSymbol<func::FuncOp>(
      (forward.getName() + "_backward").str());
  if (!backward)
    return forward.emitError("weft-schedule: no @")
           << forward.getName() << "_backward; run weft-autodiff first";
  return success();
}

LogicalResult StepScheduler::readParallel() {
  auto dict = forward->getAttrOfType<DictionaryAttr>("weft.parallel");
  if (!dict)
    return forward.emitError("weft-schedule: missing weft.parallel; run "
                             "weft-attach-mesh first");
  auto get = [&](StringRef name, int64_t &out) {
    if (auto value = dict.getAs<IntegerAttr>(name))
      out = value.getInt();
  };
  get("tp", par.tp);
  get("pp", par.pp);
  get("dp", par.dp);
  get("zero", par.zero);
  get("micro_batch", par.microBatch);
  get("grad_accum", par.gradAccum);
  if (auto recompute = dict.getAs<StringAttr>("recompute"))
    par.recompute = recompute.str();
  // The slice this scheduler implements (docs/lowering.md, status).
  if (par.tp > 1)
    return forward.emitError("weft-schedule: TP > 1 is not lowered yet");
  if (par.pp > 1)
    return forward.emitError("weft-schedule: PP > 1 is not lowered yet");
  if (par.zero > 1)
    return forward.emitError("weft-schedule: ZeRO ")
           << par.zero << " is not lowered yet";
  if (par.recompute != "none")
    return forward.emitError("weft-schedule: recompute '")
           << par.recompute << "' is not lowered yet";
  if (options.seqLen <= 0)
    return forward.emitError("weft-schedule: seq-len must be positive");
  return success();
}

Slice StepScheduler::newBuffer(StringRef name, int64_t elements,
                               wx::Region region, Type type) {
  // Unique, deterministic names: the first use keeps `name`, later ones
  // get `.1`, `.2`, ...
  int64_t &count = bufferNames[name];
  std::string symbol =
      count ? (name + "." + llvm::Twine(count)).str() : name.str();
  ++count;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(firstStream);
  int64_t bytes = elements * (type.getIntOrFloatBitWidth() / 8);
  auto buffer =
      wx::BufferOp::create(builder, module.getLoc(), symbol, region, bytes,
                           /*alignment=*/64, IntegerAttr(), type);
  return {buffer.getSymNameAttr(), 0, bytes};
}

ArrayAttr StepScheduler::ranges(ArrayRef<Slice> slices) {
  SmallVector<Attribute> attrs;
  for (const Slice &s : slices)
    attrs.push_back(wx::RangeAttr::get(ctx, FlatSymbolRefAttr::get(s.buffer),
                                       s.offset, s.bytes));
  return builder.getArrayAttr(attrs);
}

void StepScheduler::launch(StringRef kernel,
                           ArrayRef<std::pair<StringRef, int64_t>> constants,
                           ArrayRef<Slice> reads, ArrayRef<Slice> writes) {
  SmallVector<NamedAttribute> named;
  for (auto [name, value] : constants)
    named.emplace_back(builder.getStringAttr(name),
                       builder.getI64IntegerAttr(value));
  auto dict = builder.getDictionaryAttr(named);
  StringAttr &symbol = kernels[{builder.getStringAttr(kernel), dict}];
  if (!symbol) {
    // One declaration per specialization; the runtime selects the registry
    // kernel by the name before the first '.' (docs/runtime.md).
    int64_t &count = kernelNames[kernel];
    symbol = builder.getStringAttr(
        count ? (kernel + "." + llvm::Twine(count)).str() : kernel.str());
    ++count;
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(program);
    wx::KernelOp::create(
        builder, module.getLoc(), symbol,
        ("kernels/" + symbol.getValue() + ".cu").str(), dict,
        ("// " + kernel + ": runtime registry kernel (docs/runtime.md)\n")
            .str());
  }
  wx::LaunchOp::create(builder, module.getLoc(), symbol, DenseI64ArrayAttr(),
                       ranges(reads), ranges(writes), phase());
}

void StepScheduler::gemm(bool transA, bool transB, int64_t m, int64_t n,
                         int64_t k, Slice a, int64_t lda, Slice b, int64_t ldb,
                         Slice c, int64_t ldc, bool accumulate) {
  SmallVector<Slice, 3> reads = {b, a};
  if (accumulate)
    reads.push_back(c);
  wx::GemmOp::create(builder, module.getLoc(), f32, transB, transA, n, m, k,
                     ldb, lda, ldc, APFloat(1.0),
                     APFloat(accumulate ? 1.0 : 0.0), ranges(reads),
                     ranges({c}), phase());
}

void StepScheduler::declareParameters() {
  forward.walk([&](ParamOp op) {
    if (paramSlot.count(op.getName()))
      return;
    params.push_back(op);
    paramSlot[op.getName()] = {};
  });
  // With ZeRO-1 every slot is padded so that each DP rank's piece is a
  // whole number of aligned elements; the pieces are contiguous in the shard
  // buffers, so one optimizer step covers them all.
  int64_t shardElements = 0;
  for (ParamOp op : params) {
    FlatSlot slot;
    slot.start = flatElements = llvm::alignTo(flatElements, kSlotAlign);
    slot.padded = zeroShards == 1
                      ? op.getNumElements()
                      : int64_t(llvm::alignTo(op.getNumElements(),
                                              zeroShards * kSlotAlign));
    slot.shardStart = shardElements;
    flatElements += slot.padded;
    shardElements += slot.padded / zeroShards;
    slots.push_back(slot);
  }
  stateElements = zeroShards == 1 ? flatElements : shardElements;
  paramsBuf = newBuffer("params", flatElements, wx::Region::persistent, f32);
  gradsBuf = newBuffer("grads", flatElements, wx::Region::persistent, f32);
  expAvg = newBuffer("exp_avg", stateElements, wx::Region::persistent, f32);
  expAvgSq =
      newBuffer("exp_avg_sq", stateElements, wx::Region::persistent, f32);
  master = paramsBuf;
  gradShards = gradsBuf;
  if (zeroShards > 1) {
    master = newBuffer("master", stateElements, wx::Region::persistent, f32);
    gradShards =
        newBuffer("grads.shard", stateElements, wx::Region::persistent, f32);
  }
  for (auto [op, slot] : llvm::zip(params, slots)) {
    paramSlot[op.getName()] = paramsBuf.sub(slot.start, op.getNumElements());
    gradSlot[op.getName()] = gradsBuf.sub(slot.start, op.getNumElements());
  }

  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfter(program);
  auto role = FlatSymbolRefAttr::get(program.getSymNameAttr());
  for (auto [op, slot] : llvm::zip(params, slots)) {
    auto type = cast<RankedTensorType>(op.getType());
    auto init = *wx::symbolizeInitKind(stringifyInitKind(op.getInit()));
    SmallVector<Attribute, 2> shards = {wx::ShardAttr::get(
        ctx, role, FlatSymbolRefAttr::get(paramsBuf.buffer),
        paramSlot[op.getName()].offset, /*dim=*/-1, /*start=*/0, /*length=*/0,
        /*zero_shards=*/1, op.getNumElements())};
    // The ZeRO-1 master weights start as this DP rank's piece.
    if (zeroShards > 1)
      shards.push_back(wx::ShardAttr::get(
          ctx, role, FlatSymbolRefAttr::get(master.buffer),
          slot.shardStart * kF32Bytes, /*dim=*/-1, /*start=*/0,
          /*length=*/0, zeroShards, slot.padded));
    wx::ParameterOp::create(builder, op.getLoc(), op.getName(), type.getShape(),
                            type.getElementType(), init, op.getInitStdAttr(),
                            op.getCheckpointName(), op.getHfTransposed(),
                            builder.getArrayAttr(shards));
  }
}

FailureOr<Slice> StepScheduler::gradOf(Value param) {
  auto op = param.getDefiningOp<ParamOp>();
  if (!op || !gradSlot.count(op.getName()))
    return failure();
  return gradSlot[op.getName()];
}

void StepScheduler::bindParameterGrads(Operation *gradOp) {
  unsigned result = 0;
  for (Value operand : gradOp->getOperands().drop_front()) {
    if (!isa<FloatType>(getElementTypeOrSelf(operand.getType())))
      continue;
    if (FailureOr<Slice> grad = gradOf(operand); succeeded(grad))
      values[gradOp->getResult(result)] = *grad;
    ++result;
  }
}

int64_t StepScheduler::activationCode(StringRef name) {
  return llvm::StringSwitch<int64_t>(name)
      .Case("relu", 0)
      .Cases({"gelu", "gelu_erf"}, 1)
      .Cases({"gelu_tanh", "gelu_new"}, 2)
      .Cases({"silu", "swish"}, 3)
      .Default(-1);
}

std::array<Slice, 3> StepScheduler::layerNormForward(Value x, Value w, Value b,
                                                     double epsilon) {
  int64_t h = width(x);
  Slice y = activation("layer_norm", rows() * h);
  Slice mean = activation("layer_norm.mean", rows());
  Slice rstd = activation("layer_norm.rstd", rows());
  launch("layer_norm_forward",
         {{"rows", rows()},
          {"width", h},
          {"eps_nano", int64_t(std::llround(epsilon * 1e9))},
          {"bias", 1}},
         {lookup(x), lookup(w), lookup(b)}, {y, mean, rstd});
  return {y, mean, rstd};
}

std::array<Slice, 2> StepScheduler::rmsNormForward(Value x, Value w,
                                                   double epsilon) {
  int64_t h = width(x);
  Slice y = activation("rms_norm", rows() * h);
  Slice rstd = activation("rms_norm.rstd", rows());
  launch("rms_norm_forward",
         {{"rows", rows()},
          {"width", h},
          {"eps_nano", int64_t(std::llround(epsilon * 1e9))}},
         {lookup(x), lookup(w)}, {y, rstd});
  return {y, rstd};
}

LogicalResult StepScheduler::lowerEmbedding(EmbeddingOp op) {
  if (op.getTokenTypes() || op.getPositionOffset() != 0)
    return op.emitError("weft-schedule: token types and position offsets are "
                        "not lowered yet");
  auto table = cast<RankedTensorType>(op.getTable().getType());
  SmallVector<std::pair<StringRef, int64_t>> constants = {
      {"batch", par.microBatch},
      {"seq", options.seqLen},
      {"hidden", table.getShape()[1]},
      {"vocab", table.getShape()[0]}};
  SmallVector<Slice> reads = {lookup(op.getTokens()), lookup(op.getTable())};
  if (Value positions = op.getPositions()) {
    constants.push_back(
        {"positions",
         cast<RankedTensorType>(positions.getType()).getShape()[0]});
    reads.push_back(lookup(positions));
  }
  Slice out = activation("embedding", rows() * table.getShape()[1]);
  launch("embedding_forward", constants, reads, {out});
  values[op.getResult()] = out;
  return success();
}

LogicalResult StepScheduler::lowerLayerNorm(LayerNormOp op) {
  values[op.getResult()] =
      layerNormForward(op.getInput(), op.getWeight(), op.getBias(),
                       op.getEpsilon().convertToDouble())[0];
  return success();
}

LogicalResult StepScheduler::lowerRmsNorm(RMSNormOp op) {
  values[op.getResult()] = rmsNormForward(op.getInput(), op.getWeight(),
                                          op.getEpsilon().convertToDouble())[0];
  return success();
}

FailureOr<SmallVector<Projection, 3>>
StepScheduler::projections(Operation *op, ValueRange weights, ValueRange biases,
                           int64_t heads, int64_t kvHeads, int64_t headDim) {
  int64_t widths[3] = {heads * headDim, kvHeads * headDim, kvHeads * headDim};
  SmallVector<Projection, 3> proj;
  if (weights.size() == 1) {
    // Fused [hidden, q | k | v] weight: each projection is a column block.
    int64_t ld = widths[0] + widths[1] + widths[2], column = 0;
    for (int64_t w : widths) {
      proj.push_back(
          {weights[0], biases.empty() ? Value() : biases[0], column, w, ld});
      column += w;
    }
  } else if (weights.size() == 3) {
    for (int j = 0; j < 3; ++j)
      proj.push_back({weights[j], biases.empty() ? Value() : biases[j], 0,
                      widths[j], widths[j]});
  } else {
    return op->emitError("weft-schedule: expected a fused or three QKV "
                         "weights");
  }
  return proj;
}

FailureOr<int64_t>
StepScheduler::rotaryTheta(Operation *op, bool causal,
                           std::optional<APFloat> ropeTheta) {
  if (!causal)
    return op->emitError("weft-schedule: bidirectional attention is not "
                         "lowered yet");
  if (!ropeTheta)
    return 0;
  // Kernel constants are integers (docs/runtime.md).
  double theta = ropeTheta->convertToDouble();
  if (theta < 1 || theta != std::floor(theta))
    return op->emitError("weft-schedule: rope_theta ")
           << theta << " is not a positive integer";
  return int64_t(theta);
}

void StepScheduler::rotate(StringRef kernel, Slice x, int64_t heads,
                           int64_t headDim, int64_t theta) {
  launch(kernel,
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"heads", heads},
          {"head_dim", headDim},
          {"theta", theta}},
         {x}, {x});
}

SmallVector<Slice, 5> StepScheduler::attentionForward(
    Slice x, int64_t hidden, ArrayRef<Projection> proj, int64_t heads,
    int64_t kvHeads, int64_t headDim, int64_t theta) {
  const char *names[3] = {"attn.q", "attn.k", "attn.v"};
  int64_t projHeads[3] = {heads, kvHeads, kvHeads};
  SmallVector<Slice, 5> out;
  for (auto [j, p] : llvm::enumerate(proj)) {
    Slice y = activation(names[j], rows() * p.width);
    gemm(false, false, rows(), p.width, hidden, x, hidden,
         lookup(p.weight).matrix(p.column, hidden, p.width, p.ld), p.ld, y,
         p.width, false);
    if (p.bias)
      launch("bias_add", {{"rows", rows()}, {"width", p.width}},
             {y, lookup(p.bias).sub(p.column, p.width)}, {y});
    // Rotary embeddings turn q and k in place, after any bias.
    if (theta && j < 2)
      rotate("rotary_forward", y, projHeads[j], headDim, theta);
    out.push_back(y);
  }
  Slice context = activation("attn.context", rows() * heads * headDim);
  Slice lse = activation("attn.lse", rows() * heads);
  launch("attention_forward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"heads", heads},
          {"kv_heads", kvHeads},
          {"head_dim", headDim},
          {"causal", 1}},
         {out[0], out[1], out[2]}, {context, lse});
  out.push_back(context);
  out.push_back(lse);
  return out;
}

LogicalResult StepScheduler::lowerAttention(AttentionOp op) {
  FailureOr<AttentionState> attention = attentionState(op);
  if (failed(attention))
    return failure();
  ArrayRef<Slice> state = attention->slices;
  int64_t hidden = width(op.getInput()),
          inner = op.getNumHeads() * op.getHeadDim();
  Slice y = activation("attn.out", rows() * hidden);
  gemm(false, false, rows(), hidden, inner, state[3], inner,
       lookup(op.getOutWeight()), hidden, y, hidden, false);
  if (Value bias = op.getOutBias())
    launch("bias_add", {{"rows", rows()}, {"width", hidden}}, {y, lookup(bias)},
           {y});
  values[op.getResult()] = y;
  return success();
}

std::array<Slice, 3> StepScheduler::mlpForward(Slice x, int64_t hidden,
                                               int64_t ffn, Value up,
                                               Value upBias, Value gate,
                                               int64_t act) {
  int64_t n = rows() * ffn;
  Slice u = activation("mlp.up", n);
  gemm(false, false, rows(), ffn, hidden, x, hidden, lookup(up), ffn, u, ffn,
       false);
  if (upBias)
    launch("bias_add", {{"rows", rows()}, {"width", ffn}}, {u, lookup(upBias)},
           {u});
  Slice h = activation("mlp.act", n);
  if (!gate) {
    launch("activation_forward", {{"n", n}, {"act", act}}, {u}, {h});
    return {u, Slice(), h};
  }
  Slice g = activation("mlp.gate", n);
  gemm(false, false, rows(), ffn, hidden, x, hidden, lookup(gate), ffn, g, ffn,
       false);
  launch("gated_forward", {{"n", n}, {"act", act}}, {g, u}, {h});
  return {u, g, h};
}

LogicalResult StepScheduler::lowerMlp(MLPOp op) {
  int64_t act = activationCode(op.getActivation());
  if (act < 0)
    return op.emitError("weft-schedule: activation '")
           << op.getActivation() << "' is not lowered yet";
  int64_t hidden = width(op.getInput()), ffn = width(op.getUpWeight());
  Slice h = mlpForward(lookup(op.getInput()), hidden, ffn, op.getUpWeight(),
                       op.getUpBias(), op.getGateWeight(), act)[2];
  Slice y = activation("mlp.out", rows() * hidden);
  gemm(false, false, rows(), hidden, ffn, h, ffn, lookup(op.getDownWeight()),
       hidden, y, hidden, false);
  if (Value bias = op.getDownBias())
    launch("bias_add", {{"rows", rows()}, {"width", hidden}}, {y, lookup(bias)},
           {y});
  values[op.getResult()] = y;
  return success();
}

LogicalResult StepScheduler::lowerLmHead(LMHeadOp op) {
  auto weight = cast<RankedTensorType>(op.getWeight().getType());
  int64_t vocab = weight.getShape()[0], hidden = weight.getShape()[1];
  Slice logits = activation("logits", rows() * vocab);
  gemm(false, true, rows(), vocab, hidden, lookup(op.getInput()), hidden,
       lookup(op.getWeight()), hidden, logits, vocab, false);
  if (Value bias = op.getBias())
    launch("bias_add", {{"rows", rows()}, {"width", vocab}},
           {logits, lookup(bias)}, {logits});
  values[op.getResult()] = logits;
  return success();
}

LogicalResult StepScheduler::lowerAddF(arith::AddFOp op) {
  Slice lhs = lookup(op.getLhs()), rhs = lookup(op.getRhs());
  // Tied parameters: both gradients already accumulated into one slot.
  if (lhs == rhs && lhs.buffer == gradsBuf.buffer) {
    values[op.getResult()] = lhs;
    return success();
  }
  if (lhs.buffer == gradsBuf.buffer || rhs.buffer == gradsBuf.buffer)
    return op.emitError("weft-schedule: cannot add a parameter gradient to "
                        "another value");
  auto type = cast<RankedTensorType>(op.getType());
  int64_t n = type.hasStaticShape() ? type.getNumElements()
                                    : rows() * type.getShape().back();
  Slice out = activation("residual", n);
  launch("residual_add", {{"n", n}}, {lhs, rhs}, {out});
  values[op.getResult()] = out;
  return success();
}

LogicalResult StepScheduler::lowerEmbeddingGrad(EmbeddingGradOp op) {
  auto table = cast<RankedTensorType>(op.getTable().getType());
  SmallVector<std::pair<StringRef, int64_t>> constants = {
      {"batch", par.microBatch},
      {"seq", options.seqLen},
      {"hidden", table.getShape()[1]},
      {"vocab", table.getShape()[0]}};
  bindParameterGrads(op);
  SmallVector<Slice> writes = {lookup(op.getResult(0))};
  if (Value positions = op.getPositions()) {
    constants.push_back(
        {"positions",
         cast<RankedTensorType>(positions.getType()).getShape()[0]});
    writes.push_back(lookup(op.getResult(1)));
  }
  launch("embedding_backward", constants,
         {lookup(op.getTokens()), lookup(op.getGrad())}, writes);
  return success();
}

LogicalResult StepScheduler::lowerLayerNormGrad(LayerNormGradOp op) {
  // Recompute the row statistics (docs/autodiff.md: saved state is
  // recomputed).
  auto [y, mean, rstd] =
      layerNormForward(op.getInput(), op.getWeight(), op.getBias(),
                       op.getEpsilon().convertToDouble());
  (void)y;
  bindParameterGrads(op);
  int64_t h = width(op.getInput());
  Slice dx = activation("layer_norm.grad", rows() * h);
  launch("layer_norm_backward", {{"rows", rows()}, {"width", h}, {"bias", 1}},
         {lookup(op.getInput()), lookup(op.getWeight()), mean, rstd,
          lookup(op.getGrad())},
         {dx, lookup(op.getResult(1)), lookup(op.getResult(2))});
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult StepScheduler::lowerRmsNormGrad(RMSNormGradOp op) {
  // Recompute the row statistics, as for layer norms.
  Slice rstd = rmsNormForward(op.getInput(), op.getWeight(),
                              op.getEpsilon().convertToDouble())[1];
  bindParameterGrads(op);
  int64_t h = width(op.getInput());
  Slice dx = activation("rms_norm.grad", rows() * h);
  launch("rms_norm_backward", {{"rows", rows()}, {"width", h}},
         {lookup(op.getInput()), lookup(op.getWeight()), rstd,
          lookup(op.getGrad())},
         {dx, lookup(op.getResult(1))});
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult StepScheduler::lowerAttentionGrad(AttentionGradOp op) {
  FailureOr<AttentionState> attention = attentionState(op);
  if (failed(attention))
    return failure();
  ArrayRef<Slice> state = attention->slices;
  ArrayRef<Projection> proj = attention->proj;
  int64_t theta = attention->theta;
  Slice x = lookup(op.getInput()), dy = lookup(op.getGrad());
  int64_t hidden = width(op.getInput()),
          inner = op.getNumHeads() * op.getHeadDim();
  // Output projection: dWo += ctx^T dy, dbo += sum_rows(dy), dctx = dy Wo^T.
  gemm(true, false, inner, hidden, rows(), state[3], inner, dy, hidden,
       *gradOf(op.getOutWeight()), hidden, true);
  if (Value bias = op.getOutBias())
    launch("bias_grad", {{"rows", rows()}, {"width", hidden}}, {dy},
           {*gradOf(bias)});
  Slice dctx = activation("attn.context.grad", rows() * inner);
  gemm(false, true, rows(), inner, hidden, dy, hidden,
       lookup(op.getOutWeight()), hidden, dctx, inner, false);
  const char *names[3] = {"attn.q.grad", "attn.k.grad", "attn.v.grad"};
  SmallVector<Slice, 3> dqkv;
  for (auto [j, p] : llvm::enumerate(proj))
    dqkv.push_back(activation(names[j], rows() * p.width));
  launch("attention_backward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"heads", op.getNumHeads()},
          {"kv_heads", op.getNumKvHeads()},
          {"head_dim", op.getHeadDim()},
          {"causal", 1}},
         {state[0], state[1], state[2], state[3], state[4], dctx}, dqkv);
  // dq, dk are gradients of the rotated q, k: rotate them back in place.
  if (theta) {
    rotate("rotary_backward", dqkv[0], op.getNumHeads(), op.getHeadDim(),
           theta);
    rotate("rotary_backward", dqkv[1], op.getNumKvHeads(), op.getHeadDim(),
           theta);
  }
  // Input projections: dW_j += x^T dqkv_j, db_j += sum_rows(dqkv_j),
  // dx = sum_j dqkv_j W_j^T.
  Slice dx = activation("attn.grad", rows() * hidden);
  for (auto [j, p] : llvm::enumerate(proj)) {
    gemm(true, false, hidden, p.width, rows(), x, hidden, dqkv[j], p.width,
         gradOf(p.weight)->matrix(p.column, hidden, p.width, p.ld), p.ld, true);
    if (p.bias)
      launch("bias_grad", {{"rows", rows()}, {"width", p.width}}, {dqkv[j]},
             {gradOf(p.bias)->sub(p.column, p.width)});
    gemm(false, true, rows(), hidden, p.width, dqkv[j], p.width,
         lookup(p.weight).matrix(p.column, hidden, p.width, p.ld), p.ld, dx,
         hidden, j > 0);
  }
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult StepScheduler::lowerMlpGrad(MLPGradOp op) {
  int64_t act = activationCode(op.getActivation());
  if (act < 0)
    return op.emitError("weft-schedule: activation '")
           << op.getActivation() << "' is not lowered yet";
  Slice x = lookup(op.getInput()), dy = lookup(op.getGrad());
  int64_t hidden = width(op.getInput()), ffn = width(op.getUpWeight());
  int64_t n = rows() * ffn;
  Value gate = op.getGateWeight();
  auto [u, g, h] =
      mlpForward(x, hidden, ffn, op.getUpWeight(), op.getUpBias(), gate, act);
  gemm(true, false, ffn, hidden, rows(), h, ffn, dy, hidden,
       *gradOf(op.getDownWeight()), hidden, true);
  if (Value bias = op.getDownBias())
    launch("bias_grad", {{"rows", rows()}, {"width", hidden}}, {dy},
           {*gradOf(bias)});
  Slice dh = activation("mlp.act.grad", n);
  gemm(false, true, rows(), ffn, hidden, dy, hidden, lookup(op.getDownWeight()),
       hidden, dh, ffn, false);
  // du (and dg) from dh; ungated du overwrites dh.
  Slice du = dh, dg;
  if (gate) {
    du = activation("mlp.up.grad", n);
    dg = activation("mlp.gate.grad", n);
    launch("gated_backward", {{"n", n}, {"act", act}}, {g, u, dh}, {dg, du});
  } else {
    launch("activation_backward", {{"n", n}, {"act", act}}, {u, dh}, {du});
  }
  gemm(true, false, hidden, ffn, rows(), x, hidden, du, ffn,
       *gradOf(op.getUpWeight()), ffn, true);
  if (Value bias = op.getUpBias())
    launch("bias_grad", {{"rows", rows()}, {"width", ffn}}, {du},
           {*gradOf(bias)});
  // dx = du up^T (+ dg gate^T).
  Slice dx = activation("mlp.grad", rows() * hidden);
  gemm(false, true, rows(), hidden, ffn, du, ffn, lookup(op.getUpWeight()), ffn,
       dx, hidden, false);
  if (gate) {
    gemm(true, false, hidden, ffn, rows(), x, hidden, dg, ffn, *gradOf(gate),
         ffn, true);
    gemm(false, true, rows(), hidden, ffn, dg, ffn, lookup(gate), ffn, dx,
         hidden, true);
  }
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult StepScheduler::lowerLmHeadGrad(LMHeadGradOp op) {
  auto weight = cast<RankedTensorType>(op.getWeight().getType());
  int64_t vocab = weight.getShape()[0], hidden = weight.getShape()[1];
  Slice dy = lookup(op.getGrad());
  Slice dx = activation("lm_head.grad", rows() * hidden);
  gemm(false, false, rows(), hidden, vocab, dy, vocab, lookup(op.getWeight()),
       hidden, dx, hidden, false);
  gemm(true, false, vocab, hidden, rows(), dy, vocab, lookup(op.getInput()),
       hidden, *gradOf(op.getWeight()), hidden, true);
  if (Value bias = op.getBias())
    launch("bias_grad", {{"rows", rows()}, {"width", vocab}}, {dy},
           {*gradOf(bias)});
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult StepScheduler::lowerCrossEntropyGrad(CrossEntropyGradOp op) {
  // The seed must be the unscaled 1.0 of weft-autodiff (no loss scaling).
  DenseElementsAttr seed;
  if (!matchPattern(op.getGrad(), m_Constant(&seed)) || !seed.isSplat() ||
      seed.getSplatValue<APFloat>().convertToDouble() != 1.0)
    return op.emitError("weft-schedule: the loss gradient must be the "
                        "constant 1.0");
  if (auto ignore = op.getIgnoreIndexAttr(); ignore && ignore.getInt() != -100)
    return op.emitError("weft-schedule: ignore_index must be -100");
  int64_t vocab = width(op.getLogits());
  // One fused kernel per micro-batch adds this micro-batch's share of the
  // step loss to `loss` and writes the logit gradient scaled so that the DP
  // sum of the accumulated gradients is the global-batch mean.
  Slice dlogits = activation("logits.grad", rows() * vocab);
  launch("cross_entropy",
         {{"rows", rows()},
          {"vocab", vocab},
          {"loss_div", par.gradAccum},
          {"grad_div", par.gradAccum * par.dp},
          {"accumulate", 1},
          {"grad", 1}},
         {lookup(op.getLogits()), lookup(op.getLabels())}, {loss, dlogits});
  values[op.getResult(0)] = dlogits;
  return success();
}

LogicalResult StepScheduler::checkReturn(func::ReturnOp op) {
  if (op->getParentOp() != backward)
    return success();
  for (auto [i, value] : llvm::enumerate(op.getOperands())) {
    auto name = backward.getResultAttrOfType<StringAttr>(i, "weft.grad");
    if (!name)
      return op.emitError("weft-schedule: backward result ")
             << i << " is not a parameter gradient";
    // An unused parameter's gradient is a zero constant: its slot stays
    // zero.
    if (value.getDefiningOp<arith::ConstantOp>())
      continue;
    if (!(lookup(value) == gradSlot.lookup(name.getValue())))
      return op.emitError("weft-schedule: the gradient of '")
             << name.getValue() << "' is not accumulated in its slot";
  }
  return success();
}

LogicalResult StepScheduler::lowerOp(Operation *op) {
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp op) {
        values[op.getResult()] = paramSlot.lookup(op.getName());
        return success();
      })
      .Case([&](SaveOp op) {
        saved[op.getSlot()] = lookup(op.getValue());
        return success();
      })
      .Case([&](RestoreOp op) -> LogicalResult {
        auto it = saved.find(op.getSlot());
        if (it == saved.end())
          return op.emitError("weft-schedule: slot ")
                 << op.getSlot() << " was never saved";
        values[op.getResult()] = it->second;
        return success();
      })
      .Case([&](BlockOp op) -> LogicalResult {
        Block &body = op.getBody().front();
        values[body.getArgument(0)] = lookup(op.getInput());
        if (failed(lowerBlock(body)))
          return failure();
        values[op.getResult()] =
            lookup(cast<YieldOp>(body.getTerminator()).getValue());
        return success();
      })
      .Case([&](BlockGradOp op) -> LogicalResult {
        Block &body = op.getBody().front();
        values[body.getArgument(0)] = lookup(op.getGrad());
        if (failed(lowerBlock(body)))
          return failure();
        for (auto [result, value] :
             llvm::zip(op->getResults(),
                       cast<GradYieldOp>(body.getTerminator()).getValues()))
          values[result] = lookup(value);
        return success();
      })
      .Case<YieldOp, GradYieldOp, arith::ConstantOp>(
          [](Operation *) { return success(); })
      // The loss value itself is produced by the backward's fused kernel.
      .Case([](CrossEntropyOp) { return success(); })
      .Case([&](EmbeddingOp op) { return lowerEmbedding(op); })
      .Case([&](LayerNormOp op) { return lowerLayerNorm(op); })
      .Case([&](RMSNormOp op) { return lowerRmsNorm(op); })
      .Case([&](AttentionOp op) { return lowerAttention(op); })
      .Case([&](MLPOp op) { return lowerMlp(op); })
      .Case([&](LMHeadOp op) { return lowerLmHead(op); })
      .Case([&](arith::AddFOp op) { return lowerAddF(op); })
      .Case([&](EmbeddingGradOp op) { return lowerEmbeddingGrad(op); })
      .Case([&](LayerNormGradOp op) { return lowerLayerNormGrad(op); })
      .Case([&](RMSNormGradOp op) { return lowerRmsNormGrad(op); })
      .Case([&](AttentionGradOp op) { return lowerAttentionGrad(op); })
      .Case([&](MLPGradOp op) { return lowerMlpGrad(op); })
      .Case([&](LMHeadGradOp op) { return lowerLmHeadGrad(op); })
      .Case([&](CrossEntropyGradOp op) { return lowerCrossEntropyGrad(op); })
      .Case([&](func::ReturnOp op) { return checkReturn(op); })
      .Default([](Operation *op) -> LogicalResult {
        return op->emitError("weft-schedule: '")
               << op->getName() << "' is not lowered yet";
      });
}

LogicalResult StepScheduler::lowerBlock(Block &block) {
  for (Operation &op : block)
    if (failed(lowerOp(&op)))
      return failure();
  return success();
}

void StepScheduler::optimizerStep() {
  Location loc = module.getLoc();
  phaseLabel = "grad sync";
  if (zeroShards > 1) {
    // Each DP rank receives the sum of its piece of every gradient.
    for (const FlatSlot &slot : slots) {
      int64_t piece = slot.padded / zeroShards;
      wx::ReduceScatterOp::create(
          builder, loc, wx::ReduceKind::sum, piece, f32, "dp",
          ranges({gradsBuf.sub(slot.start, slot.padded)}),
          ranges({gradShards.sub(slot.shardStart, piece)}), phase());
    }
  } else if (par.dp > 1) {
    wx::AllReduceOp::create(builder, loc, wx::ReduceKind::sum, flatElements,
                            f32, "dp", ranges({gradsBuf}), ranges({gradsBuf}),
                            phase());
  }
  phaseLabel = "clip";
  wx::GradNormOp::create(builder, loc, f32, ranges({gradShards}),
                         ranges({sumsq}), phase());
  // Sharded gradients: the global norm sums every rank's partial sum.
  if (zeroShards > 1)
    wx::AllReduceOp::create(builder, loc, wx::ReduceKind::sum, 1, f32, "dp",
                            ranges({sumsq}), ranges({sumsq}), phase());
  wx::ClipOp::create(builder, loc, f32, ranges({sumsq, gradShards}),
                     ranges({gradShards}), phase());
  phaseLabel = "adamw";
  wx::OptimizerStepOp::create(builder, loc, stateElements, f32,
                              ranges({master, gradShards, expAvg, expAvgSq}),
                              ranges({master, expAvg, expAvgSq}), phase());
  if (zeroShards == 1)
    return;
  phaseLabel = "param gather";
  for (const FlatSlot &slot : slots) {
    int64_t piece = slot.padded / zeroShards;
    wx::AllGatherOp::create(builder, loc, piece, f32, "dp",
                            ranges({master.sub(slot.shardStart, piece)}),
                            ranges({paramsBuf.sub(slot.start, slot.padded)}),
                            phase());
  }
}

LogicalResult StepScheduler::run() {
  if (failed(findFunctions()) || failed(readParallel()))
    return failure();
  Location loc = module.getLoc();
  builder.setInsertionPointToEnd(module.getBody());
  auto mesh = wx::MeshOp::create(builder, loc, par.dp, 1, 1);
  SmallVector<int64_t> ranks = llvm::to_vector(llvm::seq<int64_t>(0, par.dp));
  wx::GroupOp::create(builder, loc, "dp", wx::GroupKind::dp, ranks);
  program = wx::ProgramOp::create(builder, loc, "role0", ranks, IntegerAttr(),
                                  IntegerAttr());
  builder.setInsertionPointToEnd(&program.getBody().emplaceBlock());
  // Collectives share the compute stream in this slice: nothing overlaps.
  compute = wx::StreamOp::create(builder, loc, "compute");
  firstStream = compute;
  builder.setInsertionPointToEnd(&compute.getBody().emplaceBlock());

  zeroShards = par.zero == 1 ? par.dp : 1;
  declareParameters();
  loss = newBuffer("loss", 1, wx::Region::persistent, f32);
  sumsq = newBuffer("grad.sumsq", 1, wx::Region::persistent, f32);

  phaseLabel = "zero grads";
  wx::FillOp::create(builder, loc, f32, APFloat(0.0), ArrayAttr(),
                     ranges({gradsBuf, loss}), phase());

  IntegerType i32 = builder.getI32Type();
  for (int64_t mb = 0; mb < par.gradAccum; ++mb) {
    saved.clear();
    values.clear();
    phaseLabel = ("data mb" + llvm::Twine(mb)).str();
    tokens = newBuffer("tokens", rows(), wx::Region::arena, i32);
    targets = newBuffer("targets", rows(), wx::Region::arena, i32);
    wx::LoadBatchOp::create(builder, loc, mb, ArrayAttr(),
                            ranges({tokens, targets}), phase());
    for (func::FuncOp func : {forward, backward}) {
      for (BlockArgument arg : func.getArguments()) {
        auto input =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "weft.input");
        if (!input ||
            (input.getValue() != "tokens" && input.getValue() != "labels"))
          return func.emitError("weft-schedule: argument ")
                 << arg.getArgNumber() << " is not tokens or labels";
        values[arg] = input.getValue() == "tokens" ? tokens : targets;
      }
      phaseLabel =
          ((func == forward ? "fwd mb" : "bwd mb") + llvm::Twine(mb)).str();
      if (failed(lowerBlock(func.getBody().front())))
        return failure();
    }
  }

  optimizerStep();

  // Drop level L1: the module is now one bundle.
  while (&module.getBody()->front() != mesh.getOperation())
    module.getBody()->front().erase();

  auto apf = [](double v) { return APFloat(v); };
  module->setAttr("weftx.model",
                  wx::ModelAttr::get(ctx, modelName,
                                     options.family.empty()
                                         ? StringRef(modelName)
                                         : StringRef(options.family)));
  module->setAttr(
      "weftx.training",
      wx::TrainingAttr::get(
          ctx, par.microBatch * par.gradAccum * par.dp, options.seqLen, "fp32",
          par.microBatch, par.gradAccum, options.stepsPerPlan, apf(options.lr),
          apf(options.minLr), options.warmupSteps, options.decaySteps,
          apf(options.weightDecay), apf(options.beta1), apf(options.beta2),
          apf(options.eps), apf(options.gradClip),
          wx::LossScaleAttr::get(ctx, false, apf(1.0), 0, apf(0.5))));
  module->setAttr("weftx.prediction",
                  wx::PredictionAttr::get(ctx, apf(options.predictedStepTimeS),
                                          {options.predictedPeakBytes},
                                          apf(options.predictedMfu)));
  module->setAttr(
      "weftx.config",
      builder.getDictionaryAttr({
          builder.getNamedAttr("dp", builder.getI64IntegerAttr(par.dp)),
          builder.getNamedAttr("grad_accum",
                               builder.getI64IntegerAttr(par.gradAccum)),
          builder.getNamedAttr("micro_batch",
                               builder.getI64IntegerAttr(par.microBatch)),
          builder.getNamedAttr("pp", builder.getI64IntegerAttr(par.pp)),
          builder.getNamedAttr("recompute",
                               builder.getStringAttr(par.recompute)),
          builder.getNamedAttr("tp", builder.getI64IntegerAttr(par.tp)),
          builder.getNamedAttr("zero", builder.getI64IntegerAttr(par.zero)),
      }));
  if (!options.clusterJson.empty()) {
    llvm::Expected<llvm::json::Value> cluster =
        llvm::json::parse(options.clusterJson);
    if (!cluster)
      return module.emitError() << "cluster-json is not valid JSON: "
                                << llvm::toString(cluster.takeError());
    auto config = module->getAttrOfType<DictionaryAttr>("weftx.config");
    NamedAttrList entries(config);
    entries.set("cluster", jsonToAttribute(builder, *cluster));
    module->setAttr("weftx.config", entries.getDictionary(ctx));
  }
  return success();
}

struct WeftSchedulePass : mlir::weft::impl::WeftScheduleBase<WeftSchedulePass> {
  using Base::Base;

  void runOnOperation() override {
    WeftScheduleOptions opts;
    opts.seqLen = seqLen;
    opts.family = family;
    opts.lr = lr;
    opts.minLr = minLr;
    opts.warmupSteps = warmupSteps;
    opts.decaySteps = decaySteps;
    opts.weightDecay = weightDecay;
    opts.beta1 = beta1;
    opts.beta2 = beta2;
    opts.eps = eps;
    opts.gradClip = gradClip;
    opts.stepsPerPlan = stepsPerPlan;
    opts.predictedStepTimeS = predictedStepTimeS;
    opts.predictedMfu = predictedMfu;
    opts.predictedPeakBytes = predictedPeakBytes;
    opts.clusterJson = clusterJson;
    if (failed(StepScheduler(getOperation(), opts).run()))
      signalPassFailure();
  }
};

} // namespace
