//===- GemmKey.h - The cuBLASLt algorithm cache key -------------*- C++ -*-===//
//
// Host-only (no CUDA types), so the cache logic is tested without a GPU. Two
// gemm instructions with equal keys share one cuBLASLt matmul descriptor,
// layouts and algorithm, chosen once at prepare() by
// cublasLtMatmulAlgoGetHeuristic. alpha/beta are per instruction (host
// scalars) and not part of the key; beta == 0 is, because cuBLASLt may pick
// a different algorithm when C is not read.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_EXEC_CUDA_GEMMKEY_H
#define WEFT_EXEC_CUDA_GEMMKEY_H

#include "weft/plan/Bundle.h"

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

namespace weft::exec::cuda {

struct GemmKey {
  plan::DType dtype = plan::DType::F32; // A, B and C
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool betaZero = false;
  /// Guaranteed byte alignment of A, B and C/D (cuBLASLt's heuristic
  /// assumes 256 unless told, and an algorithm chosen for 256 may reject a
  /// less aligned pointer at launch).
  int alignA = 256, alignB = 256, alignC = 256;
  /// A cuBLASLt epilogue (weft/plan/Epilogue.h), with the alignments of the
  /// bias vector and the aux matrix it reads or writes.
  std::optional<plan::GemmEpilogue> epilogue;
  int alignBias = 256, alignAux = 256;

  auto tie() const {
    return std::tie(dtype, transA, transB, m, n, k, lda, ldb, ldc, betaZero,
                    alignA, alignB, alignC, epilogue, alignBias, alignAux);
  }
  bool operator<(const GemmKey &o) const { return tie() < o.tie(); }
  bool operator==(const GemmKey &o) const { return tie() == o.tie(); }
};

/// The key of a gemm instruction (column-major, BLAS convention), with the
/// alignments its operands have in `program`'s regions (each region starts
/// 256-byte aligned: cudaMalloc).
GemmKey gemmKeyOf(const plan::Program &program, const plan::Instruction &inst);

/// The largest power of two <= 256 dividing `byteOffset` (256 for 0).
int operandAlignment(int64_t byteOffset);

/// "bf16 NT m=64 n=128 k=32 lda=64 ldb=128 ldc=64 beta=0" (errors, logs),
/// then " +bias", " +gelu_aux_bias", " +dgelu" or " +bgrada" with an
/// epilogue.
std::string describe(const GemmKey &key);

/// Empty when the CUDA backend runs gemms of `dtype` (f32 exact, bf16/f16
/// with fp32 accumulation, f64); otherwise why not.
std::string gemmUnsupported(plan::DType dtype);

/// Empty when the key is a valid column-major GEMM (positive sizes, leading
/// dimensions at least the stored rows); otherwise what is wrong.
std::string gemmShapeProblem(const GemmKey &key);

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_GEMMKEY_H
