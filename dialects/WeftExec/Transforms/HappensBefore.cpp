//===- HappensBefore.cpp - Instruction order across streams ---------------===//

#include "WeftExec/Transforms/HappensBefore.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace mlir::weftx;

SmallVector<SmallVector<InstructionOpInterface>>
weftx::instructionsByStream(ProgramOp program) {
  SmallVector<SmallVector<InstructionOpInterface>> streams;
  for (StreamOp stream : program.getStreams())
    streams.push_back(llvm::to_vector(
        stream.getBody().front().getOps<InstructionOpInterface>()));
  return streams;
}

Operation *HappensBefore::build(ProgramOp program) {
  streams = instructionsByStream(program);
  unsigned numStreams = streams.size();
  clocks.resize(numStreams);
  positions.resize(numStreams);
  for (unsigned s = 0; s < numStreams; ++s) {
    clocks[s].reserve(streams[s].size() * numStreams);
    positions[s].reserve(streams[s].size());
  }
  SmallVector<SmallVector<int64_t>> current(
      numStreams, SmallVector<int64_t>(numStreams, 0));
  llvm::DenseMap<int64_t, SmallVector<int64_t>> recorded;
  int64_t position = 0;
  bool progress = true;
  while (progress) {
    progress = false;
    for (unsigned s = 0; s < numStreams; ++s) {
      while (positions[s].size() < streams[s].size()) {
        int64_t index = positions[s].size();
        Operation *op = streams[s][index];
        if (auto wait = dyn_cast<WaitEventOp>(op)) {
          auto it = recorded.find(wait.getEvent());
          if (it == recorded.end())
            break;
          for (unsigned t = 0; t < numStreams; ++t)
            current[s][t] = std::max(current[s][t], it->second[t]);
        }
        current[s][s] = index + 1;
        if (auto record = dyn_cast<RecordEventOp>(op))
          recorded[record.getEvent()] = current[s];
        clocks[s].append(current[s].begin(), current[s].end());
        positions[s].push_back(position++);
        progress = true;
      }
    }
  }
  numPositionsTotal = position;
  for (unsigned s = 0; s < numStreams; ++s)
    if (positions[s].size() < streams[s].size())
      return streams[s][positions[s].size()];
  return nullptr;
}

BufferAccesses::BufferAccesses(const HappensBefore &order) {
  for (unsigned s = 0; s < order.numStreams(); ++s)
    for (auto [index, inst] : llvm::enumerate(order.getInstructions(s))) {
      Operation *op = InstructionOpInterface(inst);
      for (bool write : {false, true})
        if (auto list =
                op->getAttrOfType<ArrayAttr>(write ? "writes" : "reads"))
          for (RangeAttr range : list.getAsRange<RangeAttr>())
            byBuffer[range.getBuffer().getAttr()].push_back(
                {s, int64_t(index), range, op, write});
    }
}
