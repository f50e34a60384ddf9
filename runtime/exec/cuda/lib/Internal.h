//===- Internal.h - Pieces shared inside the CUDA backend -------*- C++ -*-===//
#ifndef WEFT_EXEC_CUDA_INTERNAL_H
#define WEFT_EXEC_CUDA_INTERNAL_H

#include "FloatStorage.h"
#include "weft/exec/KernelRegistry.h"
#include "weft/kernels/Attention.h"
#include "weft/kernels/CudaKernels.h"
#include "weft/kernels/Optimizer.h"
#include "weft/plan/Bundle.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace weft::exec::cuda {

//===--- Helper kernels (Helpers.cu) -------------------------------------===//

/// out[i] = in[i] widened from bf16 or f16 (`half`) to f32.
cudaError_t halfToF32(int64_t n, const std::uint16_t *in, FloatStorage half,
                      float *out, cudaStream_t stream);
/// out[i] = in[i] rounded to bf16 or f16 (`half`), nearest even.
cudaError_t f32ToHalf(int64_t n, const float *in, FloatStorage half,
                      std::uint16_t *out, cudaStream_t stream);
/// x[i] rounded to `storage` in place (kept fp32): what a 16-bit operand
/// the fp32 path widened would hold; nothing for F32.
cudaError_t roundToStorage(int64_t n, float *x, FloatStorage storage,
                           cudaStream_t stream);
/// `bytes` of finite, non-zero pseudo-random values whatever the element
/// type (f16, bf16, f32, f64): each 16-bit word a random sign and mantissa
/// with a small exponent. For timing: zeros run faster than data (less
/// power, higher clocks).
cudaError_t fillNoise(void *dst, size_t bytes, cudaStream_t stream);
/// n elements of `elementBytes` (1, 2, 4 or 8) bytes, each set to the low
/// bytes of `pattern`.
cudaError_t fillPattern(void *dst, int64_t n, int elementBytes,
                        std::uint64_t pattern, cudaStream_t stream);
cudaError_t scale(int64_t n, float *x, float factor, cudaStream_t stream);
/// *out = (accumulate ? *out : 0) + *loss / divisor.
cudaError_t finishLoss(const float *loss, float divisor, bool accumulate,
                       float *out, cudaStream_t stream);
/// *acc += sum x[i]^2 (x stored as `storage`), in a fixed order (the same
/// bits on every run): `acc` is a workspace accumulator piece
/// (Workspace.h's kAccumulatorBytes), whose doubles from
/// kAccumulatorPartials on hold the blocks' partial sums.
cudaError_t sumSquaresAccumulate(int64_t n, const void *x, FloatStorage storage,
                                 double *acc, cudaStream_t stream);
cudaError_t doubleToFloat(const double *in, float *out, cudaStream_t stream);
/// x *= maxNorm / sqrt(*sumSq) when maxNorm > 0 and the norm exceeds it.
cudaError_t clipByNorm(int64_t n, void *x, FloatStorage storage,
                       const float *sumSq, float maxNorm, cudaStream_t stream);
/// AdamW with the step's scalars read from device memory (graph-safe), in
/// one pass: the gradient stored as `gradStorage` (widened in registers) and,
/// when `low` is not null, the updated weights also stored into it as
/// `lowStorage` (rounded to bf16/f16, or copied as f32). With `sumSq` (the
/// global f32 sum of squares of the gradients, on the device) the clip factor
/// and the overflow skip come from it (kernels::clippedGradScale).
cudaError_t adamwFromDevice(const kernels::AdamWStep *step, int64_t n,
                            const void *grad, FloatStorage gradStorage,
                            float *param, float *m, float *v, void *low,
                            FloatStorage lowStorage, const float *sumSq,
                            cudaStream_t stream);

//===--- The kernel table (CudaKernelTable.cpp) --------------------------===//

/// One launch: fp32 (or i32 index) device operands in signature order.
struct CudaKernelCall {
  const KernelConstants *constants = nullptr;
  std::vector<float *> reads;
  std::vector<float *> writes;
  /// How each write is stored in the plan (the fp32 path narrows it after
  /// the launch): the fused norms round their intermediate sum as the CPU
  /// backend does.
  std::vector<FloatStorage> writeStorage;
  std::vector<const std::int32_t *> readIndices;
  float *scratch = nullptr; // scratchFloats(constants) device floats
  cudaStream_t stream = nullptr;
  float lossScale = 1; // the loss kernels seed the backward with it

  int64_t c(const char *name) const { return constants->at(name); }
};

/// A launch on 16-bit storage: the operands as they are in the plan, the
/// 16-bit ones of type `type`, the others fp32 (CudaKernelEntry::halfReads).
struct CudaHalfCall {
  const KernelConstants *constants = nullptr;
  std::vector<void *> reads;
  std::vector<void *> writes;
  kernels::gpu::HalfType type = kernels::gpu::HalfType::BF16;
  float *scratch = nullptr; // scratchFloats(constants) device floats
  cudaStream_t stream = nullptr;
  float lossScale = 1; // as CudaKernelCall::lossScale

  int64_t c(const char *name) const { return constants->at(name); }
};

struct CudaKernelEntry {
  std::string_view name; // == the CPU registry's name
  /// Device scratch (in floats) one launch needs besides its operands.
  int64_t (*scratchFloats)(const KernelConstants &);
  cudaError_t (*run)(const CudaKernelCall &);
  /// Optional path without widening for bf16/f16 models: taken when the
  /// operands in the masks (bit i = operand i) are all one 16-bit type, the
  /// other float operands are f32 and `halfSupported` accepts the constants.
  std::uint32_t halfReads = 0, halfWrites = 0;
  bool (*halfSupported)(const KernelConstants &) = nullptr;
  cudaError_t (*runHalf)(const CudaHalfCall &) = nullptr;
  /// Only runHalf uses the scratch (the fp32 kernel needs none).
  bool scratchOnlyHalf = false;
};

/// The scratch floats one launch of `entry` needs on the 16-bit path
/// (`half`) or the fp32 one.
inline int64_t scratchFloatsOf(const CudaKernelEntry &entry,
                               const KernelConstants &constants, bool half) {
  return entry.scratchOnlyHalf && !half ? 0 : entry.scratchFloats(constants);
}

/// The 16-bit type `entry`'s runHalf takes these operands in, if it does.
std::optional<kernels::gpu::HalfType>
halfPath(const CudaKernelEntry &entry, const KernelConstants &constants,
         const std::vector<plan::DType> &reads,
         const std::vector<plan::DType> &writes);

/// The dtypes of `ranges`, buffers of `program`.
std::vector<plan::DType>
operandTypes(const plan::Program &program,
             const std::vector<plan::BufferRange> &ranges);
/// Why the bundle's generated source for `kernel` cannot be launched (none,
/// or its launch lines are missing or another kernel's; KernelLaunches.h),
/// or empty when it can. Host-only.
std::string generatedSourceProblem(const plan::Bundle &bundle,
                                   const plan::Kernel &kernel);

/// The dims of an attention_forward/attention_backward kernel's constants.
kernels::AttentionDims attentionDims(const KernelConstants &constants);

/// The entry for `name` (or `base` of `base.suffix`), or null.
const CudaKernelEntry *findCudaKernel(std::string_view name);
const std::vector<CudaKernelEntry> &cudaKernelTable();

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_INTERNAL_H
