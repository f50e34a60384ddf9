//===- WeftExecOps.cpp - Weft execution dialect operations ----------------===//
#include "WeftExec/IR/WeftExecOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::weftx;

int64_t mlir::weftx::getElementBytes(Type type) {
  return type.getIntOrFloatBitWidth() / 8;
}

StringRef mlir::weftx::getDTypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isF16())
    return "f16";
  if (type.isBF16())
    return "bf16";
  if (type.isF64())
    return "f64";
  if (type.isUnsignedInteger(16))
    return "u16";
  if (type.isUnsignedInteger(8))
    return "u8";
  return type.isInteger(32) ? "i32" : "i64";
}

//===----------------------------------------------------------------------===//
// Custom directive: the list inside reads(...) / writes(...)
//===----------------------------------------------------------------------===//

/// `@buffer[offset +: bytes], ...`: the indexed part-select spelling makes the
/// second number a length, not an end.
static ParseResult parseRanges(OpAsmParser &parser, ArrayAttr &ranges) {
  SmallVector<Attribute> elements;
  auto parseOne = [&]() -> ParseResult {
    FlatSymbolRefAttr buffer;
    int64_t offset, bytes;
    if (parser.parseAttribute(buffer) || parser.parseLSquare() ||
        parser.parseInteger(offset) || parser.parsePlus() ||
        parser.parseColon() || parser.parseInteger(bytes) ||
        parser.parseRSquare())
      return failure();
    elements.push_back(
        RangeAttr::get(parser.getContext(), buffer, offset, bytes));
    return success();
  };
  if (parser.parseCommaSeparatedList(parseOne))
    return failure();
  ranges = parser.getBuilder().getArrayAttr(elements);
  return success();
}

static void printRanges(OpAsmPrinter &printer, Operation *, ArrayAttr ranges) {
  llvm::interleaveComma(
      ranges.getAsRange<RangeAttr>(), printer, [&](RangeAttr range) {
        printer << range.getBuffer() << '[' << range.getOffset()
                << " +: " << range.getBytes() << ']';
      });
}

//===----------------------------------------------------------------------===//
// Custom directive: the nested group list of weftx.group
//===----------------------------------------------------------------------===//

/// `[[0, 2], [1, 3]]`: parsed into the flat `ranks` and the common
/// `group_size`; groups of different sizes are rejected here because the
/// flat form cannot hold them.
static ParseResult parseGroupFamily(OpAsmParser &parser,
                                    DenseI64ArrayAttr &ranks,
                                    IntegerAttr &groupSize) {
  SmallVector<int64_t> flat;
  std::optional<int64_t> size;
  auto parseGroup = [&]() -> ParseResult {
    SMLoc loc = parser.getCurrentLocation();
    int64_t before = flat.size();
    if (parser.parseCommaSeparatedList(
            OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
              return parser.parseInteger(flat.emplace_back());
            }))
      return failure();
    int64_t members = int64_t(flat.size()) - before;
    if (members == 0)
      return parser.emitError(loc) << "a group needs at least one member";
    if (size && members != *size)
      return parser.emitError(loc)
             << "group of " << members << " ranks in a family of " << *size
             << "-rank groups (all groups of a family have the same size)";
    size = members;
    return success();
  };
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square,
                                     parseGroup))
    return failure();
  if (!size)
    return parser.emitError(loc) << "a group family needs at least one group";
  Builder &builder = parser.getBuilder();
  ranks = builder.getDenseI64ArrayAttr(flat);
  groupSize = builder.getI64IntegerAttr(*size);
  return success();
}

static void printGroupFamily(OpAsmPrinter &printer, Operation *,
                             DenseI64ArrayAttr ranks, IntegerAttr groupSize) {
  // Invalid IR (a non-positive size) prints as groups of one.
  int64_t size = std::max<int64_t>(groupSize.getInt(), 1);
  ArrayRef<int64_t> flat = ranks.asArrayRef();
  printer << '[';
  for (int64_t start = 0; start < int64_t(flat.size()); start += size) {
    if (start != 0)
      printer << ", ";
    printer << '[';
    llvm::interleaveComma(
        flat.slice(start, std::min<int64_t>(size, flat.size() - start)),
        printer);
    printer << ']';
  }
  printer << ']';
}

#define GET_OP_CLASSES
#include "WeftExec/IR/WeftExecOps.cpp.inc"

