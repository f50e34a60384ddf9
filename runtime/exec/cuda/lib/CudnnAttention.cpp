//===- CudnnAttention.cpp - cuDNN's fused attention -----------------------===//
//
// The frontend's sdpa graphs over Weft's attention layouts. Built with
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (libcudnn is dlopen'ed here, its
// symbols looked up by the frontend) and CUDNN_FRONTEND_SKIP_JSON_LIB.
//
//===----------------------------------------------------------------------===//

#include "weft/exec/cuda/CudnnAttention.h"
#include "weft/exec/cuda/CudaBackend.h"

#include <cstdlib>
#include <iterator>
#include <map>
#include <tuple>

#if WEFT_HAVE_CUDNN
#include <cudnn_frontend.h>
#include <dlfcn.h>

// The library handle the frontend's dynamic loading looks its symbols up in.
namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend
#endif

namespace weft::exec::cuda {

using kernels::AttentionDims;
using kernels::gpu::HalfType;

bool builtWithCudnn() {
#if WEFT_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

std::string cudnnAttentionUnsupported(const AttentionDims &d) {
  if (d.headDim < 8 || d.headDim > 128 || d.headDim % 8 != 0)
    return "head dim " + std::to_string(d.headDim) +
           " (cuDNN's fused attention takes 8..128 in steps of 8)";
  if (d.kvHeads <= 0 || d.heads % d.kvHeads != 0)
    return std::to_string(d.heads) + " query heads over " +
           std::to_string(d.kvHeads) + " key/value heads";
  if (d.batch <= 0 || d.seq <= 0)
    return "no rows";
  return {};
}

#if WEFT_HAVE_CUDNN

namespace fe = cudnn_frontend;

namespace {

/// The most device workspace a graph may take (it is per-stream scratch the
/// planner does not see).
constexpr int64_t kMaxWorkspaceBytes = int64_t(4) << 30;

// Tensor uids: the variant pack maps them to the kernel's operands.
enum Uid : int64_t { Q = 1, K, V, O, Stats, DO, DQ, DK, DV, SeqLenQ, SeqLenKV };

/// cuDNN up to 9.15 masks a backward whose key count is not a multiple of
/// 128 with a padding mask the frontend adds itself, copying its sequence
/// lengths from a temporary host vector at every execute(): under graph
/// capture a replay would read freed memory. Such backwards declare the
/// padding mask themselves, the lengths (all `seq`) in device memory written
/// once at prepare().
bool needsOwnPaddingMask(const AttentionDims &d) {
  return d.seq % 128 != 0 && fe::detail::get_backend_version() <= 91500;
}

using Key = std::tuple<bool, HalfType, int64_t, int64_t, int64_t, int64_t,
                       int64_t, bool, double>;

Key keyOf(bool backward, HalfType type, const AttentionDims &d) {
  return {backward,  type,      d.batch,  d.seq,  d.heads,
          d.kvHeads, d.headDim, d.causal, d.scale};
}

/// cuDNN's (or the frontend's) message on one line, for one-line errors.
std::string oneLine(std::string message) {
  for (char &c : message)
    if (c == '\n' || c == '\r')
      c = ' ';
  while (!message.empty() && message.back() == ' ')
    message.pop_back();
  return message.empty() ? "no reason given" : message;
}

/// Dims and strides of a [batch, seq, heads, headDim] operand as cuDNN's
/// [batch, heads, seq, headDim].
std::pair<std::vector<int64_t>, std::vector<int64_t>>
bshd(const AttentionDims &d, int64_t heads) {
  return {{d.batch, heads, d.seq, d.headDim},
          {d.seq * heads * d.headDim, d.headDim, heads * d.headDim, 1}};
}

} // namespace

struct CudnnAttentionGraph {
  fe::graph::Graph graph;
  bool backward = false;
  int64_t workspace = 0;
  /// The padding mask's sequence lengths (needsOwnPaddingMask), batch ints
  /// on the device, shared by the query and key sides; else null.
  int32_t *seqLens = nullptr;

  CudnnAttentionGraph() = default;
  CudnnAttentionGraph(const CudnnAttentionGraph &) = delete;
  CudnnAttentionGraph &operator=(const CudnnAttentionGraph &) = delete;
  ~CudnnAttentionGraph() {
    if (seqLens)
      (void)cudaFree(seqLens);
  }
};

struct CudnnAttention::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<Key, std::unique_ptr<CudnnAttentionGraph>> graphs;
  std::map<Key, std::string> refused;       // cuDNN's reasons, asked once
  std::unordered_map<int64_t, void *> pack; // reused by run()

  ~Impl() {
    graphs.clear(); // their execution plans before the handle they use
    if (handle)
      (void)fe::detail::destroy_handle(handle);
    // The library stays loaded: the frontend caches symbols from it.
  }
};

std::unique_ptr<CudnnAttention> CudnnAttention::open(std::string &why) {
  if (!fe::cudnn_dlhandle) {
    // $WEFT_CUDNN_LIBRARY (a path, e.g. a pip wheel's copy), else the
    // loader's search path.
    const char *forced = std::getenv("WEFT_CUDNN_LIBRARY");
    std::vector<std::string> names;
    if (forced && *forced)
      names = {forced};
    else
      names = {"libcudnn.so.9", "libcudnn.so"};
    std::string error;
    for (const std::string &name : names) {
      if ((fe::cudnn_dlhandle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
      const char *reason = dlerror();
      if (error.empty())
        error = reason ? reason : name + ": not found";
    }
    if (!fe::cudnn_dlhandle) {
      why = "cannot load cuDNN: " + oneLine(error) +
            (forced && *forced ? " (WEFT_CUDNN_LIBRARY)" : "");
      return nullptr;
    }
  }
  auto impl = std::make_unique<Impl>();
  try {
    if (size_t v = fe::detail::get_backend_version(); v < 90000) {
      why = "cuDNN " + fe::detail::get_backend_version_string() +
            " is older than 9.0";
      return nullptr;
    }
    if (cudnnStatus_t rc = fe::detail::create_handle(&impl->handle);
        rc != CUDNN_STATUS_SUCCESS) {
      impl->handle = nullptr;
      why = std::string("cudnnCreate: ") + fe::detail::get_error_string(rc);
      return nullptr;
    }
  } catch (const std::exception &e) {
    why = oneLine(e.what());
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

std::string CudnnAttention::version() const {
  return fe::detail::get_backend_version_string();
}

const CudnnAttentionGraph *CudnnAttention::prepare(bool backward, HalfType type,
                                                   const AttentionDims &d,
                                                   std::string &why) {
  if (std::string unsupported = cudnnAttentionUnsupported(d);
      !unsupported.empty()) {
    why = unsupported;
    return nullptr;
  }
  Key key = keyOf(backward, type, d);
  if (auto it = impl_->graphs.find(key); it != impl_->graphs.end())
    return it->second.get();
  if (auto it = impl_->refused.find(key); it != impl_->refused.end()) {
    why = it->second;
    return nullptr;
  }
  auto built = std::make_unique<CudnnAttentionGraph>();
  built->backward = backward;
  fe::graph::Graph &g = built->graph;
  // The frontend throws where it finds no implementation (and its dynamic
  // loading where a symbol is missing): every throw is a refusal.
  std::string refusal;
  try {
    g.set_io_data_type(type == HalfType::BF16 ? fe::DataType_t::BFLOAT16
                                              : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, Uid uid, int64_t heads) {
      auto [dim, stride] = bshd(d, heads);
      return g.tensor(fe::graph::Tensor_attributes()
                          .set_name(name)
                          .set_uid(uid)
                          .set_dim(dim)
                          .set_stride(stride));
    };
    auto output = [&](const std::shared_ptr<fe::graph::Tensor_attributes> &t,
                      Uid uid, int64_t heads) {
      auto [dim, stride] = bshd(d, heads);
      t->set_output(true).set_uid(uid).set_dim(dim).set_stride(stride);
    };
    std::vector<int64_t> statDim = {d.batch, d.heads, d.seq, 1},
                         statStride = {d.heads * d.seq, d.seq, 1, 1};
    auto q = tensor("q", Q, d.heads), k = tensor("k", K, d.kvHeads),
         v = tensor("v", V, d.kvHeads);
    float scale = float(d.scale);
    if (!backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("attention_forward")
                         .set_generate_stats(true)
                         .set_causal_mask(d.causal)
                         .set_attn_scale(scale);
      // The composite engines, as the backward's: left to itself the frontend
      // picks the newer unified sdpa op for a non-causal forward (cuDNN >=
      // 9.13.1), whose refusal of a shape would be cached as final.
      options.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
      auto [o, stats] = g.sdpa(q, k, v, options);
      output(o, O, d.heads);
      stats->set_output(true)
          .set_uid(Stats)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim(statDim)
          .set_stride(statStride);
    } else {
      auto o = tensor("out", O, d.heads), dO = tensor("dOut", DO, d.heads);
      auto stats = g.tensor(fe::graph::Tensor_attributes()
                                .set_name("lse")
                                .set_uid(Stats)
                                .set_data_type(fe::DataType_t::FLOAT)
                                .set_dim(statDim)
                                .set_stride(statStride));
      auto options = fe::graph::SDPA_backward_attributes()
                         .set_name("attention_backward")
                         .set_causal_mask(d.causal)
                         .set_attn_scale(scale)
                         .set_deterministic_algorithm(true);
      if (needsOwnPaddingMask(d)) {
        std::vector<int32_t> seqs(size_t(d.batch), int32_t(d.seq));
        size_t bytes = seqs.size() * sizeof(int32_t);
        cudaError_t rc =
            cudaMalloc(reinterpret_cast<void **>(&built->seqLens), bytes);
        if (rc == cudaSuccess)
          rc = cudaMemcpy(built->seqLens, seqs.data(), bytes,
                          cudaMemcpyHostToDevice);
        if (rc != cudaSuccess) {
          why = std::string("sequence lengths for the padding mask: ") +
                cudaGetErrorString(rc);
          return nullptr; // not cached: a device error, not cuDNN's refusal
        }
        auto lengths = [&](const char *name, Uid uid) {
          return g.tensor(fe::graph::Tensor_attributes()
                              .set_name(name)
                              .set_uid(uid)
                              .set_dim({d.batch, 1, 1, 1})
                              .set_stride({1, 1, 1, 1})
                              .set_data_type(fe::DataType_t::INT32));
        };
        options.set_padding_mask(true)
            .set_seq_len_q(lengths("seq_len_q", SeqLenQ))
            .set_seq_len_kv(lengths("seq_len_kv", SeqLenKV));
      }
      auto [dQ, dK, dV] = g.sdpa_backward(q, k, v, o, dO, stats, options);
      output(dQ, DQ, d.heads);
      output(dK, DK, d.kvHeads);
      output(dV, DV, d.kvHeads);
    }
    fe::error_t status = g.build(impl_->handle, {fe::HeurMode_t::A});
    if (status.is_good())
      status = g.get_workspace_size(built->workspace);
    if (!status.is_good())
      refusal = oneLine(status.get_message());
  } catch (const std::exception &e) {
    refusal = oneLine(e.what());
  }
  // The deterministic backward's workspace on Hopper is quadratic in seq
  // (b * h * seq^2 * 2 bytes before cuDNN 9.25), outside the planned arena.
  if (refusal.empty() && built->workspace > kMaxWorkspaceBytes)
    refusal = "its workspace would be " +
              std::to_string(built->workspace >> 20) + " MiB, over the " +
              std::to_string(kMaxWorkspaceBytes >> 20) + " MiB limit";
  if (!refusal.empty()) {
    why = impl_->refused[key] = refusal;
    return nullptr;
  }
  return (impl_->graphs[key] = std::move(built)).get();
}

int64_t CudnnAttention::workspaceBytes(const CudnnAttentionGraph &graph) {
  return graph.workspace;
}

std::string CudnnAttention::run(const CudnnAttentionGraph &graph,
                                const std::vector<void *> &reads,
                                const std::vector<void *> &writes,
                                void *workspace, cudaStream_t stream) {
  static constexpr Uid forwardReads[] = {Q, K, V}, forwardWrites[] = {O, Stats},
                       backwardReads[] = {Q, K, V, O, Stats, DO},
                       backwardWrites[] = {DQ, DK, DV};
  auto &pack = impl_->pack;
  pack.clear();
  auto bind = [&](const auto &uids, const std::vector<void *> &operands) {
    if (operands.size() != std::size(uids))
      return false;
    for (size_t i = 0; i < operands.size(); ++i)
      pack[uids[i]] = operands[i];
    return true;
  };
  bool bound = graph.backward
                   ? bind(backwardReads, reads) && bind(backwardWrites, writes)
                   : bind(forwardReads, reads) && bind(forwardWrites, writes);
  if (!bound)
    return "wrong operand count for cuDNN attention";
  if (graph.seqLens)
    pack[SeqLenQ] = pack[SeqLenKV] = graph.seqLens;
  try {
    if (cudnnStatus_t rc = fe::detail::set_stream(impl_->handle, stream);
        rc != CUDNN_STATUS_SUCCESS)
      return std::string("cudnnSetStream: ") + fe::detail::get_error_string(rc);
    fe::error_t status = graph.graph.execute(impl_->handle, pack, workspace);
    return status.is_good() ? std::string() : oneLine(status.get_message());
  } catch (const std::exception &e) {
    return oneLine(e.what());
  }
}

#else // !WEFT_HAVE_CUDNN

struct CudnnAttentionGraph {};
struct CudnnAttention::Impl {};

std::unique_ptr<CudnnAttention> CudnnAttention::open(std::string &why) {
  why = "built without the cuDNN frontend (scripts/install-deps.sh fetches "
        "it)";
  return nullptr;
}
std::string CudnnAttention::version() const { return {}; }
const CudnnAttentionGraph *CudnnAttention::prepare(bool, HalfType,
                                                   const AttentionDims &,
                                                   std::string &why) {
  why = "built without cuDNN";
  return nullptr;
}
int64_t CudnnAttention::workspaceBytes(const CudnnAttentionGraph &) {
  return 0;
}
std::string CudnnAttention::run(const CudnnAttentionGraph &,
                                const std::vector<void *> &,
                                const std::vector<void *> &, void *,
                                cudaStream_t) {
  return "built without cuDNN";
}

#endif // WEFT_HAVE_CUDNN

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

} // namespace weft::exec::cuda
