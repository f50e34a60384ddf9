//===- EmitBundle.cpp - weftx to plan bundle translation ------------------===//
//
// Compiled with -fexceptions: the WeftPlan library throws weft::plan::Error,
// which is caught here and returned as llvm::Error.
//
//===----------------------------------------------------------------------===//
#include "weft/Target/EmitBundle.h"

#include "WeftExec/IR/WeftExecOps.h"
#include "weft/plan/Error.h"
#include "weft/plan/Serialize.h"
#include "weft/plan/Verifier.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <exception>

using namespace mlir;
using namespace mlir::weftx;
namespace plan = weft::plan;

namespace {

/// A weftx.config value as JSON (dictionaries become objects, arrays
/// arrays; the dialect verified that nothing else occurs).
nlohmann::json configToJson(Attribute value) {
  if (auto nested = dyn_cast<DictionaryAttr>(value)) {
    nlohmann::json out = nlohmann::json::object();
    for (NamedAttribute entry : nested)
      out[entry.getName().str()] = configToJson(entry.getValue());
    return out;
  }
  if (auto array = dyn_cast<ArrayAttr>(value)) {
    nlohmann::json out = nlohmann::json::array();
    for (Attribute element : array)
      out.push_back(configToJson(element));
    return out;
  }
  if (auto flag = dyn_cast<BoolAttr>(value))
    return flag.getValue();
  if (auto integer = dyn_cast<IntegerAttr>(value))
    return integer.getInt();
  if (auto real = dyn_cast<FloatAttr>(value))
    return real.getValueAsDouble();
  return cast<StringAttr>(value).str();
}

llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// Parses a spelling that the dialect and the plan format share; the dialect's
/// enums and element types are exactly the format's, so this cannot fail.
template <typename T>
T parseShared(std::optional<T> (*parse)(std::string_view), StringRef text) {
  return *parse(std::string_view(text.data(), text.size()));
}

plan::DType toDType(Type type) {
  return parseShared(plan::parseDType, getDTypeName(type));
}

/// Builds a plan::Bundle from a verified weftx module.
class BundleBuilder {
public:
  explicit BundleBuilder(ModuleOp module) : module(module) {}

  llvm::Expected<plan::Bundle> build();

private:
  llvm::Error buildMetadata();
  llvm::Error buildProgram(ProgramOp program, int64_t role);
  plan::Instruction buildInstruction(InstructionOpInterface inst);
  std::vector<plan::BufferRange> buildRanges(ArrayAttr ranges);

