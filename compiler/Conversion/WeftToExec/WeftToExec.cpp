//===- WeftToExec.cpp - weft-schedule: L1 training functions to weftx -----===//
//
// Schedules one training step of the differentiated stage functions as one
// weftx program per role (docs/lowering.md, "Passes"). A role is a (pipeline
// rank, TP rank) pair; the DP replicas of a role share its program and talk
// to their own groups through group families (one disjoint group per
// position on the other mesh axes).
//
// Per role: parameters, gradients and AdamW moments are slots of flat
// persistent buffers (with ZeRO-1 the moments and master weights hold this
// DP rank's pieces); the pipeline schedule (GPipe, 1F1B or interleaved 1F1B,
// PipelineSchedule.h) orders the forward and backward of every (chunk,
// micro-batch) on the `compute` stream, and activations and their gradients
// cross stage boundaries with send/recv on streams of their own, ordered
// against `compute` by events; then the sequence-parallel, tied-embedding
// and DP gradient sums. weft-optimizer (the norm, clipping, AdamW, ZeRO
// gathers) and the overlap passes take it from there.
//
//===----------------------------------------------------------------------===//
#include "StepScheduler.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/SetVector.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include <set>

namespace mlir::weft {
#define GEN_PASS_DEF_WEFTSCHEDULE
#include "Conversion/WeftToExec/Passes.h.inc"
} // namespace mlir::weft

using namespace mlir;
using namespace mlir::weft;
using namespace mlir::weft::schedule;

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
  if (const llvm::json::Array *array = value.getAsArray()) {
    SmallVector<Attribute> elements;
    for (const llvm::json::Value &element : *array)
      elements.push_back(jsonToAttribute(builder, element));
    return builder.getArrayAttr(elements);
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

//===----------------------------------------------------------------------===//
// BundleScheduler: what every role shares
//===----------------------------------------------------------------------===//

LogicalResult BundleScheduler::findStageFunctions() {
  SmallVector<func::FuncOp> forwards;
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr("weft.pipeline_stage") &&
        !func.getName().ends_with("_backward"))
      forwards.push_back(func);
  if (forwards.empty())
    return module.emitError("weft-schedule: no stage function; run weft-lower "
                            "and weft-autodiff first");
  if (failed(readParallel()))
    return failure();
  stages.assign(par.pp, SmallVector<StageFunctions, 2>(par.virtualStages));
  for (func::FuncOp forward : forwards) {
    auto stage = forward->getAttrOfType<DictionaryAttr>("weft.pipeline_stage");
    auto get = [&](StringRef name) -> int64_t {
      auto value = stage.getAs<IntegerAttr>(name);
      return value ? value.getInt() : -1;
    };
    int64_t rank = get("rank"), chunk = get("chunk");
    if (rank < 0 || rank >= par.pp || chunk < 0 || chunk >= par.virtualStages ||
        stages[rank][chunk].forward)
      return forward.emitError("weft-schedule: stage function of rank ")
             << rank << " chunk " << chunk << " does not fit pp = " << par.pp
             << " x virtual_stages = " << par.virtualStages;
    if (auto model = stage.getAs<StringAttr>("model"))
      modelName = model.str();
    auto backward = module.lookupSymbol<func::FuncOp>(
        (forward.getName() + "_backward").str());
    if (!backward)
      return forward.emitError("weft-schedule: no @")
             << forward.getName() << "_backward; run weft-autodiff first";
    stages[rank][chunk] = {forward, backward, get("stage")};
  }
  for (auto [rank, chunks] : llvm::enumerate(stages))
    for (auto [chunk, functions] : llvm::enumerate(chunks))
      if (!functions.forward)
        return module.emitError("weft-schedule: no stage function for "
                                "pipeline rank ")
               << rank << " chunk " << chunk;
  if (modelName.empty())
    modelName = forwards.front().getName().str();

  // A parameter declared on two pipeline ranks is a tied copy
  // (weft-split-stages); its gradients are summed across the two.
  llvm::StringMap<int64_t> rankOfParam;
  for (auto [rank, chunks] : llvm::enumerate(stages))
    for (StageFunctions functions : chunks)
      functions.forward.walk([&](ParamOp op) {
        auto [it, inserted] = rankOfParam.try_emplace(op.getName(), rank);
        if (!inserted && it->second != int64_t(rank))
          tiedAcrossStages.insert(op.getName());
      });
  return success();
}

LogicalResult BundleScheduler::readParallel() {
  func::FuncOp forward;
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr("weft.pipeline_stage")) {
      forward = func;
      break;
    }
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
  get("virtual_stages", par.virtualStages);
  get("prefetch_depth", par.prefetchDepth);
  get("bucket_bytes", par.bucketBytes);
  if (auto recompute = dict.getAs<StringAttr>("recompute"))
    par.recompute = recompute.str();
  if (auto schedule = dict.getAs<StringAttr>("schedule"))
    par.schedule = schedule.str();
  if (auto sequenceParallel = dict.getAs<BoolAttr>("sequence_parallel"))
    par.sequenceParallel = sequenceParallel.getValue();
  if (auto layers = dict.getAs<DenseI64ArrayAttr>("layers_per_stage"))
    par.layersPerStage.assign(layers.asArrayRef().begin(),
                              layers.asArrayRef().end());
  // What this scheduler implements (docs/lowering.md, status).
  if (par.zero < 0 || par.zero > 3)
    return forward.emitError("weft-schedule: unknown ZeRO stage ") << par.zero;
  if (par.prefetchDepth < 0 || par.bucketBytes < 0)
    return forward.emitError("weft-schedule: prefetch_depth and bucket_bytes "
                             "must not be negative");
  if (options.persistThreshold < -1)
    return forward.emitError("weft-schedule: persist-threshold must be -1 "
                             "(derived) or at least 0, got ")
           << options.persistThreshold;
  if (options.maxLiveGatheredBytes < 0)
    return forward.emitError("weft-schedule: max-live-gathered-bytes must "
                             "not be negative, got ")
           << options.maxLiveGatheredBytes;
  if (options.maxLiveGradBytes < 0)
    return forward.emitError("weft-schedule: max-live-grad-bytes must not "
                             "be negative, got ")
           << options.maxLiveGradBytes;
  if (par.recompute != "none" && par.recompute != "selective" &&
      par.recompute != "full")
    return forward.emitError("weft-schedule: unknown recompute '")
           << par.recompute << "'";
  if (par.sequenceParallel && options.seqLen % par.tp != 0)
    return forward.emitError("weft-schedule: seq-len ")
           << options.seqLen << " is not divisible by tp = " << par.tp
           << " (sequence parallelism)";
  std::optional<pipeline::ScheduleKind> kind =
      pipeline::parseScheduleKind(par.schedule);
  if (!kind)
    return forward.emitError("weft-schedule: unknown pipeline schedule '")
           << par.schedule << "'";
  if (pipeline::pipelineOrder(*kind, par.pp, par.virtualStages, par.gradAccum,
                              0)
          .empty())
    return forward.emitError("weft-schedule: schedule '")
           << par.schedule << "' cannot run " << par.gradAccum
           << " micro-batches on " << par.pp << " stages x "
           << par.virtualStages << " chunks";
  if (options.seqLen <= 0)
    return forward.emitError("weft-schedule: seq-len must be positive");
  return success();
}

FlatSymbolRefAttr BundleScheduler::kernel(StringRef name,
                                          DictionaryAttr constants) {
  return kernels.get(name, constants);
}

FlatSymbolRefAttr BundleScheduler::family(Family kind) {
  FlatSymbolRefAttr &symbol = families[int(kind)];
  if (!symbol)
    symbol = wx::getOrCreateFamily(module, kind);
  return symbol;
}

void BundleScheduler::addShard(ParamOp op, wx::ShardAttr shard) {
  StringRef name = op.getName();
  if (auto info = op->getAttrOfType<DictionaryAttr>("weft.shard"))
    if (auto global = info.getAs<StringAttr>("global_name"))
      name = global.getValue();
  auto &entry = parameters[name];
  if (!entry.first)
    entry.first = op;
  entry.second.push_back(shard);
}

