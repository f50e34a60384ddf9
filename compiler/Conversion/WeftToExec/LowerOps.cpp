//===- LowerOps.cpp - weft-schedule: weft ops to weftx instructions -------===//
//
// Each op of a stage function (forward or backward) becomes GEMMs, launches
// of the runtime's registry kernels with the exact operand order of
// docs/runtime.md, and the collectives of the TP group. Every L1 value is a
// byte range (`Slice`): parameters and their gradients are slots of the
// role's flat persistent buffers, activations fresh arena buffers.
//
// Tensor parallelism needs no special cases in most lowerings: the partitioned
// ops carry rank-local shapes (local heads, MLP width, vocabulary), so one
// lowering serves every TP rank; only the vocabulary offset of a shard and the
// parameter pieces of a fused QKV projection depend on the TP rank.
//
//===----------------------------------------------------------------------===//
#include "StepScheduler.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <type_traits>

using namespace mlir;
using namespace mlir::weft;
using namespace mlir::weft::schedule;

int64_t RoleScheduler::activationCode(StringRef name) {
  return llvm::StringSwitch<int64_t>(name)
      .Case("relu", 0)
      .Cases({"gelu", "gelu_erf"}, 1)
      .Cases({"gelu_tanh", "gelu_new"}, 2)
      .Cases({"silu", "swish"}, 3)
      .Default(-1);
}

std::array<Slice, 3> RoleScheduler::layerNormForward(Value x, Value w, Value b,
                                                     double epsilon) {
  int64_t h = width(x), n = rowsOf(x);
  Slice y = activation("layer_norm", n * h);
  Slice mean = statistic("layer_norm.mean", n);
  Slice rstd = statistic("layer_norm.rstd", n);
  launch("layer_norm_forward",
         {{"rows", n},
          {"width", h},
          {"eps_nano", int64_t(std::llround(epsilon * 1e9))},
          {"bias", 1}},
         {lookup(x), lookup(w), lookup(b)}, {y, mean, rstd});
  return {y, mean, rstd};
}

std::array<Slice, 2> RoleScheduler::rmsNormForward(Value x, Value w,
                                                   double epsilon) {
  int64_t h = width(x), n = rowsOf(x);
  Slice y = activation("rms_norm", n * h);
  Slice rstd = statistic("rms_norm.rstd", n);
  launch("rms_norm_forward",
         {{"rows", n},
          {"width", h},
          {"eps_nano", int64_t(std::llround(epsilon * 1e9))}},
         {lookup(x), lookup(w)}, {y, rstd});
  return {y, rstd};
}

//===----------------------------------------------------------------------===//
// Embeddings
//===----------------------------------------------------------------------===//

LogicalResult RoleScheduler::lowerEmbedding(EmbeddingOp op) {
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

LogicalResult RoleScheduler::lowerVocabEmbedding(VocabEmbeddingOp op) {
  auto table = cast<RankedTensorType>(op.getTable().getType());
  int64_t shardRows = table.getShape()[0], hidden = table.getShape()[1];
  // This rank's partial lookup; the shard.all_reduce after it completes it.
  Slice out = activation("embedding.partial", rows() * hidden);
  launch("vocab_embedding_forward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"hidden", hidden},
          {"vocab_local", shardRows},
          {"vocab_start", vocabStart(shardRows)}},
         {lookup(op.getTokens()), lookup(op.getTable())}, {out});
  values[op.getResult()] = out;
  return success();
}

LogicalResult RoleScheduler::lowerPositionEmbedding(PositionEmbeddingOp op) {
  if (op.getTokenTypes() || op.getPositionOffset() != 0 || !op.getPositions())
    return op.emitError("weft-schedule: token types and position offsets are "
                        "not lowered yet");
  auto positions = cast<RankedTensorType>(op.getPositions().getType());
  int64_t hidden = positions.getShape()[1];
  Slice out = activation("embedding", rows() * hidden);
  launch("position_embedding_forward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"hidden", hidden},
          {"positions", positions.getShape()[0]}},
         {lookup(op.getInput()), lookup(op.getPositions())}, {out});
  values[op.getResult()] = out;
  return success();
}

//===----------------------------------------------------------------------===//
// Norms, attention, MLP, head
//===----------------------------------------------------------------------===//

/// Kernel constants are integers: a norm's epsilon travels in units of 1e-9
/// (`eps_nano`), so a smaller one would round to 0 (or, past 2^63, wrap).
static LogicalResult checkEpsilon(Operation *op, const APFloat &epsilon) {
  double eps = epsilon.convertToDouble();
  if (!(eps >= 0.5e-9 && eps <= 1.0))
    return op->emitError("weft-schedule: norm epsilon ")
           << eps
           << " is outside [5e-10, 1] (kernels take it in units of 1e-9)";
  return success();
}

// A norm's result and, when the op returns them, its row statistics (mean
// and rstd, or rstd) bind to the forward's slices in order.
LogicalResult RoleScheduler::lowerLayerNorm(LayerNormOp op) {
  if (failed(checkEpsilon(op, op.getEpsilon())))
    return failure();
  std::array<Slice, 3> slices =
      layerNormForward(op.getInput(), op.getWeight(), op.getBias(),
                       op.getEpsilon().convertToDouble());
  for (auto [value, slice] : llvm::zip(op->getResults(), slices))
    values[value] = slice;
  return success();
}

LogicalResult RoleScheduler::lowerRmsNorm(RMSNormOp op) {
  if (failed(checkEpsilon(op, op.getEpsilon())))
    return failure();
  std::array<Slice, 2> slices = rmsNormForward(
      op.getInput(), op.getWeight(), op.getEpsilon().convertToDouble());
  for (auto [value, slice] : llvm::zip(op->getResults(), slices))
    values[value] = slice;
  return success();
}

