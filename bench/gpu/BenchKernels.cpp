//===- BenchKernels.cpp - Memory-bound CUDA kernels, HBM ceiling ----------===//
//
// weft-bench-kernels [--json out.jsonl]
//
// Times the kernels a bf16 GPT-2 step runs outside the GEMMs, on the 124M
// model's shapes at batch 32 x 1024 (32,768 tokens), through the launch
// wrappers the CUDA backend calls (16-bit storage: weft-run --half-kernels),
// and compares each with a device-to-device copy measured in the same run
// (issue 6: memory-bound kernels at >= 80% of the measured bandwidth). The
// bytes counted are the ideal traffic: every operand read or written once
// (a kernel that reads an operand twice shows it as a lower fraction). The
// tensor-core attention is reported in TFLOP/s (causal: half the products),
// and cuDNN's fused attention on the same operands beside it where libcudnn
// loads (weft-run --cudnn-attention).
// The rows named "(widening path)" run what the backend does without
// --half-kernels (widen into fp32 scratch, the fp32 kernel, narrow) on the
// same data, and the 16-bit kernels' speed is printed as a ratio to them.
// Each figure is the median of 10 timed launches after 2 warm-up launches,
// CUDA events around each, behind a 256 MB memset and a pass reading it
// back, which evict L2 and leave it clean (the
// hidden-width operands are about its 50 MB) and hides the launch latency.
// Without a device it says so and exits 0 (nothing to measure).
//
//===----------------------------------------------------------------------===//

#include "weft/exec/cuda/CudnnAttention.h"
#include "weft/kernels/Attention.h"
#include "weft/kernels/Common.h"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Optimizer.h"

#include "Internal.h" // the backend's AdamW and widening helpers
#include "weft/exec/cuda/Workspace.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace gpu = weft::kernels::gpu;
using gpu::HalfType;

void check(cudaError_t rc, const char *what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "weft-bench-kernels: %s: %s\n", what,
                 cudaGetErrorString(rc));
    std::exit(1);
  }
}

/// Device memory of `bytes` bytes, every byte 0x3c (bf16 0.0115, fp32
/// 0.0115: finite, positive moments; the kernels' cost does not depend on
/// the values), freed at exit.
class Buffer {
public:
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&data_, bytes), "cudaMalloc");
    check(cudaMemset(data_, 0x3c, bytes), "cudaMemset");
  }
  Buffer(const Buffer &) = delete;
  ~Buffer() { cudaFree(data_); }
  void *get() const { return data_; }
  float *f32() const { return static_cast<float *>(data_); }
  std::size_t bytes() const { return bytes_; }

private:
  void *data_ = nullptr;
  std::size_t bytes_;
};

struct Result {
  std::string name, shape;
  double us = 0, bytes = 0, flops = 0;
};

/// The median time of one `launch` in microseconds, or nullopt (the error
/// in `error`) when a launch fails. Before each sample a 256 MB memset runs
/// on the stream, then a pass that reads it back: they evict the operands
/// from the 50 MB L2 (so a kernel that reads one buffer is not timed from
/// cache on its second launch) and leave it clean (the timed kernel does
/// not pay for the memset's write-backs), and the GPU is still busy with
/// them when the start event and the launch are queued behind, so the
/// host's launch latency (a few microseconds, which an event before a
/// launch on an idle GPU counts) is not timed either.
std::optional<double> timeLaunch(cudaStream_t stream,
                                 const std::function<cudaError_t()> &launch,
                                 std::string &error) {
  static Buffer flush(std::size_t(256) << 20);
  static Buffer sum(weft::exec::cuda::kAccumulatorBytes);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < 12 && error.empty(); ++i) {
    check(cudaMemsetAsync(flush.get(), i, flush.bytes(), stream),
          "cudaMemsetAsync");
    check(weft::exec::cuda::sumSquaresAccumulate(
              std::int64_t(flush.bytes() / 4), flush.get(),
              weft::exec::cuda::FloatStorage::F32,
              static_cast<double *>(sum.get()), stream),
          "the L2 read pass");
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    cudaError_t rc = launch();
    if (rc == cudaSuccess)
      rc = cudaEventRecord(stop, stream);
    if (rc == cudaSuccess)
      rc = cudaEventSynchronize(stop);
    if (rc != cudaSuccess) {
      error = cudaGetErrorString(rc);
      (void)cudaGetLastError(); // a launch error that is not sticky
      break;
    }
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 2) // the first two launches warm up
      times.push_back(double(ms) * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!error.empty())
    return std::nullopt;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// Runs the launches in order, stopping at the first error.
