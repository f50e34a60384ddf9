//===- KernelAbiTest.cpp - The registry against weft/kernels/KernelAbi.h --===//
//
// The runtime's kernel registry and the compiler's kernel-source generator
// both take their kernel names, constants and defaults from kKernelAbi. These
// tests check the runtime side: one registry entry (signature and host loop)
// per ABI entry and no other, and constants resolved with the ABI's defaults;
// and how the backends widen half-precision operands.
// (weft-generate-kernels stops with a fatal error if it lacks a generator.)
//
//===----------------------------------------------------------------------===//

#include "weft/kernels/KernelAbi.h"
#include "weft/exec/Backend.h"
#include "weft/exec/Error.h"
#include "weft/exec/KernelRegistry.h"
#include "weft/exec/OperandChecks.h"
#include "weft/kernels/Common.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

using namespace weft;
using kernels::ConstantAbi;
using kernels::KernelAbi;
using kernels::kKernelAbi;

namespace {

size_t abiEntriesNamed(std::string_view name) {
  return size_t(std::count_if(
      std::begin(kKernelAbi), std::end(kKernelAbi),
      [&](const KernelAbi &kernel) { return kernel.name == name; }));
}

size_t registryEntriesNamed(std::string_view name) {
  const auto &registry = exec::kernelRegistry();
  return size_t(std::count_if(
      registry.begin(), registry.end(),
      [&](const exec::KernelSpec &spec) { return spec.name == name; }));
}

/// Every required constant of `kernel` set to its minimum (at least 1).
exec::KernelConstants requiredOnly(const KernelAbi &kernel) {
  exec::KernelConstants constants;
  for (const ConstantAbi &constant : kernel)
    if (!constant.defaultValue)
      constants[std::string(constant.name)] =
          std::max<int64_t>(constant.min, 1);
  return constants;
}

} // namespace

TEST(KernelAbi, EveryRegistryKernelHasExactlyOneEntry) {
  for (const exec::KernelSpec &spec : exec::kernelRegistry()) {
    EXPECT_EQ(abiEntriesNamed(spec.name), 1u) << spec.name;
    ASSERT_NE(spec.abi, nullptr) << spec.name;
    EXPECT_EQ(spec.abi->name, spec.name);
    EXPECT_EQ(spec.abi, kernels::findKernelAbi(spec.name));
  }
}

TEST(KernelAbi, EveryEntryHasExactlyOneRegistryKernel) {
  for (const KernelAbi &kernel : kKernelAbi) {
    EXPECT_EQ(registryEntriesNamed(kernel.name), 1u) << kernel.name;
    const exec::KernelSpec *spec = exec::findKernel(kernel.name);
    ASSERT_NE(spec, nullptr) << kernel.name;
    EXPECT_EQ(spec->abi, &kernel) << kernel.name;
  }
  EXPECT_EQ(exec::kernelRegistry().size(), std::size(kKernelAbi));
}

TEST(KernelAbi, ResolveAppliesTheAbiDefaults) {
  for (const KernelAbi &kernel : kKernelAbi) {
    const exec::KernelSpec *spec = exec::findKernel(kernel.name);
    ASSERT_NE(spec, nullptr) << kernel.name;
    exec::KernelConstants resolved =
        exec::resolveConstants(*spec, requiredOnly(kernel), "test");
    EXPECT_EQ(resolved.size(), kernel.numConstants) << kernel.name;
    for (const ConstantAbi &constant : kernel) {
      if (constant.defaultValue) {
        EXPECT_EQ(resolved.at(std::string(constant.name)),
                  *constant.defaultValue)
            << kernel.name << "." << constant.name;
      }
    }
    // Every required constant is required at run time too.
    for (const ConstantAbi &constant : kernel) {
      if (constant.defaultValue)
        continue;
      exec::KernelConstants missing = requiredOnly(kernel);
      missing.erase(std::string(constant.name));
      try {
        exec::resolveConstants(*spec, missing, "test");
        ADD_FAILURE() << kernel.name << " accepted no " << constant.name;
      } catch (const exec::Error &error) {
        EXPECT_EQ(std::string(error.what()),
                  "test: kernel '" + std::string(kernel.name) +
                      "' needs constant '" + std::string(constant.name) + "'");
      }
    }
  }
}

