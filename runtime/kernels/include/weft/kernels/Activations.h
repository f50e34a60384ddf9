//===- Activations.h - Point-wise activations -------------------*- C++ -*-===//

#ifndef WEFT_KERNELS_ACTIVATIONS_H
#define WEFT_KERNELS_ACTIVATIONS_H

#include "weft/kernels/Common.h"

namespace weft::kernels {

enum class Activation : std::int32_t {
  ReLU,
  GeluErf,  ///< 0.5 x (1 + erf(x / sqrt 2)), GPT-2's "gelu" in PyTorch.
  GeluTanh, ///< The tanh approximation ("gelu_new", "gelu_pytorch_tanh").
  SiLU,     ///< x * sigmoid(x), LLaMA's gate activation.
};

template <typename T> WEFT_HD inline T sigmoid(T x) {
  return T(1) / (T(1) + math::exp(-x));
}

/// act(x).
template <typename T> WEFT_HD inline T activate(Activation act, T x) {
  switch (act) {
  case Activation::ReLU:
    return x > T(0) ? x : T(0);
  case Activation::GeluErf:
    return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
  case Activation::GeluTanh: {
    T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return T(0.5) * x * (T(1) + math::tanh(u));
  }
  case Activation::SiLU:
    return x * sigmoid(x);
  }
  return x;
}

/// d act(x) / dx (ReLU: 0 at x = 0).
template <typename T> WEFT_HD inline T activateDerivative(Activation act, T x) {
  switch (act) {
  case Activation::ReLU:
    return x > T(0) ? T(1) : T(0);
  case Activation::GeluErf: {
    T cdf = T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752440)));
    T pdf = T(0.39894228040143267794) * math::exp(T(-0.5) * x * x);
    return cdf + x * pdf;
  }
  case Activation::GeluTanh: {
    T k = T(0.79788456080286535588);
    T t = math::tanh(k * (x + T(0.044715) * x * x * x));
    return T(0.5) * (T(1) + t) +
           T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x * x);
  }
  case Activation::SiLU: {
    T s = sigmoid(x);
    return s * (T(1) + x * (T(1) - s));
  }
  }
  return T(1);
}

/// Gated linear unit: out = act(gate) * up (SwiGLU with SiLU).
template <typename T>
WEFT_HD inline T gatedActivate(Activation act, T gate, T up) {
  return activate(act, gate) * up;
}

/// Gradients of gatedActivate given the output gradient `dOut`.
template <typename T>
WEFT_HD inline void gatedActivateBackward(Activation act, T gate, T up, T dOut,
                                          T &dGate, T &dUp) {
  dGate = dOut * up * activateDerivative(act, gate);
  dUp = dOut * activate(act, gate);
}

} // namespace weft::kernels

#endif // WEFT_KERNELS_ACTIVATIONS_H
