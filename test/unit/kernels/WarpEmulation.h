//===- WarpEmulation.h - CUDA kernels as plain C++ on the CPU ---*- C++ -*-===//
//
// Include after <cuda_runtime.h> (for uint4 and the vector types) and before
// a kernel header: every CUDA thread of a block is a fiber (ucontext) on the
// calling thread, switched only at barriers: __syncthreads is a barrier over
// the block, and the warp-wide primitives (__shfl_xor_sync, __shfl_sync,
// ldmatrix.x4 and mma.sync m16n8k16) are barriers over the warp's 32 threads
// that exchange their registers through memory. cp.async copies happen at
// the wait_group that completes them, or with emulation::eagerCopies at
// issue (the two extremes the hardware allows). Blocks run one after the
// other, so __shared__ becomes `static`. Fibers instead of OS threads: a
// barrier of a 1024-thread block costs a round of cheap context switches,
// not 1024 wake-ups, and there are no data races to reason about.
// The emulated mma follows the PTX ISA's fragment layouts for m16n8k16
// (lane = 4 g + t):
//   A: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B: b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C: c0 c1 (g, 2t..2t+1)   c2 c3 (g+8, 2t..2t+1)
// with the lower-numbered element of a pair in the low 16 bits. What it
// cannot check is the hardware itself: CudaKernelsTest runs the same kernels
// on a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_TEST_WARPEMULATION_H
#define WEFT_TEST_WARPEMULATION_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "weft/kernels/Common.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include <ucontext.h>

#undef __global__
#undef __device__
#undef __shared__
#undef __launch_bounds__
#define __global__ inline // kernel headers are included by several tests
#define __device__
#define __shared__ static // blocks run one at a time
#define __launch_bounds__(...)
#define WEFT_WARP_EMULATION

namespace emulation {

/// Fibers of the running launch: the scheduler's context, the running fiber's
/// and a count of barrier events (arrivals), by which the scheduler sees
/// progress.
inline thread_local ucontext_t schedulerContext;
inline thread_local ucontext_t *runningFiber = nullptr;
inline thread_local unsigned long barrierEvents = 0;

/// Back to the scheduler; resumes when the scheduler comes round again.
inline void yieldFiber() { swapcontext(runningFiber, &schedulerContext); }

/// A reusable barrier for `count` fibers.
class Barrier {
public:
  explicit Barrier(int count) : count_(count) {}
  void wait() {
    ++barrierEvents;
    unsigned long generation = generation_;
    if (++waiting_ == count_) {
      waiting_ = 0;
      ++generation_;
      return;
    }
    while (generation_ == generation)
      yieldFiber();
  }

private:
  int count_, waiting_ = 0;
  unsigned long generation_ = 0;
};

/// What the 32 lanes of a warp exchange.
struct Warp {
  Barrier barrier{32};
  std::uint64_t shuffled[32];
  std::uint32_t a[32][4], b[32][2];
  const void *rows[32]; // ldmatrix's row addresses
};

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

inline thread_local Warp *warp = nullptr;
inline thread_local Barrier *block = nullptr;
inline thread_local int lane = 0;

/// A thread's cp.async copies: issued into the open group, committed groups
/// in order. By default a copy happens only when a wait_group lets its group
/// complete, so a read of its bytes before the wait (or, by another thread,
/// before the barrier after it) sees the old bytes; with `eagerCopies` it
/// happens at issue, so a copy into a buffer other threads still read (a
/// missing barrier before the refill) overwrites what they are about to
/// read. Tests run kernels both ways: the hardware may do either.
struct AsyncCopy {
  void *dst;
  const void *src;
  int bytes; // 16, or 0 (zero-fill); -1: done at issue (eagerCopies)
};
inline bool eagerCopies = false;
/// The scheduler runs each warp as far as it gets before the next one
/// (instead of all warps a barrier at a time), so a warp reaches code past a
/// missing barrier while the others are still before it. The attention test
/// sets it for one of its two runs; WEFT_EMULATION_WARP_GREEDY=1 makes it
/// the default for every test (the whole suite passes either way).
inline bool warpGreedy = std::getenv("WEFT_EMULATION_WARP_GREEDY") != nullptr;
struct AsyncCopies {
  std::vector<AsyncCopy> open;
  std::vector<std::vector<AsyncCopy>> committed;
};
inline thread_local AsyncCopies *copies = nullptr;

/// Every lane publishes `value`; returns lane `source(lane)`'s.
template <typename T, typename Source> T exchange(T value, Source source) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t) &&
                std::is_trivially_copyable_v<T>);
  Warp &w = *warp;
  std::memcpy(&w.shuffled[lane], &value, sizeof(T));
  w.barrier.wait();
  T other;
  std::memcpy(&other, &w.shuffled[source(lane)], sizeof(T));
  w.barrier.wait(); // nobody overwrites `shuffled` before all have read
  return other;
}

} // namespace emulation