// The defaults docs/runtime.md ("Kernel ABI") documents; a change here is a
// change of the bundle ABI.
TEST(KernelAbi, DocumentedDefaults) {
  auto defaultOf = [](std::string_view kernel, std::string_view constant) {
    const KernelAbi *abi = kernels::findKernelAbi(kernel);
    const ConstantAbi *c = abi ? abi->find(constant) : nullptr;
    return c && c->defaultValue ? *c->defaultValue : int64_t(-1);
  };
  EXPECT_EQ(defaultOf("layer_norm_forward", "eps_nano"), 10000);
  EXPECT_EQ(defaultOf("rms_norm_forward", "eps_nano"), 1000);
  EXPECT_EQ(defaultOf("rotary_forward", "theta"), 10000);
  EXPECT_EQ(defaultOf("gated_forward", "act"), 3);
  EXPECT_EQ(defaultOf("attention_forward", "causal"), 1);
  EXPECT_EQ(defaultOf("embedding_forward", "positions"), 0);
  EXPECT_EQ(defaultOf("cross_entropy", "grad"), 1);
  EXPECT_EQ(defaultOf("cross_entropy", "accumulate"), 0);
  EXPECT_EQ(defaultOf("cross_entropy_shard_finish", "loss_div"), 1);
  EXPECT_EQ(defaultOf("activation_forward", "act"), -1); // required
}

// Half-precision operands are widened to fp32 copies; operands with the same
// range (an in-place kernel: bias_add reads and writes y) share one copy, as
// fp32 operands share their buffer, and the workspace is counted that way.
TEST(KernelAbi, InPlaceHalfOperandsShareOneWidenedCopy) {
  const int64_t rows = 3, width = 4;
  plan::Program program;
  program.buffers = {
      {0, "y", plan::Region::Arena, 0, 2 * rows * width, plan::DType::BF16},
      {1, "b", plan::Region::Arena, 64, 2 * width, plan::DType::BF16}};
  plan::Instruction inst;
  inst.opcode = plan::Opcode::Kernel;
  plan::BufferRange y{0, 0, 2 * rows * width}, b{1, 0, 2 * width};
  inst.reads = {y, b};
  inst.writes = {y};
  const exec::KernelSpec *spec = exec::findKernel("bias_add");
  ASSERT_NE(spec, nullptr);
  exec::KernelConstants constants =
      exec::resolveConstants(*spec, {{"rows", rows}, {"width", width}}, "test");
  EXPECT_EQ(exec::checkKernelOperands(program, inst, *spec, constants, "test"),
            rows * width + width);
  // Out of place, y and a distinct z need a copy each.
  program.buffers.push_back(
      {2, "z", plan::Region::Arena, 128, 2 * rows * width, plan::DType::BF16});
  inst.writes = {{2, 0, 2 * rows * width}};
  EXPECT_EQ(exec::checkKernelOperands(program, inst, *spec, constants, "test"),
            2 * rows * width + width);

  std::vector<std::byte> storage(256);
  exec::Operand yOperand{storage.data(), 2 * rows * width, plan::DType::BF16},
      bOperand{storage.data() + 64, 2 * width, plan::DType::BF16};
  std::vector<float> workspace(64);
  std::vector<std::pair<exec::Operand, float *>> placed;
  exec::WidenedCopies copies(workspace.data(), placed);
  auto [yCopy, yFresh] = copies.place(yOperand);
  auto [bCopy, bFresh] = copies.place(bOperand);
  auto [yAgain, yAgainFresh] = copies.place(yOperand);
  EXPECT_TRUE(yFresh && bFresh);
  EXPECT_FALSE(yAgainFresh);
  EXPECT_EQ(yAgain, yCopy);
  EXPECT_EQ(bCopy, yCopy + rows * width);
  // A new call starts over at the workspace's start.
  exec::WidenedCopies next(workspace.data(), placed);
  EXPECT_EQ(next.place(bOperand), std::make_pair(workspace.data(), true));
}

