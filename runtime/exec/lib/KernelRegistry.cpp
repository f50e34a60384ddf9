//===- KernelRegistry.cpp - Kernel names -> CPU kernel library ------------===//

#include "weft/exec/KernelRegistry.h"
#include "weft/exec/Error.h"
#include "weft/kernels/CpuKernels.h"
#include "weft/kernels/KernelAbi.h"
#include "weft/plan/Bundle.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace weft::exec {

namespace cpu = weft::kernels::cpu;
using weft::kernels::Activation;

namespace {

OperandSpec f(int64_t elements) { return {false, elements}; }
OperandSpec idx(int64_t elements) { return {true, elements}; }

int64_t get(const KernelConstants &c, const char *name) { return c.at(name); }

Activation activation(int64_t code) {
  if (code < 0 || code > 3)
    throw Error("constant 'act' is " + std::to_string(code) +
                " (expected 0 relu, 1 gelu_erf, 2 gelu_tanh, 3 silu)");
  return Activation(code);
}

float eps(const KernelCall &call) { return float(call.c("eps_nano") * 1e-9); }

// Kernels whose output may differ from their input range copy first.
void copyIfDistinct(float *dst, const float *src, int64_t n) {
  if (dst != src)
    std::memmove(dst, src, size_t(n) * sizeof(float));
}

//===--- Element-wise ----------------------------------------------------===//

KernelSignature biasAddSig(const KernelConstants &c) {
  int64_t n = get(c, "rows") * get(c, "width");
  return {{f(n), f(get(c, "width"))}, {f(n)}, {{0, 0}}};
}
void biasAddRun(const KernelCall &k) {
  copyIfDistinct(k.writes[0], k.reads[0], k.c("rows") * k.c("width"));
  cpu::biasAdd(k.c("rows"), k.c("width"), k.reads[1], k.writes[0]);
}

KernelSignature biasGradSig(const KernelConstants &c) {
  return {{f(get(c, "rows") * get(c, "width"))}, {f(get(c, "width"))}};
}
void biasGradRun(const KernelCall &k) {
  cpu::biasGrad(k.c("rows"), k.c("width"), k.reads[0], k.writes[0]);
}

KernelSignature residualAddSig(const KernelConstants &c) {
  int64_t n = get(c, "n");
  return {{f(n), f(n)}, {f(n)}, {{0, 0}, {0, 1}}};
}
void residualAddRun(const KernelCall &k) {
  cpu::residualAdd(k.c("n"), k.reads[0], k.reads[1], k.writes[0]);
}

KernelSignature activationForwardSig(const KernelConstants &c) {
  activation(get(c, "act"));
  return {{f(get(c, "n"))}, {f(get(c, "n"))}, {{0, 0}}};
}
void activationForwardRun(const KernelCall &k) {
  cpu::activationForward(activation(k.c("act")), k.c("n"), k.reads[0],
                         k.writes[0]);
}

KernelSignature activationBackwardSig(const KernelConstants &c) {
  activation(get(c, "act"));
  int64_t n = get(c, "n");
  return {{f(n), f(n)}, {f(n)}, {{0, 0}, {0, 1}}};
}
void activationBackwardRun(const KernelCall &k) {
  cpu::activationBackward(activation(k.c("act")), k.c("n"), k.reads[0],
                          k.reads[1], k.writes[0]);
}

KernelSignature gatedForwardSig(const KernelConstants &c) {
  activation(get(c, "act"));
  int64_t n = get(c, "n");
  return {{f(n), f(n)}, {f(n)}, {{0, 0}, {0, 1}}};
}
void gatedForwardRun(const KernelCall &k) {
  cpu::gatedForward(activation(k.c("act")), k.c("n"), k.reads[0], k.reads[1],
                    k.writes[0]);
}

KernelSignature gatedBackwardSig(const KernelConstants &c) {
  activation(get(c, "act"));
  int64_t n = get(c, "n");
  // Every element's three inputs are read before its two outputs are written.
  return {{f(n), f(n), f(n)},
          {f(n), f(n)},
          {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}};
}
void gatedBackwardRun(const KernelCall &k) {
  cpu::gatedBackward(activation(k.c("act")), k.c("n"), k.reads[0], k.reads[1],
                     k.reads[2], k.writes[0], k.writes[1]);
}

//===--- Normalization ---------------------------------------------------===//

KernelSignature layerNormForwardSig(const KernelConstants &c) {
  int64_t rows = get(c, "rows"), width = get(c, "width");
  KernelSignature sig{{f(rows * width), f(width)},
                      {f(rows * width), f(rows), f(rows)},
                      {{0, 0}}};
  if (get(c, "bias"))
    sig.reads.push_back(f(width));
  return sig;
}
void layerNormForwardRun(const KernelCall &k) {
  const float *beta = k.c("bias") ? k.reads[2] : nullptr;
  cpu::layerNormForward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1], beta,
                        eps(k), k.writes[0], k.writes[1], k.writes[2]);
}

