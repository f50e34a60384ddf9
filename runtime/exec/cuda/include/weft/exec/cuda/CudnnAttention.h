//===- CudnnAttention.h - cuDNN's fused attention ---------------*- C++ -*-===//
//
// attention_forward and attention_backward on bf16/f16 operands through
// cuDNN's fused flash attention (the cuDNN frontend's sdpa and sdpa_backward
// graphs), beside the tensor-core kernels of AttentionMma.cuh
// (CudaBackendOptions::cudnnAttention). The operands are the kernels' own:
// q, out [batch, seq, heads, headDim] and k, v [batch, seq, kvHeads, headDim]
// in 16-bit storage, lse [batch, heads, seq] fp32 (cuDNN's softmax stats: the
// natural-log sum of exponentials of the scaled scores, as Weft's kernels
// write it); dq, dk, dv are overwritten. The backward uses cuDNN's
// deterministic algorithm: the same bits on every run.
//
// libcudnn is dlopen'ed (the frontend's dynamic loading), so the binaries
// start where it is missing and the backend keeps its own kernels. Graphs are
// built once per (direction, type, dims) at prepare(); run() only enqueues,
// and is safe under CUDA graph capture (a backward cuDNN <= 9.15 would mask
// with host-side sequence lengths declares its padding mask, lengths on the
// device).
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_CUDNNATTENTION_H
#define WEFT_EXEC_CUDA_CUDNNATTENTION_H

#include "weft/kernels/Attention.h"
#include "weft/kernels/CudaKernels.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace weft::exec::cuda {

/// Why cuDNN's fused attention cannot take these dims, or empty: head dims
/// of 8..128 in steps of 8, query heads a multiple of the kv heads, rows at
/// all. Host-only; cuDNN may still refuse a shape at prepare(), and so may
/// a graph whose workspace would pass 4 GiB (the deterministic backward's
/// is quadratic in seq on Hopper). The CUDA backend offers cuDNN only the
/// kernels its 16-bit tensor-core attention takes (head dims 16, 32, 64,
/// 128): that kernel is the fallback for whatever cuDNN refuses.
std::string cudnnAttentionUnsupported(const kernels::AttentionDims &dims);

/// One built sdpa or sdpa_backward graph (opaque).
struct CudnnAttentionGraph;

class CudnnAttention {
public:
  /// Loads libcudnn and makes a handle on the current device; null, with
  /// the reason in `why`, when either fails or the library was built
  /// without cuDNN.
  static std::unique_ptr<CudnnAttention> open(std::string &why);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// cuDNN's version, e.g. "9.19.0".
  std::string version() const;

  /// The graph of one attention direction for these dims, built on first
  /// use and cached; null, with cuDNN's reason in `why` (also cached), when
  /// cuDNN has no engine for it.
  const CudnnAttentionGraph *prepare(bool backward, kernels::gpu::HalfType type,
                                     const kernels::AttentionDims &dims,
                                     std::string &why);
  /// Device workspace bytes one run of `graph` needs.
  static int64_t workspaceBytes(const CudnnAttentionGraph &graph);

  /// Enqueues `graph` on `stream`: the kernel's operands in signature order
  /// (forward: q k v, then out lse; backward: q k v out lse dOut, then dq dk
  /// dv) and workspaceBytes(graph) bytes of `workspace` (256-byte aligned).
  /// Empty on success, else cuDNN's message.
  std::string run(const CudnnAttentionGraph &graph,
                  const std::vector<void *> &reads,
                  const std::vector<void *> &writes, void *workspace,
                  cudaStream_t stream);

private:
  struct Impl;
  explicit CudnnAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_CUDNNATTENTION_H