FailureOr<SmallVector<Projection, 3>>
RoleScheduler::projections(Operation *op, ValueRange weights, ValueRange biases,
                           int64_t heads, int64_t kvHeads, int64_t headDim) {
  int64_t widths[3] = {heads * headDim, kvHeads * headDim, kvHeads * headDim};
  // Projection j of a parameter: a column block of one [rows, ld] matrix, or
  // (a fused parameter split over TP) piece j, a matrix of its own.
  auto block = [&](Value value, int64_t j, int64_t column, int64_t ld,
                   Projection &p, bool isBias) {
    LocalParam *param = paramOf(value);
    Slice weight = lookup(value), grad = *gradOf(value);
    if (param && param->pieces.size() == 3) {
      const ParamPiece &piece = param->pieces[j];
      weight = weight.sub(piece.start - param->pieces[0].start, piece.elements);
      grad = grad.sub(piece.start - param->pieces[0].start, piece.elements);
      column = 0;
      ld = widths[j];
    }
    if (isBias) {
      p.bias = weight.sub(column, widths[j]);
      p.biasGrad = grad.sub(column, widths[j]);
      return;
    }
    p.weight = weight;
    p.weightGrad = grad;
    p.column = column;
    p.ld = ld;
  };
  if (weights.size() != 1 && weights.size() != 3)
    return op->emitError("weft-schedule: expected a fused or three QKV "
                         "weights");
  for (Value value : llvm::concat<const Value>(weights, biases))
    if (!paramOf(value))
      return op->emitError("weft-schedule: QKV weights and biases must be "
                           "parameters");
  SmallVector<Projection, 3> proj(3);
  int64_t fusedWidth = widths[0] + widths[1] + widths[2], column = 0;
  for (int64_t j = 0; j < 3; ++j) {
    proj[j].width = widths[j];
    bool fused = weights.size() == 1;
    block(weights[fused ? 0 : j], j, fused ? column : 0,
          fused ? fusedWidth : widths[j], proj[j], /*isBias=*/false);
    if (!biases.empty())
      block(biases[fused ? 0 : j], j, fused ? column : 0, 0, proj[j],
            /*isBias=*/true);
    column += widths[j];
  }
  return proj;
}

FailureOr<int64_t>
RoleScheduler::rotaryTheta(Operation *op, bool causal,
                           std::optional<APFloat> ropeTheta) {
  if (!causal)
    return op->emitError("weft-schedule: bidirectional attention is not "
                         "lowered yet");
  if (!ropeTheta)
    return 0;
  // Kernel constants are integers (docs/runtime.md); past 2^53 a double
  // no longer holds every integer, and the cast below must not overflow.
  double theta = ropeTheta->convertToDouble();
  if (!(theta >= 1 && theta <= 0x1p53) || theta != std::floor(theta))
    return op->emitError("weft-schedule: rope_theta ")
           << theta << " is not a positive integer of at most 2^53";
  return int64_t(theta);
}

void RoleScheduler::rotate(StringRef kernel, Slice x, int64_t heads,
                           int64_t headDim, int64_t theta) {
  launch(kernel,
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"heads", heads},
          {"head_dim", headDim},
          {"theta", theta}},
         {x}, {x});
}

