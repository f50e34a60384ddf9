//===- CpuBackend.cpp - Host execution of the compute opcodes -------------===//
//
// fp32 math throughout; bf16 and f16 operands are widened into a workspace
// sized at prepare() and narrowed back after the call, so execute() never
// allocates.
//
//===----------------------------------------------------------------------===//

#include "AdamWStep.h"
#include "Describe.h"
#include "HostMath.h"
#include "weft/exec/Backend.h"
#include "weft/exec/Error.h"
#include "weft/exec/KernelRegistry.h"
#include "weft/exec/OperandChecks.h"
#include "weft/kernels/CpuKernels.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sys/mman.h>
#include <unistd.h>

namespace weft::exec {

namespace cpu = weft::kernels::cpu;
using plan::DType;
using plan::Instruction;
using plan::Opcode;

namespace {

/// Widens n bf16 or f16 elements to fp32.
void widenHalf(DType dtype, int64_t n, const std::byte *in, float *out) {
  if (dtype == DType::BF16)
    cpu::fromBf16(n, reinterpret_cast<const kernels::BF16 *>(in), out);
  else
    cpu::fromF16(n, reinterpret_cast<const kernels::F16 *>(in), out);
}

/// Rounds n fp32 elements to bf16 or f16.
void narrowHalf(DType dtype, int64_t n, const float *in, std::byte *out) {
  if (dtype == DType::BF16)
    cpu::toBf16(n, in, reinterpret_cast<kernels::BF16 *>(out));
  else
    cpu::toF16(n, in, reinterpret_cast<kernels::F16 *>(out));
}

size_t pageBytes() {
  static const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  return page;
}
size_t roundUpToPage(size_t bytes) {
  return (bytes + pageBytes() - 1) / pageBytes() * pageBytes();
}
/// The whole pages inside [data, data + bytes): [first, last), empty when
/// last <= first.
std::pair<std::byte *, std::byte *> wholePages(std::byte *data, int64_t bytes) {
  uintptr_t begin = reinterpret_cast<uintptr_t>(data);
  uintptr_t end = begin + uintptr_t(bytes);
  uintptr_t first = (begin + pageBytes() - 1) / pageBytes() * pageBytes();
  uintptr_t last = end / pageBytes() * pageBytes();
  return {reinterpret_cast<std::byte *>(first),
          reinterpret_cast<std::byte *>(std::max(first, last))};
}

struct ResolvedKernel {
  const KernelSpec *spec = nullptr;
  KernelConstants constants;
};

//===--- Communication: non-blocking MPI ----------------------------------===//

float widen(kernels::BF16 x) { return kernels::bf16ToFloat(x); }
float widen(kernels::F16 x) { return kernels::f16ToFloat(x); }
void narrow(float x, kernels::BF16 &out) { out = kernels::floatToBf16(x); }
void narrow(float x, kernels::F16 &out) { out = kernels::floatToF16(x); }

// MPI reduces bf16 and f16 (moved as 16-bit integers) through user ops that
// combine in fp32 and round back.
template <typename Half, typename Combine>
void combineHalf(void *in, void *inout, int *len, Combine combine) {
  auto *a = static_cast<const Half *>(in);
  auto *b = static_cast<Half *>(inout);
  for (int i = 0; i < *len; ++i)
    narrow(combine(widen(a[i]), widen(b[i])), b[i]);
}
template <typename Half>
void halfSum(void *in, void *inout, int *len, MPI_Datatype *) {
  combineHalf<Half>(in, inout, len, [](float x, float y) { return x + y; });
}
template <typename Half>
void halfMax(void *in, void *inout, int *len, MPI_Datatype *) {
  combineHalf<Half>(in, inout, len,
                    [](float x, float y) { return std::max(x, y); });
}
template <typename Half>
void halfMin(void *in, void *inout, int *len, MPI_Datatype *) {
  combineHalf<Half>(in, inout, len,
                    [](float x, float y) { return std::min(x, y); });
}

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::U8:
    return MPI_UINT8_T;
  case DType::F16:
  case DType::BF16:
  case DType::U16:
    return MPI_UINT16_T; // moved as bits; bf16/f16 reduce via user ops
  }
  return MPI_BYTE;
}

