//===- GemmKey.cpp - The cuBLASLt algorithm cache key ---------------------===//

#include "weft/exec/cuda/GemmKey.h"
#include "weft/exec/cuda/CudaBackend.h"

namespace weft::exec::cuda {

int operandAlignment(int64_t byteOffset) {
  int align = 256;
  while (align > 1 && byteOffset % align != 0)
    align /= 2;
  return align;
}

GemmKey gemmKeyOf(const plan::Program &program, const plan::Instruction &inst) {
  const plan::GemmParams &g = inst.gemm;
  GemmKey key;
  key.dtype = inst.dtype;
  key.transA = g.transA;
  key.transB = g.transB;
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.lda = g.lda;
  key.ldb = g.ldb;
  key.ldc = g.ldc;
  key.betaZero = g.beta == 0;
  auto align = [&](const plan::BufferRange &range) {
    return operandAlignment(program.buffers[size_t(range.buffer)].offset +
                            range.offset);
  };
  key.alignA = align(inst.reads.at(0));
  key.alignB = align(inst.reads.at(1));
  key.alignC = align(inst.writes.at(0));
  return key;
}

std::string describe(const GemmKey &key) {
  std::string s(plan::toString(key.dtype));
  s += ' ';
  s += key.transA ? 'T' : 'N';
  s += key.transB ? 'T' : 'N';
  s += " m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) +
       " k=" + std::to_string(key.k) + " lda=" + std::to_string(key.lda) +
       " ldb=" + std::to_string(key.ldb) + " ldc=" + std::to_string(key.ldc);
  if (key.betaZero)
    s += " beta=0";
  if (key.alignA != 256 || key.alignB != 256 || key.alignC != 256)
    s += " align=" + std::to_string(key.alignA) + "/" +
         std::to_string(key.alignB) + "/" + std::to_string(key.alignC);
  if (key.epilogue) {
    switch (*key.epilogue) {
    case plan::GemmEpilogue::None:
      break;
    case plan::GemmEpilogue::Bias:
      s += " +bias";
      break;
    case plan::GemmEpilogue::GeluBias:
      s += " +gelu_aux_bias";
      break;
    case plan::GemmEpilogue::DGelu:
      s += " +dgelu";
      break;
    case plan::GemmEpilogue::BiasGrad:
      s += " +bgrada";
      break;
    }
    if (key.alignBias != 256 || key.alignAux != 256)
      s += "(align=" + std::to_string(key.alignBias) + "/" +
           std::to_string(key.alignAux) + ")";
  }
  return s;
}

std::string gemmUnsupported(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::F32:
  case plan::DType::BF16:
  case plan::DType::F16:
  case plan::DType::F64:
    return {};
  default:
    return "gemm of " + std::string(plan::toString(dtype)) +
           " is not supported on CUDA (f32, bf16, f16, f64)";
  }
}

std::string gemmShapeProblem(const GemmKey &key) {
  if (key.m <= 0 || key.n <= 0 || key.k <= 0)
    return "gemm sizes must be positive (" + describe(key) + ")";
  int64_t rowsA = key.transA ? key.k : key.m;
  int64_t rowsB = key.transB ? key.n : key.k;
  if (key.lda < rowsA || key.ldb < rowsB || key.ldc < key.m)
    return "gemm leading dimensions are smaller than the stored rows (" +
           describe(key) + ")";
  return {};
}

} // namespace weft::exec::cuda