#include "WeftExec/IR/WeftExecInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// The module-level symbol `symbol` (groups, kernels, programs) seen from an
/// op anywhere in the module, or null if it is not an op of type T.
template <typename T>
static T lookupInModule(Operation *from, SymbolTableCollection &symbolTable,
                        FlatSymbolRefAttr symbol) {
  auto module = from->getParentOfType<ModuleOp>();
  return symbolTable.lookupSymbolIn<T>(module, symbol);
}

static std::string describeRange(RangeAttr range) {
  return ("@" + range.getBuffer().getValue() + "[" + Twine(range.getOffset()) +
          " +: " + Twine(range.getBytes()) + "]")
      .str();
}

/// `what` describes an instruction's element payload, e.g. "64 x f32".
static std::string describePayload(int64_t count, Type dtype) {
  return (Twine(count) + " x " + getDTypeName(dtype)).str();
}

static bool hasDuplicates(ArrayRef<int64_t> values) {
  llvm::SmallDenseSet<int64_t> seen;
  return llvm::any_of(
      values, [&](int64_t value) { return !seen.insert(value).second; });
}

//===----------------------------------------------------------------------===//
// MeshOp
//===----------------------------------------------------------------------===//

/// The mesh checks the bundle-wide rank tables, which span sibling ops.
LogicalResult MeshOp::verify() {
  auto module = (*this)->getParentOfType<ModuleOp>();
  if (*module.getOps<MeshOp>().begin() != *this)
    return emitOpError() << "is not the only weftx.mesh of the module";
  int64_t world = getWorldSize();
  for (GroupOp group : module.getOps<GroupOp>())
    for (int64_t rank : group.getRanks())
      if (rank >= world)
        return emitOpError()
               << "of " << world << " ranks does not contain rank " << rank
               << " of group family @" << group.getSymName();
  SmallVector<ProgramOp> owner(world);
  for (ProgramOp program : module.getOps<ProgramOp>()) {
    for (int64_t rank : program.getRanks()) {
      if (rank < 0 || rank >= world)
        return emitOpError()
               << "of " << world << " ranks does not contain rank " << rank
               << " of program @" << program.getSymName();
      if (owner[rank] && owner[rank] != program)
        return emitOpError()
               << "rank " << rank << " is served by programs @"
               << owner[rank].getSymName() << " and @" << program.getSymName();
      owner[rank] = program;
    }
  }
  for (auto [rank, program] : llvm::enumerate(owner))
    if (!program)
      return emitOpError() << "rank " << rank << " is served by no program";
  return success();
}

//===----------------------------------------------------------------------===//
// GroupOp, KernelOp, ParameterOp
//===----------------------------------------------------------------------===//

LogicalResult GroupOp::verify() {
  int64_t size = getGroupSize();
  if (getRanks().empty())
    return emitOpError() << "needs at least one group";
  if (int64_t(getRanks().size()) % size != 0)
    return emitOpError() << "lists " << getRanks().size()
                         << " ranks, not a whole number of groups of " << size;
  if (llvm::any_of(getRanks(), [](int64_t rank) { return rank < 0; }))
    return emitOpError() << "has a negative rank";
  llvm::SmallDenseMap<int64_t, int64_t> groupOfRank;
  for (auto [position, rank] : llvm::enumerate(getRanks())) {
    int64_t group = int64_t(position) / size;
    auto [it, inserted] = groupOfRank.try_emplace(rank, group);
    if (inserted)
      continue;
    if (it->second == group)
      return emitOpError() << "group " << group << " lists rank " << rank
                           << " twice";
    return emitOpError() << "rank " << rank << " is in groups " << it->second
                         << " and " << group
                         << " (the groups of a family are disjoint)";
  }
  return success();
}

/// Side files stay inside the bundle: relative, '/'-separated, no empty, '.'
/// or '..' segments, and never the manifest.
static bool isValidSideFilePath(StringRef path) {
  if (path.empty() || path.starts_with("/") || path == "plan.json")
    return false;
  SmallVector<StringRef> segments;
  path.split(segments, '/');
  return llvm::none_of(segments, [](StringRef segment) {
    return segment.empty() || segment == "." || segment == "..";
  });
}

LogicalResult KernelOp::verify() {
  if (!isValidSideFilePath(getFile()))
    return emitOpError() << "file '" << getFile()
                         << "' must be a relative path inside the bundle";
  for (NamedAttribute constant : getConstants())
    if (!isa<IntegerAttr>(constant.getValue()) ||
        isa<BoolAttr>(constant.getValue()))
      return emitOpError() << "constant '" << constant.getName().getValue()
                           << "' must be an integer";
  return success();
}