/// The MPI arguments of one communication instruction, resolved at connect.
struct MpiCall {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  int peer = -1; // send/recv: world rank; broadcast: group-relative root
  int index = 0; // this rank's index in the communicator (all_gather)
};

/// One communicator per (group family, stream name) used by a collective and
/// one per stream name used by send/recv (docs/runtime.md, "Communicators").
struct MpiChannels {
  std::map<std::pair<int64_t, std::string>, MPI_Comm> collective;
  std::map<std::string, MPI_Comm> p2p;
  // Sum, max, min.
  MPI_Op bf16Ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op f16Ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

  ~MpiChannels() {
    for (auto &[key, comm] : collective)
      MPI_Comm_free(&comm);
    for (auto &[key, comm] : p2p)
      MPI_Comm_free(&comm);
    for (MPI_Op *ops : {bf16Ops, f16Ops})
      for (int i = 0; i < 3; ++i)
        if (ops[i] != MPI_OP_NULL)
          MPI_Op_free(&ops[i]);
  }
};

class CpuBackend final : public Backend {
public:
  explicit CpuBackend(bool hostAddressable)
      : hostAddressable_(hostAddressable) {}
  ~CpuBackend() override {
    for (const Mapping &region : regions_)
      ::munmap(region.data, region.bytes);
  }

  std::string_view name() const override {
    return hostAddressable_ ? "cpu" : "cpu-staged";
  }

  std::byte *allocateRegion(plan::Region region, int64_t bytes) override {
    // Page-aligned anonymous mappings (zeroed by the kernel): offload can
    // return whole pages to the OS and protect them (decommit).
    size_t size = roundUpToPage(size_t(std::max<int64_t>(bytes, 1)));
    void *data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED)
      throw Error("cannot allocate the " + std::string(plan::toString(region)) +
                  " region of " + std::to_string(bytes) + " bytes");
    // A NaN-filled arena makes reads of unwritten bytes visible instead of
    // silently plausible; the persistent region starts zeroed.
    if (region == plan::Region::Arena)
      std::memset(data, 0xff, size);
    regions_.push_back({static_cast<std::byte *>(data), size});
    // The host region is host memory on every backend, not device memory.
    if (region != plan::Region::Host)
      inUse_ += int64_t(size);
    return static_cast<std::byte *>(data);
  }

  int64_t decommit(std::byte *data, int64_t bytes) override {
    auto [first, last] = wholePages(data, bytes);
    // Partial pages are shared with other state: poison only our bytes.
    std::memset(data, 0xff, size_t(std::min(first, data + bytes) - data));
    if (last > first) {
      std::memset(last, 0xff, size_t(data + bytes - last));
      size_t length = size_t(last - first);
      if (::madvise(first, length, MADV_DONTNEED) != 0 ||
          ::mprotect(first, length, PROT_NONE) != 0) {
        int error = errno;
        // Leave the range usable (the caller restores its bytes).
        ::mprotect(first, length, PROT_READ | PROT_WRITE);
        throw Error("cannot release " + std::to_string(length) +
                    " bytes of device memory: " + std::strerror(error));
      }
      inUse_ -= int64_t(length);
      return int64_t(length);
    }
    return 0;
  }

  void recommit(std::byte *data, int64_t bytes) override {
    auto [first, last] = wholePages(data, bytes);
    if (last <= first)
      return;
    size_t length = size_t(last - first);
    if (::mprotect(first, length, PROT_READ | PROT_WRITE) != 0)
      throw Error("cannot re-map " + std::to_string(length) +
                  " bytes of device memory: " + std::strerror(errno));
#ifdef MADV_POPULATE_WRITE
    // Fault the pages in with one call instead of one fault per page while
    // the caller copies (Linux >= 5.14; older kernels fault lazily).
    (void)::madvise(first, length, MADV_POPULATE_WRITE);
#endif
    inUse_ += int64_t(length);
  }

  bool hostAddressable() const override { return hostAddressable_; }
  void poison(std::byte *data, int64_t bytes) override {
    std::memset(data, 0xff, size_t(bytes));
  }
  void copyToHost(std::byte *host, const std::byte *device,
                  int64_t bytes) override {
    std::memcpy(host, device, size_t(bytes));
  }
  void copyToDevice(std::byte *device, const std::byte *host,
                    int64_t bytes) override {
    std::memcpy(device, host, size_t(bytes));
  }
  std::byte *stagingBuffer(int64_t bytes) override {
    staging_.emplace_back(size_t(std::max<int64_t>(bytes, 1)));
    return staging_.back().data();
  }
  void copyToDeviceAsync(std::byte *device, const std::byte *host,
                         int64_t bytes, int64_t) override {
    std::memcpy(device, host, size_t(bytes));
  }
  void copyToHostAsync(std::byte *host, const std::byte *device, int64_t bytes,
                       int64_t) override {
    std::memcpy(host, device, size_t(bytes));
  }
  int64_t deviceBytesInUse() const override { return inUse_; }

  void connect(const plan::Bundle &bundle, int rank, int worldSize,
               MPI_Comm world) override;
  void communicate(const Instruction &inst, int64_t stream,
                   const std::vector<Operand> &reads,
                   const std::vector<Operand> &writes,
                   const std::string &where) override;
  bool communicationDone(int64_t stream) override {
    std::vector<MPI_Request> &requests = requests_[size_t(stream)];
    if (requests.empty())
      return true;
    int complete = 0;
    MPI_Testall(int(requests.size()), requests.data(), &complete,
                MPI_STATUSES_IGNORE);
    if (complete)
      requests.clear(); // keeps the capacity reserved at connect
    return complete != 0;
  }

  void prepare(const plan::Bundle &bundle,
               const plan::Program &program) override;

  void execute(const Instruction &inst, int64_t stream,
               const std::vector<Operand> &reads,
               const std::vector<Operand> &writes,
               const StepContext &context) override;

