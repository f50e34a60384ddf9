//===- FloatStorage.h - How a float operand of a backend kernel is stored -===//
#ifndef WEFT_EXEC_CUDA_FLOATSTORAGE_H
#define WEFT_EXEC_CUDA_FLOATSTORAGE_H

namespace weft::exec::cuda {

/// How a float operand is stored; compute is fp32 for all of them.
enum class FloatStorage { F32, BF16, F16 };

} // namespace weft::exec::cuda

#endif // WEFT_EXEC_CUDA_FLOATSTORAGE_H
