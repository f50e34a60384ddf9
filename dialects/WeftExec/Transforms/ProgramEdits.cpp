//===- ProgramEdits.cpp - Helpers for passes that edit programs -----------===//
#include "WeftExec/Transforms/ProgramEdits.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"

#include <array>

using namespace mlir;
using namespace mlir::weftx;

LaunchQueries::LaunchQueries(ProgramOp program, SymbolTable &kernels)
    : kernels(kernels) {
  for (BufferOp buffer : program.getBuffers())
    buffers[buffer.getSymNameAttr()] = buffer;
}

KernelOp LaunchQueries::kernelOf(Operation *op) const {
  auto launch = dyn_cast_or_null<LaunchOp>(op);
  return launch ? kernels.lookup<KernelOp>(launch.getKernel()) : KernelOp();
}

KernelOp LaunchQueries::kernelOf(Operation *op, StringRef name) const {
  KernelOp kernel = kernelOf(op);
  return kernel && kernel.getRegistryName() == name ? kernel : KernelOp();
}

int64_t LaunchQueries::constant(KernelOp kernel, StringRef name) {
  auto value = kernel.getConstants().getAs<IntegerAttr>(name);
  return value ? value.getInt() : -1;
}

Type LaunchQueries::dtype(RangeAttr range) const {
  BufferOp buffer = bufferOf(range);
  return buffer ? buffer.getDtype() : Type();
}

bool weftx::touches(Operation *op, StringRef attr, RangeAttr range) {
  auto list = op->getAttrOfType<ArrayAttr>(attr);
  if (!list)
    return false;
  for (auto mine : list.getAsRange<RangeAttr>())
    if (mine.overlaps(range))
      return true;
  return false;
}

bool weftx::overlaps(Operation *a, StringRef attrA, Operation *b,
                     StringRef attrB) {
  auto list = b->getAttrOfType<ArrayAttr>(attrB);
  if (!list)
    return false;
  for (auto range : list.getAsRange<RangeAttr>())
    if (touches(a, attrA, range))
      return true;
  return false;
}

StreamOp weftx::findStream(ProgramOp program, StringRef name) {
  for (auto stream : program.getBody().front().getOps<StreamOp>())
    if (stream.getName() == name)
      return stream;
  return nullptr;
}

StreamOp weftx::getOrCreateStream(ProgramOp program, StringRef name) {
  if (StreamOp stream = findStream(program, name))
    return stream;
  auto builder = OpBuilder::atBlockEnd(&program.getBody().front());
  auto stream = StreamOp::create(builder, program.getLoc(), name);
  stream.getBody().emplaceBlock();
  return stream;
}

std::optional<GroupKind> weftx::groupKindOf(Operation *collective) {
  auto symbol = collective->getAttrOfType<FlatSymbolRefAttr>("group");
  auto module = collective->getParentOfType<ModuleOp>();
  if (!symbol || !module)
    return std::nullopt;
  if (auto group = SymbolTable::lookupNearestSymbolFrom<GroupOp>(
          module, symbol.getAttr()))
    return group.getKind();
  return std::nullopt;
}

EventCounter::EventCounter(ProgramOp program) {
  program.walk([&](Operation *op) {
    if (auto record = dyn_cast<RecordEventOp>(op))
      nextEvent = std::max<int64_t>(nextEvent, record.getEvent() + 1);
    else if (auto wait = dyn_cast<WaitEventOp>(op))
      nextEvent = std::max<int64_t>(nextEvent, wait.getEvent() + 1);
  });
}

int64_t weftx::recordAfter(Operation *op, EventCounter &events) {
  int64_t event = events.next();
  OpBuilder builder(op->getContext());
  builder.setInsertionPointAfter(op);
  RecordEventOp::create(builder, op->getLoc(), event, ArrayAttr(), ArrayAttr(),
                        phaseOf(op));
  return event;
}

void weftx::waitBefore(Operation *op, int64_t event, StringAttr phase) {
  OpBuilder builder(op);
  WaitEventOp::create(builder, op->getLoc(), event, ArrayAttr(), ArrayAttr(),
                      phase);
}

BufferOp weftx::findBuffer(ProgramOp program, StringRef name) {
  for (auto buffer : program.getBody().front().getOps<BufferOp>())
    if (buffer.getSymName() == name)
      return buffer;
  return nullptr;
}

RangeAttr weftx::wholeRange(BufferOp buffer) {
  return RangeAttr::get(buffer.getContext(),
                        FlatSymbolRefAttr::get(buffer.getSymNameAttr()), 0,
                        buffer.getSize());
}

RangeAttr weftx::elementRange(BufferOp buffer, int64_t start,
                              int64_t elements) {
  int64_t bytes = buffer.getDtype().getIntOrFloatBitWidth() / 8;
  return RangeAttr::get(buffer.getContext(),
                        FlatSymbolRefAttr::get(buffer.getSymNameAttr()),
                        start * bytes, elements * bytes);
}

KernelDeclarations::KernelDeclarations(ModuleOp module) : module(module) {
  for (KernelOp kernel : module.getOps<KernelOp>()) {
    StringAttr name =
        StringAttr::get(module.getContext(), kernel.getRegistryName());
    declared[{name, kernel.getConstants()}] =
        FlatSymbolRefAttr::get(kernel.getSymNameAttr());
    ++declarations[name];
    lastKernel = kernel;
  }
}