private:
  void prepareKernel(const plan::Bundle &bundle, const plan::Program &program,
                     const Instruction &inst, const std::string &where);
  void prepareOther(const plan::Program &program, const Instruction &inst,
                    const std::string &where);
  void runKernel(const Instruction &inst, const StepContext &context,
                 const std::vector<Operand> &reads,
                 const std::vector<Operand> &writes);
  void runGemm(const Instruction &inst, const std::vector<Operand> &reads,
               const std::vector<Operand> &writes);
  /// A gemm's epilogue, as the kernels it folds (plan::epilogueSteps): the
  /// unfused plan's bits.
  void runEpilogue(const Instruction &gemm, int64_t stream,
                   const std::vector<Operand> &reads,
                   const std::vector<Operand> &writes,
                   const StepContext &context);
  void runOptimizer(const Instruction &inst, const std::vector<Operand> &reads,
                    const std::vector<Operand> &writes,
                    const StepContext &context);

  struct Mapping {
    std::byte *data;
    size_t bytes;
  };
  const plan::Program *program_ = nullptr;
  int rank_ = 0;
  std::unique_ptr<MpiChannels> channels_;
  std::vector<std::vector<MpiCall>> calls_; // [stream][instruction]
  /// Per stream: the requests of the pending operation, one per member
  /// (capacity reserved at connect, so communicate() never allocates).
  std::vector<std::vector<MPI_Request>> requests_;
  std::vector<std::vector<std::byte>> staging_;
  std::vector<Mapping> regions_;
  /// False for "cpu-staged": the executor reaches the regions through the
  /// copies only, as on a device.
  bool hostAddressable_ = true;
  int64_t inUse_ = 0;                   // mapped and not decommitted
  std::vector<ResolvedKernel> kernels_; // by bundle kernel id
  std::vector<float> workspace_;        // bf16/f16 operands widened to fp32
  std::vector<std::pair<Operand, float *>> widenedCopies_; // per call
  KernelCall call_; // reused so execute() never allocates
  /// The steps of each gemm with an epilogue, and their operands (reused).
  std::map<const Instruction *, std::vector<plan::EpilogueStep>> epilogues_;
  std::vector<Operand> stepReads_, stepWrites_;
};