cudaError_t
inOrder(std::initializer_list<std::function<cudaError_t()>> launches) {
  for (const auto &launch : launches)
    if (cudaError_t rc = launch())
      return rc;
  return cudaSuccess;
}

} // namespace

int main(int argc, char **argv) {
  const char *jsonPath = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc)
      jsonPath = argv[++i];
    else {
      std::fprintf(stderr, "usage: weft-bench-kernels [--json out.jsonl]\n");
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("weft-bench-kernels: no CUDA device: nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  // GPT-2 124M, bf16, batch 32 x 1024.
  const std::int64_t tokens = 32 * 1024, hidden = 768, ffn = 3072,
                     vocab = 50257, params = 124'439'808;
  const std::int64_t n = tokens * hidden, nf = tokens * ffn;
  const HalfType bf = HalfType::BF16;
  // Each row is printed (and written to the JSON lines) as soon as it is
  // measured, so that a run cut short keeps what it measured; a launch that
  // fails is a row saying so, and the rows after it still run.
  std::vector<Result> results;
  FILE *json = jsonPath ? std::fopen(jsonPath, "w") : nullptr;
  double ceiling = 0; // GB/s, the first row's
  int failures = 0;
  auto add = [&](std::string name, std::string shape, double bytes,
                 const std::function<cudaError_t()> &launch, double flops = 0) {
    std::string error;
    std::optional<double> us = timeLaunch(stream, launch, error);
    if (!us) {
      ++failures;
      std::printf("%-36s %-18s failed: %s\n", name.c_str(), shape.c_str(),
                  error.c_str());
      if (json)
        std::fprintf(json,
                     "{\"kernel\": \"%s\", \"shape\": \"%s\", \"error\": "
                     "\"%s\", \"gpu\": \"%s\"}\n",
                     name.c_str(), shape.c_str(), error.c_str(), prop.name);
      std::fflush(nullptr);
      return;
    }
    Result r{name, std::move(shape), *us, bytes, flops};
    if (results.empty()) {
      ceiling = r.bytes / r.us * 1e-3;
      std::printf("%s, %d SMs: device-to-device copy %.0f GB/s\n", prop.name,
                  prop.multiProcessorCount, ceiling);
      std::printf("%-36s %-18s %10s %9s %8s\n", "kernel (bf16)", "shape", "us",
                  "GB/s", "of copy");
    }
    if (r.flops > 0) {
      std::printf("%-36s %-18s %10.1f %9.1f TFLOP/s\n", r.name.c_str(),
                  r.shape.c_str(), r.us, r.flops / r.us * 1e-6);
    } else {
      double gbs = r.bytes / r.us * 1e-3;
      std::printf("%-36s %-18s %10.1f %9.0f %7.0f%%\n", r.name.c_str(),
                  r.shape.c_str(), r.us, gbs, 100 * gbs / ceiling);
    }
    if (json)
      std::fprintf(json,
                   "{\"kernel\": \"%s\", \"shape\": \"%s\", \"us\": %.2f, "
                   "\"bytes\": %.0f, \"flops\": %.0f, \"copy_gb_s\": %.1f, "
                   "\"gpu\": \"%s\"}\n",
                   r.name.c_str(), r.shape.c_str(), r.us, r.bytes, r.flops,
                   ceiling, prop.name);
    std::fflush(nullptr);
    results.push_back(r);
  };
  auto dims = [](std::int64_t a, std::int64_t b) {
    return std::to_string(a) + "x" + std::to_string(b);
  };

  // The ceiling: a 1 GiB device-to-device copy (bytes read + written).
  {
    Buffer a(1 << 30), b(1 << 30);
    add("copy (ceiling)", "1 GiB", 2.0 * double(1 << 30), [&] {
      return cudaMemcpyAsync(b.get(), a.get(), a.bytes(),
                             cudaMemcpyDeviceToDevice, stream);
    });
  }
  using weft::exec::cuda::FloatStorage;
  // The widening path (what runs without --half-kernels), in the same run:
  // 16-bit operands widened into fp32 scratch, the fp32 kernel, the 16-bit
  // outputs narrowed back.
  auto widen = [&](const Buffer &from, const Buffer &to, std::int64_t count) {
    return weft::exec::cuda::halfToF32(
        count, static_cast<const std::uint16_t *>(from.get()),
        FloatStorage::BF16, to.f32(), stream);
  };
  auto narrow = [&](const Buffer &from, const Buffer &to, std::int64_t count) {
    return weft::exec::cuda::f32ToHalf(count, from.f32(), FloatStorage::BF16,
                                       static_cast<std::uint16_t *>(to.get()),
                                       stream);
  };
  {
    Buffer x(n * 2), y(n * 2), out(n * 2), gamma(hidden * 2), beta(hidden * 2),
        dGamma(hidden * 2), dBeta(hidden * 2), mean(tokens * 4),
        rstd(tokens * 4);
    Buffer wx(n * 4), wy(n * 4), wout(n * 4), wGamma(hidden * 4),
        wBeta(hidden * 4), wdGamma(hidden * 4), wdBeta(hidden * 4);
    add("residual_add (widening path)", dims(tokens, hidden), 3.0 * n * 2, [&] {
      return inOrder(
          {[&] { return widen(x, wx, n); }, [&] { return widen(y, wy, n); },
           [&] {
             return gpu::residualAdd(n, wx.f32(), wy.f32(), wout.f32(), stream);
           },
           [&] { return narrow(wout, out, n); }});
    });
    add("layer_norm_forward (widening path)", dims(tokens, hidden),
        2.0 * n * 2 + tokens * 8, [&] {
          return inOrder({[&] { return widen(x, wx, n); },
                          [&] { return widen(gamma, wGamma, hidden); },
                          [&] { return widen(beta, wBeta, hidden); },
                          [&] {
                            return gpu::layerNormForward(
                                tokens, hidden, wx.f32(), wGamma.f32(),
                                wBeta.f32(), 1e-5f, wout.f32(), mean.f32(),
                                rstd.f32(), stream);
                          },
                          [&] { return narrow(wout, out, n); }});
        });
    add("layer_norm_backward (widening path)", dims(tokens, hidden),
        3.0 * n * 2 + tokens * 8, [&] {
          return inOrder({[&] { return widen(x, wx, n); },
                          [&] { return widen(gamma, wGamma, hidden); },
                          [&] { return widen(y, wy, n); },
                          [&] { return widen(dGamma, wdGamma, hidden); },
                          [&] { return widen(dBeta, wdBeta, hidden); },
                          [&] {
                            return gpu::layerNormBackward(
                                tokens, hidden, wx.f32(), wGamma.f32(),
                                mean.f32(), rstd.f32(), wy.f32(), wout.f32(),
                                wdGamma.f32(), wdBeta.f32(), stream);
                          },
                          [&] { return narrow(wout, out, n); },
                          [&] { return narrow(wdGamma, dGamma, hidden); },
                          [&] { return narrow(wdBeta, dBeta, hidden); }});
        });
    add("residual_add", dims(tokens, hidden), 3.0 * n * 2, [&] {
      return gpu::halfResidualAdd(bf, n, x.get(), y.get(), out.get(), stream);
    });
    add("layer_norm_forward", dims(tokens, hidden), 2.0 * n * 2 + tokens * 8,
        [&] {
          return gpu::halfLayerNormForward(
              bf, tokens, hidden, x.get(), gamma.get(), beta.get(), 1e-5f,
              out.get(), mean.f32(), rstd.f32(), stream);
        });
    Buffer sum(n * 2);
    // The two kernels the fused forward replaces (bytes as the fused one's:
    // the sum's second read may come from L2).
    add("residual_add + layer_norm_forward (two kernels)", dims(tokens, hidden),
        4.0 * n * 2 + tokens * 8, [&] {
          return inOrder({[&] {
                            return gpu::halfResidualAdd(bf, n, x.get(), y.get(),
                                                        sum.get(), stream);
                          },
                          [&] {
                            return gpu::halfLayerNormForward(
                                bf, tokens, hidden, sum.get(), gamma.get(),
                                beta.get(), 1e-5f, out.get(), mean.f32(),
                                rstd.f32(), stream);
                          }});
        });
    add("residual_add + layer_norm_forward (fused)", dims(tokens, hidden),
        4.0 * n * 2 + tokens * 8, [&] {
          return gpu::halfResidualLayerNormForward(
              bf, tokens, hidden, x.get(), y.get(), sum.get(), gamma.get(),
              beta.get(), 1e-5f, out.get(), mean.f32(), rstd.f32(), stream);
        });
    // dx over a separate buffer (dy stays the same across launches); the
    // one-pass kernels the backend runs on 16-bit operands, and the two passes.
    Buffer scratch(size_t(gpu::normBackwardScratchFloats(tokens, hidden)) * 4);
    add("layer_norm_backward (one pass)", dims(tokens, hidden),
        3.0 * n * 2 + tokens * 8, [&] {
          return gpu::halfLayerNormBackward(bf, tokens, hidden, x.get(),
                                            gamma.get(), mean.f32(), rstd.f32(),
                                            y.get(), out.get(), dGamma.get(),
                                            dBeta.get(), stream, scratch.f32());
        });
    add("layer_norm_backward (two passes)", dims(tokens, hidden),
        3.0 * n * 2 + tokens * 8, [&] {
          return gpu::halfLayerNormBackward(
              bf, tokens, hidden, x.get(), gamma.get(), mean.f32(), rstd.f32(),
              y.get(), out.get(), dGamma.get(), dBeta.get(), stream);
        });
    // The backward's residual add after it (sum = dx + x, into `sum`): two
    // kernels against the fused launch, which with dx read by the add alone
    // (the plans' case) does not store dx. Bytes: x, dy, the addend and the
    // sum.
    // The addend is the upstream gradient: its own buffer, not x (whose
    // second read would come from cache).
    Buffer addend(n * 2);
    add("layer_norm_backward + residual_add (two kernels)",
        dims(tokens, hidden), 4.0 * n * 2 + tokens * 8, [&] {
          return inOrder(
              {[&] {
                 return gpu::halfLayerNormBackward(
                     bf, tokens, hidden, x.get(), gamma.get(), mean.f32(),
                     rstd.f32(), y.get(), out.get(), dGamma.get(), dBeta.get(),
                     stream, scratch.f32());
               },
               [&] {
                 return gpu::halfResidualAdd(bf, n, out.get(), addend.get(),
                                             sum.get(), stream);
               }});
        });
    add("layer_norm_backward + residual_add (fused)", dims(tokens, hidden),
        4.0 * n * 2 + tokens * 8, [&] {
          return gpu::halfLayerNormBackwardAdd(
              bf, tokens, hidden, x.get(), gamma.get(), mean.f32(), rstd.f32(),
              y.get(), addend.get(), sum.get(), dGamma.get(), dBeta.get(),
              stream, scratch.f32());
        });
    add("bias_grad", dims(tokens, hidden), 1.0 * n * 2, [&] {
      return gpu::halfBiasGrad(bf, tokens, hidden, y.get(), dBeta.get(),
                               stream);
    });
  }
  {
    Buffer up(nf * 2), act(nf * 2), grad(nf * 2), bias(ffn * 2);
    add("bias_add (unfused)", dims(tokens, ffn), 2.0 * nf * 2, [&] {
      return gpu::halfBiasAdd(bf, tokens, ffn, up.get(), bias.get(), act.get(),
                              stream);
    });
    add("activation_forward gelu", dims(tokens, ffn), 2.0 * nf * 2, [&] {
      return gpu::halfActivationForward(bf, weft::kernels::Activation::GeluTanh,
                                        nf, up.get(), act.get(), stream);
    });
    add("activation_backward gelu", dims(tokens, ffn), 3.0 * nf * 2, [&] {
      return gpu::halfActivationBackward(
          bf, weft::kernels::Activation::GeluTanh, nf, up.get(), act.get(),
          grad.get(), stream);
    });
    add("bias_grad", dims(tokens, ffn), 1.0 * nf * 2, [&] {
      return gpu::halfBiasGrad(bf, tokens, ffn, grad.get(), bias.get(), stream);
    });
  }
  {
    // The loss over the logits in place (as the plans alias them).
    Buffer logits(std::size_t(tokens) * vocab * 2), term(tokens * 4),
        scalars(64);
    std::vector<std::int32_t> host(tokens);
    std::mt19937 rng(3);
    for (std::int32_t &t : host)
      t = std::int32_t(rng() % vocab);
    Buffer targets(tokens * 4);
    check(cudaMemcpy(targets.get(), host.data(), tokens * 4,
                     cudaMemcpyHostToDevice),
          "cudaMemcpy");
    auto *count = static_cast<int *>(scalars.get());
    float *loss = scalars.f32() + 1;
    add("cross_entropy (+grad in place)", dims(tokens, vocab),
        2.0 * double(tokens) * vocab * 2, [&] {
          return gpu::halfCrossEntropy(
              bf, tokens, vocab, logits.get(),
              static_cast<const std::int32_t *>(targets.get()), 1.0f,
              term.f32(), count, loss, logits.get(), stream);
        });
    {
      Buffer wide(std::size_t(tokens) * vocab * 4);
      const std::int64_t elements = tokens * vocab;
      add("cross_entropy (+grad in place) (widening path)", dims(tokens, vocab),
          2.0 * double(tokens) * vocab * 2, [&] {
            return inOrder(
                {[&] { return widen(logits, wide, elements); },
                 [&] {
                   return gpu::crossEntropyForwardBackward(
                       tokens, vocab, wide.f32(),
                       static_cast<const std::int32_t *>(targets.get()),
                       term.f32(), count, loss, wide.f32(), stream);
                 },
                 [&] { return narrow(wide, logits, elements); }});
          });
    }
    {
      // The plans' layout for 50257 words: rows padded to 50264 (aligned
      // rows for the LM head's GEMMs), the padding never read.
      const std::int64_t stride = (vocab + 7) / 8 * 8;
      Buffer padded(std::size_t(tokens) * stride * 2);
      add("cross_entropy (+grad in place, padded rows)",
          dims(tokens, vocab) + " in " + std::to_string(stride),
          2.0 * double(tokens) * vocab * 2, [&] {
            return gpu::halfCrossEntropy(
                bf, tokens, stride, padded.get(),
                static_cast<const std::int32_t *>(targets.get()), 1.0f,
                term.f32(), count, loss, padded.get(), stream, vocab);
          });
    }
    add("cross_entropy (loss only)", dims(tokens, vocab),
        1.0 * double(tokens) * vocab * 2, [&] {
          return gpu::halfCrossEntropy(
              bf, tokens, vocab, logits.get(),
              static_cast<const std::int32_t *>(targets.get()), 1.0f,
              term.f32(), count, loss, nullptr, stream);
        });
    Buffer wte(std::size_t(vocab) * hidden * 2), wpe(1024 * hidden * 2),
        out(n * 2);
    // Bytes the lookups move from HBM: the output, each distinct token row
    // once (repeats hit L2), the 1.5 MB position table once, the ids.
    std::vector<char> seen(std::size_t(vocab), 0);
    std::int64_t distinct = 0;
    for (std::int32_t id : host)
      if (id >= 0 && id < vocab && !seen[std::size_t(id)]++)
        ++distinct;
    const double rowBytes = double(hidden) * 2;
    add("embedding_forward", dims(tokens, hidden),
        double(n) * 2 + (double(distinct) + 1024) * rowBytes +
            double(tokens) * 4,
        [&] {
          return gpu::halfEmbeddingForward(
              bf, 32, 1024, hidden,
              static_cast<const std::int32_t *>(targets.get()), wte.get(),
              wpe.get(), out.get(), stream);
        });
    // Its backward (dOut = `out`): sorted, no atomics, against the widening
    // path's fp32 atomics. Bytes: dOut, and the rows of the two tables the
    // tokens touch (rows no token has are skipped), read and written.
    const std::int64_t table = vocab * hidden, positions = 1024 * hidden;
    Buffer dWte(std::size_t(table) * 2), dWpe(std::size_t(positions) * 2),
        scratch(std::size_t(gpu::embeddingBackwardScratchInts(vocab, tokens)) *
                4);
    const double backwardBytes =
        2.0 * n + 2.0 * (double(distinct) + 1024) * rowBytes;
    const auto *ids = static_cast<const std::int32_t *>(targets.get());
    add("embedding_backward", dims(tokens, hidden), backwardBytes, [&] {
      return gpu::halfEmbeddingBackward(
          bf, 32, 1024, hidden, vocab, ids, out.get(), dWte.get(), dWpe.get(),
          static_cast<std::int32_t *>(scratch.get()), stream);
    });
    {
      Buffer wOut(n * 4), wWte(std::size_t(table) * 4),
          wWpe(std::size_t(positions) * 4);
      add("embedding_backward (widening path)", dims(tokens, hidden),
          backwardBytes, [&] {
            return inOrder({[&] { return widen(out, wOut, n); },
                            [&] { return widen(dWte, wWte, table); },
                            [&] { return widen(dWpe, wWpe, positions); },
                            [&] {
                              return gpu::embeddingBackward(
                                  32, 1024, hidden, ids, wOut.f32(), 0,
                                  wWte.f32(), wWpe.f32(), nullptr, stream);
                            },
                            [&] { return narrow(wWte, dWte, table); },
                            [&] { return narrow(wWpe, dWpe, positions); }});
          });
    }
  }
  {
    // AdamW over every parameter: bf16 gradient in, fp32 weights and
    // moments updated, the bf16 weights stored (28 bytes per parameter),
    // the gradients clipped inside the update (a global norm of 2 against a
    // limit of 1), as compiled plans run it.
    Buffer grad(params * 2), master(params * 4), m(params * 4), v(params * 4),
        low(params * 2), step(256), sumSq(4);
    weft::kernels::AdamWStep s =
        weft::kernels::makeAdamWStep({6e-4, 0.9, 0.95, 1e-8, 0.1}, 10, 1.0);
    s.maxNorm = 1.0;
    float sumOfSquares = 4.0f;
    check(cudaMemcpy(step.get(), &s, sizeof s, cudaMemcpyHostToDevice),
          "cudaMemcpy");
    check(cudaMemcpy(sumSq.get(), &sumOfSquares, 4, cudaMemcpyHostToDevice),
          "cudaMemcpy");
    add("adamw (one pass)", std::to_string(params) + " params",
        28.0 * double(params), [&] {
          return weft::exec::cuda::adamwFromDevice(
              static_cast<const weft::kernels::AdamWStep *>(step.get()), params,
              grad.get(), FloatStorage::BF16, master.f32(), m.f32(), v.f32(),
              low.get(), FloatStorage::BF16,
              static_cast<const float *>(sumSq.get()), stream);
        });
  }
  {
    // Tensor-core attention, causal, 12 heads of 64.
    weft::kernels::AttentionDims d{32, 1024, 12, 12, 64, true, 0.125};
    std::int64_t elements = d.batch * d.seq * d.heads * d.headDim,
                 rows = d.batch * d.heads * d.seq;
    Buffer q(elements * 2), k(elements * 2), v(elements * 2), out(elements * 2),
        dOut(elements * 2), dq(elements * 2), dk(elements * 2),
        dv(elements * 2), lse(rows * 4), delta(rows * 4);
    // Products: S = QK^T and PV forward (2 each, causal half), backward 5.
    double forward =
        4.0 * d.batch * d.heads * double(d.seq) * d.seq * d.headDim / 2;
    add(
        "attention_forward (tensor cores)", "b32 h12 s1024 d64", 0,
        [&] {
          return gpu::halfAttentionForward(bf, d, q.get(), k.get(), v.get(),
                                           out.get(), lse.f32(), stream);
        },
        forward);
    add(
        "attention_backward (tensor cores)", "b32 h12 s1024 d64", 0,
        [&] {
          return gpu::halfAttentionBackward(
              bf, d, q.get(), k.get(), v.get(), out.get(), lse.f32(),
              dOut.get(), dq.get(), dk.get(), dv.get(), delta.f32(), stream);
        },
        2.5 * forward);
    // The same on cuDNN's fused attention (weft-run --cudnn-attention).
    std::string why;
    auto cudnn = weft::exec::cuda::CudnnAttention::open(why);
    const weft::exec::cuda::CudnnAttentionGraph *fwd = nullptr, *bwd = nullptr;
    if (cudnn && (fwd = cudnn->prepare(false, bf, d, why)))
      bwd = cudnn->prepare(true, bf, d, why);
    if (bwd) {
      using weft::exec::cuda::CudnnAttention;
      Buffer workspace(std::size_t(
          std::max<std::int64_t>({CudnnAttention::workspaceBytes(*fwd),
                                  CudnnAttention::workspaceBytes(*bwd), 256})));
      auto run = [&](const weft::exec::cuda::CudnnAttentionGraph &graph,
                     std::vector<void *> reads, std::vector<void *> writes) {
        std::string error =
            cudnn->run(graph, reads, writes, workspace.get(), stream);
        if (error.empty())
          return cudaSuccess;
        std::fprintf(stderr, "cuDNN attention: %s\n", error.c_str());
        return cudaErrorUnknown;
      };
      add(
          "attention_forward (cuDNN " + cudnn->version() + ")",
          "b32 h12 s1024 d64", 0,
          [&] {
            return run(*fwd, {q.get(), k.get(), v.get()},
                       {out.get(), lse.get()});
          },
          forward);
      add(
          "attention_backward (cuDNN " + cudnn->version() + ")",
          "b32 h12 s1024 d64", 0,
          [&] {
            return run(
                *bwd,
                {q.get(), k.get(), v.get(), out.get(), lse.get(), dOut.get()},
                {dq.get(), dk.get(), dv.get()});
          },
          2.5 * forward);
    } else {
      std::printf("cuDNN attention not timed: %s\n", why.c_str());
    }
  }

  if (json)
    std::fclose(json);
  // Each 16-bit kernel against its widening path, measured above.
  const std::string suffix = " (widening path)";
  for (const Result &baseline : results) {
    if (baseline.name.size() <= suffix.size() ||
        baseline.name.compare(baseline.name.size() - suffix.size(),
                              suffix.size(), suffix) != 0)
      continue;
    std::string twin =
        baseline.name.substr(0, baseline.name.size() - suffix.size());
    for (const Result &r : results)
      if (&r != &baseline &&
          (r.name == twin || r.name.rfind(twin + " (", 0) == 0))
        std::printf("%-36s %.2fx the widening path's speed\n", r.name.c_str(),
                    baseline.us / r.us);
  }
  // Fused launches against the kernels they replace.
  for (const Result &fused : results) {
    size_t at = fused.name.rfind(" (fused)");
    if (at == std::string::npos)
      continue;
    for (const Result &r : results)
      if (r.name == fused.name.substr(0, at) + " (two kernels)")
        std::printf("%-36s %.2fx the two kernels' speed\n", fused.name.c_str(),
                    r.us / fused.us);
  }
  return failures ? 1 : 0;
}