void BundleScheduler::declareParameters() {
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointToEnd(module.getBody());
  for (auto &[name, entry] : parameters) {
    ParamOp op = entry.first;
    auto type = cast<RankedTensorType>(op.getType());
    SmallVector<int64_t> shape(type.getShape());
    if (auto info = op->getAttrOfType<DictionaryAttr>("weft.shard"))
      if (auto global = info.getAs<DenseI64ArrayAttr>("global_shape"))
        shape.assign(global.asArrayRef().begin(), global.asArrayRef().end());
    auto init = *wx::symbolizeInitKind(stringifyInitKind(op.getInit()));
    wx::ParameterOp::create(builder, op.getLoc(), name, shape,
                            type.getElementType(), init, op.getInitStdAttr(),
                            op.getCheckpointName(), op.getHfTransposed(),
                            builder.getArrayAttr(entry.second));
  }
}

wx::LossScaleAttr BundleScheduler::lossScale() const {
  // fp16's narrow range needs a scale; by default it is dynamic from 2^16,
  // halved on overflow (PyTorch's GradScaler, DeepSpeed).
  bool dynamic = options.lossScale == 0 && options.precision == "fp16";
  double initial = options.lossScale > 0 ? options.lossScale
                   : dynamic             ? options.initialLossScale
                                         : 1.0;
  return wx::LossScaleAttr::get(ctx, dynamic, APFloat(initial),
                                dynamic ? options.lossScaleWindow : 0,
                                APFloat(0.5));
}

LogicalResult BundleScheduler::setBundleAttributes() {
  auto apf = [](double v) { return APFloat(v); };
  module->setAttr("weftx.model",
                  wx::ModelAttr::get(ctx, modelName,
                                     options.family.empty()
                                         ? StringRef(modelName)
                                         : StringRef(options.family)));
  module->setAttr("weftx.training",
                  wx::TrainingAttr::get(
                      ctx, par.microBatch * par.gradAccum * par.dp,
                      options.seqLen, options.precision, par.microBatch,
                      par.gradAccum, options.stepsPerPlan, apf(options.lr),
                      apf(options.minLr), options.warmupSteps,
                      options.decaySteps, apf(options.weightDecay),
                      apf(options.beta1), apf(options.beta2), apf(options.eps),
                      apf(options.gradClip), lossScale()));
  SmallVector<int64_t> peaks(par.pp * par.tp, options.predictedPeakBytes);
  module->setAttr("weftx.prediction",
                  wx::PredictionAttr::get(ctx, apf(options.predictedStepTimeS),
                                          peaks, apf(options.predictedMfu)));
  auto i64 = [&](int64_t value) { return builder.getI64IntegerAttr(value); };
  NamedAttrList config;
  config.set("dp", i64(par.dp));
  config.set("grad_accum", i64(par.gradAccum));
  config.set("micro_batch", i64(par.microBatch));
  config.set("pp", i64(par.pp));
  config.set("recompute", builder.getStringAttr(par.recompute));
  config.set("tp", i64(par.tp));
  config.set("zero", i64(par.zero));
  // The DP gradient buckets (weft-overlap-grad-sync), the offloaded AdamW's
  // buckets (weft-optimizer) and ZeRO-3's gather buckets and prefetch depth.
  if (par.dp > 1 || options.offloadOptimizer)
    config.set("bucket_bytes", i64(par.bucketBytes));
  if (par.zero == 3 && par.dp > 1)
    config.set("prefetch_depth", i64(par.prefetchDepth));
  if (par.pp > 1) {
    config.set("schedule", builder.getStringAttr(par.schedule));
    config.set("virtual_stages", i64(par.virtualStages));
  }
  // weft-inspect's "layers per stage" (one entry per virtual stage).
  if (!par.layersPerStage.empty()) {
    SmallVector<Attribute> layers;
    for (int64_t n : par.layersPerStage)
      layers.push_back(i64(n));
    config.set("layers_per_stage", builder.getArrayAttr(layers));
  }
  if (!options.clusterJson.empty()) {
    llvm::Expected<llvm::json::Value> cluster =
        llvm::json::parse(options.clusterJson);
    if (!cluster)
      return module.emitError() << "cluster-json is not valid JSON: "
                                << llvm::toString(cluster.takeError());
    config.set("cluster", jsonToAttribute(builder, *cluster));
  }
  module->setAttr("weftx.config", config.getDictionary(ctx));
  return success();
}

LogicalResult BundleScheduler::run() {
  if (options.precision == "bf16")
    computeType = BFloat16Type::get(ctx);
  else if (options.precision == "fp16")
    computeType = Float16Type::get(ctx);
  else if (options.precision == "fp32")
    computeType = Float32Type::get(ctx);
  else
    return module.emitError("weft-schedule: precision must be fp32, bf16 or "
                            "fp16, got '")
           << options.precision << "'";
  if (options.lossScale < 0)
    return module.emitError("weft-schedule: loss-scale must be >= 0, got ")
           << options.lossScale;
  if (options.initialLossScale <= 0)
    return module.emitError("weft-schedule: initial-loss-scale must be > 0, "
                            "got ")
           << options.initialLossScale;
  if (options.lossScaleWindow < 1)
    return module.emitError("weft-schedule: loss-scale-window must be >= 1, "
                            "got ")
           << options.lossScaleWindow;
  if (failed(findStageFunctions()))
    return failure();
  Location loc = module.getLoc();
  builder.setInsertionPointToEnd(module.getBody());
  mesh = wx::MeshOp::create(builder, loc, par.dp, par.pp, par.tp);
  // One program per role, in role order (role = pipeline rank * TP + TP
  // rank), created up front so that kernels declared while lowering any of
  // them go before all.
  SmallVector<wx::ProgramOp> programs;
  for (int64_t s = 0; s < par.pp; ++s)
    for (int64_t t = 0; t < par.tp; ++t) {
      SmallVector<int64_t> ranks;
      for (int64_t d = 0; d < par.dp; ++d)
        ranks.push_back(rankOf(d, s, t));
      auto program = wx::ProgramOp::create(
          builder, loc, ("role" + llvm::Twine(programs.size())).str(), ranks,
          IntegerAttr(), IntegerAttr(), IntegerAttr());
      program.getBody().emplaceBlock();
      programs.push_back(program);
    }
  for (int64_t s = 0; s < par.pp; ++s)
    for (int64_t t = 0; t < par.tp; ++t)
      if (failed(RoleScheduler(*this, s, t, programs[s * par.tp + t]).run()))
        return failure();
  declareParameters();

  // Drop level L1: the module is now one bundle.
  while (&module.getBody()->front() != mesh.getOperation())
    module.getBody()->front().erase();
  return setBundleAttributes();
}

//===----------------------------------------------------------------------===//
// RoleScheduler: buffers and instructions
//===----------------------------------------------------------------------===//

RoleScheduler::RoleScheduler(BundleScheduler &bundle, int64_t stage,
                             int64_t tpRank, wx::ProgramOp program)
    : bundle(bundle), par(bundle.par), options(bundle.options), ctx(bundle.ctx),
      builder(ctx), f32(Float32Type::get(ctx)), computeType(bundle.computeType),
      stage(stage), tpRank(tpRank), lastStage(stage == par.pp - 1),
      program(program) {}

Slice RoleScheduler::newBuffer(StringRef name, int64_t elements,
                               wx::Region region, Type type) {
  // Unique, deterministic names: the first use keeps `name`, later ones
  // get `.1`, `.2`, ...
  int64_t &count = bufferNames[name];
  std::string symbol =
      count ? (name + "." + llvm::Twine(count)).str() : name.str();
  ++count;
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPoint(compute);
  int64_t bytes = elements * (type.getIntOrFloatBitWidth() / 8);
  auto buffer =
      wx::BufferOp::create(builder, program.getLoc(), symbol, region, bytes,
                           /*alignment=*/64, IntegerAttr(), type);
  return {buffer.getSymNameAttr(), 0, bytes, type};
}

wx::RangeAttr RoleScheduler::range(const Slice &slice) {
  assert(slice && "an operand without a buffer (a forward's gradient?)");
  return wx::RangeAttr::get(ctx, FlatSymbolRefAttr::get(slice.buffer),
                            slice.offset, slice.bytes);
}

ArrayAttr RoleScheduler::ranges(ArrayRef<Slice> slices) {
  SmallVector<Attribute> attrs;
  for (const Slice &s : slices)
    attrs.push_back(range(s));
  return builder.getArrayAttr(attrs);
}

