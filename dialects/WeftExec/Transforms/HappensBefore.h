//===- HappensBefore.h - Instruction order across streams ------*- C++ -*-===//
//
// What weft-plan-memory, weft-fold-zero-fills and weft-fuse-gemm-epilogues
// need to know about the order of a program's instructions: stream order
// plus record/wait events, and where each buffer is read and written.
//
//===----------------------------------------------------------------------===//
#ifndef WEFTEXEC_TRANSFORMS_HAPPENSBEFORE_H
#define WEFTEXEC_TRANSFORMS_HAPPENSBEFORE_H

#include "WeftExec/IR/WeftExecOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir::weftx {

/// Each stream's instructions, streams in program order (the numbering
/// HappensBefore uses).
SmallVector<SmallVector<InstructionOpInterface>>
instructionsByStream(ProgramOp program);

/// The happens-before relation of one program's instructions, from vector
/// clocks: clock(s, i, t) is how many instructions of stream t are known to
/// have completed when instruction i of stream s starts (itself included for
/// t == s).
class HappensBefore {
public:
  /// Executes the streams in an interleaving that honors events. Returns
  /// the first wait that can never be satisfied, if any (then the relation
  /// is incomplete).
  Operation *build(ProgramOp program);

  unsigned numStreams() const { return streams.size(); }
  /// Instructions of all streams, the length of the interleaving.
  int64_t numPositions() const { return numPositionsTotal; }
  int64_t numInstructions(unsigned stream) const {
    return streams[stream].size();
  }
  ArrayRef<InstructionOpInterface> getInstructions(unsigned stream) const {
    return streams[stream];
  }
  int64_t clock(unsigned stream, int64_t index, unsigned other) const {
    return clocks[stream][index * numStreams() + other];
  }
  /// Whether instruction `index` of `stream` has completed when instruction
  /// `laterIndex` of `later` starts.
  bool completesBefore(unsigned stream, int64_t index, unsigned later,
                       int64_t laterIndex) const {
    return clock(later, laterIndex, stream) > index;
  }
  /// Position of (stream, index) in the interleaving.
  int64_t position(unsigned stream, int64_t index) const {
    return positions[stream][index];
  }

private:
  SmallVector<SmallVector<InstructionOpInterface>> streams;
  /// Per stream, the clocks of its instructions one after another.
  SmallVector<SmallVector<int64_t, 0>> clocks;
  SmallVector<SmallVector<int64_t, 0>> positions;
  int64_t numPositionsTotal = 0;
};

/// One read or write of a buffer: instruction `index` of `stream` accessing
/// `range`.
struct BufferAccess {
  unsigned stream;
  int64_t index;
  RangeAttr range;
  Operation *op;
  bool write;
};

/// Every access of each of a program's buffers, stream by stream in order.
class BufferAccesses {
public:
  explicit BufferAccesses(const HappensBefore &order);
  /// The accesses of `buffer` (none for a buffer no instruction names).
  ArrayRef<BufferAccess> of(FlatSymbolRefAttr buffer) const {
    auto it = byBuffer.find(buffer.getAttr());
    return it == byBuffer.end() ? ArrayRef<BufferAccess>() : it->second;
  }

private:
  llvm::DenseMap<StringAttr, SmallVector<BufferAccess, 2>> byBuffer;
};

} // namespace mlir::weftx

#endif // WEFTEXEC_TRANSFORMS_HAPPENSBEFORE_H