KernelSignature layerNormBackwardSig(const KernelConstants &c) {
  int64_t rows = get(c, "rows"), width = get(c, "width");
  KernelSignature sig{
      {f(rows * width), f(width), f(rows), f(rows), f(rows * width)},
      {f(rows * width), f(width)},
      {{0, 0}, {0, 4}}}; // dx over x or dy: the row's sums come first
  if (get(c, "bias"))
    sig.writes.push_back(f(width));
  return sig;
}
void layerNormBackwardRun(const KernelCall &k) {
  float *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  cpu::layerNormBackward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                         k.reads[2], k.reads[3], k.reads[4], k.writes[0],
                         k.writes[1], dBeta);
}

KernelSignature rmsNormForwardSig(const KernelConstants &c) {
  int64_t rows = get(c, "rows"), width = get(c, "width");
  return {{f(rows * width), f(width)}, {f(rows * width), f(rows)}, {{0, 0}}};
}
void rmsNormForwardRun(const KernelCall &k) {
  cpu::rmsNormForward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1], eps(k),
                      k.writes[0], k.writes[1]);
}

KernelSignature rmsNormBackwardSig(const KernelConstants &c) {
  int64_t rows = get(c, "rows"), width = get(c, "width");
  return {{f(rows * width), f(width), f(rows), f(rows * width)},
          {f(rows * width), f(width)},
          {{0, 0}, {0, 3}}}; // dx over x or dy
}
void rmsNormBackwardRun(const KernelCall &k) {
  cpu::rmsNormBackward(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                       k.reads[2], k.reads[3], k.writes[0], k.writes[1]);
}

// The fused norms (weft-fuse-residual-norms): a residual_add and the norm
// after it (forward) or before it (backward) in one call, bit for bit what
// the two give, the intermediate rounded as the two kernels store it.

/// Rounds `n` fp32 values in place as write `index`'s storage holds them.
void roundLikeWrite(const KernelCall &k, size_t index, float *x, int64_t n) {
  if (float (*round)(float) = k.rounding(index))
    for (int64_t i = 0; i < n; ++i)
      x[i] = round(x[i]);
}

/// a, b, then the norm's reads after x; sum, then the norm's writes. The
/// sum and the normalized row may each be written over a or b.
KernelSignature withResidual(KernelSignature norm) {
  norm.reads.insert(norm.reads.begin(), norm.reads.front());
  norm.writes.insert(norm.writes.begin(), norm.writes.front());
  norm.inPlace = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  return norm;
}
/// sum = a + b, rounded as stored: the norm's x.
float *residualSum(const KernelCall &k) {
  int64_t n = k.c("rows") * k.c("width");
  cpu::residualAdd(n, k.reads[0], k.reads[1], k.writes[0]);
  roundLikeWrite(k, 0, k.writes[0], n);
  return k.writes[0];
}

KernelSignature residualLayerNormForwardSig(const KernelConstants &c) {
  return withResidual(layerNormForwardSig(c));
}
void residualLayerNormForwardRun(const KernelCall &k) {
  const float *sum = residualSum(k);
  const float *beta = k.c("bias") ? k.reads[3] : nullptr;
  cpu::layerNormForward(k.c("rows"), k.c("width"), sum, k.reads[2], beta,
                        eps(k), k.writes[1], k.writes[2], k.writes[3]);
}

KernelSignature residualRmsNormForwardSig(const KernelConstants &c) {
  return withResidual(rmsNormForwardSig(c));
}
void residualRmsNormForwardRun(const KernelCall &k) {
  const float *sum = residualSum(k);
  cpu::rmsNormForward(k.c("rows"), k.c("width"), sum, k.reads[2], eps(k),
                      k.writes[1], k.writes[2]);
}

/// The norm backward's reads and the addend; sum instead of dx, in place
/// as dx is (over x or dy) but never over the addend: a two-pass path writes
/// dx into sum before it adds the addend.
KernelSignature withAdd(KernelSignature norm) {
  norm.reads.push_back(norm.writes.front());
  return norm;
}