void RoleScheduler::launch(StringRef kernel,
                           ArrayRef<std::pair<StringRef, int64_t>> constants,
                           ArrayRef<Slice> reads, ArrayRef<Slice> writes) {
  SmallVector<NamedAttribute> named;
  for (auto [name, value] : constants)
    named.emplace_back(builder.getStringAttr(name),
                       builder.getI64IntegerAttr(value));
  FlatSymbolRefAttr symbol =
      bundle.kernel(kernel, builder.getDictionaryAttr(named));
  wx::LaunchOp::create(builder, program.getLoc(), symbol, DenseI64ArrayAttr(),
                       ranges(reads), ranges(writes), phase());
}

void RoleScheduler::gemm(bool transA, bool transB, int64_t m, int64_t n,
                         int64_t k, Slice a, int64_t lda, Slice b, int64_t ldb,
                         Slice c, int64_t ldc, bool accumulate) {
  SmallVector<Slice, 3> reads = {b, a};
  if (accumulate)
    reads.push_back(c);
  assert(a.type == c.type && b.type == c.type && "GEMM operands' dtypes");
  wx::GemmOp::create(
      builder, program.getLoc(), c.type, transB, transA, n, m, k, ldb, lda, ldc,
      APFloat(1.0), APFloat(accumulate ? 1.0 : 0.0),
      /*epilogue=*/wx::GemmEpilogueKindAttr(),
      /*epilogue_kernels=*/ArrayAttr(), ranges(reads), ranges({c}), phase());
}

Slice RoleScheduler::tpAllReduce(Slice in, StringRef name, bool inPlace) {
  Slice out = inPlace ? in : activation(name, in.elements());
  wx::AllReduceOp::create(builder, program.getLoc(), wx::ReduceKind::sum,
                          in.elements(), in.type,
                          bundle.family(Family::TP).getValue(), ranges({in}),
                          ranges({out}), phase());
  return out;
}

int64_t RoleScheduler::eventAfter(Operation *op, StringAttr phase) {
  auto [it, inserted] = recordedAfter.try_emplace(op, 0);
  if (inserted) {
    it->second = numEvents++;
    OpBuilder after(ctx);
    after.setInsertionPointAfter(op);
    wx::RecordEventOp::create(after, program.getLoc(), it->second, ArrayAttr(),
                              ArrayAttr(), phase);
  }
  return it->second;
}

int64_t RoleScheduler::elementsOf(Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  // Activations are [batch, seq, ...] with both dynamic.
  int64_t sequence = sequenceSharded.contains(value) ? options.seqLen / par.tp
                                                     : options.seqLen;
  int64_t elements = 1;
  for (auto [dim, size] : llvm::enumerate(type.getShape()))
    elements *= !ShapedType::isDynamic(size) ? size
                : dim == 0                   ? par.microBatch
                                             : sequence;
  return elements;
}

LocalParam *RoleScheduler::paramOf(Value value) {
  auto op = value.getDefiningOp<ParamOp>();
  if (!op)
    return nullptr;
  auto it = paramIndex.find(op.getName());
  return it == paramIndex.end() ? nullptr : &params[it->second];
}

FailureOr<Slice> RoleScheduler::gradOf(Value param) {
  LocalParam *local = paramOf(param);
  if (!local)
    return failure();
  const ParamPiece &first = local->pieces.front(), &last = local->pieces.back();
  int64_t span = last.start + last.elements - first.start;
  if (!reducesEveryMicroBatch())
    return gradsBuf.sub(first.start, span);
  // A forward (the attention's projections are resolved with their
  // gradients) creates no gradient.
  if (!inBackward)
    return Slice();
  return microBatchGrad(local - params.data()).sub(0, span);
}

void RoleScheduler::bindParameterGrads(Operation *gradOp) {
  unsigned result = 0;
  for (Value operand : gradOp->getOperands().drop_front()) {
    if (!isa<FloatType>(getElementTypeOrSelf(operand.getType())))
      continue;
    if (FailureOr<Slice> grad = gradOf(operand); succeeded(grad))
      values[gradOp->getResult(result)] = *grad;
    ++result;
  }
}

LocalParam *RoleScheduler::parameterReceiving(Value grad) {
  for (OpOperand &use : grad.getUses()) {
    Operation *user = use.getOwner();
    StringAttr name;
    if (auto add = dyn_cast<arith::AddFOp>(user)) {
      if (LocalParam *param = parameterReceiving(add.getResult()))
        return param;
      continue;
    }
    if (auto ret = dyn_cast<func::ReturnOp>(user))
      name = cast<func::FuncOp>(ret->getParentOp())
                 .getResultAttrOfType<StringAttr>(use.getOperandNumber(),
                                                  "weft.grad");
    if (auto yield = dyn_cast<GradYieldOp>(user)) {
      // The yield lists the input's gradient, then the parameters'.
      auto block = cast<BlockGradOp>(yield->getParentOp());
      unsigned index = use.getOperandNumber();
      if (index > 0 && index <= block.getParams().size())
        name = cast<StringAttr>(block.getParams()[index - 1]);
    }
    if (!name)
      continue;
    auto it = paramIndex.find(name.getValue());
    if (it != paramIndex.end())
      return &params[it->second];
  }
  return nullptr;
}

//===----------------------------------------------------------------------===//
// RoleScheduler: parameters
//===----------------------------------------------------------------------===//

