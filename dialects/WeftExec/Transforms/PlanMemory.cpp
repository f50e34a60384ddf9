//===- PlanMemory.cpp - Static memory planning for weftx programs ---------===//
//
// Places every buffer of every program: persistent buffers packed in
// declaration order, arena buffers at offsets that may be shared by buffers
// whose lifetimes are ordered by happens-before (stream order plus events).
//
//===----------------------------------------------------------------------===//
#include "WeftExec/Transforms/Passes.h"

#include "WeftExec/Transforms/HappensBefore.h"

#include "WeftExec/IR/WeftExecOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Threading.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

namespace mlir::weftx {
#define GEN_PASS_DEF_WEFTPLANMEMORY
#include "WeftExec/Transforms/Passes.h.inc"
} // namespace mlir::weftx

using namespace mlir;
using namespace mlir::weftx;

namespace {

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

/// Offsets are multiples of their alignment, which the default integer hash
/// (a multiplication) keeps in the low bits: hash them properly.
struct OffsetInfo : llvm::DenseMapInfo<int64_t> {
  static unsigned getHashValue(int64_t offset) {
    return llvm::hash_value(offset);
  }
};

/// Where the buffers of one program are accessed: per buffer and stream, the
/// first and last instruction (kNever and -1 where the stream never touches
/// it), and the first and last position in the interleaving.
struct Lifetimes {
  unsigned numStreams;
  SmallVector<int64_t, 0> first, last;
  SmallVector<int64_t, 0> firstPosition, lastPosition;

  Lifetimes(unsigned numBuffers, unsigned numStreams)
      : numStreams(numStreams), first(numBuffers * numStreams, kNever),
        last(numBuffers * numStreams, -1), firstPosition(numBuffers, kNever),
        lastPosition(numBuffers, -1) {}

  int64_t &firstOn(unsigned buffer, unsigned stream) {
    return first[buffer * numStreams + stream];
  }
  int64_t &lastOn(unsigned buffer, unsigned stream) {
    return last[buffer * numStreams + stream];
  }
  bool isAccessed(unsigned buffer) const { return lastPosition[buffer] >= 0; }
};

/// When two accessed buffers may not share bytes.
///
/// Buffer `a` may share bytes with `b` only if every access of one happens
/// before every access of the other. Write F_b[s] for the number of
/// instructions of stream s known to have completed when `b` is first
/// accessed (the minimum over b's first accesses; on b's own stream, the
/// index of that access): every access of `a` happens before every access of
/// `b` exactly when a's last access on each stream s lies below F_b[s].
/// Since the interleaving honors happens-before, such an `a` also ends
/// before `b` begins in it. So `a` and `b` conflict exactly when their
/// intervals of interleaving positions overlap (PlacedIntervals), or when
/// `a` ends before `b` begins but accesses some stream s at or after F_b[s]
/// (or the other way round): streams that no chain of events orders. This
/// class lists the latter, for each buffer the ones placed before it (lower
/// `rank`), found as the buffers whose last access on s lies at a position
/// in [position(s, F_b[s]), first position of b), a range of the buffers
/// sorted by their last position on s; it costs as much as it finds.
class UnorderedConflicts {
public:
  UnorderedConflicts(const HappensBefore &hb, Lifetimes &lifetimes,
                     ArrayRef<unsigned> live, ArrayRef<unsigned> rank,
                     unsigned numBuffers);