void CpuBackend::prepare(const plan::Bundle &bundle,
                         const plan::Program &program) {
  program_ = &program;
  epilogues_.clear();
  requests_.assign(program.streams.size(), {});
  kernels_.assign(bundle.kernels.size(), {});
  for (const plan::Kernel &kernel : bundle.kernels) {
    const KernelSpec *spec = findKernel(kernel.name);
    // Kernels the program never launches need not exist on this backend.
    if (spec)
      kernels_[kernel.id] = {
          spec, resolveConstants(*spec, kernel.constants,
                                 "kernels[" + std::to_string(kernel.id) + "]")};
  }
  size_t maxOperands = forEachInstruction(
      program, "",
      [&](const Instruction &inst, size_t, const std::string &where) {
        if (inst.opcode == Opcode::Kernel)
          prepareKernel(bundle, program, inst, where);
        else
          prepareOther(program, inst, where);
        if (inst.epilogue != plan::GemmEpilogue::None)
          epilogues_[&inst] = prepareEpilogueSteps(
              inst, where, [&](const Instruction &step, const std::string &at) {
                if (step.opcode == Opcode::Kernel)
                  prepareKernel(bundle, program, step, at);
                else
                  prepareOther(program, step, at);
              });
      });
  call_.reads.reserve(maxOperands);
  call_.writes.reserve(maxOperands);
  call_.readIndices.reserve(maxOperands);
  call_.writeRounding.reserve(maxOperands);
  stepReads_.reserve(maxOperands);
  stepWrites_.reserve(maxOperands);
}

void CpuBackend::prepareKernel(const plan::Bundle &bundle,
                               const plan::Program &program,
                               const Instruction &inst,
                               const std::string &where) {
  const plan::Kernel &kernel = bundle.kernels[inst.kernel];
  const ResolvedKernel &resolved = kernels_[inst.kernel];
  std::string what = where + ": kernel '" + kernel.name + "'";
  if (!resolved.spec)
    throw Error(what + " is not in the CPU kernel registry");
  int64_t widened = checkKernelOperands(program, inst, *resolved.spec,
                                        resolved.constants, what);
  if (size_t(widened) > workspace_.size())
    workspace_.resize(size_t(widened));
}

void CpuBackend::prepareOther(const plan::Program &program,
                              const Instruction &inst,
                              const std::string &where) {
  bool gemm = inst.opcode == Opcode::Gemm;
  checkOperands(program, inst, where, "CPU");
  if (!gemm)
    return;
  // bf16 and f16 operands are widened into the workspace.
  const plan::GemmParams &g = inst.gemm;
  int64_t a = matrixSpan(g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda);
  int64_t b = matrixSpan(g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb);
  int64_t c = matrixSpan(g.m, g.n, g.ldc);
  if (isHalfFloat(inst.dtype) && size_t(a + b + c) > workspace_.size())
    workspace_.resize(size_t(a + b + c));
}

