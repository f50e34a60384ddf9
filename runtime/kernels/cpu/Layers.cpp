//===- Layers.cpp - Element-wise, norm, embedding and rotary kernels ------===//

#include "weft/kernels/CpuKernels.h"
#include "weft/kernels/Embedding.h"
#include "weft/kernels/Norms.h"
#include "weft/kernels/Rotary.h"

namespace weft::kernels::cpu {

template <typename T>
void biasAdd(int64_t rows, int64_t width, const T *bias, T *y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      y[r * width + c] += bias[c];
}

template <typename T>
void biasGrad(int64_t rows, int64_t width, const T *dy, T *dBias) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c)
      dBias[c] += dy[r * width + c];
}

template <typename T>
void residualAdd(int64_t n, const T *a, const T *b, T *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

template <typename T>
void activationForward(Activation act, int64_t n, const T *x, T *y) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = activate(act, x[i]);
}

template <typename T>
void activationBackward(Activation act, int64_t n, const T *x, const T *dy,
                        T *dx) {
  for (int64_t i = 0; i < n; ++i)
    dx[i] = dy[i] * activateDerivative(act, x[i]);
}

template <typename T>
void gatedForward(Activation act, int64_t n, const T *gate, const T *up,
                  T *out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = gatedActivate(act, gate[i], up[i]);
}

template <typename T>
void gatedBackward(Activation act, int64_t n, const T *gate, const T *up,
                   const T *dOut, T *dGate, T *dUp) {
  for (int64_t i = 0; i < n; ++i)
    gatedActivateBackward(act, gate[i], up[i], dOut[i], dGate[i], dUp[i]);
}

template <typename T>
void layerNormForward(int64_t rows, int64_t width, const T *x, const T *gamma,
                      const T *beta, T eps, T *y, T *mean, T *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width;
    layerNormRowStats(width, xr, eps, mean[r], rstd[r]);
    layerNormRowForward(width, xr, gamma, beta, mean[r], rstd[r],
                        y + r * width);
  }
}

namespace {

/// A function pointer as a rounding of norm input gradients (null: none).
template <typename T> struct RoundWith {
  T (*round)(T);
  T operator()(T v) const { return round ? round(v) : v; }
};

/// One row's dGamma += dy xhat and dBeta (nullable) += dy.
template <typename T>
void layerNormParamGradRow(int64_t width, const T *xr, T mean, T rstd,
                           const T *dyr, T *dGamma, T *dBeta) {
  for (int64_t c = 0; c < width; ++c) {
    dGamma[c] += dyr[c] * (xr[c] - mean) * rstd;
    if (dBeta)
      dBeta[c] += dyr[c];
  }
}

template <typename T>
void rmsNormParamGradRow(int64_t width, const T *xr, T rstd, const T *dyr,
                         T *dGamma) {
  for (int64_t c = 0; c < width; ++c)
    dGamma[c] += dyr[c] * xr[c] * rstd;
}

} // namespace

template <typename T>
void layerNormBackward(int64_t rows, int64_t width, const T *x, const T *gamma,
                       const T *mean, const T *rstd, const T *dy, T *dx,
                       T *dGamma, T *dBeta) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width, *dyr = dy + r * width;
    // Parameter gradients first: dx may alias dy.
    layerNormParamGradRow(width, xr, mean[r], rstd[r], dyr, dGamma, dBeta);
    layerNormRowBackward(width, xr, gamma, mean[r], rstd[r], dyr,
                         dx + r * width);
  }
}

template <typename T>
void layerNormBackwardAdd(int64_t rows, int64_t width, const T *x,
                          const T *gamma, const T *mean, const T *rstd,
                          const T *dy, const T *addend, T *sum, T *dGamma,
                          T *dBeta, T (*round)(T)) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width, *dyr = dy + r * width;
    layerNormParamGradRow(width, xr, mean[r], rstd[r], dyr, dGamma, dBeta);
    layerNormRowBackwardAdd(width, xr, gamma, mean[r], rstd[r], dyr,
                            addend + r * width, sum + r * width,
                            RoundWith<T>{round});
  }
}