KernelSignature layerNormBackwardAddSig(const KernelConstants &c) {
  return withAdd(layerNormBackwardSig(c));
}
void layerNormBackwardAddRun(const KernelCall &k) {
  float *dBeta = k.c("bias") ? k.writes[2] : nullptr;
  cpu::layerNormBackwardAdd(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                            k.reads[2], k.reads[3], k.reads[4], k.reads[5],
                            k.writes[0], k.writes[1], dBeta, k.rounding(0));
}

KernelSignature rmsNormBackwardAddSig(const KernelConstants &c) {
  return withAdd(rmsNormBackwardSig(c));
}
void rmsNormBackwardAddRun(const KernelCall &k) {
  cpu::rmsNormBackwardAdd(k.c("rows"), k.c("width"), k.reads[0], k.reads[1],
                          k.reads[2], k.reads[3], k.reads[4], k.writes[0],
                          k.writes[1], k.rounding(0));
}

//===--- Embedding and rotary --------------------------------------------===//

KernelSignature embeddingForwardSig(const KernelConstants &c) {
  int64_t tokens = get(c, "batch") * get(c, "seq"), hidden = get(c, "hidden");
  KernelSignature sig{{idx(tokens), f(get(c, "vocab") * hidden)},
                      {f(tokens * hidden)}};
  if (get(c, "positions"))
    sig.reads.push_back(f(get(c, "positions") * hidden));
  return sig;
}
void embeddingForwardRun(const KernelCall &k) {
  const float *wpe = k.c("positions") ? k.reads[2] : nullptr;
  cpu::embeddingForward(k.c("batch"), k.c("seq"), k.c("hidden"),
                        k.readIndices[0], k.reads[1], wpe,
                        static_cast<const float *>(nullptr), 0, k.writes[0]);
}

KernelSignature embeddingBackwardSig(const KernelConstants &c) {
  int64_t tokens = get(c, "batch") * get(c, "seq"), hidden = get(c, "hidden");
  KernelSignature sig{{idx(tokens), f(tokens * hidden)},
                      {f(get(c, "vocab") * hidden)}};
  if (get(c, "positions"))
    sig.writes.push_back(f(get(c, "positions") * hidden));
  return sig;
}
void embeddingBackwardRun(const KernelCall &k) {
  float *dWpe = k.c("positions") ? k.writes[1] : nullptr;
  cpu::embeddingBackward(k.c("batch"), k.c("seq"), k.c("hidden"),
                         k.readIndices[0], k.reads[1], 0, k.writes[0], dWpe,
                         static_cast<float *>(nullptr));
}

KernelSignature vocabEmbeddingSig(const KernelConstants &c, bool backward) {
  int64_t tokens = get(c, "batch") * get(c, "seq"), hidden = get(c, "hidden");
  int64_t table = get(c, "vocab_local") * hidden;
  if (get(c, "vocab_start") < 0)
    throw Error("constant 'vocab_start' must not be negative");
  if (backward)
    return {{idx(tokens), f(tokens * hidden)}, {f(table)}};
  return {{idx(tokens), f(table)}, {f(tokens * hidden)}};
}
KernelSignature vocabEmbeddingForwardSig(const KernelConstants &c) {
  return vocabEmbeddingSig(c, false);
}
void vocabEmbeddingForwardRun(const KernelCall &k) {
  cpu::vocabEmbeddingForward(k.c("batch"), k.c("seq"), k.c("hidden"),
                             k.c("vocab_start"), k.c("vocab_local"),
                             k.readIndices[0], k.reads[1], k.writes[0]);
}
KernelSignature vocabEmbeddingBackwardSig(const KernelConstants &c) {
  return vocabEmbeddingSig(c, true);
}
void vocabEmbeddingBackwardRun(const KernelCall &k) {
  cpu::vocabEmbeddingBackward(k.c("batch"), k.c("seq"), k.c("hidden"),
                              k.c("vocab_start"), k.c("vocab_local"),
                              k.readIndices[0], k.reads[1], k.writes[0]);
}