void CpuBackend::execute(const Instruction &inst, int64_t stream,
                         const std::vector<Operand> &reads,
                         const std::vector<Operand> &writes,
                         const StepContext &context) {
  switch (inst.opcode) {
  case Opcode::Kernel:
    runKernel(inst, context, reads, writes);
    return;
  case Opcode::Gemm:
    runGemm(inst, reads, writes);
    if (inst.epilogue != plan::GemmEpilogue::None)
      runEpilogue(inst, stream, reads, writes, context);
    return;
  case Opcode::Copy:
    std::memmove(writes[0].data, reads[0].data, size_t(reads[0].bytes));
    return;
  case Opcode::Fill:
    for (const Operand &out : writes) {
      int64_t n = out.bytes / plan::elementBytes(inst.dtype);
      for (int64_t i = 0; i < n; ++i) {
        switch (inst.dtype) {
        case DType::F32:
        case DType::BF16:
        case DType::F16:
          storeFloat(out.data, inst.dtype, i, float(inst.value));
          break;
        case DType::F64:
          out.as<double>()[i] = inst.value;
          break;
        case DType::I32:
          out.as<int32_t>()[i] = int32_t(inst.value);
          break;
        case DType::I64:
          out.as<int64_t>()[i] = int64_t(inst.value);
          break;
        case DType::U16:
          out.as<uint16_t>()[i] = uint16_t(inst.value);
          break;
        case DType::U8:
          out.as<uint8_t>()[i] = uint8_t(inst.value);
          break;
        }
      }
    }
    return;
  case Opcode::OptimizerStep:
    runOptimizer(inst, reads, writes, context);
    return;
  case Opcode::GradNorm: {
    double sum = 0;
    for (const Operand &grad : reads) {
      int64_t n = grad.bytes / plan::elementBytes(inst.dtype);
      for (int64_t i = 0; i < n; ++i) {
        double x = loadFloat(grad.data, inst.dtype, i);
        sum += x * x;
      }
    }
    writes[0].as<float>()[0] = float(sum);
    return;
  }
  case Opcode::Clip:
    // The gradients carry the loss scale; the norm compared is the true one.
    clipOnHost(context, inst.dtype, reads[0].as<float>(), writes);
    return;
  default:
    throw Error("the cpu backend does not execute " +
                std::string(plan::toString(inst.opcode)));
  }
}

void CpuBackend::runKernel(const Instruction &inst, const StepContext &context,
                           const std::vector<Operand> &reads,
                           const std::vector<Operand> &writes) {
  const ResolvedKernel &kernel = kernels_[inst.kernel];
  call_.constants = &kernel.constants;
  call_.lossScale = float(context.lossScale);
  call_.reads.clear();
  call_.writes.clear();
  call_.readIndices.clear();
  call_.writeRounding.clear();
  WidenedCopies copies(workspace_.data(), widenedCopies_);
  auto widen = [&](const Operand &operand) -> float * {
    if (!isHalfFloat(operand.dtype))
      return operand.dtype == DType::F32 ? operand.as<float>() : nullptr;
    auto [out, fresh] = copies.place(operand);
    if (fresh)
      widenHalf(operand.dtype, operand.elements(), operand.data, out);
    return out;
  };
  for (const Operand &operand : reads) {
    call_.reads.push_back(widen(operand));
    call_.readIndices.push_back(
        operand.dtype == DType::I32 ? operand.as<const int32_t>() : nullptr);
  }
  // Writes are widened too: gradient kernels accumulate into them.
  for (const Operand &operand : writes) {
    call_.writes.push_back(widen(operand));
    call_.writeRounding.push_back(
        operand.dtype == DType::BF16  ? kernels::roundedToBf16
        : operand.dtype == DType::F16 ? kernels::roundedToF16
                                      : nullptr);
  }
  kernel.spec->run(call_);
  for (size_t i = 0; i < writes.size(); ++i)
    if (isHalfFloat(writes[i].dtype))
      narrowHalf(writes[i].dtype, writes[i].elements(), call_.writes[i],
                 writes[i].data);
}

