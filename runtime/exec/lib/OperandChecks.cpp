//===- OperandChecks.cpp - Backend-independent operand checks -------------===//
#include "weft/exec/OperandChecks.h"

#include "Describe.h"
#include "weft/exec/Error.h"
#include "weft/exec/KernelLaunches.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace weft::exec {

using plan::DType;
using plan::Opcode;

bool isFloatStorage(DType dtype) {
  return dtype == DType::F32 || isHalfFloat(dtype);
}

bool isHalfFloat(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16;
}

int64_t matrixSpan(int64_t rows, int64_t cols, int64_t ld) {
  return (cols - 1) * ld + rows;
}

void checkHostOperands(const plan::Program &program,
                       const plan::Instruction &inst,
                       const std::string &where) {
  // The verifier's rule (Structure.cpp), repeated because a backend may be
  // handed an unverified plan: only these opcodes can reach host memory.
  size_t host = 0, total = 0;
  const plan::Buffer *first = nullptr;
  for (const auto *ranges : {&inst.reads, &inst.writes})
    for (const plan::BufferRange &range : *ranges) {
      if (range.buffer < 0 || range.buffer >= int64_t(program.buffers.size()))
        continue;
      ++total;
      const plan::Buffer &buffer = program.buffers[size_t(range.buffer)];
      if (buffer.region == plan::Region::Host && !host++)
        first = &buffer;
    }
  if (!host || plan::hostOperandsAllowed(inst.opcode, host == total))
    return;
  throw Error(where + ": " + std::string(plan::toString(inst.opcode)) +
              " reads or writes host buffer " + std::to_string(first->id) +
              " '" + first->name + "' (" + plan::kHostOperandRule + ")");
}

