//===- HalfFloatTest.cpp - f16 storage conversions ------------------------===//
//
// floatToF16 and f16ToFloat (weft/kernels/Common.h) against hand-checked
// encodings, and against the compiler's own _Float16 conversions as an
// independent reference: every one of the 65536 f16 bit patterns, and floats
// chosen around every rounding boundary (ties in every binade, the subnormal
// results, the overflow threshold 65520, two binades exhaustively).
//
//===----------------------------------------------------------------------===//

#include "weft/kernels/Common.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace weft::kernels;

namespace {

std::uint16_t toBits(float f) { return floatToF16(f).bits; }
float fromBits(std::uint16_t bits) { return f16ToFloat(F16{bits}); }
float floatOf(std::uint32_t bits) { return bitsToFloat(bits); }

TEST(F16Conversion, KnownEncodings) {
  EXPECT_EQ(toBits(0.0f), 0x0000);
  EXPECT_EQ(toBits(-0.0f), 0x8000);
  EXPECT_EQ(toBits(1.0f), 0x3c00);
  EXPECT_EQ(toBits(-2.0f), 0xc000);
  EXPECT_EQ(toBits(65504.0f), 0x7bff); // the largest finite f16
  EXPECT_EQ(toBits(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(toBits(65520.0f), 0x7c00); // the tie rounds to even: infinity
  EXPECT_EQ(toBits(-1e6f), 0xfc00);
  EXPECT_EQ(toBits(INFINITY), 0x7c00);
  EXPECT_EQ(toBits(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(toBits(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
  EXPECT_EQ(toBits(std::ldexp(1.0f, -25)), 0x0000); // tie: to even (zero)
  EXPECT_EQ(toBits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(toBits(std::ldexp(3.0f, -25)), 0x0002);        // 1.5 units: to even
  EXPECT_EQ(toBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00); // tie: to even
  EXPECT_EQ(toBits(1.0f + std::ldexp(3.0f, -11)), 0x3c02); // tie: to even
  EXPECT_EQ(toBits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)),
            0x3c01);
  // Rounding up out of the subnormals gives the smallest normal.
  EXPECT_EQ(toBits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);
  std::uint16_t nan = toBits(std::nanf(""));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_NE(toBits(floatOf(0x7f800001u)) & 0x03ff, 0); // payload only low

  EXPECT_EQ(fromBits(0x3c00), 1.0f);
  EXPECT_EQ(fromBits(0x7bff), 65504.0f);
  EXPECT_EQ(fromBits(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fromBits(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fromBits(0xfc00), -INFINITY);
  EXPECT_TRUE(std::signbit(fromBits(0x8000)));
  EXPECT_TRUE(std::isnan(fromBits(0x7c01)));
  EXPECT_TRUE(std::isnan(fromBits(0xfe00)));
}

TEST(F16Conversion, EveryF16RoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (nan)
      continue;
    ASSERT_EQ(toBits(fromBits(std::uint16_t(h))), h) << std::hex << h;
  }
}

#ifdef __FLT16_MANT_DIG__
constexpr bool kHaveFloat16 = true;
using Reference = _Float16;
#else
constexpr bool kHaveFloat16 = false;
using Reference = float; // unused: the reference tests skip
#endif

/// The compiler's conversion of f to f16, as bits.
std::uint16_t referenceToBits(float f) {
  Reference h = static_cast<Reference>(f);
  std::uint16_t bits = 0;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

float referenceFromBits(std::uint16_t bits) {
  Reference h;
  std::memcpy(&h, &bits, sizeof(bits));
  return static_cast<float>(h);
}

bool isF16Nan(std::uint16_t bits) {
  return (bits & 0x7c00u) == 0x7c00u && (bits & 0x3ffu) != 0;
}

/// Checks floatToF16(f) against the reference: bit-exact, except that a NaN
/// need only be a NaN of the same sign (payloads are not specified).
::testing::AssertionResult matchesReference(std::uint32_t floatBits) {
  float f = floatOf(floatBits);
  std::uint16_t got = toBits(f), want = referenceToBits(f);
  bool same = std::isnan(f) ? isF16Nan(got) && isF16Nan(want) &&
                                  (got & 0x8000u) == (want & 0x8000u)
                            : got == want;
  if (same)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << std::hex << "float 0x" << floatBits << " (" << f << ") -> 0x" << got
         << ", reference 0x" << want;
}

TEST(F16Conversion, EveryF16WidensLikeTheCompiler) {
  if (!kHaveFloat16)
    GTEST_SKIP() << "this compiler has no _Float16 to compare against";
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    float got = fromBits(std::uint16_t(h));
    float want = referenceFromBits(std::uint16_t(h));
    if (isF16Nan(std::uint16_t(h))) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(floatToBits(got), floatToBits(want)) << std::hex << h;
  }
}

TEST(F16Conversion, NarrowingRoundsLikeTheCompiler) {
  if (!kHaveFloat16)
    GTEST_SKIP() << "this compiler has no _Float16 to compare against";
  // The reference is libgcc's soft-float conversion (about 100 ns a call
  // without AVX512-FP16), so the sample is chosen rather than exhaustive.
  int64_t checked = 0;
  auto check = [&](std::uint32_t bits, bool bothSigns) {
    ++checked;
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      if (sign && !bothSigns)
        break;
      ::testing::AssertionResult result = matchesReference(bits | sign);
      if (!result) {
        ADD_FAILURE() << result.message();
        return false;
      }
    }
    return true;
  };
  // Every exponent and every f16-sized top mantissa, with low bits at and
  // around the normal-range tie (bit 12) and the ends of the dropped range.
  const std::uint32_t lowBits[] = {0x0000, 0x0001, 0x07ff, 0x0800, 0x0fff,
                                   0x1000, 0x1001, 0x17ff, 0x1800, 0x1fff};
  for (std::uint32_t exponent = 0; exponent < 256; ++exponent)
    for (std::uint32_t top = 0; top < 1024; ++top)
      for (std::uint32_t low : lowBits)
        if (!check(exponent << 23 | top << 13 | low, true))
          return;
  // Results in the subnormals (or zero): each binade drops 126 - exponent
  // bits of the 24-bit significand; every kept value with the dropped bits
  // at and around its tie.
  for (std::uint32_t exponent = 100; exponent <= 112; ++exponent) {
    std::uint32_t shift = 126 - exponent;
    std::uint64_t half = 1ull << (shift - 1), all = (1ull << shift) - 1;
    const std::uint64_t dropped[] = {0,    1,        half - 1,
                                     half, half + 1, all - 1,
                                     all,  half / 2, half + half / 2};
    for (std::uint64_t kept = 0; kept < (1ull << (24 - std::min(shift, 24u)));
         ++kept)
      for (std::uint64_t rest : dropped) {
        std::uint64_t significand = (kept << shift | rest) & 0xffffffull;
        if (significand < 0x800000ull)
          continue; // not a significand of this binade
        if (!check(exponent << 23 | std::uint32_t(significand & 0x7fffffull),
                   true))
          return;
      }
  }
  // Exhaustively the binade below the smallest normal (2^-15 <= |f| <
  // 2^-14: subnormal results and the round-up into 0x0400) and the binade
  // holding 65504, the 65520 threshold and everything up to 2^16.
  for (std::uint32_t bits = 112u << 23; bits < 113u << 23; ++bits)
    if (!check(bits, false))
      return;
  for (std::uint32_t bits = 142u << 23; bits < 143u << 23; ++bits)
    if (!check(bits, false))
      return;
  // And random floats of every kind, NaNs included.
  std::mt19937 random(20261122);
  for (int i = 0; i < 1000000; ++i)
    if (!check(std::uint32_t(random()) & 0x7fffffffu, true))
      return;
  EXPECT_GT(checked, 20000000);
}

} // namespace
