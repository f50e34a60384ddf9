//===- GemmEpilogue.cpp - Kernels folded into cuBLASLt GEMMs --------------===//

#include "weft/exec/cuda/GemmEpilogue.h"

#include "weft/exec/KernelRegistry.h"
#include "weft/exec/OperandChecks.h"
#include "weft/kernels/Activations.h"
#include "weft/plan/Verifier.h"

#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace weft::exec::cuda {

namespace {

using plan::DType;
using plan::Instruction;
using plan::Opcode;

/// Reads a program's instructions and buffers for the matching.
class Matcher {
public:
  Matcher(const plan::Bundle &bundle, const plan::Program &program)
      : bundle(bundle), program(program) {}

  /// The kernel `inst` runs when it is a specialization of registry kernel
  /// `name` (findKernel reads `name.N` as `name`).
  const plan::Kernel *kernel(const Instruction &inst,
                             std::string_view name) const {
    if (inst.opcode != Opcode::Kernel || inst.kernel < 0 ||
        size_t(inst.kernel) >= bundle.kernels.size())
      return nullptr;
    const plan::Kernel &k = bundle.kernels[size_t(inst.kernel)];
    const KernelSpec *spec = findKernel(k.name);
    return spec && spec->name == name ? &k : nullptr;
  }
  static int64_t constant(const plan::Kernel &k, const char *name) {
    auto it = k.constants.find(name);
    return it == k.constants.end() ? -1 : it->second;
  }
  DType dtype(const plan::BufferRange &range) const {
    return program.buffers[size_t(range.buffer)].dtype;
  }
  /// A range of `like`'s size and dtype.
  bool sameShape(const plan::BufferRange &range,
                 const plan::BufferRange &like) const {
    return range.bytes == like.bytes && dtype(range) == dtype(like);
  }

  /// A gemm on float storage with one output.
  static bool floatGemm(const Instruction &gemm) {
    return gemm.opcode == Opcode::Gemm && gemm.writes.size() == 1 &&
           isFloatStorage(gemm.dtype);
  }
  /// A gemm whose packed output has the gemm's dtype.
  static bool foldableGemm(const Instruction &gemm) {
    return floatGemm(gemm) && gemm.gemm.ldc == gemm.gemm.m;
  }

  /// bias_grad over the gemm's A (m x k, packed, not transposed) into m
  /// elements of the gemm's dtype.
  bool biasGradOfA(const Instruction &gemm, const Instruction &next) const {
    const plan::Kernel *k = kernel(next, "bias_grad");
    const plan::GemmParams &g = gemm.gemm;
    if (!k || next.reads.size() != 1 || next.writes.size() != 1 ||
        gemm.reads.size() < 2 || g.transA || g.lda != g.m)
      return false;
    const plan::BufferRange &dy = next.reads[0], &grad = next.writes[0];
    return dy == gemm.reads[0] && constant(*k, "width") == g.m &&
           constant(*k, "rows") == g.k && dtype(dy) == gemm.dtype &&
           dtype(grad) == gemm.dtype &&
           grad.bytes == g.m * plan::elementBytes(gemm.dtype);
  }

  /// Whether `range` still holds zeros when instruction `at` of stream
  /// `stream` runs and nothing on another stream writes it before that
  /// instruction has finished: every write of it on another stream waits
  /// (through the plan's events) for `at`, and its last writer before on
  /// this stream is a fill of 0 covering it.
  bool stillZeroFilled(size_t stream, size_t at,
                       const plan::BufferRange &range) const {
    auto writes = [&](const Instruction &inst) {
      for (const plan::BufferRange &w : inst.writes)
        if (w.overlaps(range))
          return true;
      return false;
    };
    for (size_t s = 0; s < program.streams.size(); ++s) {
      if (s == stream)
        continue;
      const std::vector<Instruction> &insts = program.streams[s].instructions;
      for (size_t j = 0; j < insts.size(); ++j)
        if (writes(insts[j]) && !waitsFor(s, j, stream, at))
          return false;
    }
    const std::vector<Instruction> &insts =
        program.streams[stream].instructions;
    for (size_t j = at; j-- > 0;) {
      const Instruction &inst = insts[j];
      if (!writes(inst))
        continue;
      if (inst.opcode != Opcode::Fill || inst.value != 0)
        return false;
      for (const plan::BufferRange &w : inst.writes)
        if (w.buffer == range.buffer && w.offset <= range.offset &&
            range.offset + range.bytes <= w.offset + w.bytes)
          return true;
      return false;
    }
    return false; // nothing says what it holds
  }

