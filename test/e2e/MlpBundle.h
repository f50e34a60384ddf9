//===- MlpBundle.h - A tiny byte-level MLP LM as plan bundles ---*- C++ -*-===//
//
// The end-to-end and unit tests train the same model under several plans and
// against a plain serial implementation:
//   x = wte[tokens]; h = x @ w1; a = gelu(h); logits = a @ w2; loss = CE
// with AdamW, global-norm clipping and the bundle's LR schedule. Plans:
//   serial  1 rank, the whole global batch as one micro-batch;
//   ddp     dp ranks, gradient all-reduce per parameter on a 'comm' stream
//           overlapped with the backward through events;
//   zero1   dp ranks, gradient reduce-scatter, sharded fp32 master weights
//           and moments, grad-norm all-reduce, parameter all-gather.
// Every plan supports gradient accumulation (accum micro-batches).
// serial-offload and zero1-offload: the same with optimizer offload (format
// version 4's host region): fp32 master weights, moments and the staging
// copies `.grad.host`/`.host` in host memory; the clipped gradient is
// copied to the host, AdamW runs on host buffers only and the updated
// weights are copied back to the device (to the working copy, or to the
// `.shard` the all-gather reads). Same math: bit-identical to the plain
// variant on the CPU backend.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_TEST_E2E_MLPBUNDLE_H
#define WEFT_TEST_E2E_MLPBUNDLE_H

#include "weft/exec/DataLoader.h"
#include "weft/exec/Session.h"
#include "weft/kernels/CpuKernels.h"
#include "weft/plan/Bundle.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace weft::test {

struct MlpConfig {
  // serial | ddp | zero1 | serial-offload | zero1-offload
  std::string variant = "serial";
  int64_t dp = 1;
  int64_t microBatch = 4;
  int64_t accum = 1;
  int64_t seqLen = 16;
  int64_t vocab = 256;
  int64_t hidden = 16;
  int64_t ffn = 32;
  /// A `clip` instruction before AdamW, as weft-optimizer emitted until
  /// 2026-12-01; by default each optimizer_step reads the global sum of
  /// squares and clips itself, as compiled plans do now.
  bool separateClip = false;

  int64_t globalBatch() const { return dp * microBatch * accum; }
};

inline plan::TrainingInfo mlpTraining(const MlpConfig &c) {
  plan::TrainingInfo t;
  t.globalBatch = c.globalBatch();
  t.seqLen = c.seqLen;
  t.precision = "fp32";
  t.microBatch = c.microBatch;
  t.gradAccum = c.accum;
  t.lr = 1e-2;
  t.minLr = 1e-3;
  t.warmupSteps = 2;
  t.decaySteps = 20;
  t.weightDecay = 0.1;
  t.beta1 = 0.9;
  t.beta2 = 0.95;
  t.eps = 1e-8;
  t.gradClip = 1.0;
  return t;
}

namespace detail {

using namespace weft::plan;

struct Builder {
  Program program;
  int64_t persistentEnd = 0, arenaEnd = 0, hostEnd = 0;
  std::vector<Instruction> *stream = nullptr;

  int64_t add(const std::string &name, Region region, int64_t elements,
              DType dtype = DType::F32) {
    Buffer b;
    b.id = int64_t(program.buffers.size());
    b.name = name;
    b.region = region;
    b.size = elements * elementBytes(dtype);
    b.dtype = dtype;
    b.alignment = 64;
    int64_t &end = region == Region::Persistent ? persistentEnd
                   : region == Region::Host     ? hostEnd
                                                : arenaEnd;
    b.offset = (end + 63) / 64 * 64;
    end = b.offset + b.size;
    program.buffers.push_back(b);
    return b.id;
  }
  BufferRange all(int64_t id) const {
    return {id, 0, program.buffers[id].size};
  }
  Instruction &emit(Opcode opcode, std::vector<BufferRange> reads,
                    std::vector<BufferRange> writes, const std::string &phase) {
    Instruction inst;
    inst.opcode = opcode;
    inst.reads = std::move(reads);
    inst.writes = std::move(writes);
    inst.phase = phase;
    stream->push_back(inst);
    return stream->back();
  }
  void kernel(int64_t id, std::vector<BufferRange> reads,
              std::vector<BufferRange> writes, const std::string &phase) {
    emit(Opcode::Kernel, std::move(reads), std::move(writes), phase).kernel =
        id;
  }
  /// Row-major C[M,N] (+)= op(A) op(B), emitted as the plan's column-major
  /// GEMM of the transposes (swap operands and m/n).
  void rowGemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
               int64_t a, int64_t lda, int64_t b, int64_t ldb, int64_t c,
               int64_t ldc, double beta, const std::string &phase) {
    std::vector<BufferRange> reads = {all(b), all(a)};
    if (beta != 0)
      reads.push_back(all(c));
    Instruction &inst = emit(Opcode::Gemm, reads, {all(c)}, phase);
    inst.gemm = {transB, transA, n, m, k, ldb, lda, ldc, 1.0, beta};
  }
  void comm(Opcode opcode, int64_t count, BufferRange in, BufferRange out,
            const std::string &phase) {
    std::vector<BufferRange> reads = {in};
    Instruction &inst = emit(opcode, reads, {out}, phase);
    inst.group = 0;
    inst.count = count;
  }
  void event(Opcode opcode, int64_t id, const std::string &phase) {
    emit(opcode, {}, {}, phase).event = id;
  }
};