LogicalResult RoleScheduler::declareParameters() {
  // Every parameter of this rank's chunks, once (a chunk's tied copy of a
  // parameter this rank also declares shares its slot).
  for (StageFunctions functions : bundle.stages[stage]) {
    WalkResult result = functions.forward.walk([&](ParamOp op) {
      if (paramIndex.count(op.getName()))
        return WalkResult::advance();
      LocalParam param;
      param.op = op;
      auto info = op->getAttrOfType<DictionaryAttr>("weft.shard");
      auto tpDim = info ? info.getAs<IntegerAttr>("tp_dim") : IntegerAttr();
      bool split = tpDim && par.tp > 1;
      param.tiedAcrossStages = bundle.tiedAcrossStages.contains(op.getName());
      param.sequencePartial =
          info && info.get("sequence_partial") && par.tp > 1;
      auto local = cast<RankedTensorType>(op.getType());
      if (!split) {
        param.pieces.push_back({0, op.getNumElements(), 0, 0, -1, 0, 0});
      } else {
        int64_t dim = tpDim.getInt();
        int64_t localSize = local.getDimSize(dim);
        int64_t elementsPerIndex = op.getNumElements() / localSize;
        auto global = info.getAs<DenseI64ArrayAttr>("global_shape");
        int64_t extent = global[dim];
        if (auto segments = info.getAs<DenseI64ArrayAttr>("segments")) {
          // A fused [q | k | v] tensor: this rank's columns of each third.
          int64_t segmentStart = 0;
          for (int64_t segment : segments.asArrayRef()) {
            int64_t length = segment / par.tp;
            param.pieces.push_back({0, elementsPerIndex * length, 0, 0, dim,
                                    segmentStart + tpRank * length, length});
            segmentStart += segment;
          }
        } else {
          // The vocabulary is padded to a multiple of TP: the last shards'
          // slices stop at the global extent and their padding rows start
          // (and stay) zero.
          int64_t start = tpRank * localSize;
          if (start >= extent) {
            op.emitError("weft-schedule: TP rank ")
                << tpRank << " holds only padding of parameter '"
                << op.getName() << "'";
            return WalkResult::interrupt();
          }
          param.pieces.push_back({0, op.getNumElements(), 0, 0, dim, start,
                                  std::min(localSize, extent - start)});
        }
      }
      paramIndex[op.getName()] = params.size();
      params.push_back(std::move(param));
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      return failure();
  }

  // With ZeRO-1 every slot is padded so that each DP rank's piece is a
  // whole number of aligned elements; the pieces are contiguous in the shard
  // buffers, so one optimizer step covers them all.
  int64_t shardElements = 0;
  for (LocalParam &param : params)
    for (ParamPiece &piece : param.pieces) {
      piece.start = flatElements = llvm::alignTo(flatElements, kSlotAlign);
      piece.padded =
          zeroShards == 1
              ? piece.elements
              : int64_t(llvm::alignTo(piece.elements, zeroShards * kSlotAlign));
      piece.shardStart = shardElements;
      flatElements += piece.padded;
      shardElements += piece.padded / zeroShards;
    }
  stateElements = zeroShards == 1 ? flatElements : shardElements;
  // ZeRO-3 keeps full copies only of the persistent small parameters
  // (`persist-threshold`, DeepSpeed's stage3_param_persistence_threshold),
  // packed in `params`; the others are gathered into the arena where used.
  // ZeRO-2/3 keep full gradients only during the step, in the arena, and
  // the persistent region only this rank's shard of them.
  int64_t replicaElements = flatElements;
  if (zero == 3) {
    int64_t largest = 0;
    for (const LocalParam &param : params)
      largest = std::max(largest, param.localElements());
    int64_t threshold = options.persistThreshold >= 0
                            ? options.persistThreshold
                            : std::min<int64_t>(100000, largest / 64);
    replicaElements = 0;
    SmallVector<int64_t> gatheredBytes;
    for (LocalParam &param : params) {
      param.persistent = param.localElements() <= threshold;
      if (!param.persistent) {
        gatheredBytes.push_back(param.spanElements() *
                                computeType.getIntOrFloatBitWidth() / 8);
        continue;
      }
      int64_t base = param.pieces.front().start;
      for (ParamPiece &piece : param.pieces)
        piece.replicaStart = replicaElements + piece.start - base;
      replicaElements += param.spanElements();
    }
    // Gather units: buckets of small neighbours up to `bucket_bytes` and at
    // most the second largest gathered parameter (a layer matrix: what the
    // planner's memory model counts per gather); the live bound: the
    // largest gather (a tied embedding stays gathered from the embedding to
    // the head) plus the unit in use and `prefetch_depth` ahead of it.
    llvm::sort(gatheredBytes, std::greater<int64_t>());
    int64_t first = gatheredBytes.empty() ? 0 : gatheredBytes[0];
    int64_t second = gatheredBytes.size() > 1 ? gatheredBytes[1] : first;
    gatherBucketBytes = std::min<int64_t>(
        par.bucketBytes > 0 ? par.bucketBytes : 25 << 20, second);
    liveGatherBound =
        options.maxLiveGatheredBytes > 0
            ? options.maxLiveGatheredBytes
            : first + (std::max<int64_t>(1, par.prefetchDepth) + 1) * second;
  } else {
    for (LocalParam &param : params)
      for (ParamPiece &piece : param.pieces)
        piece.replicaStart = piece.start;
  }
  // Mixed precision: the working copy `params`, the gradients and their
  // shards are in the compute dtype; the optimizer steps an fp32 `master`
  // (the whole flat buffer without ZeRO, this rank's shard with it) and
  // writes the rounded result into the working copy (without ZeRO) or into
  // `params.shard`, which the parameter all-gathers read (ZeRO 1-3).
  if (zero < 3 || replicaElements > 0)
    paramsBuf = newBuffer("params", replicaElements, wx::Region::persistent,
                          computeType);
  // ZeRO-2/3 have no full gradient buffer: a buffer per parameter and
  // micro-batch (microBatchGrad), live until reduce-scattered.
  if (!reducesEveryMicroBatch())
    gradsBuf =
        newBuffer("grads", flatElements, wx::Region::persistent, computeType);
  // Optimizer offload keeps the optimizer's state in host memory; the
  // device then needs a copy of its own even in fp32 (the working copy, or
  // the shard the gathers read).
  bool offload = options.offloadOptimizer;
  wx::Region stateRegion = offload ? wx::Region::host : wx::Region::persistent;
  bool separateMaster = mixedPrecision() || offload;
  // weft-optimizer finds the state buffers by name.
  newBuffer("exp_avg", stateElements, stateRegion, f32);
  newBuffer("exp_avg_sq", stateElements, stateRegion, f32);
  master = paramsBuf;
  gradShards = gradsBuf;
  if (reducesEveryMicroBatch()) {
    shardReduced.assign(params.size(), false);
    // The live bound: the largest gradient buffer with room for three more
    // (one written, one reduce-scattered, one queued, so that a
    // reduce-scatter as slow as a gradient's compute does not stall it:
    // with room for two, gpt2-medium's tied embedding, live through the
    // whole backward, left compute waiting every layer), each with its
    // reduce-scatter output after the first micro-batch.
    int64_t first = 0, second = 0;
    for (const LocalParam &param : params) {
      int64_t bytes =
          param.spanElements() * computeType.getIntOrFloatBitWidth() / 8;
      if (bytes > first)
        second = std::exchange(first, bytes);
      else
        second = std::max(second, bytes);
    }
    int64_t withParts = par.gradAccum > 1 ? zeroShards + 1 : zeroShards;
    liveGradBound = options.maxLiveGradBytes > 0
                        ? options.maxLiveGradBytes
                        : (first + 3 * second) * withParts / zeroShards;
    // coalesceGradReductions' buckets: cut where compute waits, so the
    // bound holds whatever their size.
    gradBucketBytes = par.bucketBytes > 0 ? par.bucketBytes : 25 << 20;
  }
  if (zeroShards > 1) {
    master = newBuffer("master", stateElements, stateRegion, f32);
    gradShards = newBuffer("grads.shard", stateElements, wx::Region::persistent,
                           computeType);
  } else if (separateMaster) {
    master = newBuffer("master", stateElements, stateRegion, f32);
  }
  gatherSource = master;
  if (zeroShards > 1 && separateMaster)
    gatherSource = newBuffer("params.shard", stateElements,
                             wx::Region::persistent, computeType);

  auto role = FlatSymbolRefAttr::get(program.getSymNameAttr());
  for (LocalParam &param : params)
    for (const ParamPiece &piece : param.pieces) {
      auto whole = [&](const Slice &buffer) {
        bundle.addShard(
            param.op,
            wx::ShardAttr::get(ctx, role, FlatSymbolRefAttr::get(buffer.buffer),
                               piece.replicaStart * buffer.elementBytes(),
                               piece.dim, piece.sliceStart, piece.sliceLength,
                               /*zero_shards=*/1, piece.elements));
      };
      // The ZeRO master weights (and their low-precision copy) start as
      // this DP rank's piece.
      auto dpPiece = [&](const Slice &buffer) {
        bundle.addShard(
            param.op,
            wx::ShardAttr::get(ctx, role, FlatSymbolRefAttr::get(buffer.buffer),
                               piece.shardStart * buffer.elementBytes(),
                               piece.dim, piece.sliceStart, piece.sliceLength,
                               zeroShards, piece.padded));
      };
      if (paramsBuf && (zero < 3 || param.persistent))
        whole(paramsBuf);
      if (zeroShards == 1 && master != paramsBuf)
        whole(master);
      if (zeroShards > 1)
        dpPiece(master);
      if (gatherSource != master)
        dpPiece(gatherSource);
    }
  return success();
}

//===----------------------------------------------------------------------===//
// RoleScheduler: the pipeline
//===----------------------------------------------------------------------===//

wx::StreamOp RoleScheduler::p2pStream(StringRef direction, int64_t sender) {
  // Transfers are matched per (sender, receiver, stream name) in order: one
  // stream per direction and sending pipeline rank keeps a rank's sends
  // independent of its receives, so neither waits behind the other.
  return sideStream(("p2p." + direction + ".s" + llvm::Twine(sender)).str());
}

void RoleScheduler::send(Slice slice, int64_t peer, StringRef direction) {
  Location loc = program.getLoc();
  int64_t event = numEvents++;
  wx::RecordEventOp::create(builder, loc, event, ArrayAttr(), ArrayAttr(),
                            phase());
  auto p2p =
      OpBuilder::atBlockEnd(&p2pStream(direction, stage).getBody().front());
  StringAttr label =
      p2p.getStringAttr(("send " + llvm::Twine(phaseLabel)).str());
  wx::WaitEventOp::create(p2p, loc, event, ArrayAttr(), ArrayAttr(), label);
  wx::SendOp::create(p2p, loc, slice.elements(), slice.type,
                     bundle.family(Family::PP).getValue(), peer,
                     ranges({slice}), ArrayAttr(), label);
  // Compute waits for the send two tasks later (runTask), so the sent
  // buffer's bytes can be reused after that.
  int64_t sent = numEvents++;
  wx::RecordEventOp::create(p2p, loc, sent, ArrayAttr(), ArrayAttr(), label);
  pendingSends.push_back({taskIndex, sent});
}

Slice RoleScheduler::receive(StringRef name, int64_t elements, int64_t peer,
                             StringRef direction) {
  Location loc = program.getLoc();
  Slice slice = activation(name, elements);
  auto p2p =
      OpBuilder::atBlockEnd(&p2pStream(direction, peer).getBody().front());
  StringAttr label =
      p2p.getStringAttr(("recv " + llvm::Twine(phaseLabel)).str());
  // The receive is posted once compute has begun the previous task: one
  // task of prefetch, and the buffers of the micro-batches compute is done
  // with are dead by then, so weft-plan-memory can reuse them (unthrottled,
  // every receive of the step could be in flight at once).
  if (previousTaskBegin) {
    int64_t begun =
        eventAfter(previousTaskBegin,
                   previousTaskBegin->getAttrOfType<StringAttr>("phase"));
    wx::WaitEventOp::create(p2p, loc, begun, ArrayAttr(), ArrayAttr(), label);
  }
  int64_t event = numEvents++;
  wx::RecvOp::create(p2p, loc, elements, slice.type,
                     bundle.family(Family::PP).getValue(), peer, ArrayAttr(),
                     ranges({slice}), label);
  wx::RecordEventOp::create(p2p, loc, event, ArrayAttr(), ArrayAttr(), label);
  wx::WaitEventOp::create(builder, loc, event, ArrayAttr(), ArrayAttr(),
                          phase());
  return slice;
}

LogicalResult RoleScheduler::bindArguments(const StageFunctions &functions,
                                           func::FuncOp func,
                                           int64_t microBatch) {
  std::pair<int64_t, int64_t> key = {functions.virtualStage, microBatch};
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (func.getArgAttr(i, "weft.output_grad")) {
      values[arg] = receivedGradient[key];
      continue;
    }
    auto input = func.getArgAttrOfType<StringAttr>(i, "weft.input");
    if (input && input.getValue() == "tokens")
      values[arg] = batches[microBatch].first;
    else if (input && input.getValue() == "labels")
      values[arg] = batches[microBatch].second;
    else if (input && input.getValue() == "activation")
      values[arg] = receivedActivation[key];
    else
      return func.emitError("weft-schedule: argument ")
             << i << " is not tokens, labels, an activation or a gradient";
  }
  return success();
}

LogicalResult RoleScheduler::runTask(const pipeline::Task &task) {
  StageFunctions functions = bundle.stages[stage][task.chunk];
  int64_t virtualStage = functions.virtualStage;
  bool firstVirtual = virtualStage == 0,
       lastVirtual = virtualStage == bundle.numVirtualStages() - 1;
  int64_t previousRank = (stage + par.pp - 1) % par.pp,
          nextRank = (stage + 1) % par.pp;
  microBatch = task.microBatch;
  std::string where = ("mb" + llvm::Twine(microBatch)).str();
  if (par.virtualStages > 1)
    where = ("c" + llvm::Twine(task.chunk) + " " + where).str();
  values.clear();
  sequenceSharded.clear();
  gathered.clear();
  Block &computeBlock = compute.getBody().front();
  // The sends of two tasks ago are done before this task begins (their
  // buffers' bytes become reusable; the partner has long posted its
  // receive).
  ++taskIndex;
  while (!pendingSends.empty() && pendingSends.front().first <= taskIndex - 2) {
    wx::WaitEventOp::create(builder, program.getLoc(),
                            pendingSends.front().second, ArrayAttr(),
                            ArrayAttr(), builder.getStringAttr("p2p done"));
    pendingSends.erase(pendingSends.begin());
  }
  Operation *taskBegin = computeBlock.empty() ? nullptr : &computeBlock.back();

  // This rank's share of the micro-batch, once, before its first use.
  bool readsData =
      llvm::any_of(functions.forward.getArguments(), [&](BlockArgument arg) {
        auto input = functions.forward.getArgAttrOfType<StringAttr>(
            arg.getArgNumber(), "weft.input");
        return input && input.getValue() != "activation";
      });
  if (readsData && !batches.count(microBatch)) {
    phaseLabel = ("data mb" + llvm::Twine(microBatch)).str();
    IntegerType i32 = builder.getI32Type();
    Slice tokens = newBuffer("tokens", rows(), wx::Region::arena, i32);
    Slice targets = newBuffer("targets", rows(), wx::Region::arena, i32);
    wx::LoadBatchOp::create(builder, program.getLoc(), microBatch, ArrayAttr(),
                            ranges({tokens, targets}), phase());
    batches[microBatch] = {tokens, targets};
  }

  std::pair<int64_t, int64_t> key = {virtualStage, microBatch};
  func::FuncOp func = task.backward ? functions.backward : functions.forward;
  inBackward = task.backward;
  // Under sequence parallelism the residual stream between blocks, and so
  // every stage boundary, holds this rank's part of the sequence.
  if (par.sequenceParallel && par.tp > 1)
    for (BlockArgument arg : func.getArguments())
      if (func.getArgAttr(arg.getArgNumber(), "weft.output_grad") ||
          func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "weft.input") ==
              StringAttr::get(ctx, "activation"))
        sequenceSharded.insert(arg);
  phaseLabel = ((task.backward ? "bwd " : "fwd ") + where);
  if (!task.backward && !firstVirtual) {
    BlockArgument arg;
    for (BlockArgument candidate : func.getArguments())
      if (auto input = func.getArgAttrOfType<StringAttr>(
              candidate.getArgNumber(), "weft.input");
          input && input.getValue() == "activation")
        arg = candidate;
    if (!arg)
      return func.emitError("weft-schedule: a stage after the first takes "
                            "exactly one activation");
    receivedActivation[key] =
        receive("activation", elementsOf(arg), previousRank, "fwd");
  }
  if (task.backward && !lastVirtual) {
    BlockArgument arg = func.getArguments().back();
    if (!func.getArgAttr(arg.getArgNumber(), "weft.output_grad"))
      return func.emitError("weft-schedule: the backward of a stage before "
                            "the last takes its output's gradient last");
    receivedGradient[key] =
        receive("activation.grad", elementsOf(arg), nextRank, "bwd");
  }

  if (failed(bindArguments(functions, func, microBatch)))
    return failure();
  currentFunction = func;
  if (failed(lowerBlock(func.getBody().front())))
    return failure();
  scheduleGathers(taskBegin);

  previousTaskBegin = taskBegin;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  if (!task.backward && !lastVirtual)
    send(lookup(ret.getOperand(0)), nextRank, "fwd");
  if (task.backward && !firstVirtual) {
    for (auto [i, value] : llvm::enumerate(ret.getOperands()))
      if (func.getResultAttr(i, "weft.input_grad"))
        send(lookup(value), previousRank, "bwd");
  }
  if (task.backward && reducesEveryMicroBatch())
    reduceFinishedGrads(task);
  return success();
}