namespace {

/// Runs registry kernel `name` on `reads` (written into `writes`, sized by
/// the signature), rounding write 0 through `round` where the kernel uses it.
std::vector<std::vector<float>> runKernel(const char *name,
                                          const exec::KernelConstants &given,
                                          std::vector<std::vector<float>> reads,
                                          float (*round)(float)) {
  const exec::KernelSpec *spec = exec::findKernel(name);
  EXPECT_NE(spec, nullptr) << name;
  exec::KernelConstants constants = exec::resolveConstants(*spec, given, name);
  exec::KernelSignature sig = spec->signature(constants);
  EXPECT_EQ(sig.reads.size(), reads.size()) << name;
  std::vector<std::vector<float>> writes;
  for (const exec::OperandSpec &operand : sig.writes)
    writes.emplace_back(size_t(operand.elements), 0.25f);
  exec::KernelCall call;
  call.constants = &constants;
  for (std::vector<float> &read : reads)
    call.reads.push_back(read.data());
  for (std::vector<float> &write : writes) {
    call.writes.push_back(write.data());
    call.writeRounding.push_back(round);
  }
  spec->run(call);
  return writes;
}

std::vector<float> randomFloats(size_t n, unsigned seed) {
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) // deterministic, spread over [-2, 2)
    values[i] = float((i * 7919 + seed * 104729) % 4000) / 1000.0f - 2.0f;
  return values;
}

} // namespace

// The fused norms of weft-fuse-residual-norms are the residual add and the
// norm next to it, bit for bit, when the intermediate (the sum, or dx) is
// rounded as its storage would hold it between the two (bf16 here) or not at
// all (fp32).
TEST(KernelAbi, FusedNormsAreTheirTwoKernels) {
  const int64_t rows = 3, width = 8, n = rows * width;
  for (float (*round)(float) :
       {kernels::roundedToBf16, static_cast<float (*)(float)>(nullptr)}) {
    SCOPED_TRACE(round ? "bf16 intermediate" : "fp32 intermediate");
    auto stored = [&](std::vector<float> v) {
      if (round)
        for (float &x : v)
          x = round(x);
      return v;
    };
    std::vector<float> a = randomFloats(n, 1), b = randomFloats(n, 2),
                       gamma = randomFloats(width, 3),
                       beta = randomFloats(width, 4), dy = randomFloats(n, 5),
                       addend = randomFloats(n, 6);
    for (bool layerNorm : {true, false}) {
      SCOPED_TRACE(layerNorm ? "layer norm" : "rms norm");
      exec::KernelConstants c{{"rows", rows}, {"width", width}};
      std::string norm = layerNorm ? "layer_norm" : "rms_norm";
      std::vector<std::vector<float>> normReads =
          layerNorm ? std::vector<std::vector<float>>{gamma, beta}
                    : std::vector<std::vector<float>>{gamma};
      // Forward: sum = a + b, then the norm of the stored sum.
      std::vector<float> sum =
          stored(runKernel("residual_add", {{"n", n}}, {a, b}, nullptr)[0]);
      std::vector<std::vector<float>> reads{sum};
      reads.insert(reads.end(), normReads.begin(), normReads.end());
      std::vector<std::vector<float>> apart =
          runKernel((norm + "_forward").c_str(), c, reads, nullptr);
      reads = {a, b};
      reads.insert(reads.end(), normReads.begin(), normReads.end());
      std::vector<std::vector<float>> fused =
          runKernel(("residual_" + norm + "_forward").c_str(), c, reads, round);
      ASSERT_EQ(fused.size(), apart.size() + 1);
      EXPECT_EQ(fused[0], sum) << "the sum";
      for (size_t i = 0; i < apart.size(); ++i)
        EXPECT_EQ(fused[i + 1], apart[i]) << "write " << i + 1;
      // Backward: dx, the parameter gradients, then the stored dx + addend.
      std::vector<float> stats = apart.back(); // rstd
      reads = {sum, gamma};
      if (layerNorm)
        reads.push_back(apart[1]); // mean
      reads.push_back(stats);
      reads.push_back(dy);
      apart = runKernel((norm + "_backward").c_str(), c, reads, nullptr);
      std::vector<float> want = runKernel(
          "residual_add", {{"n", n}}, {stored(apart[0]), addend}, nullptr)[0];
      reads.push_back(addend);
      fused = runKernel((norm + "_backward_add").c_str(), c, reads, round);
      ASSERT_EQ(fused.size(), apart.size());
      EXPECT_EQ(fused[0], want) << "dx + addend";
      for (size_t i = 1; i < apart.size(); ++i)
        EXPECT_EQ(fused[i], apart[i]) << "parameter gradient " << i;
      // The rounding matters: without it the bf16 sum differs.
      if (round) {
        EXPECT_NE(
            runKernel((norm + "_backward_add").c_str(), c, reads, nullptr)[0],
            want);
      }
    }
  }
}