void checkOperands(const plan::Program &program, const plan::Instruction &inst,
                   const std::string &where, const std::string &backend) {
  checkHostOperands(program, inst, where);
  std::string op(plan::toString(inst.opcode));
  // At least `bytes`, or with `exact` exactly them.
  auto needBytes = [&](const plan::BufferRange &range, int64_t bytes,
                       const std::string &name, bool exact = false) {
    if (exact ? range.bytes != bytes : range.bytes < bytes)
      throw Error(where + ": " + op + " operand " + name + " has " +
                  std::to_string(range.bytes) + " bytes, " +
                  (exact ? "expected " : "needs ") + std::to_string(bytes));
  };
  auto bufferDType = [&](const plan::BufferRange &range) {
    return program.buffers[size_t(range.buffer)].dtype;
  };
  auto needFloat = [&](DType dtype, const std::string &name) {
    if (!isFloatStorage(dtype))
      throw Error(where + ": " + op + " " + name + " is " +
                  std::string(plan::toString(dtype)) + "; the " + backend +
                  " backend supports f32, bf16 and f16");
  };
  switch (inst.opcode) {
  case Opcode::Gemm: {
    // Both backends multiply these (the sizes below count in the dtype).
    if (!isFloatStorage(inst.dtype) && inst.dtype != DType::F64)
      throw Error(where + ": gemm of " +
                  std::string(plan::toString(inst.dtype)) +
                  " is not supported (f32, bf16, f16, f64)");
    const plan::GemmParams &g = inst.gemm;
    int64_t eb = plan::elementBytes(inst.dtype);
    // A matrix's range runs from its span to its whole columns of ld (rows
    // past the matrix's own left alone). Past that the range claims bytes
    // the product never touches: a C range would tell the verifier they are
    // written, and either is the sign of a dimension that shrank.
    auto needMatrix = [&](const plan::BufferRange &range, int64_t rows,
                          int64_t cols, int64_t ld, const std::string &name) {
      needBytes(range, matrixSpan(rows, cols, ld) * eb, name);
      if (range.bytes > cols * ld * eb)
        throw Error(where + ": gemm operand " + name + " has " +
                    std::to_string(range.bytes) + " bytes, more than its " +
                    std::to_string(cols) + " columns of ld " +
                    std::to_string(ld) + " (" + std::to_string(cols * ld * eb) +
                    " bytes)");
    };
    needMatrix(inst.reads[0], g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda,
               "A");
    needMatrix(inst.reads[1], g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb,
               "B");
    // C must not overwrite an input mid-product.
    const plan::BufferRange &c = inst.writes[0];
    needMatrix(c, g.m, g.n, g.ldc, "C");
    for (size_t i = 0; i < 2; ++i)
      if (c.overlaps(inst.reads[i]))
        throw Error(where + ": gemm operand C overlaps " +
                    (i == 0 ? "A" : "B") + " (the product reads them whole)");
    break;
  }
  case Opcode::Fill:
  case Opcode::GradNorm:
  case Opcode::Clip: {
    DType dtype = inst.dtype;
    if (inst.opcode != Opcode::Fill)
      needFloat(dtype, "dtype");
    int64_t eb = plan::elementBytes(dtype);
    const auto &ranges =
        inst.opcode == Opcode::GradNorm ? inst.reads : inst.writes;
    for (const plan::BufferRange &range : ranges)
      if (range.bytes % eb != 0)
        throw Error(where + ": " + op + " range of " +
                    std::to_string(range.bytes) +
                    " bytes is not a whole number of " +
                    std::string(plan::toString(dtype)));
    if (inst.opcode == Opcode::Clip)
      needBytes(inst.reads[0], 4, "sum of squares (f32)");
    if (inst.opcode == Opcode::GradNorm)
      needBytes(inst.writes[0], 4, "sum of squares (f32)");
    break;
  }
  case Opcode::OptimizerStep: {
    const char *names[] = {"param", "grad", "exp_avg", "exp_avg_sq"};
    for (size_t i = 0; i < 4; ++i) {
      DType dtype = bufferDType(inst.reads[i]);
      if (i == 1)
        needFloat(dtype, "grad");
      else if (dtype != DType::F32)
        throw Error(where + ": optimizer_step " + names[i] +
                    " must be f32 (master weights and moments)");
      // Exactly count elements: the writes below are these ranges.
      needBytes(inst.reads[i], inst.count * plan::elementBytes(dtype), names[i],
                /*exact=*/true);
    }
    if (!(inst.reads[0] == inst.writes[0]) ||
        !(inst.reads[2] == inst.writes[1]) ||
        !(inst.reads[3] == inst.writes[2]))
      throw Error(where + ": optimizer_step updates param, exp_avg and "
                          "exp_avg_sq in place (writes[0..2] must equal "
                          "reads[0], reads[2], reads[3])");
    if (inst.writes.size() == 4) {
      needFloat(bufferDType(inst.writes[3]), "parameter copy");
      needBytes(inst.writes[3],
                inst.count * plan::elementBytes(bufferDType(inst.writes[3])),
                "parameter copy", /*exact=*/true);
    }
    if (plan::readsGradientNorm(inst)) {
      if (bufferDType(inst.reads[4]) != DType::F32)
        throw Error(where + ": optimizer_step sum of squares must be f32");
      needBytes(inst.reads[4], 4, "sum of squares (f32)");
    }
    break;
  }
  default:
    break;
  }
}