inline Kernel makeKernel(int64_t id, const std::string &name,
                         std::map<std::string, int64_t> constants) {
  Kernel k;
  k.id = id;
  k.name = name;
  k.source = "kernels/" + name + ".cu";
  k.constants = std::move(constants);
  return k;
}

} // namespace detail

/// The bundle of `config` (see the file comment).
inline plan::Bundle buildMlpBundle(const MlpConfig &c) {
  using namespace weft::plan;
  using detail::Builder;
  const std::string suffix = "-offload";
  const bool offload = c.variant.size() > suffix.size() &&
                       c.variant.compare(c.variant.size() - suffix.size(),
                                         suffix.size(), suffix) == 0;
  const std::string variant =
      offload ? c.variant.substr(0, c.variant.size() - suffix.size())
              : c.variant;
  const bool zero = variant == "zero1";
  if ((variant != "serial" && variant != "ddp" && !zero) ||
      (offload && variant == "ddp"))
    throw std::runtime_error("unknown variant " + c.variant);
  if (variant == "serial" && c.dp != 1)
    throw std::runtime_error("the serial plan has dp 1");

  Bundle bundle;
  bundle.model = {"byte-mlp", "mlp"};
  bundle.mesh = {c.dp, 1, 1};
  bundle.training = mlpTraining(c);
  bundle.prediction = {0.01, {0}, 0.1};
  bundle.config = {{"dp", c.dp}, {"pp", 1}, {"tp", 1}, {"zero", zero ? 1 : 0}};
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < c.dp; ++r)
    ranks.push_back(r);
  bundle.groups.push_back({0, GroupKind::DP, {ranks}});
  bundle.rankRoles.assign(size_t(c.dp), 0);

  const int64_t R = c.microBatch * c.seqLen, V = c.vocab, H = c.hidden,
                F = c.ffn;
  enum { kEmbed, kEmbedBack, kGelu, kGeluBack, kLoss };
  bundle.kernels = {detail::makeKernel(kEmbed, "embedding_forward",
                                       {{"batch", c.microBatch},
                                        {"seq", c.seqLen},
                                        {"hidden", H},
                                        {"vocab", V}}),
                    detail::makeKernel(kEmbedBack, "embedding_backward",
                                       {{"batch", c.microBatch},
                                        {"seq", c.seqLen},
                                        {"hidden", H},
                                        {"vocab", V}}),
                    detail::makeKernel(kGelu, "activation_forward",
                                       {{"act", 1}, {"n", R * F}}),
                    detail::makeKernel(kGeluBack, "activation_backward",
                                       {{"act", 1}, {"n", R * F}}),
                    detail::makeKernel(kLoss, "cross_entropy",
                                       {{"rows", R},
                                        {"vocab", V},
                                        {"accumulate", 1},
                                        {"loss_div", c.accum},
                                        {"grad_div", c.dp * c.accum}})};
  for (const Kernel &k : bundle.kernels)
    bundle.files[k.source] = "// " + k.name + ": CPU kernel library\n";

  Builder b;
  std::vector<Instruction> compute, side;
  const char *names[3] = {"wte", "w1", "w2"};
  const int64_t sizes[3] = {V * H, H * F, F * V};
  int64_t param[3], grad[3], master[3], gradShard[3], m[3], v[3];
  int64_t gradHost[3], paramHost[3], paramShard[3];
  const int64_t shards = zero ? c.dp : 1;
  // Optimizer state lives in the host region under offload.
  const Region state = offload ? Region::Host : Region::Persistent;
  for (int i = 0; i < 3; ++i) {
    std::string name = names[i];
    param[i] = b.add(name, Region::Persistent, sizes[i]);
    grad[i] = b.add(name + ".grad", Region::Persistent, sizes[i]);
    master[i] = zero || offload
                    ? b.add(name + ".master", state, sizes[i] / shards)
                    : param[i];
    gradShard[i] = zero ? b.add(name + ".grad.shard", Region::Persistent,
                                sizes[i] / shards)
                        : grad[i];
    m[i] = b.add(name + ".exp_avg", state, sizes[i] / shards);
    v[i] = b.add(name + ".exp_avg_sq", state, sizes[i] / shards);
    gradHost[i] = paramHost[i] = paramShard[i] = -1;
    if (offload) {
      gradHost[i] = b.add(name + ".grad.host", Region::Host, sizes[i] / shards);
      paramHost[i] = b.add(name + ".host", Region::Host, sizes[i] / shards);
      paramShard[i] =
          zero ? b.add(name + ".shard", Region::Persistent, sizes[i] / shards)
               : param[i];
    }
  }
  int64_t loss = b.add("loss", Region::Persistent, 1);
  int64_t norm = b.add("grad.sumsq", Region::Persistent, 1);
  int64_t tokens = b.add("tokens", Region::Arena, R, DType::I32);
  int64_t targets = b.add("targets", Region::Arena, R, DType::I32);
  int64_t x = b.add("x", Region::Arena, R * H);
  int64_t h = b.add("h", Region::Arena, R * F);
  int64_t a = b.add("a", Region::Arena, R * F);
  int64_t logits = b.add("logits", Region::Arena, R * V);
  int64_t da = b.add("a.grad", Region::Arena, R * F);
  int64_t dx = b.add("x.grad", Region::Arena, R * H);

  b.stream = &compute;
  std::vector<BufferRange> grads = {b.all(grad[0]), b.all(grad[1]),
                                    b.all(grad[2])};
  b.emit(Opcode::Fill, {}, grads, "zero grads").dtype = DType::F32;
  b.emit(Opcode::Fill, {}, {b.all(loss)}, "zero loss").dtype = DType::F32;
  const bool overlap = variant != "serial";
  for (int64_t mb = 0; mb < c.accum; ++mb) {
    std::string fwd = "fwd mb" + std::to_string(mb);
    std::string bwd = "bwd mb" + std::to_string(mb);
    bool last = mb + 1 == c.accum;
    b.emit(Opcode::LoadBatch, {}, {b.all(tokens), b.all(targets)}, "data")
        .microbatch = mb;
    b.kernel(kEmbed, {b.all(tokens), b.all(param[0])}, {b.all(x)}, fwd);
    b.rowGemm(false, false, R, F, H, x, H, param[1], F, h, F, 0, fwd);
    b.kernel(kGelu, {b.all(h)}, {b.all(a)}, fwd);
    b.rowGemm(false, false, R, V, F, a, F, param[2], V, logits, V, 0, fwd);
    b.kernel(kLoss, {b.all(logits), b.all(targets)},
             {b.all(loss), b.all(logits)}, "loss");
    // dw2 += a^T dlogits; da = dlogits w2^T
    b.rowGemm(true, false, F, V, R, a, F, logits, V, grad[2], V, 1, bwd);
    if (last && overlap)
      b.event(Opcode::RecordEvent, 0, bwd);
    b.rowGemm(false, true, R, F, V, logits, V, param[2], V, da, F, 0, bwd);
    b.kernel(kGeluBack, {b.all(h), b.all(da)}, {b.all(da)}, bwd);
    b.rowGemm(true, false, H, F, R, x, H, da, F, grad[1], F, 1, bwd);
    if (last && overlap)
      b.event(Opcode::RecordEvent, 1, bwd);
    b.rowGemm(false, true, R, H, F, da, F, param[1], F, dx, H, 0, bwd);
    b.kernel(kEmbedBack, {b.all(tokens), b.all(dx)}, {b.all(grad[0])}, bwd);
    if (last && overlap)
      b.event(Opcode::RecordEvent, 2, bwd);
  }

  // Gradient communication on its own stream, each parameter as soon as the
  // backward has produced it (w2 first).
  if (overlap) {
    b.stream = &side;
    for (int i : {2, 1, 0}) {
      b.event(Opcode::WaitEvent, 2 - i, "grad sync");
      b.comm(zero ? Opcode::ReduceScatter : Opcode::AllReduce,
             sizes[i] / shards, b.all(grad[i]), b.all(gradShard[i]),
             "grad sync");
    }
    b.event(Opcode::RecordEvent, 3, "grad sync");
    b.stream = &compute;
    b.event(Opcode::WaitEvent, 3, "optimizer");
  }
  std::vector<BufferRange> shardGrads = {
      b.all(gradShard[0]), b.all(gradShard[1]), b.all(gradShard[2])};
  b.emit(Opcode::GradNorm, shardGrads, {b.all(norm)}, "clip").dtype =
      DType::F32;
  if (zero)
    b.comm(Opcode::AllReduce, 1, b.all(norm), b.all(norm), "clip");
  // Each optimizer_step reads the sum of squares (host AdamW: a host copy
  // of it), unless a separate clip scales the gradients first.
  std::vector<BufferRange> normRead;
  if (c.separateClip) {
    std::vector<BufferRange> clipReads = {b.all(norm)};
    clipReads.insert(clipReads.end(), shardGrads.begin(), shardGrads.end());
    b.emit(Opcode::Clip, clipReads, shardGrads, "clip").dtype = DType::F32;
  } else if (offload) {
    int64_t normHost = b.add("grad.sumsq.host", Region::Host, 1);
    b.emit(Opcode::Copy, {b.all(norm)}, {b.all(normHost)}, "adamw");
    normRead = {b.all(normHost)};
  } else {
    normRead = {b.all(norm)};
  }
  auto stateReads = [&](int64_t gradient, int i) {
    std::vector<BufferRange> reads = {b.all(master[i]), b.all(gradient),
                                      b.all(m[i]), b.all(v[i])};
    reads.insert(reads.end(), normRead.begin(), normRead.end());
    return reads;
  };
  for (int i = 0; i < 3; ++i) {
    if (offload) {
      b.emit(Opcode::Copy, {b.all(gradShard[i])}, {b.all(gradHost[i])},
             "adamw");
      Instruction &step = b.emit(
          Opcode::OptimizerStep, stateReads(gradHost[i], i),
          {b.all(master[i]), b.all(m[i]), b.all(v[i]), b.all(paramHost[i])},
          "adamw");
      step.count = sizes[i] / shards;
      b.emit(Opcode::Copy, {b.all(paramHost[i])}, {b.all(paramShard[i])},
             "adamw");
      if (zero)
        b.comm(Opcode::AllGather, sizes[i] / shards, b.all(paramShard[i]),
               b.all(param[i]), "param gather");
      continue;
    }
    Instruction &step =
        b.emit(Opcode::OptimizerStep, stateReads(gradShard[i], i),
               {b.all(master[i]), b.all(m[i]), b.all(v[i])}, "adamw");
    step.count = sizes[i] / shards;
    if (zero)
      b.comm(Opcode::AllGather, sizes[i] / shards, b.all(master[i]),
             b.all(param[i]), "param gather");
  }

  b.program.numEvents = overlap ? 4 : 0;
  b.program.persistentBytes = b.persistentEnd;
  b.program.arenaBytes = b.arenaEnd;
  b.program.hostBytes = b.hostEnd;
  b.program.streams.push_back({"compute", compute});
  if (overlap)
    b.program.streams.push_back({"comm", side});
  bundle.prediction.peakMemoryBytes = {b.persistentEnd + b.arenaEnd};
  bundle.programs.push_back(b.program);

  const std::vector<std::vector<int64_t>> shapes = {{V, H}, {H, F}, {F, V}};
  for (int i = 0; i < 3; ++i) {
    Parameter p;
    p.name = names[i];
    p.shape = shapes[i];
    p.init = {"normal", 0.2};
    p.hfName = names[i];
    p.shards.push_back({0, param[i], 0, -1, 0, 0, 1, sizes[i]});
    if (zero || offload)
      p.shards.push_back({0, master[i], 0, -1, 0, 0, shards, sizes[i]});
    bundle.parameters.push_back(p);
  }
  return bundle;
}