KernelSignature positionEmbeddingForwardSig(const KernelConstants &c) {
  int64_t n = get(c, "batch") * get(c, "seq") * get(c, "hidden");
  return {{f(n), f(get(c, "positions") * get(c, "hidden"))}, {f(n)}, {{0, 0}}};
}
void positionEmbeddingForwardRun(const KernelCall &k) {
  cpu::positionEmbeddingForward(k.c("batch"), k.c("seq"), k.c("hidden"), 0,
                                k.reads[0], k.reads[1], k.writes[0]);
}
KernelSignature positionEmbeddingBackwardSig(const KernelConstants &c) {
  int64_t n = get(c, "batch") * get(c, "seq") * get(c, "hidden");
  return {{f(n)}, {f(get(c, "positions") * get(c, "hidden"))}};
}
void positionEmbeddingBackwardRun(const KernelCall &k) {
  cpu::positionEmbeddingBackward(k.c("batch"), k.c("seq"), k.c("hidden"), 0,
                                 k.reads[0], k.writes[0]);
}

KernelSignature rotarySig(const KernelConstants &c) {
  int64_t n =
      get(c, "batch") * get(c, "seq") * get(c, "heads") * get(c, "head_dim");
  return {{f(n)}, {f(n)}, {{0, 0}}};
}
void rotaryForwardRun(const KernelCall &k) {
  cpu::rotaryForward(k.c("batch"), k.c("seq"), k.c("heads"), k.c("head_dim"), 0,
                     float(k.c("theta")), k.reads[0], k.writes[0]);
}
void rotaryBackwardRun(const KernelCall &k) {
  cpu::rotaryBackward(k.c("batch"), k.c("seq"), k.c("heads"), k.c("head_dim"),
                      0, float(k.c("theta")), k.reads[0], k.writes[0]);
}

//===--- Attention -------------------------------------------------------===//

kernels::AttentionDims attentionDims(const KernelConstants &c) {
  kernels::AttentionDims dims;
  dims.batch = get(c, "batch");
  dims.seq = get(c, "seq");
  dims.heads = get(c, "heads");
  dims.kvHeads = get(c, "kv_heads");
  dims.headDim = get(c, "head_dim");
  dims.causal = get(c, "causal") != 0;
  dims.scale = 1.0 / std::sqrt(double(dims.headDim));
  return dims;
}

KernelSignature attentionForwardSig(const KernelConstants &c) {
  kernels::AttentionDims d = attentionDims(c);
  if (d.kvHeads <= 0 || d.heads % d.kvHeads != 0)
    throw Error("constant 'heads' must be a multiple of 'kv_heads'");
  int64_t q = d.batch * d.seq * d.heads * d.headDim;
  int64_t kv = d.batch * d.seq * d.kvHeads * d.headDim;
  return {{f(q), f(kv), f(kv)}, {f(q), f(d.batch * d.heads * d.seq)}};
}
void attentionForwardRun(const KernelCall &k) {
  cpu::attentionForward(attentionDims(*k.constants), k.reads[0], k.reads[1],
                        k.reads[2], k.writes[0], k.writes[1]);
}

KernelSignature attentionBackwardSig(const KernelConstants &c) {
  KernelSignature fwd = attentionForwardSig(c);
  OperandSpec q = fwd.reads[0], kv = fwd.reads[1], lse = fwd.writes[1];
  return {{q, kv, kv, q, lse, q}, {q, kv, kv}};
}
void attentionBackwardRun(const KernelCall &k) {
  cpu::attentionBackward(attentionDims(*k.constants), k.reads[0], k.reads[1],
                         k.reads[2], k.reads[3], k.reads[4], k.reads[5],
                         k.writes[0], k.writes[1], k.writes[2]);
}

//===--- Loss ------------------------------------------------------------===//

KernelSignature crossEntropySig(const KernelConstants &c) {
  if (get(c, "loss_div") <= 0 || get(c, "grad_div") <= 0)
    throw Error("constants 'loss_div' and 'grad_div' must be positive");
  if (get(c, "valid") > get(c, "vocab"))
    throw Error("constant 'valid' (" + std::to_string(get(c, "valid")) +
                ") exceeds 'vocab' (" + std::to_string(get(c, "vocab")) + ")");
  int64_t rows = get(c, "rows");
  KernelSignature sig{{f(rows * get(c, "vocab")), idx(rows)}, {f(1)}};
  if (get(c, "grad")) {
    sig.writes.push_back(f(rows * get(c, "vocab")));
    sig.inPlace = {{1, 0}}; // the gradient over the logits
  }
  return sig;
}
/// The loss kernels' tail: the loss divided by loss_div into writes[0]
/// (added with accumulate), and the gradient of the mean scaled by
/// lossScale / grad_div (a power of two times 1 / grad_div: with no
/// overflow the scaled run is the unscaled one times the scale, exactly).
void finishLoss(const KernelCall &k, float loss, float *dLogits, int64_t n) {
  float lossPart = loss / float(k.c("loss_div"));
  k.writes[0][0] = k.c("accumulate") ? k.writes[0][0] + lossPart : lossPart;
  if (!dLogits || (k.c("grad_div") == 1 && k.lossScale == 1))
    return;
  float scale = k.lossScale / float(k.c("grad_div"));
  for (int64_t i = 0; i < n; ++i)
    dLogits[i] *= scale;
}

