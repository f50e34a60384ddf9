//===- Optimizer.cpp - The optimizer step of every program ----------------===//
//
// Appends to each program's `compute` stream what follows the gradient
// reductions: the global gradient norm, AdamW over the flat state buffers
// (on the host with optimizer offload), which clips the gradients on their
// way in, and the ZeRO all-gathers that rebuild the working copy from the
// updated shards. Everything it
// needs is in the IR: the state buffers weft-schedule declared (by name)
// and the parameters' shards.
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <optional>
#include <tuple>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTOPTIMIZER
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

/// One piece of a parameter in a role's flat buffers (ShardAttr of the
/// working copy and of the optimizer's weights).
struct Piece {
  /// First element in `params` (and, without ZeRO, in `grads`); -1 where
  /// the role keeps no working copy of it (ZeRO-3's gathered parameters).
  int64_t start = -1;
  int64_t elements = 0;    // local elements
  int64_t shardStart = -1; // first element in the shard buffers (ZeRO 1-3)
  int64_t padded = 0;      // slot size (ZeRO 1-3)
  bool counted = true;     // enters the global gradient norm
};

/// One parameter as a role holds it: its shards there, and the lowest
/// pipeline rank that holds the parameter at all.
struct RoleParameter {
  int64_t firstStage = 0;
  SmallVector<ShardAttr, 4> shards;
};

/// Every role's parameters in module order, from one walk over the module.
using ShardsByRole = llvm::StringMap<SmallVector<RoleParameter>>;

ShardsByRole collectShards(ModuleOp module, MeshOp mesh) {
  llvm::StringMap<int64_t> stageOf;
  for (auto program : module.getOps<ProgramOp>())
    stageOf[program.getSymName()] =
        (program.getRanks()[0] / mesh.getTp()) % mesh.getPp();
  ShardsByRole result;
  for (auto parameter : module.getOps<ParameterOp>()) {
    auto shards = parameter.getShards().getAsRange<ShardAttr>();
    int64_t firstStage = mesh.getPp();
    for (ShardAttr shard : shards)
      firstStage =
          std::min(firstStage, stageOf.lookup(shard.getRole().getValue()));
    llvm::StringMap<size_t> slot; // role -> index in result[role]
    for (ShardAttr shard : shards) {
      auto &roleParameters = result[shard.getRole().getValue()];
      auto [it, inserted] =
          slot.try_emplace(shard.getRole().getValue(), roleParameters.size());
      if (inserted)
        roleParameters.push_back({firstStage, {}});
      roleParameters[it->second].shards.push_back(shard);
    }
  }
  return result;
}

class OptimizerBuilder {
public:
  OptimizerBuilder(ModuleOp module, MeshOp mesh, ProgramOp program,
                   ArrayRef<RoleParameter> shards, int64_t bucketBytes)
      : module(module), mesh(mesh), program(program), shards(shards),
        bucketBytes(bucketBytes), builder(program.getContext()) {}

  LogicalResult run();

private:
  BufferOp require(StringRef name) {
    BufferOp buffer = findBuffer(program, name);
    if (!buffer)
      program.emitError("weft-optimizer: program @")
          << program.getSymName() << " has no '" << name << "' buffer";
    return buffer;
  }
  BufferOp newBuffer(StringRef name, int64_t bytes, weftx::Region region,
                     Type type) {
    OpBuilder::InsertionGuard guard(builder);
    Operation *last = nullptr;
    for (auto buffer : program.getBody().front().getOps<BufferOp>())
      last = buffer;
    builder.setInsertionPointAfter(last);
    return BufferOp::create(builder, program.getLoc(), name, region, bytes,
                            /*alignment=*/64, IntegerAttr(), type);
  }
  ArrayAttr list(ArrayRef<RangeAttr> ranges) {
    return builder.getArrayAttr(
        SmallVector<Attribute>(ranges.begin(), ranges.end()));
  }
  /// This role's pieces in slot order, from the shards of `params` and of
  /// `master` (ZeRO 1-3, split over `zeroShards` ranks).
  SmallVector<Piece> pieces(BufferOp params, BufferOp master,
                            int64_t zeroShards);

  ModuleOp module;
  MeshOp mesh;
  ProgramOp program;
  ArrayRef<RoleParameter> shards;
  /// Offloaded AdamW runs in buckets of at most this many fp32 bytes.
  int64_t bucketBytes;
  OpBuilder builder;
};

static int64_t elementBytes(BufferOp buffer) {
  return buffer.getDtype().getIntOrFloatBitWidth() / 8;
}