  /// Whether instruction `j` of stream `s` starts only after instruction
  /// `at` of stream `stream` has finished.
  bool waitsFor(size_t s, size_t j, size_t stream, size_t at) const {
    if (!ordered) {
      completed = plan::completedBefore(program);
      ordered = true;
    }
    return !completed.empty() && completed[s][j][stream] > int64_t(at);
  }

  /// A range's device bytes: region, first byte, size (arena buffers whose
  /// lives do not overlap may share bytes).
  std::tuple<plan::Region, int64_t, int64_t>
  bytesOf(const plan::BufferRange &r) const {
    const plan::Buffer &b = program.buffers[size_t(r.buffer)];
    return {b.region, b.offset + r.offset, r.bytes};
  }
  bool sharesBytes(const plan::BufferRange &a,
                   const plan::BufferRange &b) const {
    auto [regionA, beginA, sizeA] = bytesOf(a);
    auto [regionB, beginB, sizeB] = bytesOf(b);
    return regionA == regionB && beginA < beginB + sizeB &&
           beginB < beginA + sizeA;
  }

  /// Whether `range` shares no bytes with an operand of `gemm` (an output
  /// the gemm does not write itself is written while it reads them).
  bool clearOfGemm(const Instruction &gemm,
                   const plan::BufferRange &range) const {
    for (const auto *ranges : {&gemm.reads, &gemm.writes})
      for (const plan::BufferRange &operand : *ranges)
        if (sharesBytes(range, operand))
          return false;
    return true;
  }

  /// Whether one launch that reads `inputs` and writes `outputs` (each
  /// thread reading an element before it writes that element) gives what
  /// the kernels it fuses give apart: every output shares no bytes with an
  /// input, or is exactly that input (the same bytes and dtype: in place,
  /// element for element). The memory plan may put the second kernel's
  /// output in the bytes of an input the first reads last.
  bool fusableInOneLaunch(const std::vector<plan::BufferRange> &inputs,
                          const std::vector<plan::BufferRange> &outputs) const {
    for (const plan::BufferRange &out : outputs)
      for (const plan::BufferRange &in : inputs)
        if (sharesBytes(out, in) &&
            !(bytesOf(out) == bytesOf(in) && dtype(out) == dtype(in)))
          return false;
    return true;
  }

  /// The layer_norm_`pass` or rms_norm_`pass` kernel `inst` runs (pass:
  /// "forward" or "backward"), with whether it is the LayerNorm.
  const plan::Kernel *norm(const Instruction &inst, const std::string &pass,
                           bool &layerNorm) const {
    const plan::Kernel *k = kernel(inst, "layer_norm_" + pass);
    layerNorm = k != nullptr;
    return k ? k : kernel(inst, "rms_norm_" + pass);
  }
  /// The residual_add `inst` runs when it adds two ranges of a norm's size.
  const plan::Kernel *residualAdd(const Instruction &inst,
                                  const plan::Kernel &norm) const {
    const plan::Kernel *k = kernel(inst, "residual_add");
    return k && inst.reads.size() == 2 && inst.writes.size() == 1 &&
                   constant(*k, "n") ==
                       constant(norm, "rows") * constant(norm, "width")
               ? k
               : nullptr;
  }

  bool biasAdd(const Instruction &gemm, const Instruction &next) const {
    const plan::Kernel *k = kernel(next, "bias_add");
    if (!k || next.reads.size() != 2 || next.writes.size() != 1)
      return false;
    const plan::GemmParams &g = gemm.gemm;
    const plan::BufferRange &y = gemm.writes[0], &bias = next.reads[1];
    return next.reads[0] == y && next.writes[0] == y &&
           constant(*k, "width") == g.m && constant(*k, "rows") == g.n &&
           dtype(y) == gemm.dtype && dtype(bias) == gemm.dtype &&
           bias.bytes == g.m * plan::elementBytes(gemm.dtype);
  }