void crossEntropyRun(const KernelCall &k) {
  int64_t rows = k.c("rows"), vocab = k.c("vocab");
  float *dLogits = k.c("grad") ? k.writes[1] : nullptr;
  float loss = cpu::crossEntropyForwardBackward(
      rows, vocab, k.reads[0], k.readIndices[1], dLogits,
      /*lse=*/static_cast<float *>(nullptr),
      crossEntropyValidColumns(*k.constants));
  finishLoss(k, loss, dLogits, rows * vocab);
}

// The vocabulary-parallel phases on a [rows, vocab_local] shard of logits
// starting at word vocab_start of a `vocab`-word vocabulary: columns at or past
// `vocab` are padding.
int64_t validColumns(const KernelCall &k) {
  return std::clamp<int64_t>(k.c("vocab") - k.c("vocab_start"), 0,
                             k.c("vocab_local"));
}
void checkShard(const KernelConstants &c) {
  if (get(c, "vocab_start") < 0 || get(c, "vocab_local") <= 0)
    throw Error("constants 'vocab_start' and 'vocab_local' must be "
                "non-negative and positive");
}

KernelSignature crossEntropyShardMaxSig(const KernelConstants &c) {
  checkShard(c);
  int64_t rows = get(c, "rows");
  return {{f(rows * get(c, "vocab_local"))}, {f(rows)}};
}
void crossEntropyShardMaxRun(const KernelCall &k) {
  cpu::crossEntropyShardMax(k.c("rows"), k.c("vocab_local"), k.reads[0],
                            k.writes[0], validColumns(k));
}

KernelSignature crossEntropyShardSumsSig(const KernelConstants &c) {
  checkShard(c);
  int64_t rows = get(c, "rows");
  return {{f(rows * get(c, "vocab_local")), idx(rows), f(rows)},
          {f(rows), f(rows)}};
}
void crossEntropyShardSumsRun(const KernelCall &k) {
  cpu::crossEntropyShardSums(
      k.c("rows"), k.c("vocab_local"), k.c("vocab_start"), k.reads[0],
      k.readIndices[1], k.reads[2], k.writes[0], k.writes[1], validColumns(k));
}

KernelSignature crossEntropyShardFinishSig(const KernelConstants &c) {
  checkShard(c);
  if (get(c, "loss_div") <= 0 || get(c, "grad_div") <= 0)
    throw Error("constants 'loss_div' and 'grad_div' must be positive");
  int64_t rows = get(c, "rows"), logits = rows * get(c, "vocab_local");
  KernelSignature sig{{f(logits), idx(rows), f(rows), f(rows), f(rows)},
                      {f(1)}};
  if (get(c, "grad")) {
    sig.writes.push_back(f(logits));
    sig.inPlace = {{1, 0}};
  }
  return sig;
}
void crossEntropyShardFinishRun(const KernelCall &k) {
  int64_t rows = k.c("rows"), logits = rows * k.c("vocab_local");
  float *dLogits = k.c("grad") ? k.writes[1] : nullptr;
  float loss = cpu::crossEntropyShardFinish(
      rows, k.c("vocab_local"), k.c("vocab_start"), k.reads[0],
      k.readIndices[1], k.reads[2], k.reads[3], k.reads[4], dLogits,
      validColumns(k));
  finishLoss(k, loss, dLogits, logits);
}