SmallVector<Slice, 5> RoleScheduler::attentionForward(
    Slice x, int64_t hidden, ArrayRef<Projection> proj, int64_t heads,
    int64_t kvHeads, int64_t headDim, int64_t theta) {
  const char *names[3] = {"attn.q", "attn.k", "attn.v"};
  int64_t projHeads[3] = {heads, kvHeads, kvHeads};
  SmallVector<Slice, 5> out;
  for (auto [j, p] : llvm::enumerate(proj)) {
    Slice y = activation(names[j], rows() * p.width);
    gemm(false, false, rows(), p.width, hidden, x, hidden,
         p.weight.matrix(p.column, hidden, p.width, p.ld), p.ld, y, p.width,
         false);
    if (p.bias)
      launch("bias_add", {{"rows", rows()}, {"width", p.width}}, {y, p.bias},
             {y});
    // Rotary embeddings turn q and k in place, after any bias.
    if (theta && j < 2)
      rotate("rotary_forward", y, projHeads[j], headDim, theta);
    out.push_back(y);
  }
  Slice context = activation("attn.context", rows() * heads * headDim);
  Slice lse = statistic("attn.lse", rows() * heads);
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

template <typename AttentionLikeOp>
FailureOr<AttentionState> RoleScheduler::attentionState(AttentionLikeOp op,
                                                        ValueRange saved) {
  FailureOr<int64_t> theta = rotaryTheta(op, op.getCausal(), op.getRopeTheta());
  if (failed(theta))
    return failure();
  auto proj =
      projections(op, op.getQkvWeights(), op.getQkvBiases(), op.getNumHeads(),
                  op.getNumKvHeads(), op.getHeadDim());
  if (failed(proj))
    return failure();
  AttentionState state{*theta, std::move(*proj), {}};
  // A grad op given the forward's state reads it instead of recomputing.
  if (!saved.empty()) {
    for (Value value : saved)
      state.slices.push_back(lookup(value));
    return state;
  }
  state.slices = attentionForward(
      lookup(op.getInput()), width(op.getInput()), state.proj, op.getNumHeads(),
      op.getNumKvHeads(), op.getHeadDim(), state.theta);
  return state;
}

/// weft.attention, or weft.tp_attention (this TP rank's heads: a partial sum
/// without the output bias, which follows the TP all-reduce).
template <typename AttentionLikeOp>
LogicalResult RoleScheduler::lowerAttention(AttentionLikeOp op) {
  FailureOr<AttentionState> attention = attentionState(op, {});
  if (failed(attention))
    return failure();
  ArrayRef<Slice> state = attention->slices;
  // q, k, v, context and lse, for the backward when the op returns them.
  for (auto [value, slice] : llvm::zip(op.getState(), state))
    values[value] = slice;
  int64_t hidden = width(op.getInput()),
          inner = op.getNumHeads() * op.getHeadDim();
  Slice y = activation("attn.out", rows() * hidden);
  gemm(false, false, rows(), hidden, inner, state[3], inner,
       lookup(op.getOutWeight()), hidden, y, hidden, false);
  if constexpr (std::is_same_v<AttentionLikeOp, AttentionOp>)
    if (Value bias = op.getOutBias())
      launch("bias_add", {{"rows", rows()}, {"width", hidden}},
             {y, lookup(bias)}, {y});
  values[op.getResult()] = y;
  return success();
}

std::array<Slice, 3> RoleScheduler::mlpForward(Slice x, int64_t hidden,
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

LogicalResult RoleScheduler::lowerMlp(MLPOp op) {
  int64_t act = activationCode(op.getActivation());
  if (act < 0)
    return op.emitError("weft-schedule: activation '")
           << op.getActivation() << "' is not lowered yet";
  int64_t hidden = width(op.getInput()), ffn = width(op.getUpWeight());
  auto [u, g, h] =
      mlpForward(lookup(op.getInput()), hidden, ffn, op.getUpWeight(),
                 op.getUpBias(), op.getGateWeight(), act);
  // up, gate (gated only) and the activation, for the backward when the op
  // returns them.
  if (!op.getState().empty()) {
    SmallVector<Slice, 3> state = {u};
    if (g)
      state.push_back(g);
    state.push_back(h);
    for (auto [value, slice] : llvm::zip_equal(op.getState(), state))
      values[value] = slice;
  }
  Slice y = activation("mlp.out", rows() * hidden);
  gemm(false, false, rows(), hidden, ffn, h, ffn, lookup(op.getDownWeight()),
       hidden, y, hidden, false);
  if (Value bias = op.getDownBias())
    launch("bias_add", {{"rows", rows()}, {"width", hidden}}, {y, lookup(bias)},
           {y});
  values[op.getResult()] = y;
  return success();
}

/// Whether `user` is the fused loss (its forward or its gradient).
static bool isTheLoss(Operation *user) {
  return isa<CrossEntropyOp, CrossEntropyGradOp>(user);
}

bool RoleScheduler::onlyTheLossReads(Value logits) {
  auto [cached, inserted] = onlyTheLossReadsCache.try_emplace(logits, true);
  if (!inserted)
    return cached->second;
  // Only the model's functions restore; the module also holds the weftx
  // programs scheduled so far, which grow with every micro-batch (walking
  // them per micro-batch made the pass quadratic in the accumulation steps).
  auto readElsewhere = [&](SaveOp save) {
    for (auto function :
         currentFunction->getParentOfType<ModuleOp>().getOps<func::FuncOp>())
      if (function
              .walk([&](RestoreOp restore) {
                bool same = restore.getForward() == currentFunction.getName() &&
                            restore.getSlot() == save.getSlot();
                return same && !llvm::all_of(restore->getUsers(), isTheLoss)
                           ? WalkResult::interrupt()
                           : WalkResult::advance();
              })
              .wasInterrupted())
        return true;
    return false;
  };
  for (Operation *user : logits.getUsers()) {
    if (isTheLoss(user))
      continue;
    auto save = dyn_cast<SaveOp>(user);
    if (!save || readElsewhere(save))
      return onlyTheLossReadsCache[logits] = false;
  }
  return true;
}

/// Elements the rows of padded logits are aligned to: 16 bytes of 16-bit
/// logits, which the GEMMs' fast (TMA) kernels need for every row.
constexpr int64_t kLogitsRowAlign = 8;

LogicalResult RoleScheduler::lowerLmHead(LMHeadOp op) {
  // Under TP the weight holds this rank's vocabulary rows: local logits.
  auto weight = cast<RankedTensorType>(op.getWeight().getType());
  int64_t vocab = weight.getShape()[0], hidden = weight.getShape()[1];
  // Rows padded to an aligned stride where only the fused loss reads them
  // (it skips the padding) and no bias is added over them.
  int64_t stride = !op.getBias() && onlyTheLossReads(op.getResult())
                       ? llvm::alignTo(vocab, kLogitsRowAlign)
                       : vocab;
  Slice logits = activation("logits", rows() * stride);
  gemm(false, true, rows(), vocab, hidden, lookup(op.getInput()), hidden,
       lookup(op.getWeight()), hidden, logits, stride, false);
  if (Value bias = op.getBias())
    launch("bias_add", {{"rows", rows()}, {"width", vocab}},
           {logits, lookup(bias)}, {logits});
  values[op.getResult()] = logits;
  notePaddedLogits(logits, stride, vocab);
  return success();
}

LogicalResult RoleScheduler::lowerAddF(arith::AddFOp op) {
  Slice lhs = lookup(op.getLhs()), rhs = lookup(op.getRhs());
  // Tied parameters: both gradients already accumulated into one slot.
  if (lhs == rhs && isParamGrad(lhs)) {
    values[op.getResult()] = lhs;
    return success();
  }
  if (isParamGrad(lhs) || isParamGrad(rhs))
    return op.emitError("weft-schedule: cannot add a parameter gradient to "
                        "another value");
  int64_t n = elementsOf(op.getResult());
  Slice out = activation("residual", n);
  launch("residual_add", {{"n", n}}, {lhs, rhs}, {out});
  values[op.getResult()] = out;
  return success();
}

LogicalResult RoleScheduler::lowerBiasAdd(BiasAddOp op) {
  int64_t w = width(op.getInput()), n = elementsOf(op.getInput());
  Slice y = activation("bias_add", n);
  launch("bias_add", {{"rows", n / w}, {"width", w}},
         {lookup(op.getInput()), lookup(op.getBias())}, {y});
  values[op.getResult()] = y;
  return success();
}

/// A sum over the TP group (Megatron's `g` after a row-parallel layer, or
/// the backward of `f`, weft.tp_copy).
LogicalResult RoleScheduler::lowerAllReduce(Operation *op, Value input,
                                            Value result) {
  auto allReduce = cast<shard::AllReduceOp>(op);
  if (allReduce.getReduction() != shard::ReductionKind::Sum ||
      allReduce.getGridAxes() != ArrayRef<int16_t>{2})
    return op->emitError("weft-schedule: only sum all-reduces over the TP "
                         "axis (grid axis 2) are lowered");
  // A partial sum nothing else reads (a fresh buffer of the op that made it)
  // is reduced in place: no second buffer, which matters while the
  // all-reduce overlaps later compute on the `tp` stream.
  Operation *producer = input.getDefiningOp();
  bool inPlace = input.hasOneUse() && producer &&
                 !isa<TPCopyOp, RestoreOp, ParamOp>(producer);
  values[result] = tpAllReduce(lookup(input), "tp.sum", inPlace);
  return success();
}

LogicalResult RoleScheduler::lowerSequenceCollective(Operation *op) {
  // The sequence is dimension 1 of [batch, seq, hidden]: a TP rank's part is
  // [batch, seq / TP, hidden]. all_gather and reduce_scatter exchange one
  // contiguous block per TP rank, which is a sequence's [seq / TP, hidden]
  // part: one member per sequence of the micro-batch (one NCCL group), each
  // between a rank's part of that sequence and the whole sequence, so no
  // staging copies reorder the blocks.
  Location loc = op->getLoc();
  int64_t batch = par.microBatch;
  // Member b of a collective between a rank's [batch, seq/TP, w] `part` and
  // the [batch, seq, w] `full`: sequence b of each.
  auto members = [&](Slice part, Slice full) {
    SmallVector<Slice> parts, fulls;
    int64_t piece = part.elements() / batch;
    for (int64_t b = 0; b < batch; ++b) {
      parts.push_back(part.sub(b * piece, piece));
      fulls.push_back(full.sub(b * piece * par.tp, piece * par.tp));
    }
    return std::pair{ranges(parts), ranges(fulls)};
  };
  StringRef tp = bundle.family(Family::TP).getValue();
  auto check = [&](ArrayRef<int16_t> axes, int64_t dim) -> LogicalResult {
    if (axes != ArrayRef<int16_t>{2} || dim != 1)
      return op->emitError("weft-schedule: only sequence (dimension 1) "
                           "collectives over the TP axis are lowered");
    return success();
  };
  if (auto gather = dyn_cast<shard::AllGatherOp>(op)) {
    if (failed(
            check(gather.getGridAxes(), gather.getGatherAxis().getZExtValue())))
      return failure();
    Slice in = lookup(gather.getInput());
    Slice out = activation("sp.gather", in.elements() * par.tp);
    auto [reads, writes] = members(in, out);
    wx::AllGatherOp::create(builder, loc, in.elements(), in.type, tp, reads,
                            writes, phase());
    values[gather.getResult()] = out;
    return success();
  }
  if (auto scatter = dyn_cast<shard::ReduceScatterOp>(op)) {
    if (failed(check(scatter.getGridAxes(),
                     scatter.getScatterAxis().getZExtValue())) ||
        scatter.getReduction() != shard::ReductionKind::Sum)
      return op->emitError("weft-schedule: only sum reduce-scatters along "
                           "the sequence are lowered");
    Slice in = lookup(scatter.getInput());
    sequenceSharded.insert(scatter.getResult());
    Slice out = activation("sp.scatter", in.elements() / par.tp);
    auto [writes, reads] = members(out, in);
    wx::ReduceScatterOp::create(builder, loc, wx::ReduceKind::sum,
                                out.elements(), out.type, tp, reads, writes,
                                phase());
    values[scatter.getResult()] = out;
    return success();
  }
  auto slice = cast<shard::AllSliceOp>(op);
  if (failed(check(slice.getGridAxes(), slice.getSliceAxis().getZExtValue())))
    return failure();
  Slice in = lookup(slice.getInput());
  int64_t part = in.elements() / par.tp, piece = part / batch;
  sequenceSharded.insert(slice.getResult());
  Slice out = activation("sp.slice", part);
  for (int64_t b = 0; b < batch; ++b)
    wx::CopyOp::create(builder, loc,
                       ranges({in.sub((b * par.tp + tpRank) * piece, piece)}),
                       ranges({out.sub(b * piece, piece)}), phase());
  values[slice.getResult()] = out;
  return success();
}

//===----------------------------------------------------------------------===//
// Gradients
//===----------------------------------------------------------------------===//

LogicalResult RoleScheduler::lowerEmbeddingGrad(EmbeddingGradOp op) {
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

LogicalResult RoleScheduler::lowerVocabEmbeddingGrad(VocabEmbeddingGradOp op) {
  auto table = cast<RankedTensorType>(op.getTable().getType());
  int64_t shardRows = table.getShape()[0], hidden = table.getShape()[1];
  FailureOr<Slice> grad = gradOf(op.getTable());
  if (failed(grad))
    return op.emitError("weft-schedule: the table is not a parameter");
  launch("vocab_embedding_backward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"hidden", hidden},
          {"vocab_local", shardRows},
          {"vocab_start", vocabStart(shardRows)}},
         {lookup(op.getTokens()), lookup(op.getGrad())}, {*grad});
  bindParameterGrads(op);
  return success();
}

LogicalResult
RoleScheduler::lowerPositionEmbeddingGrad(PositionEmbeddingGradOp op) {
  if (op.getTokenTypes() || op.getPositionOffset() != 0 || !op.getPositions())
    return op.emitError("weft-schedule: token types and position offsets are "
                        "not lowered yet");
  auto positions = cast<RankedTensorType>(op.getPositions().getType());
  FailureOr<Slice> grad = gradOf(op.getPositions());
  if (failed(grad))
    return op.emitError("weft-schedule: the position table is not a "
                        "parameter");
  launch("position_embedding_backward",
         {{"batch", par.microBatch},
          {"seq", options.seqLen},
          {"hidden", positions.getShape()[1]},
          {"positions", positions.getShape()[0]}},
         {lookup(op.getGrad())}, {*grad});
  bindParameterGrads(op);
  // The input's gradient is the upstream gradient itself.
  values[op.getResult(0)] = lookup(op.getGrad());
  return success();
}

LogicalResult RoleScheduler::lowerLayerNormGrad(LayerNormGradOp op) {
  if (failed(checkEpsilon(op, op.getEpsilon())))
    return failure();
  // The row statistics: the forward's (op state), else recomputed.
  Slice mean, rstd;
  if (ValueRange state = op.getState(); !state.empty()) {
    mean = lookup(state[0]);
    rstd = lookup(state[1]);
  } else {
    std::array<Slice, 3> recomputed =
        layerNormForward(op.getInput(), op.getWeight(), op.getBias(),
                         op.getEpsilon().convertToDouble());
    mean = recomputed[1];
    rstd = recomputed[2];
  }
  bindParameterGrads(op);
  int64_t h = width(op.getInput()), n = rowsOf(op.getInput());
  Slice dx = activation("layer_norm.grad", n * h);
  launch("layer_norm_backward", {{"rows", n}, {"width", h}, {"bias", 1}},
         {lookup(op.getInput()), lookup(op.getWeight()), mean, rstd,
          lookup(op.getGrad())},
         {dx, lookup(op.getResult(1)), lookup(op.getResult(2))});
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult RoleScheduler::lowerRmsNormGrad(RMSNormGradOp op) {
  if (failed(checkEpsilon(op, op.getEpsilon())))
    return failure();
  // The row statistics, as for layer norms.
  Slice rstd = op.getState().empty()
                   ? rmsNormForward(op.getInput(), op.getWeight(),
                                    op.getEpsilon().convertToDouble())[1]
                   : lookup(op.getState()[0]);
  bindParameterGrads(op);
  int64_t h = width(op.getInput()), n = rowsOf(op.getInput());
  Slice dx = activation("rms_norm.grad", n * h);
  launch("rms_norm_backward", {{"rows", n}, {"width", h}},
         {lookup(op.getInput()), lookup(op.getWeight()), rstd,
          lookup(op.getGrad())},
         {dx, lookup(op.getResult(1))});
  values[op.getResult(0)] = dx;
  return success();
}

template <typename AttentionLikeGradOp>
LogicalResult RoleScheduler::lowerAttentionGrad(AttentionLikeGradOp op) {
  FailureOr<AttentionState> attention = attentionState(op, op.getState());
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
  if constexpr (std::is_same_v<AttentionLikeGradOp, AttentionGradOp>)
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
  // Input projections: dx = sum_j dqkv_j W_j^T (under TP, this rank's
  // partial sum) first, so its TP all-reduce overlaps the weight gradients
  // dW_j += x^T dqkv_j, db_j += sum_rows(dqkv_j) that follow.
  Slice dx = activation("attn.grad", rows() * hidden);
  for (auto [j, p] : llvm::enumerate(proj))
    gemm(false, true, rows(), hidden, p.width, dqkv[j], p.width,
         p.weight.matrix(p.column, hidden, p.width, p.ld), p.ld, dx, hidden,
         j > 0);
  for (auto [j, p] : llvm::enumerate(proj)) {
    gemm(true, false, hidden, p.width, rows(), x, hidden, dqkv[j], p.width,
         p.weightGrad.matrix(p.column, hidden, p.width, p.ld), p.ld, true);
    if (p.bias)
      launch("bias_grad", {{"rows", rows()}, {"width", p.width}}, {dqkv[j]},
             {p.biasGrad});
  }
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult RoleScheduler::lowerMlpGrad(MLPGradOp op) {
  int64_t act = activationCode(op.getActivation());
  if (act < 0)
    return op.emitError("weft-schedule: activation '")
           << op.getActivation() << "' is not lowered yet";
  Slice x = lookup(op.getInput()), dy = lookup(op.getGrad());
  int64_t hidden = width(op.getInput()), ffn = width(op.getUpWeight());
  int64_t n = rows() * ffn;
  Value gate = op.getGateWeight();
  // The forward's up, gate and activation when given, else recomputed.
  Slice u, g, h;
  if (ValueRange state = op.getState(); !state.empty()) {
    u = lookup(state.front());
    g = gate ? lookup(state[1]) : Slice();
    h = lookup(state.back());
  } else {
    std::array<Slice, 3> recomputed =
        mlpForward(x, hidden, ffn, op.getUpWeight(), op.getUpBias(), gate, act);
    u = recomputed[0];
    g = recomputed[1];
    h = recomputed[2];
  }
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
  // dx = du up^T (+ dg gate^T) first, so its TP all-reduce overlaps the
  // weight gradients that follow.
  Slice dx = activation("mlp.grad", rows() * hidden);
  gemm(false, true, rows(), hidden, ffn, du, ffn, lookup(op.getUpWeight()), ffn,
       dx, hidden, false);
  if (gate)
    gemm(false, true, rows(), hidden, ffn, dg, ffn, lookup(gate), ffn, dx,
         hidden, true);
  gemm(true, false, hidden, ffn, rows(), x, hidden, du, ffn,
       *gradOf(op.getUpWeight()), ffn, true);
  if (Value bias = op.getUpBias())
    launch("bias_grad", {{"rows", rows()}, {"width", ffn}}, {du},
           {*gradOf(bias)});
  if (gate)
    gemm(true, false, hidden, ffn, rows(), x, hidden, dg, ffn, *gradOf(gate),
         ffn, true);
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult RoleScheduler::lowerLmHeadGrad(LMHeadGradOp op) {
  auto weight = cast<RankedTensorType>(op.getWeight().getType());
  int64_t vocab = weight.getShape()[0], hidden = weight.getShape()[1];
  Slice dy = lookup(op.getGrad());
  int64_t ld = logitsRowStride(dy, vocab);
  Slice dx = activation("lm_head.grad", rows() * hidden);
  gemm(false, false, rows(), hidden, vocab, dy, ld, lookup(op.getWeight()),
       hidden, dx, hidden, false);
  gemm(true, false, vocab, hidden, rows(), dy, ld, lookup(op.getInput()),
       hidden, *gradOf(op.getWeight()), hidden, true);
  if (Value bias = op.getBias())
    launch("bias_grad", {{"rows", rows()}, {"width", vocab}}, {dy},
           {*gradOf(bias)});
  bindParameterGrads(op);
  values[op.getResult(0)] = dx;
  return success();
}

LogicalResult RoleScheduler::lowerBiasGrad(BiasGradOp op) {
  // weft.bias_grad names no parameter: find the one its result is the
  // gradient of, and accumulate into that slot.
  LocalParam *param = parameterReceiving(op.getResult());
  if (!param)
    return op.emitError("weft-schedule: the bias gradient does not reach a "
                        "parameter's gradient");
  Slice grad = *gradOf(param->op.getResult());
  int64_t w = width(op.getGrad()), n = elementsOf(op.getGrad());
  launch("bias_grad", {{"rows", n / w}, {"width", w}}, {lookup(op.getGrad())},
         {grad});
  values[op.getResult()] = grad;
  return success();
}

/// The loss seed must be the unscaled 1.0 of weft-autodiff (no loss
/// scaling), and ignored labels -100 (the kernels' kIgnoreIndex).
template <typename CrossEntropyLikeGradOp>
static LogicalResult checkLossGradient(CrossEntropyLikeGradOp op) {
  DenseElementsAttr seed;
  if (!matchPattern(op.getGrad(), m_Constant(&seed)) || !seed.isSplat() ||
      seed.getSplatValue<APFloat>().convertToDouble() != 1.0)
    return op.emitError("weft-schedule: the loss gradient must be the "
                        "constant 1.0");
  if (auto ignore = op.getIgnoreIndexAttr(); ignore && ignore.getInt() != -100)
    return op.emitError("weft-schedule: ignore_index must be -100");
  return success();
}

/// The slice for the gradient of `logits`: the logits' own when nothing but
/// the loss reads them (the forward loss op lowers to nothing, and the fused
/// kernel reads each logit before it writes its gradient), else a new one.
Slice RoleScheduler::logitsGradient(Value logits, int64_t elements) {
  return llvm::all_of(logits.getUsers(), isTheLoss)
             ? lookup(logits)
             : activation("logits.grad", elements);
}

LogicalResult RoleScheduler::lowerCrossEntropyGrad(CrossEntropyGradOp op) {
  if (failed(checkLossGradient(op)))
    return failure();
  int64_t vocab = width(op.getLogits());
  // Padded logits: rows `stride` apart, the words in the first `vocab`.
  int64_t stride = logitsRowStride(lookup(op.getLogits()), vocab);
  SmallVector<std::pair<StringRef, int64_t>> constants = {
      {"rows", rows()},
      {"vocab", stride},
      {"loss_div", par.gradAccum},
      {"grad_div", par.gradAccum * par.dp},
      {"accumulate", 1},
      {"grad", 1}};
  if (stride != vocab)
    constants.push_back({"valid", vocab});
  // One fused kernel per micro-batch adds this micro-batch's share of the
  // step loss to `loss` and writes the logit gradient scaled so that the DP
  // sum of the accumulated gradients is the global-batch mean.
  Slice dlogits = logitsGradient(op.getLogits(), rows() * stride);
  launch("cross_entropy", constants,
         {lookup(op.getLogits()), lookup(op.getLabels())}, {loss, dlogits});
  values[op.getResult(0)] = dlogits;
  notePaddedLogits(dlogits, stride, vocab);
  return success();
}

LogicalResult RoleScheduler::lowerVocabParallelCrossEntropyGrad(
    VocabParallelCrossEntropyGradOp op) {
  if (failed(checkLossGradient(op)))
    return failure();
  // The kernels' three vocabulary-parallel phases with the two TP
  // reductions between them: the global row max, then the global sum of
  // exponentials and the target logit (one all-reduce over both), then the
  // loss (identical on every TP rank) and this shard's logit gradient.
  int64_t local = width(op.getLogits());
  SmallVector<std::pair<StringRef, int64_t>> shard = {
      {"rows", rows()},
      {"vocab", op.getVocabSize()},
      {"vocab_local", local},
      {"vocab_start", vocabStart(local)}};
  Slice logits = lookup(op.getLogits()), labels = lookup(op.getLabels());
  Slice rowMax = statistic("ce.max", rows());
  launch("cross_entropy_shard_max", shard, {logits}, {rowMax});
  StringRef tp = bundle.family(Family::TP).getValue();
  Location loc = op.getLoc();
  wx::AllReduceOp::create(builder, loc, wx::ReduceKind::max, rows(), f32, tp,
                          ranges({rowMax}), ranges({rowMax}), phase());
  Slice sums = statistic("ce.sums", 2 * rows());
  Slice sumExp = sums.sub(0, rows()), target = sums.sub(rows(), rows());
  launch("cross_entropy_shard_sums", shard, {logits, labels, rowMax},
         {sumExp, target});
  wx::AllReduceOp::create(builder, loc, wx::ReduceKind::sum, 2 * rows(), f32,
                          tp, ranges({sums}), ranges({sums}), phase());
  SmallVector<std::pair<StringRef, int64_t>> finish = shard;
  finish.append({{"loss_div", par.gradAccum},
                 {"grad_div", par.gradAccum * par.dp},
                 {"accumulate", 1},
                 {"grad", 1}});
  // Not in place: under TP the head's backward, not the loss, bounds the
  // last stage's peak, and the in-place form packed worse there
  // (docs/planner.md).
  Slice dlogits = activation("logits.grad", rows() * local);
  launch("cross_entropy_shard_finish", finish,
         {logits, labels, rowMax, sumExp, target}, {loss, dlogits});
  values[op.getResult(0)] = dlogits;
  return success();
}

LogicalResult RoleScheduler::checkReturn(func::ReturnOp op) {
  auto func = cast<func::FuncOp>(op->getParentOp());
  if (!func.getName().ends_with("_backward"))
    return success();
  for (auto [i, value] : llvm::enumerate(op.getOperands())) {
    // Gradients of received activations are sent back by the pipeline.
    if (func.getResultAttr(i, "weft.input_grad"))
      continue;
    auto name = func.getResultAttrOfType<StringAttr>(i, "weft.grad");
    if (!name)
      return op.emitError("weft-schedule: backward result ")
             << i << " is not a parameter or activation gradient";
    // An unused parameter's gradient is a zero constant: its slot stays
    // zero.
    if (value.getDefiningOp<arith::ConstantOp>())
      continue;
    auto it = paramIndex.find(name.getValue());
    if (it == paramIndex.end() ||
        !(lookup(value) == *gradOf(params[it->second].op.getResult())))
      return op.emitError("weft-schedule: the gradient of '")
             << name.getValue() << "' is not accumulated in its slot";
  }
  return success();
}

LogicalResult RoleScheduler::lowerOp(Operation *op) {
  // Row-wise ops (norms, residuals, biases and their gradients) keep the
  // sequence sharding of their inputs; the ops that need whole sequences
  // (attention, MLP, head, loss) only ever see gathered inputs.
  if (!isa<shard::AllGatherOp, shard::ReduceScatterOp, shard::AllSliceOp,
           BlockOp, BlockGradOp, RestoreOp>(op) &&
      llvm::any_of(op->getOperands(),
                   [&](Value v) { return sequenceSharded.contains(v); }))
    sequenceSharded.insert(op->result_begin(), op->result_end());
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ParamOp op) -> LogicalResult {
        LocalParam *param = paramOf(op.getResult());
        if (!param)
          return op.emitError("weft-schedule: parameter '")
                 << op.getName() << "' was not declared for this role";
        if (zero == 3) {
          values[op.getResult()] = gatheredParameter(*param);
          return success();
        }
        const ParamPiece &first = param->pieces.front(),
                         &last = param->pieces.back();
        values[op.getResult()] = paramsBuf.sub(
            first.replicaStart, last.start + last.elements - first.start);
        return success();
      })
      .Case([&](SaveOp op) {
        saved[{currentFunction.getName().str(), microBatch, op.getSlot()}] = {
            lookup(op.getValue()), sequenceSharded.contains(op.getValue())};
        return success();
      })
      .Case([&](RestoreOp op) -> LogicalResult {
        auto it = saved.find({op.getForward().str(), microBatch, op.getSlot()});
        if (it == saved.end())
          return op.emitError("weft-schedule: slot ")
                 << op.getSlot() << " was never saved";
        values[op.getResult()] = it->second.first;
        if (it->second.second)
          sequenceSharded.insert(op.getResult());
        return success();
      })
      .Case([&](BlockOp op) -> LogicalResult {
        Block &body = op.getBody().front();
        values[body.getArgument(0)] = lookup(op.getInput());
        if (sequenceSharded.contains(op.getInput()))
          sequenceSharded.insert(body.getArgument(0));
        if (failed(lowerBlock(body)))
          return failure();
        Value yielded = cast<YieldOp>(body.getTerminator()).getValue();
        values[op.getResult()] = lookup(yielded);
        if (sequenceSharded.contains(yielded))
          sequenceSharded.insert(op.getResult());
        return success();
      })
      .Case([&](BlockGradOp op) -> LogicalResult {
        Block &body = op.getBody().front();
        values[body.getArgument(0)] = lookup(op.getGrad());
        if (sequenceSharded.contains(op.getGrad()))
          sequenceSharded.insert(body.getArgument(0));
        if (failed(lowerBlockGradBody(body)))
          return failure();
        for (auto [result, value] :
             llvm::zip(op->getResults(),
                       cast<GradYieldOp>(body.getTerminator()).getValues())) {
          values[result] = lookup(value);
          if (sequenceSharded.contains(value))
            sequenceSharded.insert(result);
        }
        return success();
      })
      .Case<YieldOp, GradYieldOp, arith::ConstantOp>(
          [](Operation *) { return success(); })
      // The loss itself is produced by the backward's fused kernels.
      .Case<CrossEntropyOp, VocabParallelCrossEntropyOp>(
          [](Operation *) { return success(); })
      // Megatron's `f` is the identity forward (its backward is an
      // all-reduce the backward function spells out).
      .Case([&](TPCopyOp op) {
        values[op.getResult()] = lookup(op.getInput());
        return success();
      })
      .Case([&](shard::AllReduceOp op) {
        return lowerAllReduce(op, op.getInput(), op.getResult());
      })
      .Case<shard::AllGatherOp, shard::ReduceScatterOp, shard::AllSliceOp>(
          [&](Operation *op) { return lowerSequenceCollective(op); })
      .Case([&](EmbeddingOp op) { return lowerEmbedding(op); })
      .Case([&](VocabEmbeddingOp op) { return lowerVocabEmbedding(op); })
      .Case([&](PositionEmbeddingOp op) { return lowerPositionEmbedding(op); })
      .Case([&](LayerNormOp op) { return lowerLayerNorm(op); })
      .Case([&](RMSNormOp op) { return lowerRmsNorm(op); })
      .Case([&](AttentionOp op) { return lowerAttention(op); })
      .Case([&](TPAttentionOp op) { return lowerAttention(op); })
      .Case([&](MLPOp op) { return lowerMlp(op); })
      .Case([&](LMHeadOp op) { return lowerLmHead(op); })
      .Case([&](arith::AddFOp op) { return lowerAddF(op); })
      .Case([&](BiasAddOp op) { return lowerBiasAdd(op); })
      .Case([&](EmbeddingGradOp op) { return lowerEmbeddingGrad(op); })
      .Case(
          [&](VocabEmbeddingGradOp op) { return lowerVocabEmbeddingGrad(op); })
      .Case([&](PositionEmbeddingGradOp op) {
        return lowerPositionEmbeddingGrad(op);
      })
      .Case([&](LayerNormGradOp op) { return lowerLayerNormGrad(op); })
      .Case([&](RMSNormGradOp op) { return lowerRmsNormGrad(op); })
      .Case([&](AttentionGradOp op) { return lowerAttentionGrad(op); })
      .Case([&](TPAttentionGradOp op) { return lowerAttentionGrad(op); })
      .Case([&](MLPGradOp op) { return lowerMlpGrad(op); })
      .Case([&](LMHeadGradOp op) { return lowerLmHeadGrad(op); })
      .Case([&](BiasGradOp op) { return lowerBiasGrad(op); })
      .Case([&](CrossEntropyGradOp op) { return lowerCrossEntropyGrad(op); })
      .Case([&](VocabParallelCrossEntropyGradOp op) {
        return lowerVocabParallelCrossEntropyGrad(op);
      })
      .Case([&](func::ReturnOp op) { return checkReturn(op); })
      .Default([](Operation *op) -> LogicalResult {
        return op->emitError("weft-schedule: '")
               << op->getName() << "' is not lowered yet";
      });
}

LogicalResult RoleScheduler::lowerBlockGradBody(Block &body) {
  // The re-run forward ops (recompute selective / full, docs/autodiff.md):
  // the ops that do not depend on the incoming gradient, apart from the
  // parameter declarations and restores. They come first in the body and
  // lower like their forward (their TP and sequence collectives included,
  // so every TP rank issues them again in the same order).
  llvm::DenseSet<Value> fromGradient(body.args_begin(), body.args_end());
  llvm::DenseSet<Operation *> rerun;
  for (Operation &op : body) {
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return fromGradient.contains(v); })) {
      fromGradient.insert(op.result_begin(), op.result_end());
      continue;
    }
    if (!isa<ParamOp, RestoreOp, arith::ConstantOp, GradYieldOp>(op))
      rerun.insert(&op);
  }
  bool regathered = rerun.empty() || zero != 3;
  for (Operation &op : body) {
    // ZeRO-3: a parameter that both the re-run ops and the grad ops read is
    // gathered twice, like the forward's and the backward's gathers: the
    // re-run's copy is released after its last re-run use and the grad ops
    // get a fresh gather, so a layer's parameters are not all held across
    // its backward.
    if (!regathered && !rerun.contains(&op) &&
        !isa<ParamOp, RestoreOp, arith::ConstantOp>(op)) {
      regathered = true;
      for (ParamOp param : body.getOps<ParamOp>()) {
        auto users = param->getUsers();
        if (llvm::none_of(users,
                          [&](Operation *u) { return rerun.contains(u); }) ||
            llvm::all_of(users,
                         [&](Operation *u) { return rerun.contains(u); }))
          continue;
        LocalParam *local = paramOf(param.getResult());
        if (!local)
          continue;
        gathered.erase(param.getName());
        values[param.getResult()] = gatheredParameter(*local);
      }
    }
    if (failed(lowerOp(&op)))
      return failure();
  }
  return success();
}

LogicalResult RoleScheduler::lowerBlock(Block &block) {
  for (Operation &op : block)
    if (failed(lowerOp(&op)))
      return failure();
  return success();
}
