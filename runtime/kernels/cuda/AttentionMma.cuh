//===- AttentionMma.cuh - Tensor-core attention kernels ------------------===//
//
// Flash-attention-2 style kernels for bf16 and f16 models: q, k, v, out and
// their gradients stay in 16-bit storage, the products run on tensor cores
// (mma.sync m16n8k16, fp32 accumulation) and the softmax statistics (lse,
// delta) stay fp32. A block has four warps; each warp owns 16 rows of the
// block's 64 and walks the other side's rows a tile at a time through shared
// memory:
//
//   forward   query rows; S = Q K^T, online softmax, O += P V
//   dq        query rows; delta = dO . out, then dQ += dS K with
//             dS = P * (dO V^T - delta)
//   dk, dv    key rows of one kv head, over every query head of its group:
//             dV += P^T dO, dK += dS^T Q
//
// P and dS are rounded to the storage type before their products (as
// FlashAttention does); every output element has one writer, so results are
// deterministic. The fragment layouts are those of the PTX ISA for
// m16n8k16 (lane = 4 * group + thread-in-group):
//
//   A (16 x 16, row)  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3
//   (g+8, 2t+8..) B (16 x 8, col)   b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g) C
//   (16 x 8)        c0 c1 (g, 2t..2t+1)   c2 c3 (g+8, 2t..2t+1)
//
// so the C fragments of S for 16 consecutive keys are, packed pairwise, the
// A fragment of P for the next product (no shared-memory round trip).
// Fragments come out of shared memory by ldmatrix.x4 (four 8 x 8 matrices
// per instruction; .trans for operands stored k-major, as V); shared tiles
// are [rows][D + 8], so the eight 16-byte rows of one matrix fall in
// distinct banks. Score tiles the warp sees whole skip the mask. The
// streamed tiles (keys and values, or queries and output gradients) come
// by cp.async, double-buffered up to head dim 64: the next tiles' copies
// are in flight while the warps compute on these.
//
// The kernels live in this header so that the CPU test
// (test/unit/kernels/WarpEmulationTest.cpp) can run them under a warp
// emulator: it defines WEFT_WARP_EMULATION and supplies the mma, shuffle and
// barrier primitives. AttentionMma.cu launches them.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_CUDA_ATTENTIONMMA_CUH
#define WEFT_KERNELS_CUDA_ATTENTIONMMA_CUH

#include "weft/kernels/Attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "the tensor-core attention needs sm_80 or newer (cp.async, bf16 mma)"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace weft::kernels::gpu::mma {

constexpr int kWarps = 4, kThreads = kWarps * 32, kBlockRows = 16 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;

//===--- Storage types and the mma instruction ----------------------------===//

template <typename E> struct Storage;
template <> struct Storage<__nv_bfloat16> {
  __device__ static std::uint32_t pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::uint32_t word;
    std::memcpy(&word, &v, sizeof(word));
    return word;
  }
  __device__ static float toFloat(__nv_bfloat16 x) {
    return __bfloat162float(x);
  }
  /// c += a * b.
  __device__ static void mma(float c[4], const std::uint32_t a[4],
                             const std::uint32_t b[2]) {
#ifdef WEFT_WARP_EMULATION
    emulatedMma<__nv_bfloat16>(c, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
#endif
  }
};
template <> struct Storage<__half> {
  __device__ static std::uint32_t pack(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    std::uint32_t word;
    std::memcpy(&word, &v, sizeof(word));
    return word;
  }
  __device__ static float toFloat(__half x) { return __half2float(x); }
  __device__ static void mma(float c[4], const std::uint32_t a[4],
                             const std::uint32_t b[2]) {
#ifdef WEFT_WARP_EMULATION
    emulatedMma<__half>(c, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),
                   "r"(b[1]));
#endif
  }
};

/// Lane coordinates in the fragment layouts.
struct Lane {
  int id;   // lane in the warp
  int g, t; // group (row within 8) and thread in group (column pair)
  __device__ Lane()
      : id(threadIdx.x % 32), g((threadIdx.x % 32) / 4), t(threadIdx.x % 4) {}
};

