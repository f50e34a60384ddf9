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

/// The world communicator and, as the CPU backend's MPI channels, one
/// communicator per (group family, plan stream) of the bundle's collectives
/// and one world-wide communicator per plan stream of its sends and
/// receives: NCCL runs the operations of one communicator in the order they
/// were issued whatever their CUDA streams, so streams that the plan orders
/// independently (and ranks issue in different interleavings, as two
/// pipeline stages do) need communicators of their own. Built without
/// NCCL, create() throws Error("... built without NCCL ...").
class NcclComms {
public:
  virtual ~NcclComms() = default;
  static std::unique_ptr<NcclComms>
  create(const plan::Bundle &bundle, int rank, int worldSize,
         const std::function<void(void *, size_t)> &broadcastId);

  /// all_reduce, reduce_scatter, all_gather, broadcast, send or recv of plan
  /// stream `streamName`; the members of a multi-member collective inside
  /// one ncclGroupStart/End.
  virtual void issue(const plan::Instruction &inst,
                     const std::vector<Operand> &reads,
                     const std::vector<Operand> &writes,
                     const std::string &streamName, cudaStream_t stream,
                     const std::string &where) = 0;
  virtual void groupStart() = 0;
  virtual void groupEnd() = 0;
  /// The first asynchronous error a communicator reports
  /// (ncclCommGetAsyncError: a failed peer or network), or empty.
  virtual std::string asyncError() = 0;
  /// ncclCommAbort on every communicator, all in one NCCL group (NCCL >=
  /// 2.22: no abort waits on another's communicator), ending the groups a
  /// failure left open; idempotent, never throws.
  virtual void abort() noexcept = 0;
};

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_NCCL_H