//===----------------------------------------------------------------------===//
// RoleScheduler: ZeRO-2/3 gradients, reduce-scattered every micro-batch
//===----------------------------------------------------------------------===//

Slice RoleScheduler::microBatchGrad(size_t param) {
  auto [it, inserted] = microBatchGradIndex.try_emplace({param, microBatch}, 0);
  if (!inserted)
    return microBatchGrads[it->second].slice;
  it->second = microBatchGrads.size();
  LocalParam &local = params[param];
  Slice slice = newBuffer(("grad." + local.op.getName()).str(),
                          local.spanElements(), wx::Region::arena, computeType);
  // Zeroed right before its first writer (the padding too: the
  // reduce-scatter reads whole slots); gradients a grad op starts together
  // (a norm's weight and bias) share one fill.
  Block *block = builder.getInsertionBlock();
  auto fill = block->empty() || builder.getInsertionPoint() != block->end()
                  ? wx::FillOp()
                  : dyn_cast<wx::FillOp>(block->back());
  if (fill && !microBatchGrads.empty() &&
      microBatchGrads.back().fill == fill.getOperation()) {
    SmallVector<Attribute> writes(fill.getWrites().getValue());
    writes.push_back(ranges({slice})[0]);
    fill.setWritesAttr(builder.getArrayAttr(writes));
  } else {
    fill =
        wx::FillOp::create(builder, program.getLoc(), computeType, APFloat(0.0),
                           ArrayAttr(), ranges({slice}), phase());
  }
  microBatchGrads.push_back({param, slice, Slice(), fill});
  microBatchGradBuffers.insert(slice.buffer);
  return slice;
}