/// ldmatrix.sync.aligned.m8n8.x4 (with `Trans`, .trans) from shared memory:
/// lane l gives the address of row l % 8 of matrix l / 8 (16 bytes,
/// 16-byte aligned) and gets word (row l / 4, pair l % 4) of each matrix j
/// in r[j]; with .trans, of matrix j transposed (its column l / 4, rows
/// 2 (l % 4) and 2 (l % 4) + 1).
template <bool Trans>
__device__ inline void loadMatrices(const void *row, std::uint32_t r[4]) {
#ifdef WEFT_WARP_EMULATION
  emulatedLdmatrix(r, row, Trans);
#else
  unsigned address = unsigned(__cvta_generic_to_shared(row));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#endif
}

//===--- Shared-memory tiles ----------------------------------------------===//

template <typename E, int D> struct Tile {
  static constexpr int kStride = D + 8;
  E *data;
  __device__ E *row(int r) const { return data + r * kStride; }
  /// The A fragment of rows [r0, r0 + 16) and columns [c0, c0 + 16):
  /// matrices (rows, columns) (r0, c0) (r0 + 8, c0) (r0, c0 + 8)
  /// (r0 + 8, c0 + 8) are a0..a3.
  __device__ void loadA(int r0, int c0, const Lane &l,
                        std::uint32_t a[4]) const {
    int m = l.id / 8;
    loadMatrices<false>(row(r0 + l.id % 8 + 8 * (m & 1)) + c0 + 8 * (m >> 1),
                        a);
  }
  /// The B fragments for k = columns [c0, c0 + 16) and n = rows [r0, r0 + 8)
  /// (b[0]) and [r0 + 8, r0 + 16) (b[1]): the tile holds B transposed (a
  /// row per n), as K does for Q K^T. Matrices (r0, c0) (r0, c0 + 8) are
  /// b[0], (r0 + 8, c0) (r0 + 8, c0 + 8) b[1].
  __device__ void loadB2(int r0, int c0, const Lane &l,
                         std::uint32_t b[2][2]) const {
    int m = l.id / 8;
    std::uint32_t r[4];
    loadMatrices<false>(row(r0 + l.id % 8 + 8 * (m >> 1)) + c0 + 8 * (m & 1),
                        r);
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
  }
  /// The B fragments for k = rows [r0, r0 + 16) and n = columns
  /// [c0, c0 + 8) (b[0]) and [c0 + 8, c0 + 16) (b[1]): the tile holds B as
  /// is (a row per k), as V does for P V, so the matrices are transposed.
  /// Matrices (r0, c0) (r0 + 8, c0) are b[0], (r0, c0 + 8) (r0 + 8, c0 + 8)
  /// b[1].
  __device__ void loadBRows2(int r0, int c0, const Lane &l,
                             std::uint32_t b[2][2]) const {
    int m = l.id / 8;
    std::uint32_t r[4];
    loadMatrices<true>(row(r0 + l.id % 8 + 8 * (m & 1)) + c0 + 8 * (m >> 1), r);
    b[0][0] = r[0], b[0][1] = r[1], b[1][0] = r[2], b[1][1] = r[3];
  }
};

/// Copies rows [first, first + rows) of head `head` of a [batch, seq, heads,
/// D] tensor into `tile` (zeros past seq), 16 bytes per thread and step when
/// the tensor is 16-byte aligned.
template <typename E, int D>
__device__ void stageRows(const Tile<E, D> &tile, const E *src,
                          const AttentionDims &d, int64_t heads, int64_t b,
                          int64_t head, int64_t first, int rows, bool vector) {
  constexpr int kChunk = 8; // elements per 16 bytes
  if (vector) {
    for (int e = threadIdx.x; e < rows * (D / kChunk); e += blockDim.x) {
      int r = e / (D / kChunk), c = e % (D / kChunk) * kChunk;
      int64_t i = first + r;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (i < d.seq)
        value = *reinterpret_cast<const uint4 *>(
            src + ((b * d.seq + i) * heads + head) * D + c);
      *reinterpret_cast<uint4 *>(tile.row(r) + c) = value;
    }
    return;
  }
  for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
    int r = e / D, c = e % D;
    int64_t i = first + r;
    std::uint16_t bits = 0;
    if (i < d.seq)
      bits = reinterpret_cast<const std::uint16_t *>(
          src)[((b * d.seq + i) * heads + head) * D + c];
    reinterpret_cast<std::uint16_t *>(tile.row(r))[c] = bits;
  }
}