  ModuleOp module;
  plan::Bundle bundle;
  llvm::DenseMap<StringAttr, int64_t> groupIds, kernelIds, roleIds;
  /// Buffer ids of the program being built.
  llvm::DenseMap<StringAttr, int64_t> bufferIds;
  /// Buffer ids per role, for parameter shards.
  llvm::DenseMap<StringAttr, llvm::DenseMap<StringAttr, int64_t>> roleBuffers;
};

llvm::Error BundleBuilder::buildMetadata() {
  auto model =
      module->getAttrOfType<ModelAttr>(WeftExecDialect::kModelAttrName);
  auto training =
      module->getAttrOfType<TrainingAttr>(WeftExecDialect::kTrainingAttrName);
  auto prediction = module->getAttrOfType<PredictionAttr>(
      WeftExecDialect::kPredictionAttrName);
  for (auto [name, present] :
       {std::pair{WeftExecDialect::kModelAttrName, bool(model)},
        std::pair{WeftExecDialect::kTrainingAttrName, bool(training)},
        std::pair{WeftExecDialect::kPredictionAttrName, bool(prediction)}})
    if (!present)
      return makeError("the module has no '" + name + "' attribute");

  bundle.model = {model.getName().str(), model.getFamily().str()};
  plan::TrainingInfo &t = bundle.training;
  t.globalBatch = training.getGlobalBatch();
  t.seqLen = training.getSeqLen();
  t.precision = training.getPrecision().str();
  t.microBatch = training.getMicroBatch();
  t.gradAccum = training.getGradAccum();
  t.stepsPerPlan = training.getStepsPerPlan();
  t.lr = training.getLr().convertToDouble();
  t.minLr = training.getMinLr().convertToDouble();
  t.warmupSteps = training.getWarmupSteps();
  t.decaySteps = training.getDecaySteps();
  t.weightDecay = training.getWeightDecay().convertToDouble();
  t.beta1 = training.getBeta1().convertToDouble();
  t.beta2 = training.getBeta2().convertToDouble();
  t.eps = training.getEps().convertToDouble();
  t.gradClip = training.getGradClip().convertToDouble();
  LossScaleAttr lossScale = training.getLossScale();
  t.lossScale = {
      lossScale.getDynamic(), lossScale.getInitial().convertToDouble(),
      lossScale.getGrowthInterval(), lossScale.getBackoff().convertToDouble()};
  bundle.prediction = {prediction.getStepTimeS().convertToDouble(),
                       prediction.getPeakMemoryBytes().vec(),
                       prediction.getMfu().convertToDouble()};

  if (auto config = module->getAttrOfType<DictionaryAttr>(
          WeftExecDialect::kConfigAttrName))
    bundle.config = configToJson(config);

  auto meshes = module.getOps<MeshOp>();
  if (meshes.empty())
    return makeError("the module has no weftx.mesh");
  MeshOp mesh = *meshes.begin();
  bundle.mesh = {int64_t(mesh.getDp()), int64_t(mesh.getPp()),
                 int64_t(mesh.getTp())};

  for (GroupOp group : module.getOps<GroupOp>()) {
    int64_t id = bundle.groups.size();
    groupIds[group.getSymNameAttr()] = id;
    plan::GroupFamily &family = bundle.groups.emplace_back();
    family.id = id;
    family.kind =
        parseShared(plan::parseGroupKind, stringifyGroupKind(group.getKind()));
    for (int64_t index = 0; index < group.getNumGroups(); ++index)
      family.groups.push_back(group.getGroup(index).vec());
  }

  for (KernelOp kernel : module.getOps<KernelOp>()) {
    int64_t id = bundle.kernels.size();
    kernelIds[kernel.getSymNameAttr()] = id;
    plan::Kernel &k = bundle.kernels.emplace_back();
    k.id = id;
    k.name = kernel.getSymName().str();
    k.source = kernel.getFile().str();
    for (NamedAttribute constant : kernel.getConstants())
      k.constants[constant.getName().str()] =
          cast<IntegerAttr>(constant.getValue()).getInt();
    auto [it, inserted] =
        bundle.files.try_emplace(k.source, kernel.getSource().str());
    if (!inserted && it->second != kernel.getSource())
      return makeError("kernel @" + kernel.getSymName() +
                       " writes a different source to '" + k.source +
                       "' than an earlier kernel");
  }
  return llvm::Error::success();
}

std::vector<plan::BufferRange> BundleBuilder::buildRanges(ArrayAttr ranges) {
  std::vector<plan::BufferRange> result;
  for (RangeAttr range : ranges.getAsRange<RangeAttr>())
    result.push_back({bufferIds.lookup(range.getBuffer().getAttr()),
                      range.getOffset(), range.getBytes()});
  return result;
}

plan::Instruction BundleBuilder::buildInstruction(InstructionOpInterface inst) {
  plan::Instruction result;
  result.reads = buildRanges(inst.getReads());
  result.writes = buildRanges(inst.getWrites());
  result.phase = inst.getPhase().value_or("").str();
  auto communication = [&](auto op, plan::Opcode opcode) {
    result.opcode = opcode;
    result.group = groupIds.lookup(op.getGroupAttr().getAttr());
    result.count = op.getCount();
    result.dtype = toDType(op.getDtype());
  };
  auto reduce = [&](ReduceKind kind) {
    result.reduce = parseShared(plan::parseReduceOp, stringifyReduceKind(kind));
  };
  llvm::TypeSwitch<Operation *>(inst)
      .Case([&](LaunchOp op) {
        result.opcode = plan::Opcode::Kernel;
        result.kernel = kernelIds.lookup(op.getKernelAttr().getAttr());
        if (std::optional<ArrayRef<int64_t>> args = op.getArgs())
          result.args = args->vec();
      })
      .Case([&](GemmOp op) {
        result.opcode = plan::Opcode::Gemm;
        result.dtype = toDType(op.getDtype());
        result.gemm = {op.getTransA(),
                       op.getTransB(),
                       int64_t(op.getM()),
                       int64_t(op.getN()),
                       int64_t(op.getK()),
                       int64_t(op.getLda()),
                       int64_t(op.getLdb()),
                       int64_t(op.getLdc()),
                       op.getAlpha().convertToDouble(),
                       op.getBeta().convertToDouble()};
        if (std::optional<GemmEpilogueKind> epilogue = op.getEpilogue()) {
          result.epilogue = parseShared(plan::parseGemmEpilogue,
                                        stringifyGemmEpilogueKind(*epilogue));
          for (auto kernel :
               op.getEpilogueKernels()->getAsRange<FlatSymbolRefAttr>())
            result.epilogueKernels.push_back(
                kernelIds.lookup(kernel.getAttr()));
        }
      })
      .Case([&](LoadBatchOp op) {
        result.opcode = plan::Opcode::LoadBatch;
        result.microbatch = op.getMicrobatch();
      })
      .Case([&](CopyOp) { result.opcode = plan::Opcode::Copy; })
      .Case([&](FillOp op) {
        result.opcode = plan::Opcode::Fill;
        result.dtype = toDType(op.getDtype());
        result.value = op.getValue().convertToDouble();
      })
      .Case([&](AllReduceOp op) {
        communication(op, plan::Opcode::AllReduce);
        reduce(op.getReduce());
      })
      .Case([&](ReduceScatterOp op) {
        communication(op, plan::Opcode::ReduceScatter);
        reduce(op.getReduce());
      })
      .Case([&](AllGatherOp op) { communication(op, plan::Opcode::AllGather); })
      .Case([&](BroadcastOp op) {
        communication(op, plan::Opcode::Broadcast);
        result.peer = op.getRoot();
      })
      .Case([&](SendOp op) {
        communication(op, plan::Opcode::Send);
        result.peer = op.getPeer();
      })
      .Case([&](RecvOp op) {
        communication(op, plan::Opcode::Recv);
        result.peer = op.getPeer();
      })
      .Case([&](RecordEventOp op) {
        result.opcode = plan::Opcode::RecordEvent;
        result.event = op.getEvent();
      })
      .Case([&](WaitEventOp op) {
        result.opcode = plan::Opcode::WaitEvent;
        result.event = op.getEvent();
      })
      .Case([&](OptimizerStepOp op) {
        result.opcode = plan::Opcode::OptimizerStep;
        result.count = op.getCount();
        result.dtype = toDType(op.getDtype());
      })
      .Case([&](GradNormOp op) {
        result.opcode = plan::Opcode::GradNorm;
        result.dtype = toDType(op.getDtype());
      })
      .Case([&](ClipOp op) {
        result.opcode = plan::Opcode::Clip;
        result.dtype = toDType(op.getDtype());
      })
      .Case([&](ReleaseOp) { result.opcode = plan::Opcode::Release; });
  return result;
}

llvm::Error BundleBuilder::buildProgram(ProgramOp program, int64_t role) {
  if (!program.getArenaSize() || !program.getPersistentSize())
    return makeError("program @" + program.getSymName() +
                     " has no planned region sizes (run weft-plan-memory)");
  plan::Program &p = bundle.programs.emplace_back();
  p.role = role;
  p.numEvents = program.getNumEvents();
  p.arenaBytes = *program.getArenaSize();
  p.persistentBytes = *program.getPersistentSize();
  p.hostBytes = program.getHostSize().value_or(0);
  bufferIds.clear();
  for (BufferOp buffer : program.getBuffers()) {
    std::optional<int64_t> offset = buffer.getOffset();
    if (!offset)
      return makeError("buffer @" + buffer.getSymName() + " of program @" +
                       program.getSymName() +
                       " has no offset (run weft-plan-memory)");
    int64_t id = p.buffers.size();
    bufferIds[buffer.getSymNameAttr()] = id;
    p.buffers.push_back(
        {id, buffer.getSymName().str(),
         parseShared(plan::parseRegion, stringifyRegion(buffer.getRegion())),
         *offset, int64_t(buffer.getSize()), toDType(buffer.getDtype()),
         int64_t(buffer.getAlignment())});
  }
  roleBuffers[program.getSymNameAttr()] = bufferIds;
  for (StreamOp stream : program.getStreams()) {
    plan::Stream &s = p.streams.emplace_back();
    s.name = stream.getName().str();
    for (auto inst : stream.getBody().front().getOps<InstructionOpInterface>())
      s.instructions.push_back(buildInstruction(inst));
  }
  for (int64_t rank : program.getRanks())
    bundle.rankRoles[rank] = role;
  return llvm::Error::success();
}

llvm::Expected<plan::Bundle> BundleBuilder::build() {
  if (llvm::Error error = buildMetadata())
    return std::move(error);
  bundle.rankRoles.assign(bundle.mesh.worldSize(), 0);
  for (auto [role, program] : llvm::enumerate(module.getOps<ProgramOp>())) {
    roleIds[program.getSymNameAttr()] = role;
    if (llvm::Error error = buildProgram(program, role))
      return std::move(error);
  }
  for (ParameterOp parameter : module.getOps<ParameterOp>()) {
    plan::Parameter &p = bundle.parameters.emplace_back();
    p.name = parameter.getName().str();
    p.shape = parameter.getShape().vec();
    p.dtype = toDType(parameter.getDtype());
    p.init = {stringifyInitKind(parameter.getInit()).str(),
              parameter.getInitStd() ? parameter.getInitStd()->convertToDouble()
                                     : 0.0};
    p.hfName = parameter.getHfName().str();
    p.hfTransposed = parameter.getHfTransposed();
    for (ShardAttr shard : parameter.getShards().getAsRange<ShardAttr>()) {
      StringAttr role = shard.getRole().getAttr();
      p.shards.push_back({roleIds.lookup(role),
                          roleBuffers[role].lookup(shard.getBuffer().getAttr()),
                          shard.getOffset(), shard.getDim(), shard.getStart(),
                          shard.getLength(), shard.getZeroShards(),
                          shard.getPaddedElements()});
    }
  }
  return std::move(bundle);
}

} // namespace