namespace {

/// The message checkKernelOperands throws for `inst`, or "" when it accepts.
std::string aliasingError(const plan::Program &program,
                          const plan::Instruction &inst, const char *kernel,
                          const exec::KernelConstants &given) {
  const exec::KernelSpec *spec = exec::findKernel(kernel);
  if (!spec)
    return "no kernel";
  try {
    exec::checkKernelOperands(program, inst, *spec,
                              exec::resolveConstants(*spec, given, "test"),
                              "test");
  } catch (const exec::Error &error) {
    return error.what();
  }
  return "";
}

} // namespace

// A kernel's writes may be exactly the range of one of the reads its
// signature lists as in place; any other overlap is refused in one line
// naming both operands and the bytes, because the CPU's loops and the GPU's
// threads would compute different things from it.
TEST(KernelAbi, WritesOverlapReadsOnlyInPlace) {
  const int64_t n = 16;
  plan::Program program;
  program.buffers = {
      {0, "x", plan::Region::Arena, 0, 4 * 2 * n, plan::DType::F32},
      {1, "dy", plan::Region::Arena, 256, 4 * n, plan::DType::F32}};
  plan::BufferRange x{0, 0, 4 * n}, dy{1, 0, 4 * n};
  plan::Instruction inst;
  inst.opcode = plan::Opcode::Kernel;
  exec::KernelConstants act = {{"act", 1}, {"n", n}};

  // activation_backward(x, dy) -> dx: dx over dy or over x is in place.
  inst.reads = {x, dy};
  inst.writes = {dy};
  EXPECT_EQ(aliasingError(program, inst, "activation_backward", act), "");
  inst.writes = {x};
  EXPECT_EQ(aliasingError(program, inst, "activation_backward", act), "");
  // Half a row off: partial overlap.
  inst.writes = {{0, 4 * 4, 4 * n}};
  EXPECT_EQ(aliasingError(program, inst, "activation_backward", act),
            "test: writes[0] overlaps reads[0] (bytes [16, 64) of buffer 0 "
            "'x'); writes[0] may only be exactly the range of reads[0], "
            "reads[1]");
  // The range just past x touches nothing.
  inst.writes = {{0, 4 * n, 4 * n}};
  EXPECT_EQ(aliasingError(program, inst, "activation_backward", act), "");

  // bias_add(y, bias) -> y: in place over y only, not over the bias.
  exec::KernelConstants bias = {{"rows", 1}, {"width", n}};
  inst.reads = {x, dy};
  inst.writes = {dy};
  EXPECT_EQ(aliasingError(program, inst, "bias_add", bias),
            "test: writes[0] overlaps reads[1] (bytes [0, 64) of buffer 1 "
            "'dy'); writes[0] may only be exactly the range of reads[0]");

  // The fused norm backward never writes its sum over the addend (a two-pass
  // path writes dx there first); over dy it may.
  const int64_t rows = 2, width = 8;
  plan::Program norm;
  auto add = [&](const char *name, int64_t elements) {
    int64_t id = int64_t(norm.buffers.size());
    norm.buffers.push_back({id, name, plan::Region::Arena, 256 * id,
                            4 * elements, plan::DType::F32});
    return plan::BufferRange{id, 0, 4 * elements};
  };
  plan::BufferRange nx = add("x", rows * width), gamma = add("gamma", width),
                    rstd = add("rstd", rows), ndy = add("dy", rows * width),
                    addend = add("addend", rows * width),
                    dGamma = add("dGamma", width);
  plan::Instruction back;
  back.opcode = plan::Opcode::Kernel;
  back.reads = {nx, gamma, rstd, ndy, addend};
  exec::KernelConstants shape = {{"rows", rows}, {"width", width}};
  back.writes = {ndy, dGamma};
  EXPECT_EQ(aliasingError(norm, back, "rms_norm_backward_add", shape), "");
  back.writes = {addend, dGamma};
  EXPECT_EQ(aliasingError(norm, back, "rms_norm_backward_add", shape),
            "test: writes[0] overlaps reads[4] (bytes [0, 64) of buffer 4 "
            "'addend'); writes[0] may only be exactly the range of reads[0], "
            "reads[3]");
  // A parameter gradient is accumulated while gamma is still being read.
  back.writes = {ndy, gamma};
  EXPECT_EQ(aliasingError(norm, back, "rms_norm_backward_add", shape),
            "test: writes[1] overlaps reads[1] (bytes [0, 32) of buffer 1 "
            "'gamma'); writes[1] may not overlap any read");
}