void CpuBackend::runGemm(const Instruction &inst,
                         const std::vector<Operand> &reads,
                         const std::vector<Operand> &writes) {
  const plan::GemmParams &g = inst.gemm;
  // The plan's GEMM is column-major (BLAS); the kernel library is row-major.
  // A column-major C = op(A) op(B) is the row-major C^T = op(B)^T op(A)^T, so
  // swap the operands and m/n and keep the transposition flags.
  if (inst.dtype == DType::F64) {
    cpu::gemm(g.transB, g.transA, g.n, g.m, g.k, g.alpha, reads[1].as<double>(),
              g.ldb, reads[0].as<double>(), g.lda, g.beta,
              writes[0].as<double>(), g.ldc);
    return;
  }
  if (inst.dtype == DType::F32) {
    cpu::gemm(g.transB, g.transA, g.n, g.m, g.k, float(g.alpha),
              reads[1].as<float>(), g.ldb, reads[0].as<float>(), g.lda,
              float(g.beta), writes[0].as<float>(), g.ldc);
    return;
  }
  int64_t a = matrixSpan(g.transA ? g.k : g.m, g.transA ? g.m : g.k, g.lda);
  int64_t b = matrixSpan(g.transB ? g.n : g.k, g.transB ? g.k : g.n, g.ldb);
  int64_t c = matrixSpan(g.m, g.n, g.ldc);
  float *wa = workspace_.data(), *wb = wa + a, *wc = wb + b;
  widenHalf(inst.dtype, a, reads[0].data, wa);
  widenHalf(inst.dtype, b, reads[1].data, wb);
  widenHalf(inst.dtype, c, writes[0].data, wc);
  cpu::gemm(g.transB, g.transA, g.n, g.m, g.k, float(g.alpha), wb, g.ldb, wa,
            g.lda, float(g.beta), wc, g.ldc);
  narrowHalf(inst.dtype, c, wc, writes[0].data);
}

void CpuBackend::runEpilogue(const Instruction &gemm, int64_t stream,
                             const std::vector<Operand> &reads,
                             const std::vector<Operand> &writes,
                             const StepContext &context) {
  for (const plan::EpilogueStep &step : epilogues_.at(&gemm)) {
    epilogueOperands(step, reads, writes, stepReads_, stepWrites_);
    execute(step.inst, stream, stepReads_, stepWrites_, context);
  }
}

void CpuBackend::runOptimizer(const Instruction &inst,
                              const std::vector<Operand> &reads,
                              const std::vector<Operand> &writes,
                              const StepContext &context) {
  std::optional<kernels::AdamWStep> step = hostAdamWStep(context, inst, reads);
  if (!step) // dynamic loss scaling: the gradients overflowed
    return;
  float *param = writes[0].as<float>();
  float *m = writes[1].as<float>();
  float *v = writes[2].as<float>();
  const Operand &grad = reads[1];
  for (int64_t i = 0; i < inst.count; ++i)
    kernels::adamwElement(*step, loadFloat(grad.data, grad.dtype, i), param[i],
                          m[i], v[i]);
  if (writes.size() == 4)
    for (int64_t i = 0; i < inst.count; ++i)
      storeFloat(writes[3].data, writes[3].dtype, i, param[i]);
}

} // namespace

std::string_view toString(HostMemoryKind kind) {
  return kind == HostMemoryKind::Pinned ? "pinned" : "pageable";
}

HostBuffer::HostBuffer(int64_t bytes, HostMemoryKind kind)
    : bytes_(bytes), kind_(kind) {
  size_t size = size_t(std::max<int64_t>(bytes, 1));
  if (kind == HostMemoryKind::Pageable) {
    data_ = static_cast<std::byte *>(std::malloc(size));
    if (!data_)
      throw Error("cannot allocate " + std::to_string(bytes) +
                  " bytes of pageable host memory");
    return;
  }
  // Pinned: page-aligned and locked in RAM (never swapped), the host side of
  // what cudaHostAlloc gives a CUDA backend for DMA.
  mapped_ = roundUpToPage(size);
  void *data = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED)
    throw Error("cannot allocate " + std::to_string(bytes) +
                " bytes of pinned host memory: " + std::strerror(errno));
  if (::mlock(data, mapped_) != 0) {
    int error = errno;
    ::munmap(data, mapped_);
    throw Error("cannot pin " + std::to_string(bytes) +
                " bytes of host memory: " + std::strerror(error) +
                (error == ENOMEM || error == EPERM
                     ? " (RLIMIT_MEMLOCK, see ulimit -l; or offload to "
                       "pageable memory)"
                     : ""));
  }
  data_ = static_cast<std::byte *>(data);
}

HostBuffer::~HostBuffer() { reset(); }