/// cp.async.cg of 16 bytes from global to shared memory (sm_80+), or of
/// none with `valid` false: the 16 bytes are then zero-filled (src-size 0;
/// `src` is not read but must be a global address). Complete once
/// waitCopies() has waited for its commit group.
__device__ inline void copyAsync16(void *dst, const void *src, bool valid) {
#ifdef WEFT_WARP_EMULATION
  emulatedCopyAsync(dst, src, valid ? 16 : 0);
#else
  unsigned address = unsigned(__cvta_generic_to_shared(dst));
  int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(src), "r"(bytes));
#endif
}
/// Closes the group of this thread's copies issued since the last commit.
__device__ inline void commitCopies() {
#ifdef WEFT_WARP_EMULATION
  emulatedCommitCopies();
#else
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/// Waits until at most `Pending` of this thread's committed groups (the
/// newest) are in flight. Other threads' copies need a barrier after it.
template <int Pending> __device__ inline void waitCopies() {
#ifdef WEFT_WARP_EMULATION
  emulatedWaitCopies(Pending);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

/// stageRows without the round trip through registers where the tensor is
/// 16-byte aligned: cp.async per 16 bytes (zero-filled past seq), complete
/// at the waitCopies() of the group the caller commits. Unaligned tensors
/// are staged synchronously (the wait then has nothing to wait for).
template <typename E, int D>
__device__ void stageRowsAsync(const Tile<E, D> &tile, const E *src,
                               const AttentionDims &d, int64_t heads, int64_t b,
                               int64_t head, int64_t first, int rows,
                               bool vector) {
  if (!vector) {
    stageRows<E, D>(tile, src, d, heads, b, head, first, rows, vector);
    return;
  }
  constexpr int kChunk = 8; // elements per 16 bytes
  for (int e = threadIdx.x; e < rows * (D / kChunk); e += blockDim.x) {
    int r = e / (D / kChunk), c = e % (D / kChunk) * kChunk;
    int64_t i = first + r;
    bool inside = i < d.seq;
    copyAsync16(tile.row(r) + c,
                inside ? src + ((b * d.seq + i) * heads + head) * D + c : src,
                inside);
  }
}

/// Buffers per streamed tile pair: two (the next tiles' copies in flight
/// while the warps compute on these) where a block's tiles then still fit
/// the 48 KB of static shared memory, i.e. up to head dim 64.
template <int D> constexpr int kTileStages = D > 64 ? 1 : 2;

/// The buffer iteration t's streamed tiles use: t % 2, or 0 with one stage.
template <int Stages> __device__ constexpr int slotOf(std::int64_t t) {
  return Stages == 2 ? int(t & 1) : 0;
}

/// Before iteration t's tiles are used: with one stage, issue them
/// (`issue(t, slot)`) and wait; with two, issue iteration t + 1's into the
/// other slot (consumed at t - 1) when there is one and wait for all but
/// those. A barrier must follow, and another one after the iteration's
/// reads of the slot.
template <int Stages, typename Issue>
__device__ inline void nextTiles(std::int64_t t, bool hasNext, Issue &&issue) {
  if constexpr (Stages == 1) {
    issue(t, 0);
    waitCopies<0>();
  } else if (hasNext) {
    issue(t + 1, slotOf<Stages>(t + 1));
    waitCopies<1>();
  } else {
    waitCopies<0>();
  }
}

/// The block's (batch, head, first row). Row tiles run fastest, last tile
/// first: under a causal mask the longest blocks start earliest.
struct BlockRows {
  int64_t b, head, first;
};
__device__ inline BlockRows blockRows(const AttentionDims &d, int64_t heads) {
  int64_t tiles = (d.seq + kBlockRows - 1) / kBlockRows;
  int64_t block = blockIdx.x;
  int64_t tile = tiles - 1 - block % tiles;
  return {block / tiles / heads, block / tiles % heads, tile * kBlockRows};
}

/// Sum or max over the four threads of a fragment row.
__device__ inline float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ inline float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

/// Stores a [16, D] accumulator (C fragments, 8 columns each) times `factor`
/// as rows `row0` and `row0 + 8` of `dst` (rows at or past seq skipped).
template <typename E, int D>
__device__ void storeRows(const float (&acc)[D / 8][4], float factor0,
                          float factor1, const Lane &l, E *dst0, E *dst1) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    int c = 8 * n + 2 * l.t;
    if (dst0)
      *reinterpret_cast<std::uint32_t *>(dst0 + c) =
          Storage<E>::pack(acc[n][0] * factor0, acc[n][1] * factor0);
    if (dst1)
      *reinterpret_cast<std::uint32_t *>(dst1 + c) =
          Storage<E>::pack(acc[n][2] * factor1, acc[n][3] * factor1);
  }
}