TEST(KernelAbi, WritesNeverOverlapEachOther) {
  const int64_t n = 16;
  plan::Program program;
  program.buffers = {
      {0, "in", plan::Region::Arena, 0, 4 * 3 * n, plan::DType::F32},
      {1, "out", plan::Region::Arena, 256, 4 * 2 * n, plan::DType::F32}};
  plan::Instruction inst;
  inst.opcode = plan::Opcode::Kernel;
  inst.reads = {{0, 0, 4 * n}, {0, 4 * n, 4 * n}, {0, 8 * n, 4 * n}};
  inst.writes = {{1, 0, 4 * n}, {1, 4 * n, 4 * n}};
  exec::KernelConstants gated = {{"n", n}};
  EXPECT_EQ(aliasingError(program, inst, "gated_backward", gated), "");
  // Reading one range twice is fine.
  inst.reads[2] = inst.reads[1];
  EXPECT_EQ(aliasingError(program, inst, "gated_backward", gated), "");
  inst.writes[1] = {1, 8, 4 * n};
  EXPECT_EQ(aliasingError(program, inst, "gated_backward", gated),
            "test: writes[1] overlaps writes[0] (bytes [8, 64) of buffer 1 "
            "'out'); a kernel's writes may not overlap");
}

// What weft-inspect verify reports: every refused launch and bundle kernel
// of a program, one message each, in the words a backend's prepare throws.
TEST(KernelAbi, OperandProblemsListEveryRefusal) {
  auto constant = [](std::string name,
                     std::map<std::string, int64_t> constants) {
    plan::Kernel kernel;
    kernel.name = std::move(name);
    kernel.constants = std::move(constants);
    return kernel;
  };
  plan::Bundle bundle;
  bundle.kernels = {constant("residual_add", {{"n", 16}}),
                    constant("embed", {}),
                    constant("bias_add", {{"rows", 1}, {"frob", 2}})};
  for (size_t id = 0; id < bundle.kernels.size(); ++id)
    bundle.kernels[id].id = int64_t(id);
  plan::Program program;
  program.role = 3;
  program.buffers = {{0, "a", plan::Region::Arena, 0, 64, plan::DType::F32},
                     {1, "b", plan::Region::Arena, 64, 128, plan::DType::F32},
                     {2, "c", plan::Region::Arena, 192, 32, plan::DType::F32}};
  plan::BufferRange a{0, 0, 64}, b{1, 0, 64}, c{2, 0, 32};
  auto launch = [](int64_t id, std::vector<plan::BufferRange> reads,
                   std::vector<plan::BufferRange> writes) {
    plan::Instruction inst;
    inst.opcode = plan::Opcode::Kernel;
    inst.kernel = id;
    inst.reads = std::move(reads);
    inst.writes = std::move(writes);
    inst.phase = "fwd";
    return inst;
  };
  plan::Instruction gemm;
  gemm.opcode = plan::Opcode::Gemm;
  gemm.gemm = {false, false, 4, 4, 4, 4, 4, 4, 1.0, 0.0};
  gemm.reads = {a, c};
  gemm.writes = {b};
  program.streams.push_back(
      {"compute",
       {launch(0, {a, b}, {a}), launch(0, {a, b}, {c}), launch(1, {a}, {b}),
        launch(2, {a, b}, {a}), gemm, launch(0, {a, b}, {{1, 32, 64}})}});
  EXPECT_EQ(exec::kernelProblems(bundle),
            (std::vector<std::string>{
                "kernels[2]: kernel 'bias_add' needs constant 'width'"}));
  EXPECT_EQ(
      exec::operandProblems(bundle, program),
      (std::vector<std::string>{
          "role 3 stream 0 'compute' instruction 1 (fwd): kernel "
          "'residual_add' operand writes[0] has 32 bytes, expected 64 (16 "
          "f32)",
          "role 3 stream 0 'compute' instruction 2 (fwd): kernel 'embed' is "
          "not in the runtime's kernel registry",
          "role 3 stream 0 'compute' instruction 4: gemm operand B has 32 "
          "bytes, needs 64",
          "role 3 stream 0 'compute' instruction 5 (fwd): kernel "
          "'residual_add': writes[0] overlaps reads[1] (bytes [32, 64) of "
          "buffer 1 'b'); writes[0] may only be exactly the range of "
          "reads[0], reads[1]"}));
}