FlatSymbolRefAttr KernelDeclarations::get(StringRef name,
                                          DictionaryAttr constants) {
  MLIRContext *context = module.getContext();
  FlatSymbolRefAttr &symbol =
      declared[{StringAttr::get(context, name), constants}];
  if (symbol)
    return symbol;
  // The next free name (a module may hold kernels declared by hand).
  int64_t &count = declarations[name];
  auto nameFor = [&](int64_t n) {
    return n ? (name + "." + Twine(n)).str() : name.str();
  };
  while (SymbolTable::lookupSymbolIn(module, nameFor(count)))
    ++count;
  std::string symName = nameFor(count++);
  OpBuilder builder(context);
  if (lastKernel)
    builder.setInsertionPointAfter(lastKernel);
  else if (auto programs = module.getOps<ProgramOp>(); !programs.empty())
    builder.setInsertionPoint(*programs.begin());
  else
    builder.setInsertionPointToEnd(module.getBody());
  lastKernel = KernelOp::create(
      builder, module.getLoc(), symName, "kernels/" + symName + ".cu",
      constants,
      ("// " + name + ": runtime registry kernel (docs/runtime.md)\n").str());
  symbol = FlatSymbolRefAttr::get(context, symName);
  return symbol;
}

FlatSymbolRefAttr weftx::getOrCreateFamily(ModuleOp module, Family family) {
  MeshOp mesh;
  Operation *lastGroup = nullptr;
  for (Operation &op : *module.getBody()) {
    if (auto found = dyn_cast<MeshOp>(op))
      mesh = found, lastGroup = &op;
    else if (isa<GroupOp>(op))
      lastGroup = &op;
  }
  assert(mesh && "a family needs the weftx.mesh");
  int64_t dp = mesh.getDp(), pp = mesh.getPp(), tp = mesh.getTp();
  auto rankOf = [&](int64_t d, int64_t s, int64_t t) {
    return (d * pp + s) * tp + t;
  };
  SmallVector<int64_t> ranks;
  // Every rank, with the mesh axes (0 dp, 1 pp, 2 tp) nested from `order[0]`
  // outermost to `order[2]` innermost: groups of the innermost axis follow
  // one another.
  auto enumerate = [&](std::array<int, 3> order) {
    int64_t extent[3] = {dp, pp, tp}, at[3] = {0, 0, 0};
    for (at[order[0]] = 0; at[order[0]] < extent[order[0]]; ++at[order[0]])
      for (at[order[1]] = 0; at[order[1]] < extent[order[1]]; ++at[order[1]])
        for (at[order[2]] = 0; at[order[2]] < extent[order[2]]; ++at[order[2]])
          ranks.push_back(rankOf(at[0], at[1], at[2]));
  };
  int64_t groupSize = 0;
  StringRef name;
  GroupKind kind = GroupKind::custom;
  switch (family) {
  case Family::TP:
    name = "tp", kind = GroupKind::tp, groupSize = tp;
    enumerate({0, 1, 2});
    break;
  case Family::PP:
    name = "pp", kind = GroupKind::pp, groupSize = pp;
    enumerate({0, 2, 1});
    break;
  case Family::DP:
    name = "dp", kind = GroupKind::dp, groupSize = dp;
    enumerate({1, 2, 0});
    break;
  case Family::ModelParallel:
    name = "mp", groupSize = pp * tp;
    enumerate({0, 1, 2});
    break;
  case Family::World:
    name = "world", kind = GroupKind::world, groupSize = dp * pp * tp;
    enumerate({0, 1, 2});
    break;
  case Family::Tied:
    name = "tied", groupSize = 2;
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t t = 0; t < tp; ++t)
        ranks.append({rankOf(d, 0, t), rankOf(d, pp - 1, t)});
    break;
  }
  auto symbol = FlatSymbolRefAttr::get(module.getContext(), name);
  if (SymbolTable::lookupSymbolIn(module, symbol.getAttr()))
    return symbol;
  OpBuilder builder(module.getContext());
  builder.setInsertionPointAfter(lastGroup);
  GroupOp::create(builder, module.getLoc(), name, kind, ranks, groupSize);
  return symbol;
}

SmallVector<std::pair<size_t, size_t>>
weftx::bucketsInOrder(size_t n, function_ref<int64_t(size_t)> bytesOf,
                      int64_t limit, function_ref<bool(size_t)> startsBucket) {
  SmallVector<std::pair<size_t, size_t>> buckets;
  int64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t item = bytesOf(i);
    if (buckets.empty() || bytes + item > limit ||
        (startsBucket && startsBucket(i))) {
      buckets.push_back({i, i});
      bytes = 0;
    }
    buckets.back().second = i + 1;
    bytes += item;
  }
  return buckets;
}

int64_t weftx::bucketBytesOf(ModuleOp module) {
  if (auto config = module->getAttrOfType<DictionaryAttr>("weftx.config"))
    if (auto bytes = config.getAs<IntegerAttr>("bucket_bytes"))
      if (bytes.getInt() > 0)
        return bytes.getInt();
  return 25 << 20;
}
