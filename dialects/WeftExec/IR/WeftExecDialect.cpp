//===- WeftExecDialect.cpp - The Weft execution dialect -------------------===//
#include "WeftExec/IR/WeftExecDialect.h"
#include "WeftExec/IR/WeftExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::weftx;

#include "WeftExec/IR/WeftExecOpsDialect.cpp.inc"

#include "WeftExec/IR/WeftExecEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "WeftExec/IR/WeftExecAttrs.cpp.inc"

void WeftExecDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "WeftExec/IR/WeftExecOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "WeftExec/IR/WeftExecAttrs.cpp.inc"
      >();
}

LogicalResult TrainingAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t globalBatch,
    int64_t seqLen, StringRef precision, int64_t microBatch, int64_t gradAccum,
    int64_t stepsPerPlan, APFloat lrValue, APFloat minLrValue,
    int64_t warmupSteps, int64_t decaySteps, APFloat weightDecayValue,
    APFloat beta1Value, APFloat beta2Value, APFloat epsValue,
    APFloat gradClipValue, LossScaleAttr lossScale) {
  double lr = lrValue.convertToDouble(), minLr = minLrValue.convertToDouble(),
         weightDecay = weightDecayValue.convertToDouble(),
         beta1 = beta1Value.convertToDouble(),
         beta2 = beta2Value.convertToDouble(), eps = epsValue.convertToDouble(),
         gradClip = gradClipValue.convertToDouble();
  if (precision != "bf16" && precision != "fp16" && precision != "fp32")
    return emitError() << "precision must be bf16, fp16 or fp32, got '"
                       << precision << "'";
  for (auto [name, value] :
       {std::pair{"global_batch", globalBatch}, std::pair{"seq_len", seqLen},
        std::pair{"micro_batch", microBatch},
        std::pair{"grad_accum", gradAccum},
        std::pair{"steps_per_plan", stepsPerPlan}})
    if (value <= 0)
      return emitError() << name << " must be positive, got " << value;
  if (warmupSteps < 0 || decaySteps < 0)
    return emitError() << "warmup_steps and decay_steps must not be negative";
  if (lr < 0 || minLr < 0 || weightDecay < 0 || eps <= 0 || gradClip < 0)
    return emitError() << "lr, min_lr, weight_decay and grad_clip must not be "
                          "negative and eps must be positive";
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)
    return emitError() << "beta1 and beta2 must lie in [0, 1)";
  if (!lossScale)
    return emitError() << "loss_scale is required";
  return success();
}

/// The bundle metadata lives on the module; the training geometry and the
/// prediction are checked against the mesh and the programs here.
/// Configuration entries are JSON-like: scalars, arrays and dictionaries of
/// them (e.g. the cluster description weft-inspect simulates on).
static bool isConfigValue(Attribute value) {
  if (auto nested = dyn_cast<DictionaryAttr>(value))
    return llvm::all_of(nested, [](NamedAttribute entry) {
      return isConfigValue(entry.getValue());
    });
  if (auto array = dyn_cast<ArrayAttr>(value))
    return llvm::all_of(array, isConfigValue);
  return isa<IntegerAttr, FloatAttr, BoolAttr, StringAttr>(value);
}

static LogicalResult verifyConfigEntries(Operation *op, StringRef name,
                                         DictionaryAttr config) {
  for (NamedAttribute entry : config)
    if (!isConfigValue(entry.getValue()))
      return op->emitError()
             << "'" << name << "' entry '" << entry.getName().getValue()
             << "' must be an integer, float, bool, string, "
                "array or dictionary";
  return success();
}

LogicalResult WeftExecDialect::verifyOperationAttribute(Operation *op,
                                                        NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kModelAttrName && name != kTrainingAttrName &&
      name != kPredictionAttrName && name != kConfigAttrName)
    return op->emitError() << "unknown weftx attribute '" << name << "'";
  auto module = dyn_cast<ModuleOp>(op);
  if (!module)
    return op->emitError() << "'" << name
                           << "' must be attached to a builtin.module";
  auto mismatch = [&](StringRef kind) {
    return op->emitError() << "'" << name << "' must be " << kind << ", got "
                           << attr.getValue();
  };
  Attribute value = attr.getValue();

  if (name == kModelAttrName) {
    auto model = dyn_cast<ModelAttr>(value);
    if (!model)
      return mismatch("a #weftx.model");
    if (model.getName().empty() || model.getFamily().empty())
      return op->emitError()
             << "'" << name << "' needs a non-empty name and family";
    return success();
  }

  if (name == kTrainingAttrName) {
    auto training = dyn_cast<TrainingAttr>(value);
    if (!training)
      return mismatch("a #weftx.training");
    auto meshes = module.getOps<MeshOp>();
    if (meshes.empty())
      return success();
    int64_t dp = (*meshes.begin()).getDp();
    if (training.getGlobalBatch() !=
        training.getMicroBatch() * training.getGradAccum() * dp)
      return op->emitError()
             << "'" << name << "': global_batch " << training.getGlobalBatch()
             << " != micro_batch " << training.getMicroBatch()
             << " x grad_accum " << training.getGradAccum() << " x dp " << dp;
    return success();
  }

  if (name == kPredictionAttrName) {
    auto prediction = dyn_cast<PredictionAttr>(value);
    if (!prediction)
      return mismatch("a #weftx.prediction");
    double mfu = prediction.getMfu().convertToDouble();
    if (prediction.getStepTimeS().isNegative() || mfu < 0 || mfu > 1)
      return op->emitError() << "'" << name
                             << "': step_time_s must not be negative and mfu "
                                "must lie in [0, 1]";
    int64_t numPrograms = llvm::range_size(module.getOps<ProgramOp>());
    if (int64_t(prediction.getPeakMemoryBytes().size()) != numPrograms)
      return op->emitError() << "'" << name << "' has "
                             << prediction.getPeakMemoryBytes().size()
                             << " peak_memory_bytes entries for " << numPrograms
                             << " programs (one per role)";
    return success();
  }

  auto config = dyn_cast<DictionaryAttr>(value);
  if (!config)
    return mismatch("a dictionary");
  return verifyConfigEntries(op, name, config);
}