struct ReferenceStep {
  double loss;
  double gradNorm;
};

/// The same training written directly against the kernel library: one
/// process, the whole global batch at once.
inline std::vector<ReferenceStep> referenceTraining(const MlpConfig &c,
                                                    const std::string &dataPath,
                                                    int64_t steps,
                                                    uint64_t seed) {
  namespace cpu = weft::kernels::cpu;
  plan::Bundle bundle = buildMlpBundle(MlpConfig{
      "serial", 1, c.globalBatch(), 1, c.seqLen, c.vocab, c.hidden, c.ffn});
  const plan::TrainingInfo &t = bundle.training;
  const int64_t B = c.globalBatch(), R = B * c.seqLen, V = c.vocab,
                H = c.hidden, F = c.ffn;
  exec::DataLoader data(dataPath, c.seqLen, B);
  std::vector<std::vector<float>> p(3), g(3), m(3), v(3);
  for (int i = 0; i < 3; ++i) {
    const plan::Parameter &param = bundle.parameters[size_t(i)];
    int64_t n = param.shape[0] * param.shape[1];
    for (int64_t e = 0; e < n; ++e)
      p[i].push_back(float(exec::initialValue(seed, param, e)));
    g[i].assign(size_t(n), 0);
    m[i].assign(size_t(n), 0);
    v[i].assign(size_t(n), 0);
  }
  std::vector<int32_t> tokens(static_cast<size_t>(R));
  std::vector<int32_t> targets(static_cast<size_t>(R));
  std::vector<float> x(R * H), hh(R * F), a(R * F), logits(R * V), da(R * F),
      dx(R * H);
  std::vector<ReferenceStep> out;
  for (int64_t step = 1; step <= steps; ++step) {
    data.read(step - 1, 0, B, tokens.data(), targets.data());
    for (auto &grad : g)
      std::fill(grad.begin(), grad.end(), 0.0f);
    cpu::embeddingForward(B, c.seqLen, H, tokens.data(), p[0].data(),
                          static_cast<const float *>(nullptr),
                          static_cast<const float *>(nullptr), 0, x.data());
    cpu::gemm(false, false, R, F, H, 1.0f, x.data(), H, p[1].data(), F, 0.0f,
              hh.data(), F);
    cpu::activationForward(kernels::Activation::GeluErf, R * F, hh.data(),
                           a.data());
    cpu::gemm(false, false, R, V, F, 1.0f, a.data(), F, p[2].data(), V, 0.0f,
              logits.data(), V);
    float loss = cpu::crossEntropyForwardBackward(
        R, V, logits.data(), targets.data(), logits.data());
    cpu::gemm(true, false, F, V, R, 1.0f, a.data(), F, logits.data(), V, 1.0f,
              g[2].data(), V);
    cpu::gemm(false, true, R, F, V, 1.0f, logits.data(), V, p[2].data(), V,
              0.0f, da.data(), F);
    cpu::activationBackward(kernels::Activation::GeluErf, R * F, hh.data(),
                            da.data(), da.data());
    cpu::gemm(true, false, H, F, R, 1.0f, x.data(), H, da.data(), F, 1.0f,
              g[1].data(), F);
    cpu::gemm(false, true, R, H, F, 1.0f, da.data(), F, p[1].data(), F, 0.0f,
              dx.data(), H);
    cpu::embeddingBackward(B, c.seqLen, H, tokens.data(), dx.data(), 0,
                           g[0].data(), static_cast<float *>(nullptr),
                           static_cast<float *>(nullptr));
    double sumsq = 0;
    for (auto &grad : g)
      for (float e : grad)
        sumsq += double(e) * double(e);
    double norm = std::sqrt(double(float(sumsq)));
    if (norm > t.gradClip)
      for (auto &grad : g)
        for (float &e : grad)
          e *= float(t.gradClip / norm);
    kernels::AdamWStep adam = kernels::makeAdamWStep(
        {exec::learningRate(t, step), t.beta1, t.beta2, t.eps, t.weightDecay},
        step);
    for (int i = 0; i < 3; ++i)
      for (size_t e = 0; e < p[i].size(); ++e)
        kernels::adamwElement(adam, g[i][e], p[i][e], m[i][e], v[i][e]);
    out.push_back({loss, norm});
  }
  return out;
}

} // namespace weft::test

#endif // WEFT_TEST_E2E_MLPBUNDLE_H
