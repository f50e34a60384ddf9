//===- WarpEmulation.h - CUDA kernels as plain C++ on the CPU ---*- C++ -*-===//
//
// Include after <cuda_runtime.h> (for uint4 and the vector types) and before
// a kernel header: every CUDA thread of a block is a fiber (ucontext) on the
// calling thread, switched only at barriers: __syncthreads is a barrier over
// the block, and the warp-wide primitives (__shfl_xor_sync, __shfl_sync,
// ldmatrix.x4 and mma.sync m16n8k16) are barriers over the warp's 32 threads
// that exchange their registers through memory. Blocks run one after the other,
// so
// __shared__ becomes `static`. Fibers instead of OS threads: a barrier of a
// 1024-thread block costs a round of cheap context switches, not 1024
// wake-ups, and there are no data races to reason about.
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
  for (unsigned live = threads; live > 0;) {
    unsigned long events = barrierEvents;
    bool finished = false;
    for (Fiber &fiber : fibers) {
      if (fiber.done)
        continue;
      threadIdx.x = fiber.thread;
      blockIdx.x = fiber.block;
      block = &blockBarrier;
      warp = &warps[fiber.thread / 32];
      lane = int(fiber.thread % 32);
      currentFiber = &fiber;
      runningFiber = &fiber.context;
      swapcontext(&schedulerContext, &fiber.context);
      if (fiber.done) {
        --live;
        finished = true;
      }
    }
    if (live > 0 && !finished && events == barrierEvents) {
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
