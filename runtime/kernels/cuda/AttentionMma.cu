//===- AttentionMma.cu - Launches of the tensor-core attention kernels ----===//
//
// Grid and dispatch for AttentionMma.cuh: one block of four warps per 64
// rows of one (batch, head) pair, templated on the storage type and head dim.
//
//===----------------------------------------------------------------------===//

#include "AttentionMma.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {

namespace {

using namespace mma;

//===--- Launches ---------------------------------------------------------===//

unsigned blocks(const AttentionDims &d, int64_t heads) {
  return unsigned(d.batch * heads * ((d.seq + kBlockRows - 1) / kBlockRows));
}

bool aligned16(const void *p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

/// Asks once per kernel for the largest shared-memory carveout: the blocks
/// an SM holds (up to 46 KB of double-buffered tiles each) are then bound by
/// registers, not by a split that favours L1 (cp.async.cg bypasses L1). A
/// hint; a refusal is cleared, not reported by the launch after it. The
/// first launch is an eager one (graph capture starts after a warm-up
/// step), so the call never lands inside a capture.
template <auto Kernel> void preferShared() {
  static const bool asked = [] {
    if (cudaFuncSetAttribute(
            Kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
            int(cudaSharedmemCarveoutMaxShared)) != cudaSuccess)
      cudaGetLastError();
    return true;
  }();
  (void)asked;
}

template <typename E, int D>
cudaError_t forward(const AttentionDims &d, const void *q, const void *k,
                    const void *v, void *out, float *lse, cudaStream_t stream) {
  bool vector = aligned16(q) && aligned16(k) && aligned16(v);
  preferShared<mmaForward<E, D>>();
  mmaForward<E, D><<<blocks(d, d.heads), kThreads, 0, stream>>>(
      d, static_cast<const E *>(q), static_cast<const E *>(k),
      static_cast<const E *>(v), static_cast<E *>(out), lse, vector);
  return cudaGetLastError();
}

template <typename E, int D>
cudaError_t backward(const AttentionDims &d, const void *q, const void *k,
                     const void *v, const void *out, const float *lse,
                     const void *dOut, void *dq, void *dk, void *dv,
                     float *delta, cudaStream_t stream) {
  bool vector = aligned16(q) && aligned16(k) && aligned16(v) && aligned16(dOut);
  auto in = [](const void *p) { return static_cast<const E *>(p); };
  preferShared<mmaQueryBackward<E, D>>();
  preferShared<mmaKeyBackward<E, D>>();
  mmaQueryBackward<E, D><<<blocks(d, d.heads), kThreads, 0, stream>>>(
      d, in(q), in(k), in(v), in(out), lse, in(dOut), static_cast<E *>(dq),
      delta, vector);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
    return err;
  mmaKeyBackward<E, D><<<blocks(d, d.kvHeads), kThreads, 0, stream>>>(
      d, in(q), in(k), in(v), lse, delta, in(dOut), static_cast<E *>(dk),
      static_cast<E *>(dv), vector);
  return cudaGetLastError();
}

/// Dispatches `F<E, D>` on the storage type and head dim.
template <template <typename, int> class F, typename... Args>
cudaError_t dispatch(HalfType type, int64_t headDim, Args... args) {
  auto byDim = [&](auto tag) -> cudaError_t {
    using E = decltype(tag);
    switch (headDim) {
    case 16:
      return F<E, 16>::run(args...);
    case 32:
      return F<E, 32>::run(args...);
    case 64:
      return F<E, 64>::run(args...);
    case 128:
      return F<E, 128>::run(args...);
    default:
      return cudaErrorInvalidValue;
    }
  };
  return type == HalfType::BF16 ? byDim(__nv_bfloat16()) : byDim(__half());
}

template <typename E, int D> struct Forward {
  template <typename... Args> static cudaError_t run(Args... args) {
    return forward<E, D>(args...);
  }
};
template <typename E, int D> struct Backward {
  template <typename... Args> static cudaError_t run(Args... args) {
    return backward<E, D>(args...);
  }
};

} // namespace

bool halfAttentionSupported(const AttentionDims &dims) {
  int64_t tiles = (dims.seq + kBlockRows - 1) / kBlockRows;
  return dims.batch * dims.heads * tiles < (int64_t(1) << 31) &&
         (dims.headDim == 16 || dims.headDim == 32 || dims.headDim == 64 ||
          dims.headDim == 128);
}

cudaError_t halfAttentionForward(HalfType type, const AttentionDims &dims,
                                 const void *q, const void *k, const void *v,
                                 void *out, float *lse, cudaStream_t stream) {
  if (dims.batch * dims.seq == 0)
    return cudaSuccess;
  if (!halfAttentionSupported(dims))
    return cudaErrorInvalidValue;
  return dispatch<Forward>(type, dims.headDim, dims, q, k, v, out, lse, stream);
}

cudaError_t halfAttentionBackward(HalfType type, const AttentionDims &dims,
                                  const void *q, const void *k, const void *v,
                                  const void *out, const float *lse,
                                  const void *dOut, void *dq, void *dk,
                                  void *dv, float *delta, cudaStream_t stream) {
  if (dims.batch * dims.seq == 0)
    return cudaSuccess;
  if (!halfAttentionSupported(dims))
    return cudaErrorInvalidValue;
  return dispatch<Backward>(type, dims.headDim, dims, q, k, v, out, lse, dOut,
                            dq, dk, dv, delta, stream);
}

} // namespace weft::kernels::gpu