  /// A tanh-GELU activation kernel `name` over the gemm's m x n output.
  const plan::Kernel *gelu(const Instruction &gemm, const Instruction &inst,
                           std::string_view name) const {
    const plan::Kernel *k = kernel(inst, name);
    const plan::GemmParams &g = gemm.gemm;
    if (!k || constant(*k, "act") != int64_t(kernels::Activation::GeluTanh) ||
        constant(*k, "n") != g.m * g.n || g.m % 8 != 0)
      return nullptr;
    return k;
  }

  /// activation_forward reading y into another range of y's shape.
  bool geluForward(const Instruction &gemm, const Instruction &inst) const {
    const plan::BufferRange &y = gemm.writes[0];
    return gelu(gemm, inst, "activation_forward") && inst.reads.size() == 1 &&
           inst.writes.size() == 1 && inst.reads[0] == y &&
           !(inst.writes[0] == y) && sameShape(inst.writes[0], y);
  }

  /// activation_backward(x, dy = y) over y in place.
  bool geluBackward(const Instruction &gemm, const Instruction &inst) const {
    const plan::BufferRange &y = gemm.writes[0];
    return gemm.gemm.beta == 0 && gelu(gemm, inst, "activation_backward") &&
           inst.reads.size() == 2 && inst.writes.size() == 1 &&
           inst.reads[1] == y && inst.writes[0] == y && !(inst.reads[0] == y) &&
           sameShape(inst.reads[0], y) && dtype(y) == gemm.dtype;
  }

private:
  const plan::Bundle &bundle;
  const plan::Program &program;
  mutable bool ordered = false; // `completed` computed
  mutable std::vector<std::vector<std::vector<int64_t>>> completed;
};

} // namespace

std::vector<ResidualNorm> findResidualNorms(const plan::Bundle &bundle,
                                            const plan::Program &program) {
  Matcher match(bundle, program);
  std::vector<ResidualNorm> found;
  for (const plan::Stream &stream : program.streams)
    for (size_t i = 0; i + 1 < stream.instructions.size(); ++i) {
      const Instruction &add = stream.instructions[i],
                        &norm = stream.instructions[i + 1];
      bool layerNorm = false;
      const plan::Kernel *n = match.norm(norm, "forward", layerNorm);
      if (!n || !match.residualAdd(add, *n) || norm.reads.empty() ||
          !(norm.reads[0] == add.writes[0]))
        continue;
      std::vector<plan::BufferRange> inputs = add.reads, outputs = add.writes;
      inputs.insert(inputs.end(), norm.reads.begin() + 1, norm.reads.end());
      outputs.insert(outputs.end(), norm.writes.begin(), norm.writes.end());
      if (match.fusableInOneLaunch(inputs, outputs))
        found.push_back({&add, &norm, layerNorm});
    }
  return found;
}

std::vector<NormBackwardAdd>
findNormBackwardAdds(const plan::Bundle &bundle, const plan::Program &program) {
  Matcher match(bundle, program);
  std::vector<NormBackwardAdd> found;
  for (const plan::Stream &stream : program.streams)
    for (size_t i = 0; i + 1 < stream.instructions.size(); ++i) {
      const Instruction &norm = stream.instructions[i],
                        &add = stream.instructions[i + 1];
      bool layerNorm = false;
      const plan::Kernel *n = match.norm(norm, "backward", layerNorm);
      if (!n || !match.residualAdd(add, *n) || norm.writes.empty())
        continue;
      bool first = add.reads[0] == norm.writes[0],
           second = add.reads[1] == norm.writes[0];
      if (first == second) // dx + dx adds nothing the norm could fold
        continue;
      int addend = first ? 1 : 0;
      std::vector<plan::BufferRange> inputs = norm.reads, outputs = norm.writes;
      inputs.push_back(add.reads[size_t(addend)]);
      outputs.push_back(add.writes[0]);
      if (match.fusableInOneLaunch(inputs, outputs))
        found.push_back({&norm, &add, layerNorm, addend, false});
    }
  // Which dx nothing else reads: one pass over every read of the program.
  std::unordered_map<int64_t, std::vector<NormBackwardAdd *>> byBuffer;
  for (NormBackwardAdd &pair : found) {
    const plan::BufferRange &dx = pair.norm->writes[0];
    pair.dxUnread =
        program.buffers[size_t(dx.buffer)].region == plan::Region::Arena;
    byBuffer[dx.buffer].push_back(&pair);
  }
  for (const plan::Stream &stream : program.streams)
    for (const Instruction &inst : stream.instructions)
      for (const plan::BufferRange &read : inst.reads) {
        auto it = byBuffer.find(read.buffer);
        if (it == byBuffer.end())
          continue;
        for (NormBackwardAdd *pair : it->second)
          if (&inst != pair->norm && &inst != pair->add &&
              read.overlaps(pair->norm->writes[0]))
            pair->dxUnread = false;
      }
  return found;
}

