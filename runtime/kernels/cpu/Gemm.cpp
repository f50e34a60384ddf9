//===- Gemm.cpp - Row-major GEMM through OpenBLAS cblas -------------------===//

#include "weft/kernels/CpuKernels.h"

#include <cblas.h>

namespace weft::kernels::cpu {

static CBLAS_TRANSPOSE toCblas(bool trans) {
  return trans ? CblasTrans : CblasNoTrans;
}

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, toCblas(transA), toCblas(transB), m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
          double alpha, const double *a, int64_t lda, const double *b,
          int64_t ldb, double beta, double *c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, toCblas(transA), toCblas(transB), m, n, k, alpha,
              a, lda, b, ldb, beta, c, ldc);
}

} // namespace weft::kernels::cpu