void HostBuffer::reset() {
  if (data_ && release_)
    release_(data_);
  release_ = nullptr;
  if (data_ && mapped_)
    ::munmap(data_, mapped_);
  else
    std::free(data_);
  data_ = nullptr;
  bytes_ = 0;
  mapped_ = 0;
}

HostBuffer::HostBuffer(HostBuffer &&other) noexcept
    : data_(other.data_), bytes_(other.bytes_), mapped_(other.mapped_),
      kind_(other.kind_), release_(std::move(other.release_)) {
  other.release_ = nullptr;
  other.data_ = nullptr;
  other.bytes_ = 0;
  other.mapped_ = 0;
}

HostBuffer &HostBuffer::operator=(HostBuffer &&other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    bytes_ = other.bytes_;
    mapped_ = other.mapped_;
    kind_ = other.kind_;
    release_ = std::move(other.release_);
    other.release_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
    other.mapped_ = 0;
  }
  return *this;
}

void CpuBackend::connect(const plan::Bundle &bundle, int rank, int,
                         MPI_Comm world) {
  if (!program_)
    throw Error("connect() before prepare()");
  rank_ = rank;
  channels_ = std::make_unique<MpiChannels>();
  // Every rank sees the whole bundle, so every rank derives the same list
  // of (group family, stream name) channels and calls MPI_Comm_split in the
  // same order, including for channels it is not part of. One split per
  // channel gives each concrete group of the family its own communicator:
  // the color is the index of the group containing the rank.
  CommunicationChannels all = communicationChannels(bundle);
  for (const auto &channel : all.collectives) {
    const plan::GroupFamily &family = bundle.groups[channel.first];
    int groupIndex = int(plan::findGroupOf(family, rank));
    int indexInGroup =
        groupIndex < 0
            ? 0
            : int(plan::groupIndexOf(family.groups[groupIndex], rank));
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm_split(world, groupIndex >= 0 ? groupIndex : MPI_UNDEFINED,
                   indexInGroup, &comm);
    if (comm != MPI_COMM_NULL)
      channels_->collective[channel] = comm;
  }
  for (const std::string &name : all.pointToPoint)
    MPI_Comm_dup(world, &channels_->p2p[name]);
  MPI_Op_create(halfSum<kernels::BF16>, 1, &channels_->bf16Ops[0]);
  MPI_Op_create(halfMax<kernels::BF16>, 1, &channels_->bf16Ops[1]);
  MPI_Op_create(halfMin<kernels::BF16>, 1, &channels_->bf16Ops[2]);
  MPI_Op_create(halfSum<kernels::F16>, 1, &channels_->f16Ops[0]);
  MPI_Op_create(halfMax<kernels::F16>, 1, &channels_->f16Ops[1]);
  MPI_Op_create(halfMin<kernels::F16>, 1, &channels_->f16Ops[2]);

  // Resolve every communication instruction of this rank's program once.
  const plan::Program &program = *program_;
  calls_.assign(program.streams.size(), {});
  for (size_t s = 0; s < program.streams.size(); ++s) {
    const plan::Stream &stream = program.streams[s];
    calls_[s].resize(stream.instructions.size());
    size_t members = 0;
    for (size_t i = 0; i < stream.instructions.size(); ++i) {
      const Instruction &inst = stream.instructions[i];
      MpiCall &call = calls_[s][i];
      if (plan::isCollective(inst.opcode) || plan::isPointToPoint(inst.opcode))
        members = std::max(members, plan::memberCount(inst));
      if (plan::isCollective(inst.opcode)) {
        call.comm = channels_->collective.at({inst.group, stream.name});
        call.peer = int(inst.peer);
        MPI_Comm_rank(call.comm, &call.index);
      } else if (plan::isPointToPoint(inst.opcode)) {
        call.comm = channels_->p2p.at(stream.name);
        call.peer =
            int((*plan::resolveGroup(bundle, inst.group, rank))[inst.peer]);
      } else {
        continue;
      }
      call.type = mpiType(inst.dtype);
      const MPI_Op *halfOps = inst.dtype == DType::BF16  ? channels_->bf16Ops
                              : inst.dtype == DType::F16 ? channels_->f16Ops
                                                         : nullptr;
      switch (inst.reduce) {
      case plan::ReduceOp::Sum:
        call.op = halfOps ? halfOps[0] : MPI_SUM;
        break;
      case plan::ReduceOp::Max:
        call.op = halfOps ? halfOps[1] : MPI_MAX;
        break;
      case plan::ReduceOp::Min:
        call.op = halfOps ? halfOps[2] : MPI_MIN;
        break;
      }
    }
    // One request per member of the stream's largest collective.
    requests_[s].reserve(members);
  }
}