void RoleScheduler::reduceFinishedGrads(const pipeline::Task &task) {
  // The gradients of this micro-batch that no later task writes.
  llvm::DenseMap<StringAttr, size_t> finished;
  for (size_t param : chunkParams[task.chunk]) {
    std::pair<size_t, int64_t> key = {param, task.microBatch};
    auto it = microBatchGradIndex.find(key);
    if (it != microBatchGradIndex.end() &&
        lastBackwardTask.at(key) == taskIndex)
      finished[microBatchGrads[it->second].slice.buffer] = it->second;
  }
  if (finished.empty())
    return;
  // Their last writers (at worst the fill), walking back from the end.
  Block &block = compute.getBody().front();
  SmallVector<size_t> order;
  for (Operation &op : llvm::reverse(block)) {
    auto instruction = dyn_cast<wx::InstructionOpInterface>(op);
    if (!instruction)
      continue;
    for (auto range : instruction.getWrites().getAsRange<wx::RangeAttr>()) {
      auto it = finished.find(range.getBuffer().getAttr());
      if (it == finished.end() || microBatchGrads[it->second].lastWriter)
        continue;
      microBatchGrads[it->second].lastWriter = &op;
      order.push_back(it->second);
    }
    if (order.size() == finished.size())
      break;
  }
  // Reduce-scattered in the order they become final (one writer's in the
  // order it writes them); compute waits for them only where
  // boundLiveGrads needs their bytes, and before the step.
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    Operation *first = microBatchGrads[a].lastWriter,
              *second = microBatchGrads[b].lastWriter;
    return first != second && first->isBeforeInBlock(second);
  });
  Location loc = program.getLoc();
  OpBuilder::InsertionGuard guard(builder);
  std::string label = std::exchange(phaseLabel, "grad sync");
  Block &stream = sideStream("reducescatter").getBody().front();
  StringRef dp = bundle.family(Family::DP).getValue();
  for (size_t index : order) {
    MicroBatchGrad &grad = microBatchGrads[index];
    int64_t written = eventAfter(
        grad.lastWriter, grad.lastWriter->getAttrOfType<StringAttr>("phase"));
    builder.setInsertionPointToEnd(&stream);
    Operation *wait = nullptr;
    if (written != lastGradSyncWait)
      wait = wx::WaitEventOp::create(builder, loc, written, ArrayAttr(),
                                     ArrayAttr(), phase());
    lastGradSyncWait = written;
    LocalParam &param = params[grad.param];
    // After the first, a micro-batch's pieces are reduce-scattered into a
    // buffer of their own and added to the shard: it lives as long as the
    // gradient (compute reuses both once it waits for the reduction).
    bool accumulate = shardReduced[grad.param];
    if (accumulate) {
      int64_t elements = 0;
      for (const ParamPiece &piece : param.pieces)
        elements += piece.padded / zeroShards;
      grad.part = newBuffer(("grad.part." + param.op.getName()).str(), elements,
                            wx::Region::arena, computeType);
    }
    // One reduce-scatter whose members are the pieces.
    SmallVector<wx::RangeAttr> reads, writes;
    SmallVector<std::pair<Slice, Slice>> additions; // shard += part
    int64_t partStart = 0;
    for (const ParamPiece &piece : param.pieces) {
      int64_t count = piece.padded / zeroShards;
      reads.push_back(range(grad.slice.sub(
          piece.start - param.pieces.front().start, piece.padded)));
      Slice shard = gradShards.sub(piece.shardStart, count);
      if (!accumulate) {
        writes.push_back(range(shard));
        continue;
      }
      Slice part = grad.part.sub(partStart, count);
      partStart += count;
      writes.push_back(range(part));
      additions.push_back({shard, part});
    }
    grad.scatter = wx::createCoalesced<wx::ReduceScatterOp>(
        builder, loc, computeType, dp, reads, writes, phase());
    grad.firstOnStream = wait ? wait : grad.scatter;
    for (auto [shard, part] : additions)
      launch("residual_add", {{"n", part.elements()}}, {shard, part}, {shard});
    shardReduced[grad.param] = true;
    grad.reduction = &stream.back();
    grad.task = taskIndex;
  }
  phaseLabel = label;
}

void RoleScheduler::boundLiveGrads() {
  Block &block = compute.getBody().front();
  llvm::DenseMap<Operation *, size_t> position;
  for (Operation &op : block)
    position[&op] = position.size();
  // One stream runs the reductions: once compute has waited for one, every
  // earlier one is done too.
  llvm::DenseMap<Operation *, size_t> reducedAt;
  for (Operation &op : sideStream("reducescatter").getBody().front())
    reducedAt[&op] = reducedAt.size();
  // A gradient's bytes: its buffer and the reduce-scatter's.
  auto bytesOf = [](const MicroBatchGrad &grad) {
    return grad.slice.bytes + grad.part.bytes;
  };
  // Live gradients in reduction order: (position of the reduction, index).
  std::set<std::pair<size_t, size_t>> live;
  int64_t liveBytes = 0;
  for (auto [index, grad] : llvm::enumerate(microBatchGrads)) {
    assert(grad.reduction && "every gradient is reduced after its last task");
    // Free the first gradients in reduction order, as many as needed, of
    // those whose last writer precedes this one's fill (the reductions
    // before them are done or wait only for compute before the fill: the
    // wait cannot deadlock); one wait, for the last of them.
    Operation *last = nullptr;
    size_t start = position.at(grad.fill);
    while (!live.empty() && liveBytes + bytesOf(grad) > liveGradBound) {
      const MicroBatchGrad &old = microBatchGrads[live.begin()->second];
      if (position.at(old.lastWriter) > start)
        break;
      last = old.reduction;
      liveBytes -= bytesOf(old);
      live.erase(live.begin());
    }
    if (last) {
      waitedReductions.insert(last);
      // The event after the reduction, recorded only for such a wait.
      int64_t reduced = eventAfter(last, StringAttr::get(ctx, "grad sync"));
      OpBuilder before(grad.fill);
      wx::WaitEventOp::create(before, program.getLoc(), reduced, ArrayAttr(),
                              ArrayAttr(),
                              before.getStringAttr("grad sync done"));
    }
    live.insert({reducedAt.at(grad.reduction), index});
    liveBytes += bytesOf(grad);
  }
}