/// The A fragment (16 rows, k = columns [16 kk, 16 kk + 16)) made of the C
/// fragments c[2 kk] and c[2 kk + 1], rounded to storage: how a score tile
/// feeds the next product without leaving registers.
template <typename E, int N>
__device__ inline void packA(const float (&c)[N][4], int kk,
                             std::uint32_t a[4]) {
  a[0] = Storage<E>::pack(c[2 * kk][0], c[2 * kk][1]);
  a[1] = Storage<E>::pack(c[2 * kk][2], c[2 * kk][3]);
  a[2] = Storage<E>::pack(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = Storage<E>::pack(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

/// s += A X^T over the N * 8 rows of the tile x (a score-shaped product).
template <typename E, int D, int N>
__device__ inline void product(const Tile<E, D> &x,
                               const std::uint32_t (&a)[D / 16][4],
                               const Lane &l, float (&s)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; n += 2)
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      std::uint32_t xb[2][2];
      x.loadB2(8 * n, 16 * c, l, xb);
      Storage<E>::mma(s[n], a[c], xb[0]);
      Storage<E>::mma(s[n + 1], a[c], xb[1]);
    }
}

/// o[n] += A B over n < D / 8, B = rows [16 kk, 16 kk + 16) of the tile y
/// (stored a row per k): the context-shaped products.
template <typename E, int D>
__device__ inline void productRows(const Tile<E, D> &y, int kk,
                                   const std::uint32_t a[4], const Lane &l,
                                   float (&o)[D / 8][4]) {
#pragma unroll
  for (int n = 0; n < D / 8; n += 2) {
    std::uint32_t yb[2][2];
    y.loadBRows2(16 * kk, 8 * n, l, yb);
    Storage<E>::mma(o[n], a, yb[0]);
    Storage<E>::mma(o[n + 1], a, yb[1]);
  }
}

/// Whether `query` sees `key` (both inside the sequence).
__device__ inline bool visible(const AttentionDims &d, int64_t query,
                               int64_t key) {
  return key < d.seq && query < d.seq && (!d.causal || key <= query);
}

/// Whether every query of [q0, q0 + queries) sees every key of
/// [k0, k0 + keys): a score tile that needs no mask (warp-uniform).
__device__ inline bool wholeTile(const AttentionDims &d, int64_t q0,
                                 int64_t queries, int64_t k0, int64_t keys) {
  return q0 + queries <= d.seq && k0 + keys <= d.seq &&
         (!d.causal || k0 + keys - 1 <= q0);
}

//===--- Forward ----------------------------------------------------------===//

template <int D> struct ForwardTiling {
  static constexpr int kKeys = D > 64 ? 32 : 64;
  /// Blocks per SM the registers must allow: 3 (at most 168 registers a
  /// thread) up to head dim 64, where that costs no spills (4, at 128,
  /// spilled); shared memory would allow 4 there on an H100 (3 on an A100).
  static constexpr int kMinBlocks = D > 64 ? 1 : 3;
};

template <typename E, int D>
__global__ void __launch_bounds__(kThreads, ForwardTiling<D>::kMinBlocks)
    mmaForward(AttentionDims d, const E *q, const E *k, const E *v, E *out,
               float *lse, bool vector) {
  constexpr int kKeys = ForwardTiling<D>::kKeys;
  constexpr int kStages = kTileStages<D>;
  __shared__ __align__(16) E qData[kBlockRows * Tile<E, D>::kStride];
  __shared__ __align__(16) E kData[kStages][kKeys * Tile<E, D>::kStride];
  __shared__ __align__(16) E vData[kStages][kKeys * Tile<E, D>::kStride];
  const Tile<E, D> qs{qData};
  const BlockRows br = blockRows(d, d.heads);
  const int64_t g = br.head / d.groupSize();
  const int warp = threadIdx.x / 32;
  const Lane l;
  const int64_t row0 = br.first + 16 * warp + l.g, row1 = row0 + 8;
  const float scale = float(d.scale) * kLog2e; // scores in log2 units
  // Key tile t's keys and values into buffer `slot`, one commit group.
  auto issue = [&](std::int64_t t, int slot) {
    stageRowsAsync<E, D>(Tile<E, D>{kData[slot]}, k, d, d.kvHeads, br.b, g,
                         t * kKeys, kKeys, vector);
    stageRowsAsync<E, D>(Tile<E, D>{vData[slot]}, v, d, d.kvHeads, br.b, g,
                         t * kKeys, kKeys, vector);
    commitCopies();
  };
  if constexpr (kStages == 2)
    issue(0, 0); // in flight while the queries are staged

  stageRows<E, D>(qs, q, d, d.heads, br.b, br.head, br.first, kBlockRows,
                  vector);
  __syncthreads();
  std::uint32_t qa[D / 16][4];
#pragma unroll
  for (int c = 0; c < D / 16; ++c)
    qs.loadA(16 * warp, 16 * c, l, qa[c]);

  float o[D / 8][4] = {};
  float max0 = -INFINITY, max1 = -INFINITY, sum0 = 0, sum1 = 0;
  const int64_t lastQuery =
      min(br.first + kBlockRows, d.seq) - 1; // of the block
  const int64_t keyEnd = d.causal ? lastQuery + 1 : d.seq;
  const int64_t warpLast = br.first + 16 * warp + 15;
  for (int64_t t = 0, k0 = 0; k0 < keyEnd; ++t, k0 += kKeys) {
    nextTiles<kStages>(t, k0 + kKeys < keyEnd, issue);
    __syncthreads(); // this iteration's tiles are in shared memory
    const int slot = slotOf<kStages>(t);
    const Tile<E, D> ks{kData[slot]}, vs{vData[slot]};
    // Causal: a warp skips the tiles whose keys are all in its future (the
    // barriers stay, for the other warps).
    if (!(d.causal && k0 > warpLast)) {
      float s[kKeys / 8][4] = {};
      product(ks, qa, l, s);
      if (wholeTile(d, warpLast - 15, 16, k0, kKeys)) {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            s[n][r] *= scale;
      } else {
#pragma unroll
        for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            int64_t key = k0 + 8 * n + 2 * l.t + (r & 1);
            int64_t query = r < 2 ? row0 : row1;
            s[n][r] = visible(d, query, key) ? s[n][r] * scale : -INFINITY;
          }
      }
      float tileMax0 = -INFINITY, tileMax1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        tileMax0 = fmaxf(tileMax0, fmaxf(s[n][0], s[n][1]));
        tileMax1 = fmaxf(tileMax1, fmaxf(s[n][2], s[n][3]));
      }
      float new0 = fmaxf(max0, quadMax(tileMax0));
      float new1 = fmaxf(max1, quadMax(tileMax1));
      // A row with nothing visible yet keeps max -inf: subtract 0 instead so
      // that exp2 gives 0, not NaN.
      float base0 = new0 == -INFINITY ? 0.0f : new0;
      float base1 = new1 == -INFINITY ? 0.0f : new1;
      float correction0 = exp2f(max0 - base0),
            correction1 = exp2f(max1 - base1);
      max0 = new0;
      max1 = new1;
      sum0 *= correction0;
      sum1 *= correction1;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= correction0;
        o[n][1] *= correction0;
        o[n][2] *= correction1;
        o[n][3] *= correction1;
      }
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][0] = exp2f(s[n][0] - base0);
        s[n][1] = exp2f(s[n][1] - base0);
        s[n][2] = exp2f(s[n][2] - base1);
        s[n][3] = exp2f(s[n][3] - base1);
        sum0 += s[n][0] + s[n][1];
        sum1 += s[n][2] + s[n][3];
      }
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        std::uint32_t pa[4];
        packA<E>(s, kk, pa);
        productRows(vs, kk, pa, l, o);
      }
    }
    __syncthreads(); // the slot is consumed: a later issue may refill it
  }
  sum0 = quadSum(sum0);
  sum1 = quadSum(sum1);
  E *dst0 = row0 < d.seq ? out + d.qRow(br.b, row0, br.head) : nullptr;
  E *dst1 = row1 < d.seq ? out + d.qRow(br.b, row1, br.head) : nullptr;
  storeRows<E, D>(o, 1.0f / sum0, 1.0f / sum1, l, dst0, dst1);
  if (l.t == 0) {
    // lse in natural-log units: (max + log2 sum) * ln 2.
    constexpr float kLn2 = 0.6931471805599453f;
    if (dst0)
      lse[d.statIndex(br.b, br.head, row0)] = (max0 + log2f(sum0)) * kLn2;
    if (dst1)
      lse[d.statIndex(br.b, br.head, row1)] = (max1 + log2f(sum1)) * kLn2;
  }
}