template <typename T>
void rmsNormForward(int64_t rows, int64_t width, const T *x, const T *gamma,
                    T eps, T *y, T *rstd) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width;
    rstd[r] = rmsNormRowRstd(width, xr, eps);
    rmsNormRowForward(width, xr, gamma, rstd[r], y + r * width);
  }
}

template <typename T>
void rmsNormBackward(int64_t rows, int64_t width, const T *x, const T *gamma,
                     const T *rstd, const T *dy, T *dx, T *dGamma) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width, *dyr = dy + r * width;
    rmsNormParamGradRow(width, xr, rstd[r], dyr, dGamma);
    rmsNormRowBackward(width, xr, gamma, rstd[r], dyr, dx + r * width);
  }
}

template <typename T>
void rmsNormBackwardAdd(int64_t rows, int64_t width, const T *x, const T *gamma,
                        const T *rstd, const T *dy, const T *addend, T *sum,
                        T *dGamma, T (*round)(T)) {
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * width, *dyr = dy + r * width;
    rmsNormParamGradRow(width, xr, rstd[r], dyr, dGamma);
    rmsNormRowBackwardAdd(width, xr, gamma, rstd[r], dyr, addend + r * width,
                          sum + r * width, RoundWith<T>{round});
  }
}

template <typename T>
void embeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                      const std::int32_t *ids, const T *wte, const T *wpe,
                      const T *tokenType, int64_t positionOffset, T *out) {
  for (int64_t t = 0; t < batch * seq; ++t) {
    const T *pos = wpe ? wpe + (t % seq + positionOffset) * hidden : nullptr;
    embeddingRowForward(hidden, wte + int64_t(ids[t]) * hidden, pos, tokenType,
                        out + t * hidden);
  }
}

template <typename T>
void embeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                       const std::int32_t *ids, const T *dOut,
                       int64_t positionOffset, T *dWte, T *dWpe,
                       T *dTokenType) {
  for (int64_t t = 0; t < batch * seq; ++t) {
    T *dPos = dWpe ? dWpe + (t % seq + positionOffset) * hidden : nullptr;
    embeddingRowBackward(hidden, dOut + t * hidden,
                         dWte + int64_t(ids[t]) * hidden, dPos, dTokenType);
  }
}

template <typename T>
void vocabEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                           int64_t vocabStart, int64_t shardRows,
                           const std::int32_t *ids, const T *table, T *out) {
  for (int64_t t = 0; t < batch * seq; ++t)
    vocabEmbeddingRowForward(hidden, vocabStart, shardRows, table, ids[t],
                             out + t * hidden);
}

template <typename T>
void vocabEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                            int64_t vocabStart, int64_t shardRows,
                            const std::int32_t *ids, const T *dOut, T *dTable) {
  for (int64_t t = 0; t < batch * seq; ++t)
    vocabEmbeddingRowBackward(hidden, vocabStart, shardRows, ids[t],
                              dOut + t * hidden, dTable);
}

template <typename T>
void positionEmbeddingForward(int64_t batch, int64_t seq, int64_t hidden,
                              int64_t positionOffset, const T *x, const T *wpe,
                              T *out) {
  for (int64_t t = 0; t < batch * seq; ++t)
    positionEmbeddingRowForward(hidden, x + t * hidden,
                                wpe + (t % seq + positionOffset) * hidden,
                                out + t * hidden);
}

template <typename T>
void positionEmbeddingBackward(int64_t batch, int64_t seq, int64_t hidden,
                               int64_t positionOffset, const T *dOut, T *dWpe) {
  for (int64_t t = 0; t < batch * seq; ++t) {
    T *row = dWpe + (t % seq + positionOffset) * hidden;
    for (int64_t i = 0; i < hidden; ++i)
      row[i] += dOut[t * hidden + i];
  }
}

