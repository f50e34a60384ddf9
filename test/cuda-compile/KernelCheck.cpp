//===- KernelCheck.cpp - Generated host entries vs the registry kernels ---===//
//
//   weft-kernel-check LIBRARY KERNEL [NAME=VALUE...]
//
// LIBRARY is a shared object built from the generated source of bundle kernel
// KERNEL (kernels/KERNEL.cu, weft-generate-kernels) and NAME=VALUE its
// constants. Runs the source's host entry and the runtime registry's kernel
// (what the CPU backend executes) on the same random operands and compares
// every output: bit for bit, except for the kernels whose parameter
// gradients are summed per column (docs/kernels.md), which must agree to a
// relative 1e-5. Exit status 0 on agreement, 1 otherwise.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/KernelRegistry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace weft::exec;

namespace {

/// The generated entries' prefix for a kernel symbol (the pass's rule).
std::string entryName(const std::string &symbol) {
  std::string name = "weft_";
  for (char c : symbol)
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

struct Operand {
  bool isIndex;
  std::vector<float> f;
  std::vector<int32_t> i;
  void *data() {
    return isIndex ? static_cast<void *>(i.data())
                   : static_cast<void *>(f.data());
  }
};

/// Random operands: floats in [-1, 1); token ids and targets in [0, vocab)
/// (for a vocabulary shard: up to one shard past it, so that some are off
/// the shard), every fifth cross-entropy target ignored (-100).
std::vector<Operand> makeOperands(const std::vector<OperandSpec> &specs,
                                  const KernelConstants &constants,
                                  const std::string &base, std::mt19937 &rng) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  int64_t vocab = 1;
  if (constants.count("vocab"))
    vocab = constants.at("vocab");
  else if (constants.count("vocab_local"))
    vocab = constants.at("vocab_start") + 2 * constants.at("vocab_local");
  std::uniform_int_distribution<int32_t> index(0, int32_t(vocab - 1));
  std::vector<Operand> operands;
  for (const OperandSpec &spec : specs) {
    Operand op{spec.isIndex, {}, {}};
    for (int64_t e = 0; e < spec.elements; ++e) {
      if (!spec.isIndex)
        op.f.push_back(value(rng));
      else if (base.rfind("cross_entropy", 0) == 0 && e % 5 == 4)
        op.i.push_back(-100);
      else
        op.i.push_back(index(rng));
    }
    operands.push_back(std::move(op));
  }
  return operands;
}

int check(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: weft-kernel-check LIBRARY KERNEL "
                         "[NAME=VALUE...]\n");
    return 2;
  }
  std::string library = argv[1], kernel = argv[2];
  std::string base = kernel.substr(0, kernel.find('.'));
  KernelConstants given;
  for (int a = 3; a < argc; ++a) {
    std::string arg = argv[a];
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "expected NAME=VALUE, got '%s'\n", arg.c_str());
      return 2;
    }
    given[arg.substr(0, eq)] = std::stoll(arg.substr(eq + 1));
  }
  const KernelSpec *spec = findKernel(kernel);
  if (!spec) {
    std::fprintf(stderr, "%s: not a registry kernel\n", kernel.c_str());
    return 1;
  }
  KernelConstants constants = resolveConstants(*spec, given, kernel);
  KernelSignature sig = spec->signature(constants);

  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  std::string entry = entryName(kernel) + "_host";
  auto *host =
      reinterpret_cast<void (*)(void *const *)>(dlsym(handle, entry.c_str()));
  if (!host) {
    std::fprintf(stderr, "%s: no symbol %s\n", library.c_str(), entry.c_str());
    return 1;
  }

  std::mt19937 rng(20240520);
  std::vector<Operand> reads = makeOperands(sig.reads, constants, base, rng);
  std::vector<Operand> writes = makeOperands(sig.writes, constants, base, rng);
  // The registry's copy (accumulated outputs start from the same values).
  std::vector<Operand> refWrites = writes;

  KernelCall call;
  call.constants = &constants;
  for (Operand &op : reads) {
    call.reads.push_back(op.isIndex ? nullptr : op.f.data());
    call.readIndices.push_back(op.isIndex ? op.i.data() : nullptr);
  }
  for (Operand &op : refWrites)
    call.writes.push_back(op.isIndex ? nullptr : op.f.data());
  spec->run(call);

  std::vector<void *> pointers;
  for (Operand &op : reads)
    pointers.push_back(op.data());
  for (Operand &op : writes)
    pointers.push_back(op.data());
  host(pointers.data());

  // Column sums of parameter gradients round differently (docs/kernels.md).
  static const std::set<std::string> reordered = {
      "bias_grad", "layer_norm_backward", "layer_norm_backward_add",
      "rms_norm_backward", "rms_norm_backward_add"};
  bool exact = !reordered.count(base);
  int64_t elements = 0, equal = 0, bad = 0;
  double worst = 0;
  for (size_t w = 0; w < writes.size(); ++w) {
    const std::vector<float> &got = writes[w].f, &want = refWrites[w].f;
    for (size_t e = 0; e < got.size(); ++e) {
      ++elements;
      if (std::memcmp(&got[e], &want[e], sizeof(float)) == 0) {
        ++equal;
        continue;
      }
      double rel = std::fabs(double(got[e]) - want[e]) /
                   std::max(1.0, std::fabs(double(want[e])));
      worst = std::max(worst, std::isnan(rel) ? INFINITY : rel);
      if (exact || !(rel <= 1e-5)) {
        if (bad++ < 3)
          std::printf("%s: writes[%zu][%zu] = %.9g, registry %.9g\n",
                      kernel.c_str(), w, e, got[e], want[e]);
      }
    }
  }
  std::printf("%s: %lld output elements, %lld bit-identical, max relative "
              "difference %.3g (%s)\n",
              kernel.c_str(), static_cast<long long>(elements),
              static_cast<long long>(equal), worst,
              exact ? "must be bit-identical" : "tolerance 1e-5");
  return bad ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return check(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