inline thread_local emulation::Dim3 threadIdx, blockIdx;
inline emulation::Dim3 blockDim, gridDim;

inline void __syncthreads() { emulation::block->wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  emulation::warp->barrier.wait();
}

/// Fibers switch only at barriers, so an integer add is atomic as it is.
inline int atomicAdd(int *address, int value) {
  int old = *address;
  *address = old + value;
  return old;
}

template <typename T> T __shfl_xor_sync(unsigned, T value, int laneMask) {
  return emulation::exchange(value, [&](int me) { return me ^ laneMask; });
}
template <typename T> T __shfl_sync(unsigned, T value, int sourceLane) {
  return emulation::exchange(value, [&](int) { return sourceLane; });
}

template <typename T> T min(T a, T b) { return a < b ? a : b; }

template <typename E> float halfBits(std::uint16_t bits);
template <> inline float halfBits<__nv_bfloat16>(std::uint16_t bits) {
  return weft::kernels::bf16ToFloat(weft::kernels::BF16{bits});
}
template <> inline float halfBits<__half>(std::uint16_t bits) {
  return weft::kernels::f16ToFloat(weft::kernels::F16{bits});
}

/// c += a * b for the warp's m16n8k16 fragments (fp32 accumulation).
template <typename E>
void emulatedMma(float c[4], const std::uint32_t a[4],
                 const std::uint32_t b[2]) {
  emulation::Warp &w = *emulation::warp;
  const int me = emulation::lane;
  std::copy(a, a + 4, w.a[me]);
  std::copy(b, b + 2, w.b[me]);
  w.barrier.wait();
  auto element = [](std::uint32_t word, int k) {
    return halfBits<E>(std::uint16_t(k % 2 ? word >> 16 : word & 0xffff));
  };
  auto aAt = [&](int row, int k) {
    int reg = (row >= 8 ? 1 : 0) + (k % 16 >= 8 ? 2 : 0);
    return element(w.a[(row % 8) * 4 + (k % 8) / 2][reg], k);
  };
  auto bAt = [&](int k, int n) {
    return element(w.b[n * 4 + (k % 8) / 2][k >= 8 ? 1 : 0], k);
  };
  const int g = me / 4, t = me % 4;
  float result[4];
  for (int r = 0; r < 4; ++r) {
    int row = g + 8 * (r / 2), col = 2 * t + r % 2;
    float sum = 0;
    for (int k = 0; k < 16; ++k)
      sum += aAt(row, k) * bAt(k, col);
    result[r] = c[r] + sum;
  }
  w.barrier.wait(); // every lane has read every fragment
  std::copy(result, result + 4, c);
}

/// cp.async.cg.shared.global 16 bytes (src-size `bytes`: 16 or 0).
inline void emulatedCopyAsync(void *dst, const void *src, int bytes) {
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 ||
      (bytes > 0 && reinterpret_cast<std::uintptr_t>(src) % 16 != 0)) {
    std::fprintf(stderr,
                 "warp emulation: cp.async of 16 bytes from %p to %p "
                 "is not 16-byte aligned\n",
                 src, dst);
    std::abort();
  }
  if (emulation::eagerCopies) {
    if (bytes == 16)
      std::memcpy(dst, src, 16);
    else
      std::memset(dst, 0, 16);
    bytes = -1;
  }
  emulation::copies->open.push_back({dst, src, bytes});
}
/// cp.async.commit_group.
inline void emulatedCommitCopies() {
  emulation::AsyncCopies &c = *emulation::copies;
  c.committed.push_back(std::move(c.open));
  c.open.clear();
}
/// cp.async.wait_group `pending`: the oldest groups complete until at most
/// `pending` are left.
inline void emulatedWaitCopies(int pending) {
  emulation::AsyncCopies &c = *emulation::copies;
  while (int(c.committed.size()) > pending) {
    for (const emulation::AsyncCopy &copy : c.committed.front()) {
      if (copy.bytes == 16)
        std::memcpy(copy.dst, copy.src, 16);
      else if (copy.bytes == 0)
        std::memset(copy.dst, 0, 16);
    }
    c.committed.erase(c.committed.begin());
  }
}

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives the
/// address of row l % 8 of matrix l / 8 (8 16-bit elements, 16-byte
/// aligned); r[j] gets elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1)
/// of matrix j, with `trans` (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4).
inline void emulatedLdmatrix(std::uint32_t r[4], const void *row, bool trans) {
  emulation::Warp &w = *emulation::warp;
  const int me = emulation::lane;
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0) {
    std::fprintf(stderr,
                 "warp emulation: ldmatrix row address %p of lane %d "
                 "is not 16-byte aligned\n",
                 row, me);
    std::abort();
  }
  w.rows[me] = row;
  w.barrier.wait();
  auto element = [&](int matrix, int rowInMatrix, int column) {
    return static_cast<const std::uint16_t *>(
        w.rows[8 * matrix + rowInMatrix])[column];
  };
  const int g = me / 4, t = me % 4;
  for (int j = 0; j < 4; ++j) {
    std::uint32_t lo = trans ? element(j, 2 * t, g) : element(j, g, 2 * t);
    std::uint32_t hi =
        trans ? element(j, 2 * t + 1, g) : element(j, g, 2 * t + 1);
    r[j] = lo | (hi << 16);
  }
  w.barrier.wait(); // every lane has read every row address
}