SmallVector<Piece> OptimizerBuilder::pieces(BufferOp params, BufferOp master,
                                            int64_t zeroShards) {
  int64_t firstRank = program.getRanks()[0];
  int64_t stage = (firstRank / mesh.getTp()) % mesh.getPp();
  int64_t tpRank = firstRank % mesh.getTp();
  SmallVector<Piece> result;
  for (const RoleParameter &parameter : shards) {
    // A piece is a slice of the parameter's global tensor.
    std::map<std::tuple<int64_t, int64_t, int64_t>, Piece> mine;
    for (ShardAttr shard : parameter.shards) {
      Piece &piece =
          mine[{shard.getDim(), shard.getStart(), shard.getLength()}];
      // Replicated over TP: TP rank 0 counts it; a tied embedding counts on
      // the lowest pipeline rank that holds it.
      piece.counted =
          (shard.getDim() >= 0 || tpRank == 0) && stage == parameter.firstStage;
      StringRef name = shard.getBuffer().getValue();
      if (zeroShards > 1 && master && name == master.getSymName() &&
          shard.getZeroShards() == zeroShards) {
        piece.shardStart = shard.getOffset() / elementBytes(master);
        piece.padded = shard.getPaddedElements();
      } else if (params && name == params.getSymName() &&
                 shard.getZeroShards() == 1) {
        piece.start = shard.getOffset() / elementBytes(params);
        piece.elements = shard.getPaddedElements();
      }
    }
    for (auto &entry : mine)
      result.push_back(entry.second);
  }
  llvm::stable_sort(result, [&](const Piece &a, const Piece &b) {
    return zeroShards > 1 ? a.shardStart < b.shardStart : a.start < b.start;
  });
  return result;
}

