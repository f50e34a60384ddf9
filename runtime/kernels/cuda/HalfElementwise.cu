//===- HalfElementwise.cu - Launches of the 16-bit element-wise kernels ---===//

#include "HalfElementwise.cuh"
#include "Launch.cuh"
#include "weft/kernels/CudaKernels.h"

namespace weft::kernels::gpu {

namespace {

half::Half16 storage(HalfType type) { return {type == HalfType::BF16}; }
const std::uint16_t *in(const void *p) {
  return static_cast<const std::uint16_t *>(p);
}
std::uint16_t *out(void *p) { return static_cast<std::uint16_t *>(p); }

} // namespace

cudaError_t halfBiasAdd(HalfType type, int64_t rows, int64_t width,
                        const void *x, const void *bias, void *y,
                        cudaStream_t stream) {
  return detail::launch(rows * width, stream, half::biasAdd, storage(type),
                        rows * width, width, in(x), in(bias), out(y));
}

cudaError_t halfResidualAdd(HalfType type, int64_t n, const void *a,
                            const void *b, void *sum, cudaStream_t stream) {
  return detail::launch(n, stream, half::residualAdd, storage(type), n, in(a),
                        in(b), out(sum));
}

cudaError_t halfActivationForward(HalfType type, Activation act, int64_t n,
                                  const void *x, void *y, cudaStream_t stream) {
  return detail::launch(n, stream, half::activationForward, storage(type), act,
                        n, in(x), out(y));
}

cudaError_t halfActivationBackward(HalfType type, Activation act, int64_t n,
                                   const void *x, const void *dy, void *dx,
                                   cudaStream_t stream) {
  return detail::launch(n, stream, half::activationBackward, storage(type), act,
                        n, in(x), in(dy), out(dx));
}

cudaError_t halfGatedForward(HalfType type, Activation act, int64_t n,
                             const void *gate, const void *up, void *result,
                             cudaStream_t stream) {
  return detail::launch(n, stream, half::gatedForward, storage(type), act, n,
                        in(gate), in(up), out(result));
}

cudaError_t halfGatedBackward(HalfType type, Activation act, int64_t n,
                              const void *gate, const void *up,
                              const void *dOut, void *dGate, void *dUp,
                              cudaStream_t stream) {
  return detail::launch(n, stream, half::gatedBackward, storage(type), act, n,
                        in(gate), in(up), in(dOut), out(dGate), out(dUp));
}

} // namespace weft::kernels::gpu