  ArrayRef<unsigned> placedBefore(unsigned buffer) const {
    return ArrayRef<unsigned>(targets).slice(
        starts[buffer], starts[buffer + 1] - starts[buffer]);
  }

private:
  SmallVector<unsigned, 0> starts, targets;
};

UnorderedConflicts::UnorderedConflicts(const HappensBefore &hb,
                                       Lifetimes &lifetimes,
                                       ArrayRef<unsigned> live,
                                       ArrayRef<unsigned> rank,
                                       unsigned numBuffers) {
  const SmallVector<int64_t, 0> &firstPosition = lifetimes.firstPosition;
  const SmallVector<int64_t, 0> &lastPosition = lifetimes.lastPosition;
  // (later placed, earlier placed)
  SmallVector<std::pair<unsigned, unsigned>, 0> edges;
  unsigned numStreams = hb.numStreams();
  SmallVector<SmallVector<std::pair<int64_t, unsigned>, 0>> byLast(numStreams);
  for (unsigned b : live)
    for (unsigned s = 0; s < numStreams; ++s)
      if (int64_t index = lifetimes.lastOn(b, s); index >= 0)
        byLast[s].push_back({hb.position(s, index), b});
  for (auto &list : byLast)
    llvm::sort(list);
  SmallVector<unsigned> seen(numBuffers, ~0u);
  for (unsigned b : live) {
    int64_t begin = firstPosition[b];
    for (unsigned s = 0; s < numStreams; ++s) {
      int64_t frontier = kNever;
      for (unsigned t = 0; t < numStreams; ++t) {
        int64_t index = lifetimes.firstOn(b, t);
        if (index == kNever)
          continue;
        frontier = std::min(frontier, t == s ? index : hb.clock(t, index, s));
      }
      if (frontier >= hb.numInstructions(s))
        continue;
      int64_t from = hb.position(s, frontier);
      if (from >= begin)
        continue;
      auto it = llvm::lower_bound(byLast[s], std::make_pair(from, 0u));
      for (; it != byLast[s].end() && it->first < begin; ++it) {
        unsigned other = it->second;
        // Overlapping intervals are PlacedIntervals' to find.
        if (lastPosition[other] >= begin || seen[other] == b)
          continue;
        seen[other] = b;
        if (rank[other] < rank[b])
          edges.push_back({b, other});
        else
          edges.push_back({other, b});
      }
    }
  }

  starts.assign(numBuffers + 1, 0);
  for (auto [later, earlier] : edges)
    ++starts[later + 1];
  for (unsigned b = 0; b < numBuffers; ++b)
    starts[b + 1] += starts[b];
  targets.resize(edges.size());
  SmallVector<unsigned, 0> fill(starts.begin(), starts.end() - 1);
  for (auto [later, earlier] : edges)
    targets[fill[later]++] = earlier;
}

/// The placed buffers by their intervals of interleaving positions, to list
/// those that overlap a given interval: the ones that contain its first
/// position (a segment tree, stabbed) and the ones that begin after it
/// within it (per first position, nonempty positions in a bit set). Each is
/// listed once, in time proportional to the answer. The intervals that will
/// be inserted are announced first, so that every list has its place in one
/// array. An entry is a value the caller chooses.
template <typename Entry> class PlacedIntervals {
public:
  /// Positions are [0, numPositions); `intervals` are the (first, last)
  /// positions of everything that will be inserted.
  PlacedIntervals(int64_t numPositions,
                  ArrayRef<std::pair<int64_t, int64_t>> intervals) {
    while (width < numPositions)
      width *= 2;
    // Lists: the 2 * width tree nodes, then the width first positions.
    starts.assign(3 * width + 1, 0);
    for (auto [first, last] : intervals)
      forEachNode(first, last, [&](int64_t node) { ++starts[node + 1]; });
    for (auto [first, last] : intervals)
      ++starts[2 * width + first + 1];
    for (int64_t list = 0; list < 3 * width; ++list)
      starts[list + 1] += starts[list];
    ends.assign(starts.begin(), starts.end() - 1);
    entries.resize(starts.back());
    nonempty.assign(width / 64 + 1, 0);
  }

  void insert(int64_t first, int64_t last, Entry entry) {
    forEachNode(first, last,
                [&](int64_t node) { entries[ends[node]++] = entry; });
    entries[ends[2 * width + first]++] = entry;
    nonempty[first / 64] |= uint64_t(1) << (first % 64);
  }

  template <typename Fn>
  void forEachOverlapping(int64_t first, int64_t last, Fn fn) const {
    for (int64_t node = first + width; node >= 1; node /= 2)
      visit(node, fn);
    // Positions first + 1 .. last.
    int64_t from = first + 1;
    for (int64_t w = from / 64; w * 64 <= last; ++w) {
      uint64_t word = nonempty[w];
      if (w == from / 64)
        word &= ~uint64_t(0) << (from % 64);
      for (; word; word &= word - 1) {
        int64_t position = w * 64 + llvm::countr_zero(word);
        if (position > last)
          return;
        visit(2 * width + position, fn);
      }
    }
  }

private:
  /// The segment tree nodes that [first, last] is stored at.
  template <typename Fn>
  void forEachNode(int64_t first, int64_t last, Fn fn) const {
    for (int64_t lo = first + width, hi = last + 1 + width; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        fn(lo++);
      if (hi & 1)
        fn(--hi);
    }
  }

  template <typename Fn> void visit(int64_t list, Fn fn) const {
    for (int64_t i = starts[list], e = ends[list]; i < e; ++i)
      fn(entries[i]);
  }

  int64_t width = 1;
  SmallVector<int64_t, 0> starts, ends;
  SmallVector<Entry, 0> entries;
  SmallVector<uint64_t, 0> nonempty;
};

/// The distinct offsets at which placed buffers begin, kept in increasing
/// order, and per offset the conflicting buffers collected for the buffer
/// being placed: the best fit visits them in the order of their offsets
/// without sorting them (a program has far fewer distinct offsets than
/// conflicts).
class OffsetSlots {
public:
  /// The slot of `offset`, created if new. Slots are stable; their order is
  /// that of the offsets.
  unsigned getOrCreate(int64_t offset) {
    auto [it, inserted] = idOf.try_emplace(offset, rankOf.size());
    if (!inserted)
      return it->second;
    unsigned id = it->second;
    unsigned rank =
        llvm::partition_point(
            byRank, [&](const Offset &o) { return o.begin < offset; }) -
        byRank.begin();
    byRank.insert(byRank.begin() + rank, Offset{offset});
    idAt.insert(idAt.begin() + rank, id);
    rankOf.push_back(rank);
    for (unsigned r = rank + 1; r < idAt.size(); ++r)
      rankOf[idAt[r]] = r;
    if (words.size() * 64 < byRank.size())
      words.push_back(0);
    return id;
  }

