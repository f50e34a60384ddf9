//===- KernelTestUtil.h - Random inputs, error norms, finite differences --===//

#ifndef WEFT_TEST_UNIT_KERNELS_KERNELTESTUTIL_H
#define WEFT_TEST_UNIT_KERNELS_KERNELTESTUTIL_H

#include "weft/kernels/Common.h"
#include "weft/kernels/CpuKernels.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace weft::kernels::test {

/// Uniform values in [lo, hi); each test seeds its own generator so inputs
/// are fresh per test yet reproducible.
inline std::vector<double> randomVector(std::mt19937_64 &rng, std::size_t n,
                                        double lo = -1.0, double hi = 1.0) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double &x : v)
    x = dist(rng);
  return v;
}

inline std::vector<std::int32_t> randomIds(std::mt19937_64 &rng, std::size_t n,
                                           std::int32_t limit) {
  std::uniform_int_distribution<std::int32_t> dist(0, limit - 1);
  std::vector<std::int32_t> v(n);
  for (std::int32_t &x : v)
    x = dist(rng);
  return v;
}

/// Sets columns `valid` and beyond of `rows` rows `width` apart to `value`:
/// padding a kernel must not read (a value far above the others changes any
/// max or sum that reads it).
template <typename T>
void fillPadding(std::vector<T> &x, std::int64_t rows, std::int64_t width,
                 std::int64_t valid, T value) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = valid; c < width; ++c)
      x[std::size_t(r * width + c)] = value;
}

template <typename To, typename From>
std::vector<To> convert(const std::vector<From> &v) {
  return std::vector<To>(v.begin(), v.end());
}

/// ||a - b|| / ||b|| in double (0 when both are zero). A NaN anywhere makes
/// the result NaN, which fails every `< tolerance` check.
template <typename A, typename B>
double relativeError(const std::vector<A> &a, const std::vector<B> &b) {
  if (a.size() != b.size())
    return INFINITY;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double d = double(a[i]) - double(b[i]);
    diff += d * d;
    norm += double(b[i]) * double(b[i]);
  }
  if (norm == 0)
    return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

/// Central differences d loss / d x[i] for every i, perturbing x in place.
inline std::vector<double> numericGradient(std::vector<double> &x,
                                           const std::function<double()> &loss,
                                           double step = 1e-6) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + step;
    double up = loss();
    x[i] = saved - step;
    double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * step);
  }
  return grad;
}

/// sum_i w[i] * y[i]: the scalar whose gradient w.r.t. y is w.
inline double weightedSum(const std::vector<double> &w,
                          const std::vector<double> &y) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i)
    s += w[i] * y[i];
  return s;
}

/// Attention dims with the usual scale 1/sqrt(headDim).
inline AttentionDims scaledAttentionDims(std::int64_t batch, std::int64_t seq,
                                         std::int64_t heads,
                                         std::int64_t kvHeads,
                                         std::int64_t headDim, bool causal) {
  return {batch,
          seq,
          heads,
          kvHeads,
          headDim,
          causal,
          1.0 / std::sqrt(double(headDim))};
}

/// The fp32 CPU kernels' attention forward and backward: the reference the
/// CUDA kernels (and their emulation) are checked against.
struct AttentionReference {
  std::vector<float> out, lse, dq, dk, dv;
};
inline AttentionReference cpuAttention(const AttentionDims &d,
                                       const std::vector<float> &q,
                                       const std::vector<float> &k,
                                       const std::vector<float> &v,
                                       const std::vector<float> &dOut) {
  const std::size_t stats = std::size_t(d.batch * d.heads * d.seq);
  AttentionReference r{std::vector<float>(q.size()), std::vector<float>(stats),
                       std::vector<float>(q.size()),
                       std::vector<float>(k.size()),
                       std::vector<float>(k.size())};
  cpu::attentionForward(d, q.data(), k.data(), v.data(), r.out.data(),
                        r.lse.data());
  cpu::attentionBackward(d, q.data(), k.data(), v.data(), r.out.data(),
                         r.lse.data(), dOut.data(), r.dq.data(), r.dk.data(),
                         r.dv.data());
  return r;
}

/// bf16 or f16 storage in tests of the 16-bit kernels: rounds floats to bits
/// and widens bits to floats with the conversions the backends use.
struct HalfCodec {
  bool bf16;

  std::uint16_t round(float x) const {
    return bf16 ? floatToBf16(x).bits : floatToF16(x).bits;
  }
  float widen(std::uint16_t bits) const {
    return bf16 ? bf16ToFloat(BF16{bits}) : f16ToFloat(F16{bits});
  }
  std::vector<std::uint16_t> narrow(const std::vector<float> &in) const {
    std::vector<std::uint16_t> out;
    for (float x : in)
      out.push_back(round(x));
    return out;
  }
  std::vector<float> widen(const std::uint16_t *in, std::size_t n) const {
    std::vector<float> out;
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(widen(in[i]));
    return out;
  }
  std::vector<float> widen(const std::vector<std::uint16_t> &in) const {
    return widen(in.data(), in.size());
  }
  /// Uniform values in [lo, hi), rounded.
  std::vector<std::uint16_t> random(std::mt19937_64 &rng, std::size_t n,
                                    double lo, double hi) const {
    std::vector<std::uint16_t> out;
    for (double x : randomVector(rng, n, lo, hi))
      out.push_back(round(float(x)));
    return out;
  }
  std::string name() const { return bf16 ? "bf16" : "f16"; }
};

} // namespace weft::kernels::test

#endif // WEFT_TEST_UNIT_KERNELS_KERNELTESTUTIL_H