/// The signature and host loop of every kernel of kernels::kKernelAbi, which
/// gives the names, constants and defaults; sorted by name.
std::vector<KernelSpec> buildRegistry() {
  struct Implementation {
    std::string_view name;
    KernelSignature (*signature)(const KernelConstants &);
    void (*run)(const KernelCall &);
  };
  static constexpr Implementation implementations[] = {
      {"activation_backward", activationBackwardSig, activationBackwardRun},
      {"activation_forward", activationForwardSig, activationForwardRun},
      {"attention_backward", attentionBackwardSig, attentionBackwardRun},
      {"attention_forward", attentionForwardSig, attentionForwardRun},
      {"bias_add", biasAddSig, biasAddRun},
      {"bias_grad", biasGradSig, biasGradRun},
      {"cross_entropy", crossEntropySig, crossEntropyRun},
      {"cross_entropy_shard_finish", crossEntropyShardFinishSig,
       crossEntropyShardFinishRun},
      {"cross_entropy_shard_max", crossEntropyShardMaxSig,
       crossEntropyShardMaxRun},
      {"cross_entropy_shard_sums", crossEntropyShardSumsSig,
       crossEntropyShardSumsRun},
      {"embedding_backward", embeddingBackwardSig, embeddingBackwardRun},
      {"embedding_forward", embeddingForwardSig, embeddingForwardRun},
      {"gated_backward", gatedBackwardSig, gatedBackwardRun},
      {"gated_forward", gatedForwardSig, gatedForwardRun},
      {"layer_norm_backward", layerNormBackwardSig, layerNormBackwardRun},
      {"layer_norm_backward_add", layerNormBackwardAddSig,
       layerNormBackwardAddRun},
      {"layer_norm_forward", layerNormForwardSig, layerNormForwardRun},
      {"position_embedding_backward", positionEmbeddingBackwardSig,
       positionEmbeddingBackwardRun},
      {"position_embedding_forward", positionEmbeddingForwardSig,
       positionEmbeddingForwardRun},
      {"residual_add", residualAddSig, residualAddRun},
      {"residual_layer_norm_forward", residualLayerNormForwardSig,
       residualLayerNormForwardRun},
      {"residual_rms_norm_forward", residualRmsNormForwardSig,
       residualRmsNormForwardRun},
      {"rms_norm_backward", rmsNormBackwardSig, rmsNormBackwardRun},
      {"rms_norm_backward_add", rmsNormBackwardAddSig, rmsNormBackwardAddRun},
      {"rms_norm_forward", rmsNormForwardSig, rmsNormForwardRun},
      {"rotary_backward", rotarySig, rotaryBackwardRun},
      {"rotary_forward", rotarySig, rotaryForwardRun},
      {"vocab_embedding_backward", vocabEmbeddingBackwardSig,
       vocabEmbeddingBackwardRun},
      {"vocab_embedding_forward", vocabEmbeddingForwardSig,
       vocabEmbeddingForwardRun},
  };
  std::vector<KernelSpec> registry;
  for (const Implementation &impl : implementations)
    registry.push_back({impl.name, kernels::findKernelAbi(impl.name),
                        impl.signature, impl.run});
  return registry;
}

} // namespace

const std::vector<KernelSpec> &kernelRegistry() {
  static const std::vector<KernelSpec> registry = buildRegistry();
  return registry;
}

const KernelSpec *findKernel(std::string_view name) {
  name = plan::registryName(name);
  const std::vector<KernelSpec> &registry = kernelRegistry();
  auto it = std::lower_bound(registry.begin(), registry.end(), name,
                             [](const KernelSpec &spec, std::string_view key) {
                               return spec.name < key;
                             });
  return it != registry.end() && it->name == name ? &*it : nullptr;
}

KernelConstants resolveConstants(const KernelSpec &spec,
                                 const KernelConstants &constants,
                                 const std::string &where) {
  if (!spec.abi)
    throw Error(where + ": kernel '" + std::string(spec.name) +
                "' is missing from weft/kernels/KernelAbi.h");
  KernelConstants resolved;
  for (const kernels::ConstantAbi &constant : *spec.abi) {
    std::string name(constant.name);
    auto it = constants.find(name);
    if (it != constants.end())
      resolved[name] = it->second;
    else if (constant.defaultValue)
      resolved[name] = *constant.defaultValue;
    else
      throw Error(where + ": kernel '" + std::string(spec.name) +
                  "' needs constant '" + name + "'");
  }
  for (const auto &[name, value] : constants)
    if (!resolved.count(name))
      throw Error(where + ": kernel '" + std::string(spec.name) +
                  "' has no constant '" + name + "'");
  return resolved;
}

int64_t crossEntropyValidColumns(const KernelConstants &constants) {
  auto valid = constants.find("valid");
  return valid != constants.end() && valid->second > 0 ? valid->second : -1;
}

} // namespace weft::exec
