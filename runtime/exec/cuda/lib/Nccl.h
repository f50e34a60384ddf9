//===- Nccl.h - NCCL communicators of the CUDA backend ----------*- C++ -*-===//
#ifndef WEFT_EXEC_CUDA_NCCL_H
#define WEFT_EXEC_CUDA_NCCL_H

#include "weft/exec/Backend.h"

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace weft::exec::cuda {

/// The world communicator and one communicator per group family. Built
/// without NCCL, create() throws Error("... built without NCCL ...").
class NcclComms {
public:
  virtual ~NcclComms() = default;
  static std::unique_ptr<NcclComms>
  create(const plan::Bundle &bundle, int rank, int worldSize,
         const std::function<void(void *, size_t)> &broadcastId);

  /// all_reduce, reduce_scatter, all_gather, broadcast, send or recv; the
  /// members of a multi-member collective inside one ncclGroupStart/End.
  virtual void issue(const plan::Instruction &inst,
                     const std::vector<Operand> &reads,
                     const std::vector<Operand> &writes, cudaStream_t stream,
                     const std::string &where) = 0;
  virtual void groupStart() = 0;
  virtual void groupEnd() = 0;
  /// ncclCommAbort on every communicator; idempotent, never throws.
  virtual void abort() noexcept = 0;
};

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_NCCL_H