LogicalResult OptimizerBuilder::run() {
  StreamOp compute = findStream(program, "compute");
  if (!compute)
    return program.emitError("weft-optimizer: program @")
           << program.getSymName() << " has no compute stream";
  BufferOp params = findBuffer(program, "params");
  BufferOp expAvg = require("exp_avg"), expAvgSq = require("exp_avg_sq"),
           sumsq = require("grad.sumsq");
  if (!expAvg || !expAvgSq || !sumsq)
    return failure();
  // ZeRO 1-3 step this rank's shard: `master` and `grads.shard` (ZeRO-2/3
  // have no full `grads`: every micro-batch is reduce-scattered).
  BufferOp gradShards = findBuffer(program, "grads.shard");
  BufferOp grads = gradShards ? findBuffer(program, "grads") : require("grads");
  if (!grads && !gradShards)
    return failure();
  BufferOp master = findBuffer(program, "master");
  int64_t zeroShards = 1;
  if (gradShards) {
    if (!master)
      return require("master"), failure();
    for (const RoleParameter &parameter : shards)
      for (ShardAttr shard : parameter.shards)
        if (shard.getBuffer().getValue() == master.getSymName())
          zeroShards = std::max(zeroShards, shard.getZeroShards());
  } else {
    gradShards = grads;
    if (!master)
      master = params;
    if (!master)
      return require("params"), failure();
  }
  // What the parameter all-gathers read: the optimizer's rounded copy of
  // the shard in a mixed-precision or offloaded plan, else the master.
  BufferOp gatherSource = findBuffer(program, "params.shard");
  if (!gatherSource)
    gatherSource = master;
  int64_t modelParallel = mesh.getTp() * mesh.getPp();
  Type f32 = builder.getF32Type();
  Location loc = program.getLoc();
  builder.setInsertionPointToEnd(&compute.getBody().front());
  SmallVector<Piece> slots = pieces(params, master, zeroShards);

  // The global norm counts every gradient element once: this rank's part
  // leaves out the copies other ranks count, then one all-reduce sums the
  // parts over the ranks that hold distinct gradients. Runs of counted
  // pieces become one range each: between neighbouring slots lies only
  // alignment padding, which no instruction writes.
  StringAttr normPhase = builder.getStringAttr("grad norm");
  SmallVector<RangeAttr> counted;
  bool previousCounted = false;
  for (const Piece &piece : slots) {
    RangeAttr part = zeroShards > 1
                         ? elementRange(gradShards, piece.shardStart,
                                        piece.padded / zeroShards)
                         : elementRange(grads, piece.start, piece.elements);
    if (piece.counted && previousCounted)
      counted.back() =
          RangeAttr::get(builder.getContext(), counted.back().getBuffer(),
                         counted.back().getOffset(),
                         part.getEnd() - counted.back().getOffset());
    else if (piece.counted)
      counted.push_back(part);
    previousCounted = piece.counted;
  }
  // Each slot's tile of the state buffers (elements [begin, end), its
  // alignment padding included): together they cover the buffers.
  int64_t stateElements = expAvg.getSize() / 4;
  SmallVector<std::pair<int64_t, int64_t>> tiles;
  for (const Piece &piece : slots) {
    int64_t begin = zeroShards > 1 ? piece.shardStart : piece.start;
    if (tiles.empty())
      begin = 0;
    else
      tiles.back().second = begin;
    tiles.push_back({begin, stateElements});
  }
  if (tiles.empty())
    tiles.push_back({0, stateElements});

  // Optimizer offload (the state in host memory): the gradients go to the
  // host slot by slot (weft-overlap-offload issues each copy as soon as its
  // slot is final), the norm is computed on the device and copied over, and
  // AdamW runs on the host.
  bool offload = expAvg.getRegion() == weftx::Region::host;
  BufferOp deviceCopy = zeroShards > 1 ? gatherSource : params;
  BufferOp stepGrads = gradShards, hostParams, hostSumsq;
  StringAttr offloadGrads = builder.getStringAttr("offload grads");
  if (offload) {
    stepGrads =
        newBuffer("grads.host", stateElements * elementBytes(gradShards),
                  weftx::Region::host, gradShards.getDtype());
    hostParams =
        newBuffer("params.host", stateElements * elementBytes(deviceCopy),
                  weftx::Region::host, deviceCopy.getDtype());
    hostSumsq = newBuffer("grad.sumsq.host", 4, weftx::Region::host, f32);
    for (auto [begin, end] : tiles)
      CopyOp::create(
          builder, loc, list({elementRange(gradShards, begin, end - begin)}),
          list({elementRange(stepGrads, begin, end - begin)}), offloadGrads);
  }

  RangeAttr norm = wholeRange(sumsq);
  if (counted.empty())
    FillOp::create(builder, loc, f32, APFloat(0.0), ArrayAttr(), list({norm}),
                   normPhase);
  else
    GradNormOp::create(builder, loc, gradShards.getDtype(), list(counted),
                       list({norm}), normPhase);
  std::optional<Family> normFamily;
  if (zeroShards > 1)
    normFamily = modelParallel > 1 ? Family::World : Family::DP;
  else if (modelParallel > 1)
    normFamily = Family::ModelParallel;
  if (normFamily)
    AllReduceOp::create(builder, loc, ReduceKind::sum, 1, f32,
                        getOrCreateFamily(module, *normFamily).getValue(),
                        list({norm}), list({norm}), normPhase);
  if (offload) {
    CopyOp::create(builder, loc, list({norm}), list({wholeRange(hostSumsq)}),
                   offloadGrads);
    norm = wholeRange(hostSumsq);
  }

  // AdamW, reading the global sum of squares: it clips the gradients on
  // their way into the update (no pass of its own over them) and skips the
  // update on an overflow under dynamic loss scaling, decided where it runs.
  // With a separate master the step also writes the (rounded)
  // weights the device uses: the working copy without ZeRO, the shard the
  // parameter all-gathers read with it (with offload: a host copy of them,
  // brought back after the step). Offloaded, it runs in buckets of whole
  // slots of at most `bucketBytes` of fp32 weights, each bucket's weights
  // copied back right after it, so weft-overlap-offload can overlap the copy
  // with the next bucket's AdamW.
  StringAttr adamw = builder.getStringAttr("adamw");
  SmallVector<std::pair<int64_t, int64_t>> buckets;
  if (!offload)
    buckets.push_back({0, stateElements});
  else
    for (auto [begin, end] : tiles) {
      if (!buckets.empty() && (end - buckets.back().first) * 4 <= bucketBytes)
        buckets.back().second = end;
      else
        buckets.push_back({begin, end});
    }
  for (auto [begin, end] : buckets) {
    int64_t count = end - begin;
    auto part = [&](BufferOp buffer) {
      return elementRange(buffer, begin, count);
    };
    SmallVector<RangeAttr, 4> updated = {part(master), part(expAvg),
                                         part(expAvgSq)};
    if (master != deviceCopy)
      updated.push_back(part(offload ? hostParams : deviceCopy));
    OptimizerStepOp::create(builder, loc, count, f32,
                            list({part(master), part(stepGrads), part(expAvg),
                                  part(expAvgSq), norm}),
                            list(updated), adamw);
    if (offload)
      CopyOp::create(builder, loc, list({part(hostParams)}),
                     list({part(deviceCopy)}),
                     builder.getStringAttr("reload params"));
  }

  // ZeRO rebuilds every slot of the working copy it keeps (ZeRO-3: the
  // persistent small parameters) from the updated shards;
  // weft-overlap-param-gathers moves ZeRO-1/2's under the next forward.
  if (zeroShards == 1 || !params)
    return success();
  StringAttr gather = builder.getStringAttr("param gather");
  FlatSymbolRefAttr dp = getOrCreateFamily(module, Family::DP);
  for (const Piece &piece : slots) {
    if (piece.start < 0)
      continue;
    int64_t count = piece.padded / zeroShards;
    AllGatherOp::create(
        builder, loc, count, gatherSource.getDtype(), dp.getValue(),
        list({elementRange(gatherSource, piece.shardStart, count)}),
        list({elementRange(params, piece.start, piece.padded)}), gather);
  }
  return success();
}

struct WeftOptimizerPass
    : mlir::weftx::impl::WeftOptimizerBase<WeftOptimizerPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.getOps<MeshOp>().empty())
      return;
    MeshOp mesh = *module.getOps<MeshOp>().begin();
    ShardsByRole shards = collectShards(module, mesh);
    int64_t bucketBytes = bucketBytesOf(module);
    for (auto program : module.getOps<ProgramOp>()) {
      auto it = shards.find(program.getSymName());
      ArrayRef<RoleParameter> mine;
      if (it != shards.end())
        mine = it->second;
      if (failed(
              OptimizerBuilder(module, mesh, program, mine, bucketBytes).run()))
        return signalPassFailure();
    }
  }
};

} // namespace
