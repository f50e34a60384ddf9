//===- NormFusion.cpp - Kernels run inside a neighbouring norm ------------===//

#include "weft/exec/cuda/NormFusion.h"

#include "weft/exec/KernelRegistry.h"

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

private:
  const plan::Bundle &bundle;
  const plan::Program &program;
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

} // namespace weft::exec::cuda