std::vector<GemmEpilogue> findGemmEpilogues(const plan::Bundle &bundle,
                                            const plan::Program &program) {
  Matcher match(bundle, program);
  std::vector<GemmEpilogue> found;
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const std::vector<Instruction> &insts = program.streams[s].instructions;
    for (size_t i = 0; i + 1 < insts.size(); ++i) {
      const Instruction &gemm = insts[i];
      if (!Matcher::floatGemm(gemm))
        continue;
      // The instructions after the gemm that do device work: record_events
      // (they only make the folded results ready earlier) and releases (the
      // end of a buffer's life) are passed over; a folded output the gemm
      // does not write must then not share memory with its operands (an
      // arena buffer first written after the gemm may reuse the bytes of
      // one it reads last).
      std::vector<size_t> next;
      for (size_t j = i + 1; j < insts.size() && next.size() < 3; ++j)
        if (insts[j].opcode != Opcode::RecordEvent &&
            insts[j].opcode != Opcode::Release)
          next.push_back(j);
      if (next.empty())
        continue;
      const Instruction &first = insts[next[0]];
      GemmEpilogue e;
      e.gemm = &gemm;
      e.output = gemm.writes[0];
      // A bias_grad, after a zero fill of exactly its slot where the plan
      // has one (ZeRO-2 fills a micro-batch's gradient slots right before
      // their first sum; the epilogue overwrites, so the fill folds too).
      size_t grad = next[0];
      const Instruction *slotFill = nullptr;
      if (next.size() > 1 && first.opcode == Opcode::Fill && first.value == 0 &&
          first.writes.size() == 1 && insts[next[1]].writes.size() == 1 &&
          first.writes[0] == insts[next[1]].writes[0]) {
        slotFill = &first;
        grad = next[1];
      }
      if (match.biasGradOfA(gemm, insts[grad]) &&
          match.stillZeroFilled(s, grad, insts[grad].writes[0]) &&
          match.clearOfGemm(gemm, insts[grad].writes[0])) {
        e.kind = EpilogueKind::BiasGradA;
        if (slotFill)
          e.folded.push_back(slotFill);
        e.folded.push_back(&insts[grad]);
        e.bias = insts[grad].writes[0];
      } else if (!Matcher::foldableGemm(gemm)) {
        continue;
      } else if (match.biasAdd(gemm, first)) {
        e.folded.push_back(&first);
        e.bias = first.reads[1];
        if (gemm.gemm.beta == 0 && next.size() > 1 &&
            match.geluForward(gemm, insts[next[1]]) &&
            match.clearOfGemm(gemm, insts[next[1]].writes[0])) {
          e.kind = EpilogueKind::GeluAuxBias;
          e.folded.push_back(&insts[next[1]]);
          e.aux = gemm.writes[0];
          e.output = insts[next[1]].writes[0];
        }
      } else if (match.geluBackward(gemm, first)) {
        e.kind = EpilogueKind::DGelu;
        e.folded.push_back(&first);
        e.aux = first.reads[0];
        e.output = first.writes[0];
      } else {
        continue;
      }
      found.push_back(e);
    }
  }
  return found;
}

} // namespace weft::exec::cuda