LogicalResult ParameterOp::verify() {
  if (getName().empty())
    return emitOpError() << "name must not be empty";
  if (llvm::any_of(getShape(), [](int64_t dim) { return dim <= 0; }))
    return emitOpError() << "shape must have positive extents";
  bool isNormal = getInit() == InitKind::normal;
  if (isNormal && (!getInitStd() || getInitStd()->convertToDouble() <= 0))
    return emitOpError() << "with normal init needs a positive standard "
                            "deviation";
  if (!isNormal && getInitStd())
    return emitOpError() << "with " << stringifyInitKind(getInit())
                         << " init takes no standard deviation";
  return success();
}

LogicalResult
ParameterOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  int64_t elements = 1;
  for (int64_t dim : getShape())
    elements *= dim;
  for (auto [index, shard] :
       llvm::enumerate(getShards().getAsRange<ShardAttr>())) {
    auto shardError = [&, index = index]() {
      return emitOpError() << "shard " << index << ": ";
    };
    auto program =
        lookupInModule<ProgramOp>(*this, symbolTable, shard.getRole());
    if (!program)
      return shardError() << shard.getRole()
                          << " does not name a weftx.program";
    auto buffer =
        symbolTable.lookupSymbolIn<BufferOp>(program, shard.getBuffer());
    if (!buffer)
      return shardError() << shard.getBuffer()
                          << " does not name a buffer of program "
                          << shard.getRole();
    int64_t sliceElements = elements;
    if (shard.getDim() == -1) {
      if (shard.getStart() != 0 || shard.getLength() != 0)
        return shardError() << "dim -1 (whole tensor) needs start 0 and "
                               "length 0";
    } else {
      if (shard.getDim() < 0 || shard.getDim() >= int64_t(getShape().size()))
        return shardError()
               << "dim " << shard.getDim() << " is outside the tensor's "
               << getShape().size() << " dims";
      int64_t extent = getShape()[shard.getDim()];
      if (shard.getStart() < 0 || shard.getLength() <= 0 ||
          shard.getStart() + shard.getLength() > extent)
        return shardError()
               << "slice [" << shard.getStart() << ", "
               << shard.getStart() + shard.getLength() << ") is outside dim "
               << shard.getDim() << " of extent " << extent;
      sliceElements = elements / extent * shard.getLength();
    }
    if (shard.getZeroShards() <= 0)
      return shardError() << "zero_shards must be positive";
    if (shard.getPaddedElements() < sliceElements ||
        shard.getPaddedElements() % shard.getZeroShards() != 0)
      return shardError() << "padded_elements " << shard.getPaddedElements()
                          << " must be at least the slice's " << sliceElements
                          << " elements and a multiple of zero_shards "
                          << shard.getZeroShards();
    // A shard holds the parameter converted to its buffer's dtype.
    int64_t bytes = shard.getPaddedElements() / shard.getZeroShards() *
                    getElementBytes(buffer.getDtype());
    if (shard.getOffset() < 0 ||
        shard.getOffset() + bytes > int64_t(buffer.getSize()))
      return shardError() << bytes << " bytes at offset " << shard.getOffset()
                          << " exceed buffer " << shard.getBuffer() << " of "
                          << buffer.getSize() << " bytes";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ProgramOp, BufferOp, StreamOp
//===----------------------------------------------------------------------===//

int64_t ProgramOp::getNumEvents() {
  int64_t numEvents = 0;
  getBody().walk([&](Operation *op) {
    if (auto record = dyn_cast<RecordEventOp>(op))
      numEvents = std::max<int64_t>(numEvents, record.getEvent() + 1);
    else if (auto wait = dyn_cast<WaitEventOp>(op))
      numEvents = std::max<int64_t>(numEvents, wait.getEvent() + 1);
  });
  return numEvents;
}

LogicalResult ProgramOp::verify() {
  if (getRanks().empty())
    return emitOpError() << "must serve at least one rank";
  if (hasDuplicates(getRanks()))
    return emitOpError() << "lists a rank twice";
  // Checked before the nested ops verify, so a misplaced op gets this message.
  for (Operation &op : getBody().front())
    if (!isa<BufferOp, StreamOp>(op))
      return op.emitOpError()
             << "cannot appear in a weftx.program (only buffers and streams)";
  return success();
}

/// Checks that need the program's buffers and all of its streams: ranges,
/// stream names, event pairing and the planned region sizes.
LogicalResult ProgramOp::verifyRegions() {
  llvm::DenseMap<StringAttr, BufferOp> buffers;
  llvm::StringSet<> streamNames;
  for (Operation &op : getBody().front()) {
    if (auto buffer = dyn_cast<BufferOp>(op)) {
      buffers[buffer.getSymNameAttr()] = buffer;
      continue;
    }
    auto stream = cast<StreamOp>(op);
    if (!streamNames.insert(stream.getName()).second)
      return stream.emitOpError()
             << "name '" << stream.getName() << "' is used twice";
  }

  for (auto [name, buffer] : buffers) {
    std::optional<int64_t> regionSize =
        buffer.getRegion() == Region::arena  ? getArenaSize()
        : buffer.getRegion() == Region::host ? getHostSize()
                                             : getPersistentSize();
    std::optional<int64_t> offset = buffer.getOffset();
    if (regionSize && offset &&
        *offset + int64_t(buffer.getSize()) > *regionSize)
      return buffer.emitOpError()
             << "bytes [" << *offset << ", " << *offset + buffer.getSize()
             << ") lie outside the " << stringifyRegion(buffer.getRegion())
             << " region of " << *regionSize << " bytes";
  }

  llvm::DenseMap<int64_t, RecordEventOp> records;
  SmallVector<WaitEventOp> waits;
  // The group families the program communicates on, each with its first use.
  llvm::MapVector<StringAttr, Operation *> families;
  for (StreamOp stream : getStreams()) {
    for (Operation &op : stream.getBody().front()) {
      auto inst = cast<InstructionOpInterface>(op);
      if (isa<AllReduceOp, ReduceScatterOp, AllGatherOp, BroadcastOp, SendOp,
              RecvOp>(op))
        families.try_emplace(
            op.getAttrOfType<FlatSymbolRefAttr>("group").getAttr(), &op);
      for (auto [kind, ranges] : {std::pair{"read", inst.getReads()},
                                  std::pair{"write", inst.getWrites()}}) {
        for (auto [index, range] :
             llvm::enumerate(ranges.getAsRange<RangeAttr>())) {
          BufferOp buffer = buffers.lookup(range.getBuffer().getAttr());
          if (!buffer)
            return op.emitOpError()
                   << kind << " range " << index << " names unknown buffer "
                   << range.getBuffer();
          if (range.getOffset() < 0 || range.getBytes() <= 0 ||
              range.getEnd() > int64_t(buffer.getSize()))
            return op.emitOpError()
                   << kind << " range " << index << " " << describeRange(range)
                   << " is not a non-empty range "
                   << "inside the buffer's " << buffer.getSize() << " bytes";
        }
      }
      if (auto release = dyn_cast<ReleaseOp>(op)) {
        auto target = cast<RangeAttr>(release.getWrites()[0]);
        if (buffers.lookup(target.getBuffer().getAttr()).getRegion() !=
            Region::arena)
          return op.emitOpError()
                 << "releases "
                 << stringifyRegion(buffers.lookup(target.getBuffer().getAttr())
                                        .getRegion())
                 << " buffer " << target.getBuffer()
                 << " (only arena contents can be released)";
      } else if (auto record = dyn_cast<RecordEventOp>(op)) {
        auto [it, inserted] = records.try_emplace(record.getEvent(), record);
        if (!inserted) {
          InFlightDiagnostic diag = op.emitOpError()
                                    << "records event " << record.getEvent()
                                    << " a second time";
          diag.attachNote(it->second.getLoc()) << "first recorded here";
          return diag;
        }
      } else if (auto wait = dyn_cast<WaitEventOp>(op)) {
        waits.push_back(wait);
      }
    }
  }
  for (WaitEventOp wait : waits)
    if (!records.count(wait.getEvent()))
      return wait.emitOpError() << "waits for event " << wait.getEvent()
                                << ", which no record_event of the program "
                                   "records";
  // Every rank the program serves is in some group of each family it
  // communicates on: checked once per family (not per instruction), since a
  // family of a 1024-rank mesh lists every rank. An unknown family is left
  // to the instruction's symbol check.
  for (auto [family, firstUse] : families) {
    auto group = mlir::SymbolTable::lookupNearestSymbolFrom<GroupOp>(
        getOperation()->getParentOp(), family);
    if (!group)
      continue;
    llvm::DenseSet<int64_t> members(group.getRanks().begin(),
                                    group.getRanks().end());
    for (int64_t rank : getRanks())
      if (!members.contains(rank))
        return firstUse->emitOpError()
               << "on group family @" << family.getValue()
               << ", which has no group containing rank " << rank
               << " of program @" << getSymName();
  }
  return success();
}

LogicalResult BufferOp::verify() {
  if (!llvm::isPowerOf2_64(getAlignment()))
    return emitOpError() << "alignment " << getAlignment()
                         << " is not a power of two";
  int64_t elementBytes = getElementBytes(getDtype());
  if (getSize() % elementBytes != 0)
    return emitOpError() << "size " << getSize() << " is not a multiple of the "
                         << elementBytes << "-byte " << getDTypeName(getDtype())
                         << " element";
  if (std::optional<int64_t> offset = getOffset();
      offset && *offset % getAlignment() != 0)
    return emitOpError() << "offset " << *offset
                         << " is not a multiple of its alignment "
                         << getAlignment();
  return success();
}

LogicalResult StreamOp::verify() {
  for (Operation &op : getBody().front())
    if (!isa<InstructionOpInterface>(op))
      return op.emitOpError() << "cannot appear in a weftx.stream (only "
                                 "weftx instructions)";
  return success();
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

/// Checks how many read and write ranges an opcode takes; max -1 is
/// unbounded.
static LogicalResult verifyRangeCounts(InstructionOpInterface op,
                                       int64_t minReads, int64_t maxReads,
                                       int64_t minWrites, int64_t maxWrites) {
  for (auto [kind, ranges, lo, hi] :
       {std::tuple{"read", op.getReads(), minReads, maxReads},
        std::tuple{"write", op.getWrites(), minWrites, maxWrites}}) {
    int64_t count = ranges.size();
    if (count >= lo && (hi < 0 || count <= hi))
      continue;
    InFlightDiagnostic diag = op->emitOpError() << "expects ";
    if (lo == hi)
      diag << "exactly " << lo;
    else if (hi < 0)
      diag << "at least " << lo;
    else
      diag << lo << " to " << hi;
    return diag << " " << kind << (lo == 1 && hi == 1 ? " range" : " ranges")
                << ", got " << count;
  }
  return success();
}

/// Checks that range `index` of `ranges` holds exactly `bytes` bytes.
static LogicalResult verifyRangeBytes(Operation *op, StringRef kind,
                                      ArrayAttr ranges, unsigned index,
                                      int64_t bytes, const Twine &what) {
  auto range = cast<RangeAttr>(ranges[index]);
  if (range.getBytes() == bytes)
    return success();
  return op->emitOpError() << kind << " range " << index << " has "
                           << range.getBytes() << " bytes but " << what
                           << " needs " << bytes;
}

ArrayRef<StringLiteral>
GemmOp::getEpilogueKernelNames(GemmEpilogueKind epilogue) {
  static constexpr StringLiteral bias[] = {"bias_add"},
                                 geluBias[] = {"bias_add",
                                               "activation_forward"},
                                 dgelu[] = {"activation_backward"},
                                 biasGrad[] = {"bias_grad"};
  switch (epilogue) {
  case GemmEpilogueKind::bias:
    return bias;
  case GemmEpilogueKind::gelu_bias:
    return geluBias;
  case GemmEpilogueKind::dgelu:
    return dgelu;
  case GemmEpilogueKind::bias_grad:
    return biasGrad;
  }
  return {};
}

std::pair<unsigned, unsigned>
GemmOp::getEpilogueOperands(GemmEpilogueKind epilogue) {
  switch (epilogue) {
  case GemmEpilogueKind::bias:
  case GemmEpilogueKind::dgelu:
    return {1, 0};
  case GemmEpilogueKind::gelu_bias:
    return {1, 1};
  case GemmEpilogueKind::bias_grad:
    return {0, 1};
  }
  return {0, 0};
}

LogicalResult GemmOp::verify() {
  bool accumulates = getBeta().convertToDouble() != 0;
  int64_t numReads = accumulates ? 3 : 2, numWrites = 1;
  std::optional<GemmEpilogueKind> epilogue = getEpilogue();
  if (epilogue.has_value() != bool(getEpilogueKernels()))
    return emitOpError() << "has an epilogue exactly when it lists the "
                            "epilogue's kernels";
  if (epilogue) {
    auto [reads, writes] = getEpilogueOperands(*epilogue);
    numReads += reads;
    numWrites += writes;
    StringRef name = stringifyGemmEpilogueKind(*epilogue);
    size_t kernels = getEpilogueKernelNames(*epilogue).size();
    if (getEpilogueKernels()->size() != kernels)
      return emitOpError() << "epilogue " << name << " folds " << kernels
                           << (kernels == 1 ? " kernel" : " kernels")
                           << ", got " << getEpilogueKernels()->size();
    if (accumulates && (*epilogue == GemmEpilogueKind::gelu_bias ||
                        *epilogue == GemmEpilogueKind::dgelu))
      return emitOpError() << "epilogue " << name << " needs beta 0";
    if (*epilogue == GemmEpilogueKind::bias_grad
            ? getTransA() || getLda() != getM()
            : getLdc() != getM())
      return emitOpError() << "epilogue " << name << " needs "
                           << (*epilogue == GemmEpilogueKind::bias_grad
                                   ? "A not transposed with lda == m"
                                   : "ldc == m");
  }
  if (failed(
          verifyRangeCounts(*this, numReads, numReads, numWrites, numWrites)))
    return failure();
  if (accumulates && getReads()[2] != getWrites()[0])
    return emitOpError() << "with beta != 0 reads C as read range 2, which "
                            "must equal write range 0";
  // Column-major: op(A) is m x k, op(B) is k x n, C is m x n.
  int64_t m = getM(), n = getN(), k = getK();
  int64_t lda = getLda(), ldb = getLdb(), ldc = getLdc();
  int64_t aRows = getTransA() ? k : m, aCols = getTransA() ? m : k;
  int64_t bRows = getTransB() ? n : k, bCols = getTransB() ? k : n;
  for (auto [name, ld, rows] :
       {std::tuple{"lda", lda, aRows}, std::tuple{"ldb", ldb, bRows},
        std::tuple{"ldc", ldc, m}})
    if (ld < rows)
      return emitOpError() << name << " " << ld << " is less than the " << rows
                           << " rows of its matrix";
  int64_t elementBytes = getElementBytes(getDtype());
  for (auto [kind, ranges, index, name, ld, rows, cols] :
       {std::tuple{"read", getReads(), 0u, "A", lda, aRows, aCols},
        std::tuple{"read", getReads(), 1u, "B", ldb, bRows, bCols},
        std::tuple{"write", getWrites(), 0u, "C", ldc, m, n}}) {
    int64_t needed = ((cols - 1) * ld + rows) * elementBytes;
    int64_t bytes = cast<RangeAttr>(ranges[index]).getBytes();
    if (bytes < needed)
      return emitOpError() << kind << " range " << index << " (" << name
                           << ") has " << bytes << " bytes but needs at least "
                           << needed;
  }
  return success();
}

LogicalResult LoadBatchOp::verify() {
  if (failed(verifyRangeCounts(*this, 0, 0, 1, 2)))
    return failure();
  auto module = (*this)->getParentOfType<ModuleOp>();
  auto training = module ? module->getAttrOfType<TrainingAttr>(
                               WeftExecDialect::kTrainingAttrName)
                         : TrainingAttr();
  if (training && int64_t(getMicrobatch()) >= training.getGradAccum())
    return emitOpError() << "micro-batch " << getMicrobatch()
                         << " is outside [0, grad_accum = "
                         << training.getGradAccum() << ")";
  return success();
}

LogicalResult CopyOp::verify() {
  if (failed(verifyRangeCounts(*this, 1, 1, 1, 1)))
    return failure();
  return verifyRangeBytes(*this, "write", getWrites(), 0,
                          cast<RangeAttr>(getReads()[0]).getBytes(),
                          "a copy of read range 0");
}

LogicalResult FillOp::verify() {
  if (failed(verifyRangeCounts(*this, 0, 0, 1, -1)))
    return failure();
  int64_t elementBytes = getElementBytes(getDtype());
  for (auto [index, range] : llvm::enumerate(getWriteRanges()))
    if (range.getBytes() % elementBytes != 0)
      return emitOpError() << "write range " << index << " has "
                           << range.getBytes() << " bytes, not a whole number "
                           << "of " << getDTypeName(getDtype()) << " elements";
  return success();
}

/// A collective's name in messages about member `index` of `members`, e.g.
/// "reduce_scatter of 64 x f32" or "member 2 of reduce_scatter of 64 x f32".
template <typename OpTy>
static std::string describeMember(OpTy op, size_t index, size_t members) {
  std::string what = (op->getName().stripDialect() + " of " +
                      describePayload(op.getCount(), op.getDtype()))
                         .str();
  return members == 1 ? what
                      : "member " + std::to_string(index) + " of " + what;
}

/// The byte checks of communication ops that need the group's size.
template <typename OpTy>
static LogicalResult verifyCommunication(OpTy op,
                                         SymbolTableCollection &symbolTable) {
  auto group = lookupInModule<GroupOp>(op, symbolTable, op.getGroupAttr());
  if (!group)
    return op.emitOpError()
           << op.getGroupAttr() << " does not name a weftx.group";
  // Membership of the program's ranks: ProgramOp::verifyRegions.
  int64_t size = group.getGroupSize();
  if constexpr (llvm::is_one_of<OpTy, ReduceScatterOp, AllGatherOp>::value) {
    // Member i: the per-rank side times the group size on the other.
    constexpr bool scatter = std::is_same_v<OpTy, ReduceScatterOp>;
    ArrayAttr perRank = scatter ? op.getWrites() : op.getReads();
    ArrayAttr whole = scatter ? op.getReads() : op.getWrites();
    for (size_t i = 0; i < whole.size(); ++i) {
      int64_t bytes = cast<RangeAttr>(perRank[i]).getBytes() * size;
      std::string over = describeMember(op, i, whole.size()) + " over " +
                         std::to_string(size) + " ranks";
      if (failed(verifyRangeBytes(op, scatter ? "read" : "write", whole, i,
                                  bytes, over)))
        return failure();
    }
  } else if constexpr (llvm::is_one_of<OpTy, BroadcastOp, SendOp,
                                       RecvOp>::value) {
    StringRef field = std::is_same_v<OpTy, BroadcastOp> ? "root" : "peer";
    int64_t peer;
    if constexpr (std::is_same_v<OpTy, BroadcastOp>)
      peer = op.getRoot();
    else
      peer = op.getPeer();
    if (peer >= size)
      return op.emitOpError()
             << field << " " << peer << " is outside the " << size
             << "-rank groups of family " << op.getGroupAttr();
  }
  return success();
}

/// The member checks of all_reduce, reduce_scatter and all_gather: member i
/// reads `reads[i]` and writes `writes[i]`; the per-rank sides (both for
/// all_reduce, the output of reduce_scatter, the input of all_gather) hold
/// whole elements adding up to `count`; and no member writes bytes another
/// member reads or writes, so issuing them together (one NCCL group) cannot
/// race.
template <typename OpTy> static LogicalResult verifyMembers(OpTy op) {
  ArrayAttr reads = op.getReads(), writes = op.getWrites();
  if (reads.empty() || reads.size() != writes.size())
    return op.emitOpError()
           << "expects one read and one write range per member, got "
           << reads.size() << " read and " << writes.size() << " write ranges";
  constexpr bool scatter = std::is_same_v<OpTy, ReduceScatterOp>;
  ArrayAttr perRank = scatter ? writes : reads;
  StringRef kind = scatter ? "write" : "read";
  int64_t elementBytes = getElementBytes(op.getDtype());
  size_t members = reads.size();
  if (members == 1) {
    if (failed(verifyRangeBytes(op, kind, perRank, 0,
                                op.getCount() * elementBytes,
                                describeMember(op, 0, 1))))
      return failure();
  } else {
    int64_t total = 0;
    for (auto [index, attr] : llvm::enumerate(perRank)) {
      int64_t bytes = cast<RangeAttr>(attr).getBytes();
      if (bytes % elementBytes != 0)
        return op.emitOpError() << kind << " range " << index << " has "
                                << bytes << " bytes, not a whole number of "
                                << getDTypeName(op.getDtype()) << " elements";
      total += bytes / elementBytes;
    }
    if (total != op.getCount())
      return op.emitOpError()
             << "members hold " << total << " elements per rank but count is "
             << op.getCount();
  }
  if constexpr (std::is_same_v<OpTy, AllReduceOp>)
    for (size_t i = 0; i < members; ++i)
      if (failed(verifyRangeBytes(op, "write", writes, i,
                                  cast<RangeAttr>(reads[i]).getBytes(),
                                  describeMember(op, i, members))))
        return failure();
  for (size_t i = 0; i < members; ++i)
    for (size_t j = 0; j < members; ++j) {
      if (i == j)
        continue;
      auto written = cast<RangeAttr>(writes[i]);
      for (auto [other, attr] :
           {std::pair{"reads", reads[j]}, std::pair{"writes", writes[j]}})
        if (written.overlaps(cast<RangeAttr>(attr)))
          return op.emitOpError()
                 << "member " << i << " writes " << describeRange(written)
                 << ", which member " << j << " " << other
                 << " (members must be independent)";
    }
  return success();
}

/// The byte checks that need only the op: `count` elements on each side
/// whose size does not depend on the group.
template <typename OpTy>
static LogicalResult verifyPayload(OpTy op, bool checkReads, bool checkWrites) {
  int64_t bytes = op.getCount() * getElementBytes(op.getDtype());
  std::string what = (op->getName().stripDialect() + " of " +
                      describePayload(op.getCount(), op.getDtype()))
                         .str();
  if (checkReads &&
      failed(verifyRangeBytes(op, "read", op.getReads(), 0, bytes, what)))
    return failure();
  if (checkWrites &&
      failed(verifyRangeBytes(op, "write", op.getWrites(), 0, bytes, what)))
    return failure();
  return success();
}

LogicalResult AllReduceOp::verify() { return verifyMembers(*this); }
LogicalResult
AllReduceOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult ReduceScatterOp::verify() { return verifyMembers(*this); }
LogicalResult
ReduceScatterOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult AllGatherOp::verify() { return verifyMembers(*this); }
LogicalResult
AllGatherOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult BroadcastOp::verify() {
  if (failed(verifyRangeCounts(*this, 0, 0, 1, 1)))
    return failure();
  return verifyPayload(*this, /*checkReads=*/false, /*checkWrites=*/true);
}
LogicalResult
BroadcastOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult SendOp::verify() {
  if (failed(verifyRangeCounts(*this, 1, 1, 0, 0)))
    return failure();
  return verifyPayload(*this, /*checkReads=*/true, /*checkWrites=*/false);
}
LogicalResult SendOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult RecvOp::verify() {
  if (failed(verifyRangeCounts(*this, 0, 0, 1, 1)))
    return failure();
  return verifyPayload(*this, /*checkReads=*/false, /*checkWrites=*/true);
}
LogicalResult RecvOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyCommunication(*this, symbolTable);
}

LogicalResult GemmOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  std::optional<GemmEpilogueKind> epilogue = getEpilogue();
  if (!epilogue)
    return success();
  ArrayRef<StringLiteral> names = getEpilogueKernelNames(*epilogue);
  int64_t m = getM(), n = getN(), k = getK();
  for (auto [index, symbol] :
       llvm::enumerate(getEpilogueKernels()->getAsRange<FlatSymbolRefAttr>())) {
    auto kernel = lookupInModule<KernelOp>(*this, symbolTable, symbol);
    if (!kernel)
      return emitOpError() << symbol << " does not name a weftx.kernel";
    StringRef name = kernel.getRegistryName();
    if (name != names[index])
      return emitOpError() << "epilogue kernel " << index << " (" << symbol
                           << ") is not a " << names[index];
    auto constant = [&](StringRef key) -> int64_t {
      auto value = kernel.getConstants().getAs<IntegerAttr>(key);
      return value ? value.getInt() : -1;
    };
    bool fits =
        name == "bias_add"    ? constant("width") == m && constant("rows") == n
        : name == "bias_grad" ? constant("width") == m && constant("rows") == k
                              : constant("n") == m * n;
    if (!fits)
      return emitOpError() << "epilogue kernel " << symbol
                           << " does not have the gemm's shape (m " << m
                           << ", n " << n << ", k " << k << ")";
  }
  return success();
}

