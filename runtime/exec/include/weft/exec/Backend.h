//===- Backend.h - Where a rank's memory lives and compute runs -*- C++ -*-===//
//
// The executor (Session) owns scheduling, events, communication and data;
// a Backend owns device memory and the compute opcodes. Each rank allocates
// exactly two regions, sized by the plan (persistent and arena), once at
// open; Backend::prepare sees the whole program up front so it can check the
// kernel ABI and size every workspace, and execute() must not allocate.
//
// The CPU backend executes synchronously. A CUDA backend fits the same
// interface: allocateRegion is one cudaMalloc per region, execute() enqueues
// on the CUDA stream of `stream` and returns at once, and the Session's
// record/wait of events becomes cudaEventRecord/cudaStreamWaitEvent (issue 8
// extends the interface with those hooks and NCCL communication).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_BACKEND_H
#define WEFT_EXEC_BACKEND_H

#include "weft/plan/Bundle.h"

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace weft::exec {

/// One byte range of a buffer, resolved to memory.
struct Operand {
  std::byte *data = nullptr;
  int64_t bytes = 0;
  plan::DType dtype = plan::DType::F32; // the buffer's dtype

  template <typename T> T *as() const { return reinterpret_cast<T *>(data); }
  int64_t elements() const { return bytes / plan::elementBytes(dtype); }
};

/// What an instruction needs to know about the step it runs in.
struct StepContext {
  int64_t step = 1; // 1-based optimizer step (AdamW bias correction)
  double lr = 0;    // from the schedule
  const plan::TrainingInfo *training = nullptr;
};

class Backend {
public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  /// Allocates a region of `bytes` (called twice per rank, at open). The
  /// persistent region is zeroed; the arena's contents are unspecified.
  virtual std::byte *allocateRegion(plan::Region region, int64_t bytes) = 0;

  /// Checks every compute instruction of `program` against what this
  /// backend implements (kernel names, operand dtypes and sizes) and sizes
  /// the workspaces. Throws Error naming the instruction.
  virtual void prepare(const plan::Bundle &bundle,
                       const plan::Program &program) = 0;

  /// Runs one compute instruction: kernel, gemm, copy, fill,
  /// optimizer_step, grad_norm or clip. `stream` is the program's stream
  /// index.
  virtual void execute(const plan::Instruction &inst, int64_t stream,
                       const std::vector<Operand> &reads,
                       const std::vector<Operand> &writes,
                       const StepContext &context) = 0;
};

/// The host backend: OpenBLAS GEMM and the CPU kernel library, fp32 and bf16
/// storage (bf16 computed in fp32).
std::unique_ptr<Backend> makeCpuBackend();

} // namespace weft::exec

#endif // WEFT_EXEC_BACKEND_H
