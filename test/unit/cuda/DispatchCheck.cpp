//===- DispatchCheck.cpp - How the CUDA backend runs a bundle's kernels ---===//
//
// weft-cuda-dispatch-check [--expect-folded] BUNDLE...
//
// For every role of each bundle, how the CUDA backend runs each kernel
// instruction with --half-kernels (kernelDispatch, host-only): counted per
// kernel and path, printed. Exits 1 when a kernel has no CUDA entry, when a
// 16-bit operand widens (every kernel has a 16-bit twin), or, with
// --expect-folded (bundles compiled with --gemm-epilogues), when a bias_add,
// a bias_grad or a tanh-GELU activation is left unfolded (single-stream
// GPT-2 plans fold them all), or when a
// 16-bit gemm has a leading dimension off 16 bytes (cuBLASLt's fast kernels
// need every row aligned: the lowering pads the logits of odd vocabularies).
// So a plan whose operand dtypes or layouts drift is caught here, not on a
// lent GPU as a silent slowdown.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/KernelRegistry.h"
#include "weft/exec/OperandChecks.h"
#include "weft/exec/cuda/CudaBackend.h"
#include "weft/kernels/Activations.h"
#include "weft/plan/Serialize.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <string>
#include <utility>

namespace {

using weft::exec::cuda::KernelPath;

const char *pathName(KernelPath path) {
  switch (path) {
  case KernelPath::Fp32:
    return "fp32";
  case KernelPath::Half:
    return "16-bit";
  case KernelPath::Widened:
    return "widened";
  case KernelPath::Generated:
    return "generated";
  case KernelPath::Missing:
    return "MISSING";
  }
  return "?";
}

} // namespace

int main(int argc, char **argv) {
  bool expectFolded = false;
  int failures = 0, bundles = 0;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--expect-folded") == 0) {
      expectFolded = true;
      continue;
    }
    ++bundles;
    weft::plan::Bundle bundle;
    try {
      bundle = weft::plan::loadBundle(argv[a]);
    } catch (const std::exception &error) {
      std::fprintf(stderr, "%s: %s\n", argv[a], error.what());
      return 2;
    }
    for (const weft::plan::Program &program : bundle.programs) {
      int gemms = 0;
      for (const weft::plan::Stream &stream : program.streams)
        for (const weft::plan::Instruction &inst : stream.instructions) {
          if (inst.opcode != weft::plan::Opcode::Gemm ||
              !weft::exec::isHalfFloat(inst.dtype))
            continue;
          ++gemms;
          const weft::plan::GemmParams &g = inst.gemm;
          for (int64_t ld : {g.lda, g.ldb, g.ldc})
            if (ld * 2 % 16 != 0) {
              ++failures;
              std::printf("FAIL %s role %lld: gemm (%s) m %lld n %lld k %lld "
                          "has a leading dimension of %lld 16-bit elements, "
                          "rows off 16-byte alignment\n",
                          argv[a], (long long)program.role, inst.phase.c_str(),
                          (long long)g.m, (long long)g.n, (long long)g.k,
                          (long long)ld);
              break;
            }
        }
      std::map<std::pair<std::string, KernelPath>, int> counts;
      for (const auto &d : weft::exec::cuda::kernelDispatch(bundle, program)) {
        // The registry kernel `name.N` specializes (the name itself when
        // it has none: then the path is Missing).
        const weft::exec::KernelSpec *spec = weft::exec::findKernel(d.kernel);
        std::string base = spec ? std::string(spec->name) : d.kernel;
        ++counts[{base, d.path}];
        const auto &constants =
            bundle.kernels[size_t(d.inst->kernel)].constants;
        auto act = constants.find("act");
        bool gelu = act != constants.end() &&
                    act->second == int64_t(weft::kernels::Activation::GeluTanh);
        const char *problem =
            d.path == KernelPath::Missing ? "has no CUDA entry"
            // Every kernel a bf16/f16 plan runs has a 16-bit twin.
            : d.path == KernelPath::Widened ? "widens its 16-bit operands"
            : expectFolded && (base == "bias_add" || base == "bias_grad" ||
                               (gelu && (base == "activation_forward" ||
                                         base == "activation_backward")))
                ? "is not folded into its gemm's epilogue"
                : nullptr;
        if (problem) {
          ++failures;
          std::printf("FAIL %s role %lld: kernel '%s' (%s) %s\n", argv[a],
                      (long long)program.role, d.kernel.c_str(),
                      d.inst->phase.c_str(), problem);
        }
      }
      std::printf("%s role %lld:", argv[a], (long long)program.role);
      for (const auto &[key, count] : counts)
        std::printf(" %s %s x%d;", key.first.c_str(), pathName(key.second),
                    count);
      std::printf(" 16-bit gemms x%d;\n", gemms);
    }
  }
  if (bundles == 0) {
    std::fprintf(
        stderr,
        "usage: weft-cuda-dispatch-check [--expect-folded] BUNDLE...\n");
    return 2;
  }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
