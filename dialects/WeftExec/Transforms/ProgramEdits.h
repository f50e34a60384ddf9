//===- ProgramEdits.h - Helpers for passes that edit programs ---*- C++ -*-===//
//
// What weft-schedule, weft-optimizer and the overlap passes share: byte-range
// overlap of instructions, fresh event numbers, side streams, buffers by
// name, and the standard group families of the mesh.
//
//===----------------------------------------------------------------------===//
#ifndef WEFTEXEC_TRANSFORMS_PROGRAMEDITS_H
#define WEFTEXEC_TRANSFORMS_PROGRAMEDITS_H

#include "WeftExec/IR/WeftExecOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

namespace mlir::weftx {

/// What the fusion passes ask about one program's launches: the kernel a
/// launch runs, its constants, and the element type of a range's buffer.
class LaunchQueries {
public:
  LaunchQueries(ProgramOp program, SymbolTable &kernels);

  /// The kernel `op` launches, or null (not a weftx.launch).
  KernelOp kernelOf(Operation *op) const;
  /// That kernel when it specializes registry kernel `name` (`name.N`
  /// specializes `name`), else null.
  KernelOp kernelOf(Operation *op, StringRef name) const;
  /// Constant `name` of `kernel`, -1 when absent.
  static int64_t constant(KernelOp kernel, StringRef name);
  /// The element type of `range`'s buffer (null for an unknown buffer).
  Type dtype(RangeAttr range) const;
  BufferOp bufferOf(RangeAttr range) const {
    return buffers.lookup(range.getBuffer().getAttr());
  }
  static RangeAttr range(ArrayAttr ranges, size_t index) {
    return cast<RangeAttr>(ranges[index]);
  }

protected:
  SymbolTable &kernels;
  DenseMap<StringAttr, BufferOp> buffers;
};

/// Whether one of the `attr` ("reads" or "writes") ranges of `op` overlaps
/// `range`.
bool touches(Operation *op, StringRef attr, RangeAttr range);

/// Whether any `attrA` range of `a` overlaps any `attrB` range of `b`.
bool overlaps(Operation *a, StringRef attrA, Operation *b, StringRef attrB);

/// For disjoint ranges `slots` of one buffer, the first instruction of `ops`
/// (walked in order) whose `attr` ("reads" or "writes") ranges overlap each
/// slot, null where none does: one walk, a binary search per range.
template <typename OpRange>
SmallVector<Operation *> firstTouching(ArrayRef<RangeAttr> slots,
                                       StringRef attr, OpRange &&ops) {
  SmallVector<Operation *> found(slots.size(), nullptr);
  if (slots.empty())
    return found;
  SmallVector<size_t> byOffset(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    byOffset[i] = i;
  llvm::sort(byOffset, [&](size_t a, size_t b) {
    return slots[a].getOffset() < slots[b].getOffset();
  });
  FlatSymbolRefAttr buffer = slots.front().getBuffer();
  size_t unseen = slots.size();
  for (Operation &op : ops) {
    if (!unseen)
      break;
    auto list = op.getAttrOfType<ArrayAttr>(attr);
    if (!list)
      continue;
    for (auto range : list.getAsRange<RangeAttr>()) {
      if (range.getBuffer() != buffer)
        continue;
      auto it = llvm::partition_point(byOffset, [&](size_t slot) {
        return slots[slot].getEnd() <= range.getOffset();
      });
      for (; it != byOffset.end() && slots[*it].getOffset() < range.getEnd();
           ++it)
        if (!found[*it]) {
          found[*it] = &op;
          --unseen;
        }
    }
  }
  return found;
}

/// The stream named `name` of `program`, or null.
StreamOp findStream(ProgramOp program, StringRef name);

/// The stream named `name`, appended to `program` if it has none.
StreamOp getOrCreateStream(ProgramOp program, StringRef name);

/// The buffer named `name` of `program`, or null.
BufferOp findBuffer(ProgramOp program, StringRef name);

/// The whole of `buffer` as a range.
RangeAttr wholeRange(BufferOp buffer);

/// `elements` elements of `buffer` from element `start`.
RangeAttr elementRange(BufferOp buffer, int64_t start, int64_t elements);

/// The standard group families over the `weftx.mesh` (rank = (dp * pp +
/// pp index) * tp + tp index), each listing its groups one after another,
/// members in group-relative order.
enum class Family {
  TP,            // the TP ranks of one (dp, pp) position
  PP,            // the pipeline of one (dp, tp) position, by stage
  DP,            // the replicas of one (pp, tp) position
  ModelParallel, // every rank of one DP replica (`mp`)
  World,         // every rank
  Tied,          // the first and last pipeline rank of one (dp, tp) position
};

/// The module's `weftx.kernel` declarations by registry kernel and
/// constants: one per specialization, named `name`, `name.1`, ... (the
/// runtime selects the registry kernel by the name before the first `.`;
/// docs/runtime.md).
class KernelDeclarations {
public:
  /// Indexes the declarations `module` has.
  explicit KernelDeclarations(ModuleOp module);
  /// The declaration of registry kernel `name` specialized to `constants`;
  /// a new one goes after the module's kernels (before its first program
  /// when it has none), its `source` a placeholder weft-generate-kernels
  /// replaces.
  FlatSymbolRefAttr get(StringRef name, DictionaryAttr constants);

private:
  ModuleOp module;
  Operation *lastKernel = nullptr;
  DenseMap<std::pair<StringAttr, DictionaryAttr>, FlatSymbolRefAttr> declared;
  llvm::StringMap<int64_t> declarations; // per registry kernel
};

/// The family's `weftx.group` (named tp, pp, dp, mp, world or tied),
/// declared after the mesh and the groups before it if the module has none.
FlatSymbolRefAttr getOrCreateFamily(ModuleOp module, Family family);

/// The module's `weftx.config` `bucket_bytes` (DP gradient buckets,
/// offloaded AdamW buckets), or 25 MiB (as DDP) when absent or 0.
int64_t bucketBytesOf(ModuleOp module);

/// The kind of the group family a collective communicates over.
std::optional<GroupKind> groupKindOf(Operation *collective);

/// Hands out event numbers above every number `program` already uses.
class EventCounter {
public:
  explicit EventCounter(ProgramOp program);
  int64_t next() { return nextEvent++; }

private:
  int64_t nextEvent = 0;
};

/// `record_event` of a fresh event right after `op` (with `op`'s phase),
/// returning its number.
int64_t recordAfter(Operation *op, EventCounter &events);

/// `wait_event event` before `op`, labelled with `phase`.
void waitBefore(Operation *op, int64_t event, StringAttr phase);

/// The phase label of an instruction (null if it has none).
inline StringAttr phaseOf(Operation *op) {
  return op->getAttrOfType<StringAttr>("phase");
}

/// Splits items 0..n-1, in order, into consecutive buckets of at most
/// `limit` bytes (`bytesOf(i)` each; a bucket holds at least one item), a
/// new one also starting at every item `startsBucket(i)` says must begin
/// one. Returns the buckets as [begin, end) index pairs.
SmallVector<std::pair<size_t, size_t>>
bucketsInOrder(size_t n, function_ref<int64_t(size_t)> bytesOf, int64_t limit,
               function_ref<bool(size_t)> startsBucket = nullptr);

/// One all_reduce, reduce_scatter or all_gather (OpTy) of the members
/// `reads[i]` -> `writes[i]`, issued together (one NCCL group); `count` is
/// the members' per-rank elements (the outputs of a reduce_scatter, the
/// inputs otherwise). The members must be independent (the op verifier).
template <typename OpTy>
OpTy createCoalesced(OpBuilder &builder, Location loc, Type dtype,
                     StringRef group, ArrayRef<RangeAttr> reads,
                     ArrayRef<RangeAttr> writes, StringAttr phase) {
  static_assert(
      llvm::is_one_of<OpTy, AllReduceOp, ReduceScatterOp, AllGatherOp>::value,
      "a collective with members");
  int64_t bytes = 0;
  for (RangeAttr range : std::is_same_v<OpTy, ReduceScatterOp> ? writes : reads)
    bytes += range.getBytes();
  int64_t count = bytes / getElementBytes(dtype);
  auto list = [&](ArrayRef<RangeAttr> ranges) {
    return builder.getArrayAttr(
        SmallVector<Attribute>(ranges.begin(), ranges.end()));
  };
  if constexpr (std::is_same_v<OpTy, AllGatherOp>)
    return OpTy::create(builder, loc, count, dtype, group, list(reads),
                        list(writes), phase);
  else
    return OpTy::create(builder, loc, ReduceKind::sum, count, dtype, group,
                        list(reads), list(writes), phase);
}

} // namespace mlir::weftx

#endif // WEFTEXEC_TRANSFORMS_PROGRAMEDITS_H