  /// Collects a buffer [offset of `slot`, end).
  void add(unsigned slot, int64_t end) {
    unsigned rank = rankOf[slot];
    words[rank / 64] |= uint64_t(1) << (rank % 64);
    Offset &o = byRank[rank];
    o.maxEnd = std::max(o.maxEnd, end);
  }

  /// Calls fn(begin, maxEnd) for every offset collected since the last call,
  /// in increasing order, and forgets them: `maxEnd` is the largest end of
  /// the buffers collected there.
  template <typename Fn> void drain(Fn fn) {
    for (unsigned w = 0; w < words.size(); ++w) {
      for (uint64_t word = words[w]; word; word &= word - 1) {
        Offset &o = byRank[w * 64 + llvm::countr_zero(word)];
        fn(o.begin, o.maxEnd);
        o.maxEnd = -1;
      }
      words[w] = 0;
    }
  }

private:
  struct Offset {
    int64_t begin;
    int64_t maxEnd = -1;
  };
  llvm::DenseMap<int64_t, unsigned, OffsetInfo> idOf;
  /// Per rank (position in increasing order of offsets).
  SmallVector<Offset, 0> byRank;
  SmallVector<unsigned, 0> idAt;
  /// Per slot.
  SmallVector<unsigned, 0> rankOf;
  SmallVector<uint64_t, 0> words;
};

struct PlanMemoryPass
    : public mlir::weftx::impl::WeftPlanMemoryBase<PlanMemoryPass> {
  using WeftPlanMemoryBase::WeftPlanMemoryBase;

  void runOnOperation() override;

private:
  /// Places the buffers of `program`; returns the wait that blocks it, if
  /// any (then nothing is placed). Appends the report line to `reportLine`
  /// with `report`.
  Operation *planProgram(ProgramOp program, int64_t role,
                         PredictionAttr prediction, std::string &reportLine);
};

Operation *PlanMemoryPass::planProgram(ProgramOp program, int64_t role,
                                       PredictionAttr prediction,
                                       std::string &reportLine) {
  HappensBefore hb;
  if (Operation *blocked = hb.build(program))
    return blocked;

  SmallVector<BufferOp> buffers = llvm::to_vector(program.getBuffers());
  unsigned numBuffers = buffers.size(), numStreams = hb.numStreams();
  llvm::DenseMap<StringAttr, unsigned> bufferIndex;
  SmallVector<int64_t, 0> sizes(numBuffers), alignments(numBuffers),
      offsets(numBuffers, 0);
  for (auto [index, buffer] : llvm::enumerate(buffers)) {
    bufferIndex[buffer.getSymNameAttr()] = index;
    sizes[index] = buffer.getSize();
    alignments[index] = buffer.getAlignment();
  }
  Lifetimes lifetimes(numBuffers, numStreams);
  for (unsigned s = 0; s < numStreams; ++s) {
    for (auto [index, constInst] : llvm::enumerate(hb.getInstructions(s))) {
      InstructionOpInterface inst = constInst;
      int64_t i = index, position = hb.position(s, i);
      for (ArrayAttr ranges : {inst.getReads(), inst.getWrites()}) {
        for (RangeAttr range : ranges.getAsRange<RangeAttr>()) {
          unsigned b = bufferIndex.lookup(range.getBuffer().getAttr());
          int64_t &first = lifetimes.firstOn(b, s),
                  &last = lifetimes.lastOn(b, s);
          first = std::min(first, i);
          last = std::max(last, i);
          lifetimes.firstPosition[b] =
              std::min(lifetimes.firstPosition[b], position);
          lifetimes.lastPosition[b] =
              std::max(lifetimes.lastPosition[b], position);
        }
      }
    }
  }

  OpBuilder builder(program);
  // Many buffers share an offset: one attribute lookup per distinct value.
  llvm::DenseMap<int64_t, IntegerAttr, OffsetInfo> offsetAttrs;
  auto setOffset = [&](unsigned index, int64_t offset) {
    offsets[index] = offset;
    IntegerAttr &attr = offsetAttrs[offset];
    if (!attr)
      attr = builder.getI64IntegerAttr(offset);
    buffers[index].setOffsetAttr(attr);
  };

  // Persistent and host buffers live for the whole run: packed in
  // declaration order.
  int64_t persistentSize = 0, hostSize = 0;
  SmallVector<unsigned> arena;
  for (auto [index, buffer] : llvm::enumerate(buffers)) {
    if (buffer.getRegion() == weftx::Region::arena) {
      arena.push_back(index);
      continue;
    }
    int64_t &size =
        buffer.getRegion() == weftx::Region::host ? hostSize : persistentSize;
    int64_t offset = llvm::alignTo(size, alignments[index]);
    setOffset(index, offset);
    size = offset + sizes[index];
  }

  // Largest first packs best; ties go to the earlier first access, then to
  // declaration order, so the result is deterministic.
  llvm::stable_sort(arena, [&](unsigned a, unsigned b) {
    if (sizes[a] != sizes[b])
      return sizes[a] > sizes[b];
    return lifetimes.firstPosition[a] < lifetimes.firstPosition[b];
  });
  SmallVector<unsigned> rank(numBuffers, 0), accessed;
  for (auto [r, index] : llvm::enumerate(arena)) {
    rank[index] = r;
    if (lifetimes.isAccessed(index))
      accessed.push_back(index);
  }
  UnorderedConflicts unordered(hb, lifetimes, accessed, rank, numBuffers);

  // Best fit: the smallest gap between conflicting buffers that holds the
  // aligned buffer, else the first aligned offset after all of them. The
  // conflicting buffers are visited by increasing offset, as a sort of
  // (begin, end) pairs would; since sizes are positive (the op verifier),
  // only the first buffer at one offset can bound a gap, and the largest end
  // there moves the cursor.
  OffsetSlots slots;
  SmallVector<unsigned, 0> slotOf(numBuffers, 0);
  struct PlacedBuffer {
    unsigned slot;
    int64_t end;
  };
  SmallVector<std::pair<int64_t, int64_t>, 0> intervals;
  for (unsigned index : accessed)
    intervals.push_back(
        {lifetimes.firstPosition[index], lifetimes.lastPosition[index]});
  PlacedIntervals<PlacedBuffer> placed(hb.numPositions(), intervals);
  int64_t arenaSize = 0;
  for (unsigned index : arena) {
    int64_t size = sizes[index], alignment = alignments[index];
    bool isAccessed = lifetimes.isAccessed(index);
    if (isAccessed) {
      placed.forEachOverlapping(
          lifetimes.firstPosition[index], lifetimes.lastPosition[index],
          [&](const PlacedBuffer &other) { slots.add(other.slot, other.end); });
      for (unsigned other : unordered.placedBefore(index))
        slots.add(slotOf[other], offsets[other] + sizes[other]);
    }
    int64_t cursor = 0, bestOffset = -1, bestGap = kNever;
    auto consider = [&](int64_t begin) {
      // offset >= cursor: the first test only saves the division.
      if (begin - cursor < size || begin - cursor >= bestGap)
        return;
      int64_t offset = llvm::alignTo(cursor, alignment);
      if (offset + size <= begin && begin - cursor < bestGap) {
        bestGap = begin - cursor;
        bestOffset = offset;
      }
    };
    slots.drain([&](int64_t begin, int64_t maxEnd) {
      consider(begin);
      cursor = std::max(cursor, maxEnd);
    });
    int64_t offset = bestOffset >= 0
                         ? bestOffset
                         : int64_t(llvm::alignTo(cursor, alignment));
    setOffset(index, offset);
    if (isAccessed) {
      slotOf[index] = slots.getOrCreate(offset);
      placed.insert(lifetimes.firstPosition[index],
                    lifetimes.lastPosition[index],
                    PlacedBuffer{slotOf[index], offset + size});
    }
    arenaSize = std::max(arenaSize, offset + size);
  }

  program.setArenaSizeAttr(builder.getI64IntegerAttr(arenaSize));
  program.setPersistentSizeAttr(builder.getI64IntegerAttr(persistentSize));
  if (hostSize > 0)
    program.setHostSizeAttr(builder.getI64IntegerAttr(hostSize));
  if (!report)
    return nullptr;

  // Live bytes along the interleaving: a lower bound for any placement.
  SmallVector<std::pair<int64_t, int64_t>> deltas;
  for (unsigned index : arena) {
    if (!lifetimes.isAccessed(index))
      continue;
    deltas.push_back({lifetimes.firstPosition[index], sizes[index]});
    deltas.push_back({lifetimes.lastPosition[index] + 1, -sizes[index]});
  }
  llvm::sort(deltas);
  int64_t live = 0, liveBound = 0;
  for (auto [position, delta] : deltas) {
    live += delta;
    liveBound = std::max(liveBound, live);
  }
  llvm::raw_string_ostream os(reportLine);
  os << "weft-plan-memory: program @" << program.getSymName() << " (role "
     << role << "): arena " << arenaSize << " B (live lower bound " << liveBound
     << " B), persistent " << persistentSize << " B, planned peak "
     << arenaSize + persistentSize << " B";
  if (prediction)
    os << ", predicted " << prediction.getPeakMemoryBytes()[role] << " B";
  os << "\n";
  return nullptr;
}

void PlanMemoryPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto prediction = module->getAttrOfType<PredictionAttr>(
      WeftExecDialect::kPredictionAttrName);
  // Programs are planned independently, in parallel; what they report and
  // the first that cannot be planned come out in program order.
  SmallVector<ProgramOp> programs = llvm::to_vector(module.getOps<ProgramOp>());
  SmallVector<std::string> reports(programs.size());
  SmallVector<Operation *> blocked(programs.size(), nullptr);
  mlir::parallelFor(&getContext(), 0, programs.size(), [&](size_t role) {
    blocked[role] =
        planProgram(programs[role], role, prediction, reports[role]);
  });
  for (auto [role, program] : llvm::enumerate(programs)) {
    if (blocked[role]) {
      blocked[role]->emitError()
          << "waits for an event that is never recorded before it in any "
             "order of the streams; the program cannot be memory-planned";
      return signalPassFailure();
    }
    llvm::outs() << reports[role];
  }
}

} // namespace