void CpuBackend::communicate(const Instruction &inst, int64_t stream,
                             const std::vector<Operand> &reads,
                             const std::vector<Operand> &writes,
                             const std::string &where) {
  const std::vector<Instruction> &insts =
      program_->streams.at(size_t(stream)).instructions;
  size_t index = size_t(&inst - insts.data());
  if (!channels_ || &inst < insts.data() || index >= insts.size())
    throw Error("rank " + std::to_string(rank_) + " " + where +
                ": not an instruction of the connected program");
  const MpiCall &p = calls_[size_t(stream)][index];
  // One non-blocking call per member (all_reduce, reduce_scatter and
  // all_gather may have several; every other opcode has one), issued in
  // member order on every rank of the group; communicationDone() tests them
  // all.
  std::vector<MPI_Request> &requests = requests_[size_t(stream)];
  size_t members = operandMembers(inst, reads);
  requests.assign(members, MPI_REQUEST_NULL); // within the reserved capacity
  int64_t elementSize = plan::elementBytes(inst.dtype);
  for (size_t m = 0; m < members; ++m) {
    int count = int(operandMemberElements(inst, reads, writes, m));
    MPI_Request *request = &requests[m];
    int rc = MPI_SUCCESS;
    switch (inst.opcode) {
    case Opcode::AllReduce: {
      const void *in =
          reads[m].data == writes[m].data ? MPI_IN_PLACE : reads[m].data;
      rc = MPI_Iallreduce(in, writes[m].data, count, p.type, p.op, p.comm,
                          request);
      break;
    }
    case Opcode::ReduceScatter:
      rc = MPI_Ireduce_scatter_block(reads[m].data, writes[m].data, count,
                                     p.type, p.op, p.comm, request);
      break;
    case Opcode::AllGather: {
      // In place when the input is this rank's block of the output.
      int64_t block = int64_t(count) * elementSize;
      const void *in = reads[m].data == writes[m].data + p.index * block
                           ? MPI_IN_PLACE
                           : reads[m].data;
      rc = MPI_Iallgather(in, count, p.type, writes[m].data, count, p.type,
                          p.comm, request);
      break;
    }
    case Opcode::Broadcast:
      rc = MPI_Ibcast(writes[0].data, count, p.type, p.peer, p.comm, request);
      break;
    case Opcode::Send:
      rc = MPI_Isend(reads[0].data, count, p.type, p.peer, 0, p.comm, request);
      break;
    case Opcode::Recv:
      rc = MPI_Irecv(writes[0].data, count, p.type, p.peer, 0, p.comm, request);
      break;
    default:
      throw Error("rank " + std::to_string(rank_) + " " + where + ": " +
                  std::string(plan::toString(inst.opcode)) +
                  " is not a communication instruction");
    }
    if (rc != MPI_SUCCESS)
      throw Error("rank " + std::to_string(rank_) + " " + where + ": " +
                  std::string(plan::toString(inst.opcode)) +
                  (members > 1 ? " (member " + std::to_string(m) + " of " +
                                     std::to_string(members) + ")"
                               : std::string()) +
                  " failed in MPI");
  }
}

std::unique_ptr<Backend> makeCpuBackend(bool hostAddressable) {
  return std::make_unique<CpuBackend>(hostAddressable);
}

} // namespace weft::exec
