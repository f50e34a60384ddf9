//===- Common.h - Host/device portability, bf16 and f16 storage -*- C++ -*-===//
//
// Every kernel header in this directory is single-source: the math is written
// once as WEFT_HD functions over one element or one row, and both the CPU
// backend (host loops) and the CUDA backend (a thread per element or row, or
// a warp or block splitting a row) use it. Nothing here may use the C++
// standard library at run time, because device code cannot.
//
//===----------------------------------------------------------------------===//

#ifndef WEFT_KERNELS_COMMON_H
#define WEFT_KERNELS_COMMON_H

#ifdef __CUDACC_RTC__
// NVRTC (generated kernels compiled at load, docs/kernels.md) has no C++
// standard headers; device code needs only the fixed-width integers and
// HUGE_VAL (its math functions are built in).
namespace std {
using int32_t = int;
using int64_t = long long;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
} // namespace std
#define HUGE_VAL (__longlong_as_double(0x7ff0000000000000LL))
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#endif

#ifdef __CUDACC__
#define WEFT_HD __host__ __device__
#else
#define WEFT_HD
#endif

namespace weft::kernels {

/// Label value that cross-entropy skips (the PyTorch/Hugging Face default).
constexpr std::int32_t kIgnoreIndex = -100;

/// Overloads resolving to the C math library on the host and to CUDA's math
/// functions on the device, so templates pick the float or double variant.
namespace math {
WEFT_HD inline float exp(float x) { return ::expf(x); }
WEFT_HD inline double exp(double x) { return ::exp(x); }
WEFT_HD inline float log(float x) { return ::logf(x); }
WEFT_HD inline double log(double x) { return ::log(x); }
WEFT_HD inline float sqrt(float x) { return ::sqrtf(x); }
WEFT_HD inline double sqrt(double x) { return ::sqrt(x); }
WEFT_HD inline float erf(float x) { return ::erff(x); }
WEFT_HD inline double erf(double x) { return ::erf(x); }
WEFT_HD inline float tanh(float x) { return ::tanhf(x); }
WEFT_HD inline double tanh(double x) { return ::tanh(x); }
WEFT_HD inline float cos(float x) { return ::cosf(x); }
WEFT_HD inline double cos(double x) { return ::cos(x); }
WEFT_HD inline float sin(float x) { return ::sinf(x); }
WEFT_HD inline double sin(double x) { return ::sin(x); }
WEFT_HD inline float pow(float x, float y) { return ::powf(x, y); }
WEFT_HD inline double pow(double x, double y) { return ::pow(x, y); }
template <typename T> WEFT_HD inline bool isFinite(T x) {
#ifdef __CUDA_ARCH__
  return isfinite(x);
#else
  return std::isfinite(x);
#endif
}
template <typename T> WEFT_HD inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> WEFT_HD inline T infinity() {
  return static_cast<T>(HUGE_VAL);
}
} // namespace math

/// Adds `value` to `*dst`. On the device several threads may scatter into the
/// same element (embedding and attention gradients), so this is atomic there;
/// host loops are sequential and use a plain add.
template <typename T> WEFT_HD inline void accumulate(T *dst, T value) {
#ifdef __CUDA_ARCH__
  atomicAdd(dst, value);
#else
  *dst += value;
#endif
}

/// Sum of x[i] * y[i] over one contiguous row.
template <typename T>
WEFT_HD inline T dot(std::int64_t n, const T *x, const T *y) {
  T sum = 0;
  for (std::int64_t i = 0; i < n; ++i)
    sum += x[i] * y[i];
  return sum;
}

//===----------------------------------------------------------------------===//
// bf16 storage: the upper 16 bits of an IEEE float. Compute is always fp32.
//===----------------------------------------------------------------------===//

struct BF16 {
  std::uint16_t bits;
};

WEFT_HD inline std::uint32_t floatToBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

WEFT_HD inline float bitsToFloat(std::uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/// Rounds to the nearest bf16, ties to even; finite values too large round
/// to infinity. NaNs stay NaN (quieted, sign kept) instead of being rounded
/// into the infinity encoding.
WEFT_HD inline BF16 floatToBf16(float f) {
  std::uint32_t u = floatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return BF16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  std::uint32_t roundingBias = 0x7fffu + ((u >> 16) & 1u);
  return BF16{static_cast<std::uint16_t>((u + roundingBias) >> 16)};
}

WEFT_HD inline float bf16ToFloat(BF16 h) {
  return bitsToFloat(static_cast<std::uint32_t>(h.bits) << 16);
}

//===----------------------------------------------------------------------===//
// f16 storage: IEEE binary16 (1 sign, 5 exponent, 10 mantissa bits). Compute
// is always fp32. The conversions are integer code on host and device alike,
// so both backends round bit-identically and no CUDA header is needed.
//===----------------------------------------------------------------------===//

struct F16 {
  std::uint16_t bits;
};

/// Rounds to the nearest f16, ties to even, subnormals included; finite
/// values of magnitude 65520 or more round to infinity. NaNs stay NaN
/// (quieted, sign and top payload bits kept).
WEFT_HD inline F16 floatToF16(float f) {
  std::uint32_t u = floatToBits(f);
  std::uint32_t sign = (u >> 16) & 0x8000u;
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return F16{
        static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu))};
  if (abs >= 0x477ff000u) // 65520: halfway between 65504 and 2^16
    return F16{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (abs >= 0x38800000u) { // 2^-14, the smallest normal f16
    // Rebias the exponent (127 -> 15) and round away the low 13 mantissa
    // bits; a carry out of the mantissa correctly bumps the exponent.
    std::uint32_t rebiased = abs - (112u << 23);
    rebiased += 0xfffu + ((rebiased >> 13) & 1u);
    return F16{static_cast<std::uint16_t>(sign | (rebiased >> 13))};
  }
  if (abs <= 0x33000000u) // at most 2^-25, half the smallest subnormal
    return F16{static_cast<std::uint16_t>(sign)};
  // Subnormal: count units of 2^-24 from the full 24-bit significand. A
  // round-up to 0x400 is the smallest normal, which is the right encoding.
  std::uint32_t exponent = abs >> 23; // 102..112 here
  std::uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
  std::uint32_t shift = 126u - exponent;
  std::uint32_t units = significand >> shift;
  std::uint32_t rest = significand & ((1u << shift) - 1u);
  std::uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (units & 1u)))
    ++units;
  return F16{static_cast<std::uint16_t>(sign | units)};
}

/// Exact: every f16 is an f32. Signaling NaNs come back quieted.
WEFT_HD inline float f16ToFloat(F16 h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  std::uint32_t exponent = (h.bits >> 10) & 0x1fu;
  std::uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0x1fu)
    return bitsToFloat(sign | 0x7f800000u | (mantissa << 13) |
                       (mantissa ? 0x400000u : 0u));
  if (exponent != 0)
    return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, a normal (or zero) f32.
  float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return bitsToFloat(sign | floatToBits(magnitude));
}

/// An fp32 value as bf16 or f16 storage holds it (what a kernel reading the
/// stored value back sees).
WEFT_HD inline float roundedToBf16(float f) {
  return bf16ToFloat(floatToBf16(f));
}
WEFT_HD inline float roundedToF16(float f) { return f16ToFloat(floatToF16(f)); }

} // namespace weft::kernels

#endif // WEFT_KERNELS_COMMON_H