void RoleScheduler::coalesceGradReductions() {
  Block &stream = sideStream("reducescatter").getBody().front();
  llvm::DenseMap<Operation *, size_t> position;
  for (Operation &op : stream)
    position[&op] = position.size();
  SmallVector<size_t> order(microBatchGrads.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  llvm::sort(order, [&](size_t a, size_t b) {
    return position.at(microBatchGrads[a].scatter) <
           position.at(microBatchGrads[b].scatter);
  });
  // Runs of one backward task's gradients in reduction order, of at most
  // `gradBucketBytes`, ending at every reduction compute waits for (so
  // those waits, and the live bound, stay exactly as boundLiveGrads placed
  // them; a task's gradients follow the previous task's on the stream).
  llvm::DenseSet<int64_t> dropped; // events of the waits merged away
  auto gradAt = [&](size_t i) -> MicroBatchGrad & {
    return microBatchGrads[order[i]];
  };
  for (auto [begin, end] : wx::bucketsInOrder(
           order.size(), [&](size_t i) { return gradAt(i).slice.bytes; },
           gradBucketBytes,
           [&](size_t i) {
             return i > 0 &&
                    (waitedReductions.contains(gradAt(i - 1).reduction) ||
                     gradAt(i).task != gradAt(i - 1).task);
           })) {
    if (end - begin < 2)
      continue;
    const MicroBatchGrad &lead = gradAt(begin);
    // The span on the stream: each member's optional wait for its writer,
    // its reduce-scatter and its additions. It becomes the last wait (the
    // latest writer: they come in writer order), one reduce-scatter of
    // every member's pieces, then the additions.
    Operation *spanEnd = gradAt(end - 1).reduction;
    Operation *anchor = spanEnd->getNextNode();
    SmallVector<Operation *> span;
    for (Operation *op = lead.firstOnStream;; op = op->getNextNode()) {
      span.push_back(op);
      if (op == spanEnd)
        break;
    }
    auto moveToAnchor = [&](Operation *op) {
      if (anchor)
        op->moveBefore(anchor);
      else
        op->moveBefore(&stream, stream.end());
    };
    SmallVector<wx::RangeAttr> reads, writes;
    Operation *lastWait = nullptr;
    for (Operation *op : span)
      if (isa<wx::WaitEventOp>(op)) {
        lastWait = op;
      } else if (auto scatter = dyn_cast<wx::ReduceScatterOp>(op)) {
        for (auto [read, write] :
             llvm::zip(scatter.getReads(), scatter.getWrites())) {
          reads.push_back(cast<wx::RangeAttr>(read));
          writes.push_back(cast<wx::RangeAttr>(write));
        }
      }
    if (lastWait)
      moveToAnchor(lastWait);
    OpBuilder at(ctx);
    if (anchor)
      at.setInsertionPoint(anchor);
    else
      at.setInsertionPointToEnd(&stream);
    auto merged = wx::createCoalesced<wx::ReduceScatterOp>(
        at, program.getLoc(), computeType, bundle.family(Family::DP).getValue(),
        reads, writes, wx::phaseOf(lead.scatter));
    Operation *last = merged;
    for (Operation *op : span)
      if (!isa<wx::WaitEventOp, wx::ReduceScatterOp>(op)) {
        moveToAnchor(op);
        last = op;
      }
    for (Operation *op : span)
      if (op != lastWait && isa<wx::WaitEventOp, wx::ReduceScatterOp>(op)) {
        if (auto wait = dyn_cast<wx::WaitEventOp>(op))
          dropped.insert(wait.getEvent());
        op->erase();
      }
    for (size_t i = begin; i < end; ++i) {
      gradAt(i).scatter = merged;
      gradAt(i).reduction = last;
    }
  }
  // The events compute recorded after the merged members' writers, where
  // nothing waits for them any more.
  llvm::DenseSet<int64_t> waited;
  program.walk([&](wx::WaitEventOp wait) { waited.insert(wait.getEvent()); });
  for (Operation &op : llvm::make_early_inc_range(compute.getBody().front()))
    if (auto record = dyn_cast<wx::RecordEventOp>(op))
      if (dropped.contains(record.getEvent()) &&
          !waited.contains(record.getEvent()))
        record.erase();
}

void RoleScheduler::reduceGradients() {
  Location loc = program.getLoc();
  // ZeRO-2/3: every micro-batch's gradient is in `grads.shard` already. The
  // sums below are linear, so they apply to the shard once (TP ranks, and
  // the two copies of a tied embedding, hold the same pieces), after the
  // reduce-scatters on their stream; otherwise to the full gradients on
  // `compute`.
  bool onShards = reducesEveryMicroBatch();
  OpBuilder::InsertionGuard guard(builder);
  if (onShards)
    builder.setInsertionPointToEnd(
        &sideStream("reducescatter").getBody().front());
  // Sequence parallelism: replicated parameters used on sequence shards
  // have one partial gradient per TP rank. The copies of a tied embedding
  // on the first and last pipeline rank each hold part of its gradient: sum
  // them, so both take the same step.
  // One in-place all-reduce per family, every piece a member.
  for (auto [family, label] : {std::pair(Family::TP, "sequence-parallel grads"),
                               std::pair(Family::Tied, "tied grads")}) {
    phaseLabel = label;
    SmallVector<wx::RangeAttr> parts;
    for (const LocalParam &param : params) {
      if (!(family == Family::TP ? param.sequencePartial
                                 : param.tiedAcrossStages))
        continue;
      for (const ParamPiece &piece : param.pieces)
        parts.push_back(range(
            onShards
                ? gradShards.sub(piece.shardStart, piece.padded / zeroShards)
                : gradsBuf.sub(piece.start, piece.elements)));
    }
    if (!parts.empty())
      wx::createCoalesced<wx::AllReduceOp>(builder, loc, computeType,
                                           bundle.family(family).getValue(),
                                           parts, parts, phase());
  }

  phaseLabel = "grad sync";
  if (onShards) {
    int64_t done = numEvents++;
    wx::RecordEventOp::create(builder, loc, done, ArrayAttr(), ArrayAttr(),
                              phase());
    builder.setInsertionPointToEnd(&compute.getBody().front());
    wx::WaitEventOp::create(builder, loc, done, ArrayAttr(), ArrayAttr(),
                            phase());
    return;
  }
  // The DP sync, one collective per slot in slot order (ZeRO-1: a
  // reduce-scatter into this rank's piece of the gradient shard; ZeRO-0: an
  // in-place all-reduce); weft-overlap-grad-sync moves them under the
  // backward and buckets the all-reduces.
  if (par.dp > 1) {
    StringRef dp = bundle.family(Family::DP).getValue();
    for (const LocalParam &param : params)
      for (const ParamPiece &piece : param.pieces) {
        Slice slot = gradsBuf.sub(piece.start, piece.padded);
        if (zeroShards > 1) {
          int64_t count = piece.padded / zeroShards;
          wx::ReduceScatterOp::create(
              builder, loc, wx::ReduceKind::sum, count, gradsBuf.type, dp,
              ranges({slot}), ranges({gradShards.sub(piece.shardStart, count)}),
              phase());
        } else {
          wx::AllReduceOp::create(builder, loc, wx::ReduceKind::sum,
                                  slot.elements(), slot.type, dp,
                                  ranges({slot}), ranges({slot}), phase());
        }
      }
  }
}

//===----------------------------------------------------------------------===//
// RoleScheduler: ZeRO-2/3 side streams
//===----------------------------------------------------------------------===//

wx::StreamOp RoleScheduler::sideStream(StringRef name) {
  // Cached: the program's body is long (every buffer) and this is asked
  // for every transfer and gather.
  wx::StreamOp &stream = sideStreams[name];
  if (!stream)
    stream = wx::getOrCreateStream(program, name);
  return stream;
}

/// Whether one of the `attr` ("reads" or "writes") ranges of `op` overlaps
/// `slice`.
static bool touches(Operation *op, StringRef attr, const Slice &slice) {
  return wx::touches(op, attr,
                     wx::RangeAttr::get(op->getContext(),
                                        FlatSymbolRefAttr::get(slice.buffer),
                                        slice.offset, slice.bytes));
}

Slice RoleScheduler::gatheredParameter(LocalParam &param) {
  const ParamPiece &head = param.pieces.front(), &tail = param.pieces.back();
  if (param.persistent)
    return paramsBuf.sub(head.replicaStart,
                         tail.start + tail.elements - head.start);
  StringRef name = param.op.getName();
  if (auto it = gathered.find(name); it != gathered.end())
    return it->second;
  const ParamPiece &first = param.pieces.front(), &last = param.pieces.back();
  Slice full = activation((name + ".gathered").str(),
                          last.start + last.padded - first.start);
  pendingGathers.push_back({&param, full});
  Slice value = full.sub(0, last.start + last.elements - first.start);
  gathered[name] = value;
  return value;
}

void RoleScheduler::scheduleGathers(Operation *taskBegin) {
  if (pendingGathers.empty())
    return;
  Block &block = compute.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : llvm::make_range(
           taskBegin ? std::next(Block::iterator(taskBegin)) : block.begin(),
           block.end()))
    ops.push_back(&op);
  // Where the task first and last touches each gathered parameter; a
  // parameter the task never reads (e.g. a position table in the backward)
  // is not gathered.
  struct Use {
    size_t first, last;
    LocalParam *param;
    Slice full;
  };
  SmallVector<Use> uses;
  for (auto [param, full] : pendingGathers) {
    std::optional<size_t> first;
    size_t last = 0;
    for (auto [i, op] : llvm::enumerate(ops))
      if (touches(op, "reads", full) || touches(op, "writes", full)) {
        if (!first)
          first = i;
        last = i;
      }
    if (first) {
      uses.push_back({*first, last, param, full});
      continue;
    }
    for (auto buffer :
         llvm::make_early_inc_range(program.getBody().getOps<wx::BufferOp>()))
      if (buffer.getSymNameAttr() == full.buffer)
        buffer.erase();
  }
  pendingGathers.clear();
  // In first-use order, gather k waits for compute to begin using gather
  // k - depth: at most `depth` gathers run ahead, and since compute begins
  // using them in the same order, no wait can deadlock.
  llvm::stable_sort(
      uses, [](const Use &a, const Use &b) { return a.first < b.first; });
  // Gather units: a parameter, or a bucket of small parameters (each at
  // most a quarter of `gatherBucketBytes`) used one after the other that
  // are neighbours in slot order, of at most `gatherBucketBytes` together.
  struct Unit {
    SmallVector<const Use *, 4> members;
    int64_t bytes = 0;
  };
  SmallVector<Unit> units;
  for (const Use &use : uses) {
    if (!units.empty()) {
      Unit &open = units.back();
      const ParamPiece &end = open.members.back()->param->pieces.back();
      auto small = [&](const Use &u) {
        return 4 * u.full.bytes <= gatherBucketBytes;
      };
      if (small(*open.members.front()) && small(use) &&
          end.start + end.padded == use.param->pieces.front().start &&
          open.bytes + use.full.bytes <= gatherBucketBytes) {
        open.members.push_back(&use);
        open.bytes += use.full.bytes;
        continue;
      }
    }
    units.emplace_back();
    units.back().members.push_back(&use);
    units.back().bytes = use.full.bytes;
  }
  Location loc = program.getLoc();
  auto gather =
      OpBuilder::atBlockEnd(&sideStream("allgather").getBody().front());
  int64_t depth = std::max<int64_t>(1, par.prefetchDepth);
  StringRef dp = bundle.family(Family::DP).getValue();
  for (const Unit &unit : units) {
    const Use &lead = *unit.members.front();
    Operation *firstOp = ops[lead.first];
    std::string names = lead.param->op.getName().str();
    if (unit.members.size() > 1)
      names =
          ("bucket " + names + ".." + unit.members.back()->param->op.getName())
              .str();
    StringAttr label =
        gather.getStringAttr(("gather " + names + " (" + phaseLabel + ")"));
    int64_t index = gatherUsedEvents.size();
    if (index >= depth)
      wx::WaitEventOp::create(gather, loc, gatherUsedEvents[index - depth],
                              ArrayAttr(), ArrayAttr(), label);
    // The live bound: wait for compute to release earlier gathers (in the
    // order compute releases them) until this one fits. Only releases
    // before this unit's first use can be waited for (compute needs this
    // gather to go further); if those do not free enough, the gather goes
    // ahead over the bound.
    int64_t live = 0;
    for (auto [size, release] : liveGathers)
      live += size;
    if (live + unit.bytes > liveGatherBound) {
      // The releases compute performs before this unit's first use, in
      // compute order; waiting for one implies every earlier one.
      SmallVector<std::pair<int64_t, Operation *>> candidates;
      for (auto entry : liveGathers)
        if (entry.second->isBeforeInBlock(firstOp))
          candidates.push_back(entry);
      llvm::sort(candidates, [](const auto &a, const auto &b) {
        return a.second->isBeforeInBlock(b.second);
      });
      Operation *waitFor = nullptr;
      for (auto [size, release] : candidates) {
        live -= size;
        waitFor = release;
        if (live + unit.bytes <= liveGatherBound)
          break;
      }
      if (waitFor) {
        int64_t released =
            eventAfter(waitFor, waitFor->getAttrOfType<StringAttr>("phase"));
        wx::WaitEventOp::create(gather, loc, released, ArrayAttr(), ArrayAttr(),
                                label);
        llvm::erase_if(liveGathers, [&](const auto &entry) {
          return entry.second == waitFor ||
                 entry.second->isBeforeInBlock(waitFor);
        });
      }
    }
    // One all_gather of the unit whose members are its parameters' pieces,
    // each gathered straight into its place in the parameter's gathered
    // buffer (one launch per unit; no staging buffer, no copies).
    SmallVector<wx::RangeAttr> reads, writes;
    for (const Use *member : unit.members) {
      const ParamPiece &first = member->param->pieces.front();
      for (const ParamPiece &piece : member->param->pieces) {
        reads.push_back(range(
            gatherSource.sub(piece.shardStart, piece.padded / zeroShards)));
        writes.push_back(
            range(member->full.sub(piece.start - first.start, piece.padded)));
      }
    }
    wx::createCoalesced<wx::AllGatherOp>(gather, loc, gatherSource.type, dp,
                                         reads, writes, label);
    int64_t ready = numEvents++, used = numEvents++;
    wx::RecordEventOp::create(gather, loc, ready, ArrayAttr(), ArrayAttr(),
                              label);
    OpBuilder before(firstOp);
    auto firstPhase = firstOp->getAttrOfType<StringAttr>("phase");
    wx::WaitEventOp::create(before, loc, ready, ArrayAttr(), ArrayAttr(),
                            firstPhase);
    wx::RecordEventOp::create(before, loc, used, ArrayAttr(), ArrayAttr(),
                              firstPhase);
    gatherUsedEvents.push_back(used);
    // Each member is released right after its own last use.
    for (const Use *member : unit.members) {
      Operation *lastOp = ops[member->last];
      OpBuilder after(ctx);
      after.setInsertionPointAfter(lastOp);
      auto release =
          wx::ReleaseOp::create(after, loc, ArrayAttr(), ranges({member->full}),
                                lastOp->getAttrOfType<StringAttr>("phase"));
      liveGathers.push_back({member->full.bytes, release});
    }
  }
}