template <typename T>
static void rotaryApply(int64_t batch, int64_t seq, int64_t heads,
                        int64_t headDim, int64_t positionOffset, T theta,
                        bool inverse, const T *x, T *y) {
  for (int64_t t = 0; t < batch * seq; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t row = (t * heads + h) * headDim;
      rotaryRow(headDim, t % seq + positionOffset, theta, inverse, x + row,
                y + row);
    }
}

template <typename T>
void rotaryForward(int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                   int64_t positionOffset, T theta, const T *x, T *y) {
  rotaryApply(batch, seq, heads, headDim, positionOffset, theta, false, x, y);
}

template <typename T>
void rotaryBackward(int64_t batch, int64_t seq, int64_t heads, int64_t headDim,
                    int64_t positionOffset, T theta, const T *dy, T *dx) {
  rotaryApply(batch, seq, heads, headDim, positionOffset, theta, true, dy, dx);
}

#define WEFT_INSTANTIATE(T)                                                    \
  template void biasAdd<T>(int64_t, int64_t, const T *, T *);                  \
  template void biasGrad<T>(int64_t, int64_t, const T *, T *);                 \
  template void residualAdd<T>(int64_t, const T *, const T *, T *);            \
  template void activationForward<T>(Activation, int64_t, const T *, T *);     \
  template void activationBackward<T>(Activation, int64_t, const T *,          \
                                      const T *, T *);                         \
  template void gatedForward<T>(Activation, int64_t, const T *, const T *,     \
                                T *);                                          \
  template void gatedBackward<T>(Activation, int64_t, const T *, const T *,    \
                                 const T *, T *, T *);                         \
  template void layerNormForward<T>(int64_t, int64_t, const T *, const T *,    \
                                    const T *, T, T *, T *, T *);              \
  template void layerNormBackward<T>(int64_t, int64_t, const T *, const T *,   \
                                     const T *, const T *, const T *, T *,     \
                                     T *, T *);                                \
  template void layerNormBackwardAdd<T>(                                       \
      int64_t, int64_t, const T *, const T *, const T *, const T *, const T *, \
      const T *, T *, T *, T *, T (*)(T));                                     \
  template void rmsNormForward<T>(int64_t, int64_t, const T *, const T *, T,   \
                                  T *, T *);                                   \
  template void rmsNormBackwardAdd<T>(int64_t, int64_t, const T *, const T *,  \
                                      const T *, const T *, const T *, T *,    \
                                      T *, T (*)(T));                          \
  template void rmsNormBackward<T>(int64_t, int64_t, const T *, const T *,     \
                                   const T *, const T *, T *, T *);            \
  template void embeddingForward<T>(int64_t, int64_t, int64_t,                 \
                                    const std::int32_t *, const T *,           \
                                    const T *, const T *, int64_t, T *);       \
  template void embeddingBackward<T>(int64_t, int64_t, int64_t,                \
                                     const std::int32_t *, const T *, int64_t, \
                                     T *, T *, T *);                           \
  template void vocabEmbeddingForward<T>(int64_t, int64_t, int64_t, int64_t,   \
                                         int64_t, const std::int32_t *,        \
                                         const T *, T *);                      \
  template void vocabEmbeddingBackward<T>(int64_t, int64_t, int64_t, int64_t,  \
                                          int64_t, const std::int32_t *,       \
                                          const T *, T *);                     \
  template void positionEmbeddingForward<T>(                                   \
      int64_t, int64_t, int64_t, int64_t, const T *, const T *, T *);          \
  template void positionEmbeddingBackward<T>(int64_t, int64_t, int64_t,        \
                                             int64_t, const T *, T *);         \
  template void rotaryForward<T>(int64_t, int64_t, int64_t, int64_t, int64_t,  \
                                 T, const T *, T *);                           \
  template void rotaryBackward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, \
                                  T, const T *, T *);

WEFT_INSTANTIATE(float)
WEFT_INSTANTIATE(double)

} // namespace weft::kernels::cpu