llvm::Error weft::emitBundle(ModuleOp module, llvm::StringRef dir,
                             mlir::TimingScope timer,
                             const KernelFatbinOptions &fatbins) {
  mlir::TimingScope phase = timer.nest("verify-weftx");
  if (failed(mlir::verify(module)))
    return makeError("the weftx module does not verify");
  phase = timer.nest("translate");
  llvm::Expected<plan::Bundle> bundle = BundleBuilder(module).build();
  if (!bundle)
    return bundle.takeError();
  try {
    phase = timer.nest("plan-verifier");
    plan::VerifyResult result = plan::verify(*bundle);
    if (!result.ok()) {
      std::string message = "plan verifier: " + result.diagnostics[0].message;
      if (size_t more = result.diagnostics.size() - 1)
        message += " (and " + std::to_string(more) + " more)";
      return makeError(message);
    }
    if (!fatbins.archs.empty()) {
      phase = timer.nest("nvcc");
      if (llvm::Error error = addKernelFatbins(*bundle, fatbins))
        return error;
    }
    phase = timer.nest("write");
    plan::writeBundle(*bundle, dir.str());
  } catch (const plan::Error &error) {
    return makeError(error.what());
  } catch (const std::exception &error) {
    return makeError(dir + ": " + error.what());
  }
  return llvm::Error::success();
}