//===--- Backward: dq and delta -------------------------------------------===//

/// A backward kernel's shared tiles: two of kBlockRows rows, which the block
/// stages and loads into its warps' fragments first and which then hold the
/// streamed tile pair of slot 0, and with two stages the pair of `Rows` rows
/// of slot 1.
template <typename E, int D, int Rows> struct BackwardTiles {
  static constexpr int kStride = Tile<E, D>::kStride;
  /// Slot 1's tiles, or a placeholder of 16 bytes with one stage.
  static constexpr int kNext = kTileStages<D> == 2 ? Rows * kStride : 8;
  alignas(16) E a[kBlockRows * kStride];
  alignas(16) E b[kBlockRows * kStride];
  alignas(16) E aNext[kNext];
  alignas(16) E bNext[kNext];
  /// Slot `slot`'s two tiles.
  __device__ Tile<E, D> first(int slot) { return {slot ? aNext : a}; }
  __device__ Tile<E, D> second(int slot) { return {slot ? bNext : b}; }
};

/// Keys per tile of the dq kernel (scores and their gradient stay in
/// registers).
template <int D> struct BackwardTiling {
  static constexpr int kTile = D > 64 ? 32 : 64;
};

template <typename E, int D>
__global__ void __launch_bounds__(kThreads)
    mmaQueryBackward(AttentionDims d, const E *q, const E *k, const E *v,
                     const E *out, const float *lse, const E *dOut, E *dq,
                     float *delta, bool vector) {
  constexpr int kKeys = BackwardTiling<D>::kTile;
  constexpr int kStages = kTileStages<D>;
  // The queries and output gradients, then key and value tiles.
  __shared__ BackwardTiles<E, D, kKeys> shared;
  __shared__ float rowDelta[kBlockRows];
  const BlockRows br = blockRows(d, d.heads);
  const int64_t g = br.head / d.groupSize();
  const int warp = threadIdx.x / 32;
  const Lane l;
  const int64_t row0 = br.first + 16 * warp + l.g, row1 = row0 + 8;
  const float scale = float(d.scale) * kLog2e;

  // delta = dO . out per query row: two threads per row, half a row each.
  {
    int r = threadIdx.x / 2, half = threadIdx.x % 2;
    int64_t i = br.first + r;
    float partial = 0;
    if (i < d.seq) {
      const E *o = out + d.qRow(br.b, i, br.head) + half * (D / 2);
      const E *dy = dOut + d.qRow(br.b, i, br.head) + half * (D / 2);
      for (int c = 0; c < D / 2; ++c)
        partial = fmaf(Storage<E>::toFloat(o[c]), Storage<E>::toFloat(dy[c]),
                       partial);
    }
    partial += __shfl_xor_sync(0xffffffffu, partial, 1);
    if (half == 0) {
      rowDelta[r] = partial;
      if (i < d.seq)
        delta[d.statIndex(br.b, br.head, i)] = partial;
    }
  }
  const Tile<E, D> as = shared.first(0), bs = shared.second(0);
  stageRows<E, D>(as, q, d, d.heads, br.b, br.head, br.first, kBlockRows,
                  vector);
  stageRows<E, D>(bs, dOut, d, d.heads, br.b, br.head, br.first, kBlockRows,
                  vector);
  __syncthreads();
  std::uint32_t qa[D / 16][4], dya[D / 16][4];
#pragma unroll
  for (int c = 0; c < D / 16; ++c) {
    as.loadA(16 * warp, 16 * c, l, qa[c]);
    bs.loadA(16 * warp, 16 * c, l, dya[c]);
  }
  const float delta0 = rowDelta[16 * warp + l.g],
              delta1 = rowDelta[16 * warp + l.g + 8];
  const float lse0 =
      row0 < d.seq ? lse[d.statIndex(br.b, br.head, row0)] * kLog2e : 0.0f;
  const float lse1 =
      row1 < d.seq ? lse[d.statIndex(br.b, br.head, row1)] * kLog2e : 0.0f;
  float acc[D / 8][4] = {};
  const int64_t lastQuery = min(br.first + kBlockRows, d.seq) - 1;
  const int64_t keyEnd = d.causal ? lastQuery + 1 : d.seq;
  const int64_t warpLast = br.first + 16 * warp + 15;
  // From here the slots hold key and value tiles: key tile t in slot t % 2.
  auto issue = [&](std::int64_t t, int slot) {
    stageRowsAsync<E, D>(shared.first(slot), k, d, d.kvHeads, br.b, g,
                         t * kKeys, kKeys, vector);
    stageRowsAsync<E, D>(shared.second(slot), v, d, d.kvHeads, br.b, g,
                         t * kKeys, kKeys, vector);
    commitCopies();
  };
  __syncthreads(); // every warp has its query fragments: slot 0 is free
  if constexpr (kStages == 2)
    issue(0, 0);
  for (int64_t t = 0, k0 = 0; k0 < keyEnd; ++t, k0 += kKeys) {
    nextTiles<kStages>(t, k0 + kKeys < keyEnd, issue);
    __syncthreads(); // this iteration's tiles are in shared memory
    const int slot = slotOf<kStages>(t);
    const Tile<E, D> ks = shared.first(slot), vs = shared.second(slot);
    if (!(d.causal && k0 > warpLast)) {
      // S = Q K^T, dP = dO V^T; dS = P * (dP - delta) with
      // P = exp(S * scale - lse), 0 where not visible.
      float s[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};
      product(ks, qa, l, s);
      product(vs, dya, l, dp);
      const bool whole = wholeTile(d, warpLast - 15, 16, k0, kKeys);
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          int64_t key = k0 + 8 * n + 2 * l.t + (r & 1);
          int64_t query = r < 2 ? row0 : row1;
          float p = whole || visible(d, query, key)
                        ? exp2f(s[n][r] * scale - (r < 2 ? lse0 : lse1))
                        : 0.0f;
          s[n][r] = p * (dp[n][r] - (r < 2 ? delta0 : delta1));
        }
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        std::uint32_t dsa[4];
        packA<E>(s, kk, dsa);
        productRows(ks, kk, dsa, l, acc);
      }
    }
    __syncthreads(); // the slot is consumed: a later issue may refill it
  }
  E *dst0 = row0 < d.seq ? dq + d.qRow(br.b, row0, br.head) : nullptr;
  E *dst1 = row1 < d.seq ? dq + d.qRow(br.b, row1, br.head) : nullptr;
  storeRows<E, D>(acc, float(d.scale), float(d.scale), l, dst0, dst1);
}