namespace {

/// A kernel's writes may overlap its reads only as the in-place pairs of its
/// signature (the very same range); writes never overlap each other. The
/// verifier cannot tell (it knows no kernel), and what overlapping operands
/// give differs between the CPU loops and the GPU's threads.
void checkKernelAliasing(const plan::Program &program,
                         const plan::Instruction &inst,
                         const KernelSignature &sig, const std::string &what) {
  auto overlap = [&](const plan::BufferRange &write, const std::string &wName,
                     const plan::BufferRange &other, const std::string &oName) {
    int64_t begin = std::max(write.offset, other.offset);
    int64_t end =
        std::min(write.offset + write.bytes, other.offset + other.bytes);
    const plan::Buffer &buffer = program.buffers[size_t(write.buffer)];
    return what + ": " + wName + " overlaps " + oName + " (bytes [" +
           std::to_string(begin) + ", " + std::to_string(end) + ") of buffer " +
           std::to_string(buffer.id) + " '" + buffer.name + "')";
  };
  for (size_t w = 0; w < inst.writes.size(); ++w) {
    const plan::BufferRange &write = inst.writes[w];
    std::string wName = "writes[" + std::to_string(w) + "]";
    for (size_t r = 0; r < inst.reads.size(); ++r) {
      if (!write.overlaps(inst.reads[r]))
        continue;
      bool allowed =
          write == inst.reads[r] &&
          std::find(sig.inPlace.begin(), sig.inPlace.end(),
                    std::pair<size_t, size_t>(w, r)) != sig.inPlace.end();
      if (allowed)
        continue;
      std::string reason = overlap(write, wName, inst.reads[r],
                                   "reads[" + std::to_string(r) + "]");
      std::string inPlace;
      for (auto [pw, pr] : sig.inPlace)
        if (pw == w)
          inPlace += std::string(inPlace.empty() ? "" : ", ") + "reads[" +
                     std::to_string(pr) + "]";
      throw Error(reason + "; " + wName +
                  (inPlace.empty()
                       ? " may not overlap any read"
                       : " may only be exactly the range of " + inPlace));
    }
    for (size_t other = 0; other < w; ++other)
      if (write.overlaps(inst.writes[other]))
        throw Error(overlap(write, wName, inst.writes[other],
                            "writes[" + std::to_string(other) + "]") +
                    "; a kernel's writes may not overlap");
  }
}

} // namespace

int64_t checkKernelOperands(const plan::Program &program,
                            const plan::Instruction &inst,
                            const KernelSpec &spec,
                            const KernelConstants &constants,
                            const std::string &what) {
  checkHostOperands(program, inst, what);
  if (!inst.args.empty())
    throw Error(what + " takes no scalar args (shapes are constants)");
  KernelSignature sig;
  try {
    sig = spec.signature(constants);
  } catch (const Error &error) {
    throw Error(what + ": " + error.what());
  }
  if (sig.reads.size() != inst.reads.size() ||
      sig.writes.size() != inst.writes.size())
    throw Error(what + " takes " + std::to_string(sig.reads.size()) +
                " reads and " + std::to_string(sig.writes.size()) +
                " writes, got " + std::to_string(inst.reads.size()) + " and " +
                std::to_string(inst.writes.size()));
  int64_t widened = 0;
  // Operands with the same range (an in-place kernel) share one widened
  // copy, as an fp32 operand shares its buffer (sameOperand).
  std::vector<plan::BufferRange> widenedRanges;
  auto check = [&](const OperandSpec &operand, const plan::BufferRange &range,
                   const std::string &name) {
    DType dtype = program.buffers[size_t(range.buffer)].dtype;
    bool ok = operand.isIndex ? dtype == DType::I32 : isFloatStorage(dtype);
    if (!ok)
      throw Error(what + " operand " + name + " is " +
                  std::string(plan::toString(dtype)) + ", expected " +
                  (operand.isIndex ? "i32" : "f32, bf16 or f16"));
    int64_t expected = operand.elements * plan::elementBytes(dtype);
    if (range.bytes != expected)
      throw Error(what + " operand " + name + " has " +
                  std::to_string(range.bytes) + " bytes, expected " +
                  std::to_string(expected) + " (" +
                  std::to_string(operand.elements) + " " +
                  std::string(plan::toString(dtype)) + ")");
    if (isHalfFloat(dtype) &&
        !(std::find(widenedRanges.begin(), widenedRanges.end(), range) !=
          widenedRanges.end())) {
      widened += operand.elements;
      widenedRanges.push_back(range);
    }
  };
  for (size_t i = 0; i < sig.reads.size(); ++i)
    check(sig.reads[i], inst.reads[i], "reads[" + std::to_string(i) + "]");
  for (size_t i = 0; i < sig.writes.size(); ++i)
    check(sig.writes[i], inst.writes[i], "writes[" + std::to_string(i) + "]");
  checkKernelAliasing(program, inst, sig, what);
  return widened;
}