LogicalResult LaunchOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!lookupInModule<KernelOp>(*this, symbolTable, getKernelAttr()))
    return emitOpError() << getKernelAttr() << " does not name a weftx.kernel";
  return success();
}

LogicalResult RecordEventOp::verify() {
  return verifyRangeCounts(*this, 0, 0, 0, 0);
}

LogicalResult WaitEventOp::verify() {
  return verifyRangeCounts(*this, 0, 0, 0, 0);
}

LogicalResult OptimizerStepOp::verify() {
  if (failed(verifyRangeCounts(*this, 4, 5, 3, 4)))
    return failure();
  if (getReads().size() == 5 &&
      failed(verifyRangeBytes(*this, "read", getReads(), 4, 4,
                              "the f32 sum of squares")))
    return failure();
  return verifyPayload(*this, /*checkReads=*/true, /*checkWrites=*/true);
}

LogicalResult GradNormOp::verify() {
  if (failed(verifyRangeCounts(*this, 1, -1, 1, 1)))
    return failure();
  return verifyRangeBytes(*this, "write", getWrites(), 0, 4,
                          "the f32 sum of squares");
}

LogicalResult ClipOp::verify() {
  if (failed(verifyRangeCounts(*this, 2, -1, 1, -1)))
    return failure();
  if (failed(verifyRangeBytes(*this, "read", getReads(), 0, 4,
                              "the f32 sum of squares")))
    return failure();
  if (getWrites().size() + 1 != getReads().size())
    return emitOpError() << "rescales read ranges 1.." << getReads().size() - 1
                         << " in place: needs " << getReads().size() - 1
                         << " write ranges, got " << getWrites().size();
  for (auto [index, write] : llvm::enumerate(getWrites()))
    if (write != getReads()[index + 1])
      return emitOpError() << "write range " << index
                           << " must equal read range " << index + 1
                           << " (clip is in place)";
  return success();
}

LogicalResult ReleaseOp::verify() {
  return verifyRangeCounts(*this, 0, 0, 1, 1);
}