//===--- Backward: dk and dv ----------------------------------------------===//

template <typename E, int D>
__global__ void __launch_bounds__(kThreads)
    mmaKeyBackward(AttentionDims d, const E *q, const E *k, const E *v,
                   const float *lse, const float *delta, const E *dOut, E *dk,
                   E *dv, bool vector) {
  constexpr int kQueries = BackwardTiling<D>::kTile;
  constexpr int kStages = kTileStages<D>;
  // The keys and values, then query and output-gradient tiles.
  __shared__ BackwardTiles<E, D, kQueries> shared;
  __shared__ float tileLse[kStages][kQueries], tileDelta[kStages][kQueries];
  const BlockRows br = blockRows(d, d.kvHeads);
  const int64_t g = br.head;
  const int warp = threadIdx.x / 32;
  const Lane l;
  const int64_t key0 = br.first + 16 * warp + l.g, key1 = key0 + 8;
  const float scale = float(d.scale) * kLog2e;

  const Tile<E, D> as = shared.first(0), bs = shared.second(0);
  stageRows<E, D>(as, k, d, d.kvHeads, br.b, g, br.first, kBlockRows, vector);
  stageRows<E, D>(bs, v, d, d.kvHeads, br.b, g, br.first, kBlockRows, vector);
  __syncthreads();
  std::uint32_t ka[D / 16][4], va[D / 16][4];
#pragma unroll
  for (int c = 0; c < D / 16; ++c) {
    as.loadA(16 * warp, 16 * c, l, ka[c]);
    bs.loadA(16 * warp, 16 * c, l, va[c]);
  }
  float dkAcc[D / 8][4] = {}, dvAcc[D / 8][4] = {};
  // From here the slots hold query and output-gradient tiles: iteration t
  // (query head h, rows from q0; the group's heads one after the other) in
  // slot t % 2, with the rows' lse and delta.
  const int64_t warpFirstKey = br.first + 16 * warp;
  const int64_t firstQuery = d.causal ? br.first : 0;
  const int64_t queryTiles = (d.seq - firstQuery + kQueries - 1) / kQueries;
  const int64_t tiles = d.groupSize() * queryTiles;
  auto headOf = [&](std::int64_t t) {
    return g * d.groupSize() + t / queryTiles;
  };
  auto firstOf = [&](std::int64_t t) {
    return firstQuery + t % queryTiles * kQueries;
  };
  auto issue = [&](std::int64_t t, int slot) {
    const int64_t h = headOf(t), q0 = firstOf(t);
    stageRowsAsync<E, D>(shared.first(slot), q, d, d.heads, br.b, h, q0,
                         kQueries, vector);
    stageRowsAsync<E, D>(shared.second(slot), dOut, d, d.heads, br.b, h, q0,
                         kQueries, vector);
    commitCopies();
    for (int e = threadIdx.x; e < kQueries; e += blockDim.x) {
      bool inRange = q0 + e < d.seq;
      tileLse[slot][e] =
          inRange ? lse[d.statIndex(br.b, h, q0 + e)] * kLog2e : 0.0f;
      tileDelta[slot][e] = inRange ? delta[d.statIndex(br.b, h, q0 + e)] : 0.0f;
    }
  };
  __syncthreads(); // every warp has its key fragments: slot 0 is free
  if constexpr (kStages == 2)
    issue(0, 0);
  for (int64_t t = 0; t < tiles; ++t) {
    nextTiles<kStages>(t, t + 1 < tiles, issue);
    __syncthreads(); // this iteration's tiles are in shared memory
    const int slot = slotOf<kStages>(t);
    const Tile<E, D> qs = shared.first(slot), dys = shared.second(slot);
    const float *rowLse = tileLse[slot], *rowDelta = tileDelta[slot];
    const int64_t q0 = firstOf(t);
    // Causal: a warp skips the tiles whose queries all precede its keys.
    if (!(d.causal && q0 + kQueries - 1 < warpFirstKey)) {
      // S^T = K Q^T and dP^T = V dO^T: [16 keys, kQueries].
      float s[kQueries / 8][4] = {}, dp[kQueries / 8][4] = {};
      product(qs, ka, l, s);
      product(dys, va, l, dp);
      const bool whole = wholeTile(d, q0, kQueries, warpFirstKey, 16);
#pragma unroll
      for (int n = 0; n < kQueries / 8; ++n)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          int col = 8 * n + 2 * l.t + (r & 1);
          int64_t query = q0 + col;
          int64_t key = r < 2 ? key0 : key1;
          float p = whole || visible(d, query, key)
                        ? exp2f(s[n][r] * scale - rowLse[col])
                        : 0.0f;
          s[n][r] = p;                               // P^T
          dp[n][r] = p * (dp[n][r] - rowDelta[col]); // dS^T
        }
#pragma unroll
      for (int kk = 0; kk < kQueries / 16; ++kk) {
        std::uint32_t pa[4];
        packA<E>(s, kk, pa);
        std::uint32_t dsa[4];
        packA<E>(dp, kk, dsa);
        productRows(dys, kk, pa, l, dvAcc);
        productRows(qs, kk, dsa, l, dkAcc);
      }
    }
    __syncthreads(); // the slot is consumed: a later issue may refill it
  }
  E *dk0 = key0 < d.seq ? dk + d.kvRow(br.b, key0, g) : nullptr;
  E *dk1 = key1 < d.seq ? dk + d.kvRow(br.b, key1, g) : nullptr;
  storeRows<E, D>(dkAcc, float(d.scale), float(d.scale), l, dk0, dk1);
  E *dv0 = key0 < d.seq ? dv + d.kvRow(br.b, key0, g) : nullptr;
  E *dv1 = key1 < d.seq ? dv + d.kvRow(br.b, key1, g) : nullptr;
  storeRows<E, D>(dvAcc, 1.0f, 1.0f, l, dv0, dv1);
}

} // namespace weft::kernels::gpu::mma

#endif // WEFT_KERNELS_CUDA_ATTENTIONMMA_CUH