LogicalResult RoleScheduler::run() {
  Location loc = program.getLoc();
  builder.setInsertionPointToEnd(&program.getBody().front());
  compute = wx::StreamOp::create(builder, loc, "compute");
  builder.setInsertionPointToEnd(&compute.getBody().emplaceBlock());

  zero = par.dp > 1 ? par.zero : 0;
  zeroShards = zero > 0 ? par.dp : 1;
  if (failed(declareParameters()))
    return failure();
  // Only the last stage computes the loss; the runtime reports the mean of
  // the `loss` buffers of the ranks that have one (docs/runtime.md).
  if (lastStage)
    loss = newBuffer("loss", 1, wx::Region::persistent, f32);
  newBuffer("grad.sumsq", 1, wx::Region::persistent, f32);

  phaseLabel = "zero grads";
  // One fill per dtype: the gradients (ZeRO-2/3: the shard, for parameters
  // no micro-batch gives a gradient), and `loss` (f32).
  Slice grads = reducesEveryMicroBatch() ? gradShards : gradsBuf;
  SmallVector<Slice, 2> zeroed = {grads};
  if (loss && loss.type == grads.type)
    zeroed.push_back(loss);
  wx::FillOp::create(builder, loc, grads.type, APFloat(0.0), ArrayAttr(),
                     ranges(zeroed), phase());
  if (loss && loss.type != grads.type)
    wx::FillOp::create(builder, loc, f32, APFloat(0.0), ArrayAttr(),
                       ranges({loss}), phase());

  auto kind = *pipeline::parseScheduleKind(par.schedule);
  std::vector<pipeline::Task> tasks = pipeline::pipelineOrder(
      kind, par.pp, par.virtualStages, par.gradAccum, stage);
  if (reducesEveryMicroBatch()) {
    for (const StageFunctions &functions : bundle.stages[stage]) {
      llvm::SetVector<size_t> used;
      for (func::FuncOp func : {functions.forward, functions.backward})
        func.walk([&](ParamOp op) {
          auto it = paramIndex.find(op.getName());
          if (it != paramIndex.end())
            used.insert(it->second);
        });
      chunkParams.push_back(used.takeVector());
    }
    for (auto [index, task] : llvm::enumerate(tasks))
      if (task.backward)
        for (size_t param : chunkParams[task.chunk])
          lastBackwardTask[{param, task.microBatch}] = int64_t(index) + 1;
  }
  for (const pipeline::Task &task : tasks)
    if (failed(runTask(task)))
      return failure();
  reduceGradients();
  if (reducesEveryMicroBatch()) {
    boundLiveGrads();
    coalesceGradReductions();
  }
  return success();
}

namespace {
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
    opts.precision = precision;
    opts.lossScale = lossScale;
    opts.initialLossScale = initialLossScale;
    opts.lossScaleWindow = lossScaleWindow;
    opts.offloadOptimizer = offloadOptimizer;
    opts.stepsPerPlan = stepsPerPlan;
    opts.predictedStepTimeS = predictedStepTimeS;
    opts.predictedMfu = predictedMfu;
    opts.predictedPeakBytes = predictedPeakBytes;
    opts.clusterJson = clusterJson;
    opts.persistThreshold = persistThreshold;
    opts.maxLiveGatheredBytes = maxLiveGatheredBytes;
    opts.maxLiveGradBytes = maxLiveGradBytes;
    if (failed(BundleScheduler(getOperation(), opts).run()))
      signalPassFailure();
  }
};
} // namespace