namespace {

/// Each bundle kernel's constants resolved against its registry kernel
/// (nullopt: not in the registry, or its constants refused with `problem`).
std::optional<KernelConstants> constantsOf(const plan::Bundle &bundle,
                                           size_t id, std::string *problem) {
  const plan::Kernel &kernel = bundle.kernels[id];
  const KernelSpec *spec = findKernel(kernel.name);
  if (!spec)
    return std::nullopt;
  try {
    return resolveConstants(*spec, kernel.constants,
                            "kernels[" + std::to_string(id) + "]");
  } catch (const Error &error) {
    if (problem)
      *problem = error.what();
    return std::nullopt;
  }
}

} // namespace

std::vector<std::string> generatedSourceProblems(const plan::Bundle &bundle) {
  std::vector<std::string> problems;
  for (size_t id = 0; id < bundle.kernels.size(); ++id) {
    const plan::Kernel &kernel = bundle.kernels[id];
    // A source with launch lines is a generated one, which the CUDA backend
    // launches: they must be this kernel's entries.
    auto source = bundle.files.find(kernel.source);
    if (source == bundle.files.end() ||
        source->second.find("// weft-launch:") == std::string::npos)
      continue;
    try {
      parseLaunches(source->second, kernel.source, kernel.name);
    } catch (const Error &error) {
      problems.push_back("kernels[" + std::to_string(id) +
                         "]: " + error.what());
    }
  }
  return problems;
}

std::vector<std::string> kernelProblems(const plan::Bundle &bundle) {
  std::vector<std::string> problems;
  for (size_t id = 0; id < bundle.kernels.size(); ++id) {
    std::string problem;
    if (!constantsOf(bundle, id, &problem) && !problem.empty())
      problems.push_back(problem);
  }
  std::vector<std::string> sources = generatedSourceProblems(bundle);
  problems.insert(problems.end(), sources.begin(), sources.end());
  return problems;
}

std::vector<std::string> operandProblems(const plan::Bundle &bundle,
                                         const plan::Program &program) {
  std::vector<std::string> problems;
  std::vector<const KernelSpec *> specs(bundle.kernels.size(), nullptr);
  std::vector<KernelConstants> constants(bundle.kernels.size());
  for (size_t id = 0; id < bundle.kernels.size(); ++id)
    if (std::optional<KernelConstants> resolved =
            constantsOf(bundle, id, nullptr)) {
      constants[id] = std::move(*resolved);
      specs[id] = findKernel(bundle.kernels[id].name);
    }
  auto check = [&](const plan::Instruction &inst, const std::string &where) {
    try {
      if (inst.opcode != Opcode::Kernel) {
        checkOperands(program, inst, where, "CPU");
        return;
      }
      const plan::Kernel &kernel = bundle.kernels[size_t(inst.kernel)];
      std::string what = where + ": kernel '" + kernel.name + "'";
      const KernelSpec *spec = specs[size_t(inst.kernel)];
      if (!spec) {
        if (!findKernel(kernel.name))
          problems.push_back(what + " is not in the runtime's kernel registry");
        return; // a bad constant: kernelProblems reports it
      }
      checkKernelOperands(program, inst, *spec, constants[size_t(inst.kernel)],
                          what);
    } catch (const Error &error) {
      problems.push_back(error.what());
    }
  };
  forEachInstruction(
      program, "",
      [&](const plan::Instruction &inst, size_t, const std::string &where) {
        check(inst, where);
        if (inst.epilogue != plan::GemmEpilogue::None)
          prepareEpilogueSteps(inst, where, check);
      });
  return problems;
}

} // namespace weft::exec