TEST(KernelAbi, GemmResultAndOptimizerStateRangesAreChecked) {
  // Found by scripts/plan-mutate.py: a gemm writing over its own input and
  // an optimizer_step updating more bytes than its count both ran.
  plan::Program program;
  for (int64_t id = 0; id < 6; ++id)
    program.buffers.push_back({id, "b" + std::to_string(id),
                               plan::Region::Persistent, id * 256, 256,
                               plan::DType::F32});
  auto refusal = [&](const plan::Instruction &inst) -> std::string {
    try {
      exec::checkOperands(program, inst, "here", "CPU");
    } catch (const exec::Error &error) {
      return error.what();
    }
    return "<accepted>";
  };
  plan::Instruction gemm;
  gemm.opcode = plan::Opcode::Gemm;
  gemm.gemm = {false, false, 4, 4, 4, 4, 4, 4, 1.0, 0.0};
  gemm.reads = {{0, 0, 64}, {1, 0, 64}};
  gemm.writes = {{2, 0, 64}};
  EXPECT_EQ(refusal(gemm), "<accepted>");
  gemm.gemm.ldc = 16; // whole columns of a larger ldc are allowed
  gemm.writes = {{2, 0, 256}};
  EXPECT_EQ(refusal(gemm), "<accepted>");
  gemm.gemm.ldc = 4; // but not bytes past them: n shrunk, say
  EXPECT_EQ(refusal(gemm), "here: gemm operand C has 256 bytes, more than "
                           "its 4 columns of ld 4 (64 bytes)");
  gemm.writes = {{2, 0, 64}};
  gemm.gemm.k = 3; // A's and B's ranges are bounded alike
  EXPECT_EQ(refusal(gemm), "here: gemm operand A has 64 bytes, more than "
                           "its 3 columns of ld 4 (48 bytes)");
  gemm.gemm.k = 4;
  gemm.writes = {{1, 32, 64}};
  EXPECT_EQ(refusal(gemm), "here: gemm operand C overlaps B (the product "
                           "reads them whole)");
  gemm.writes = {{0, 0, 64}};
  EXPECT_EQ(refusal(gemm), "here: gemm operand C overlaps A (the product "
                           "reads them whole)");
  gemm.writes = {{2, 0, 64}};
  gemm.dtype = plan::DType::I32; // was refused only when the CPU ran it
  EXPECT_EQ(refusal(gemm),
            "here: gemm of i32 is not supported (f32, bf16, f16, f64)");

  plan::Instruction step;
  step.opcode = plan::Opcode::OptimizerStep;
  step.count = 16;
  step.reads = {{0, 0, 64}, {1, 0, 64}, {2, 0, 64}, {3, 0, 64}};
  step.writes = {step.reads[0], step.reads[2], step.reads[3], {4, 0, 64}};
  EXPECT_EQ(refusal(step), "<accepted>");
  step.reads[2] = step.writes[1] = {2, 0, 128};
  EXPECT_EQ(refusal(step), "here: optimizer_step operand exp_avg has 128 "
                           "bytes, expected 64");
  step.reads[2] = step.writes[1] = {2, 0, 64};
  step.writes[3] = {4, 0, 256};
  EXPECT_EQ(refusal(step), "here: optimizer_step operand parameter copy has "
                           "256 bytes, expected 64");
}

TEST(KernelAbi, KernelProblemsNameAGeneratedSourceOfAnotherKernel) {
  // Found by scripts/plan-mutate.py: a kernel pointed at another kernel's
  // generated source ran on the CPU (which reads no source); the CUDA
  // backend's generated path would have launched it on the wrong operands.
  plan::Bundle bundle;
  plan::Kernel kernel;
  kernel.name = "residual_add";
  kernel.constants = {{"n", 16}};
  kernel.source = "kernels/residual_add.cu";
  bundle.kernels = {kernel};
  bundle.files[kernel.source] =
      "// weft-launch: weft_residual_add_0 grid 1 block 64\n";
  EXPECT_EQ(exec::kernelProblems(bundle), std::vector<std::string>{});
  bundle.files[kernel.source] = "// a hand-written stand-in\n";
  EXPECT_EQ(exec::kernelProblems(bundle), std::vector<std::string>{});
  bundle.files[kernel.source] =
      "// weft-launch: weft_bias_add_0 grid 1 block 64\n";
  EXPECT_EQ(exec::kernelProblems(bundle),
            std::vector<std::string>{
                "kernels[0]: kernels/residual_add.cu:1: entry weft_bias_add_0 "
                "is not one of kernel 'residual_add' (weft_residual_add_N): "
                "the plan names another kernel's source"});
}