namespace emulation {

/// One CUDA thread: its context, stack and place in the grid.
struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack;
  AsyncCopies copies;
  unsigned thread = 0, block = 0;
  bool done = false;
};
inline thread_local std::function<void(Fiber &)> *fiberBody = nullptr;
inline thread_local Fiber *currentFiber = nullptr;
inline void fiberEntry() {
  (*fiberBody)(*currentFiber);
  currentFiber->done = true; // returns to uc_link, the scheduler
}

/// Runs `kernel(args...)` over `blocks` blocks of `threads` threads: one
/// fiber per CUDA thread, which runs its thread of every block in turn, with
/// a block barrier between blocks (shared memory is per block). The
/// scheduler resumes the fibers round robin; a round without a barrier event
/// or a finished fiber is a deadlock (a barrier not every thread reaches).
template <typename Kernel, typename... Args>
void launch(unsigned blocks, unsigned threads, Kernel kernel, Args... args) {
  constexpr std::size_t kStackBytes = 128 * 1024;
  gridDim.x = blocks;
  blockDim.x = threads;
  Barrier blockBarrier{int(threads)};
  std::vector<Warp> warps(threads / 32);
  std::vector<Fiber> fibers(threads);
  std::function<void(Fiber &)> body = [&](Fiber &fiber) {
    for (unsigned b = 0; b < blocks; ++b) {
      fiber.block = blockIdx.x = b;
      kernel(args...);
      if (!fiber.copies.open.empty() || !fiber.copies.committed.empty()) {
        std::fprintf(stderr,
                     "warp emulation: thread %u of block %u ended "
                     "with cp.async copies it never waited for\n",
                     fiber.thread, b);
        std::abort();
      }
      blockBarrier.wait(); // the block ends before the next one starts
    }
  };
  fiberBody = &body;
  for (unsigned t = 0; t < threads; ++t) {
    Fiber &fiber = fibers[t];
    fiber.thread = t;
    fiber.stack.reset(new char[kStackBytes]);
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack.get();
    fiber.context.uc_stack.ss_size = kStackBytes;
    fiber.context.uc_link = &schedulerContext;
    makecontext(&fiber.context, fiberEntry, 0);
  }
  // A sweep resumes every warp's fibers once, in order (all warps in step),
  // or with warpGreedy each warp's until none of them gets further (one warp
  // runs ahead of the others to the next block barrier).
  const unsigned numWarps = (threads + 31) / 32;
  for (unsigned live = threads; live > 0;) {
    unsigned long sweepEvents = barrierEvents;
    bool progressed = false;
    for (unsigned w = 0; w < numWarps; ++w)
      for (;;) {
        unsigned long events = barrierEvents;
        bool finished = false;
        for (unsigned t = 32 * w; t < std::min(threads, 32 * w + 32); ++t) {
          Fiber &fiber = fibers[t];
          if (fiber.done)
            continue;
          threadIdx.x = fiber.thread;
          blockIdx.x = fiber.block;
          block = &blockBarrier;
          warp = &warps[fiber.thread / 32];
          lane = int(fiber.thread % 32);
          copies = &fiber.copies;
          currentFiber = &fiber;
          runningFiber = &fiber.context;
          swapcontext(&schedulerContext, &fiber.context);
          if (fiber.done) {
            --live;
            finished = true;
          }
        }
        progressed = progressed || finished;
        if (!warpGreedy || (!finished && events == barrierEvents))
          break;
      }
    if (live > 0 && !progressed && sweepEvents == barrierEvents) {
      std::fprintf(stderr, "warp emulation: deadlock (a barrier that not "
                           "every thread reaches)\n");
      std::abort();
    }
  }
  runningFiber = nullptr;
  currentFiber = nullptr;
}

/// Runs an element-wise kernel (no barriers or warp exchanges) over
/// `items` threads in blocks of 256, one thread after the other.
template <typename Kernel, typename... Args>
void launchSerial(std::int64_t items, Kernel kernel, Args... args) {
  blockDim.x = 256;
  gridDim.x = unsigned((items + 255) / 256);
  for (unsigned b = 0; b < gridDim.x; ++b)
    for (unsigned t = 0; t < blockDim.x; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      kernel(args...);
    }
}

} // namespace emulation

#endif // WEFT_TEST_WARPEMULATION_H
