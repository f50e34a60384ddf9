//===- MakeBundle.cpp - Bundles and reference checks for the e2e tests ----===//
//
//   weft-e2e-bundle mlp VARIANT DP MICRO ACCUM OUT_DIR
//   weft-e2e-bundle deadlock OUT_DIR     (2 ranks; fails the verifier)
//
// VARIANT is serial, ddp or zero1 (MlpBundle.h), or pipe: the same model
// over DP x 2 pipeline stages whose DP replicas share one program per stage
// and resolve their own pipeline and DP groups (group families).
//   weft-e2e-bundle check METRICS.jsonl DATA STEPS SEED GLOBAL_BATCH
//
// `check` trains the same model serially (MlpBundle.h, referenceTraining)
// and compares every step's loss (relative 1e-5) and gradient norm (1e-4)
// with the metrics weft-run wrote.
//
//===----------------------------------------------------------------------===//

#include "MlpBundle.h"
#include "weft/plan/Serialize.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

namespace {

/// The MLP over dp x 2 ranks (rank = dp_idx * 2 + stage). Stage 0 embeds,
/// multiplies by w1 and applies GELU, then sends the activation `a` to stage
/// 1, which computes the logits and the loss and sends back the gradient of
/// `a`. One micro-batch at a time (forward and backward), then each stage
/// all-reduces its gradients over its DP group, and the stages sum their
/// squared gradient norms over their pipeline for the global clip. Both DP
/// replicas of a stage run one program: family 0 holds the DP groups, family
/// 1 the pipelines, and each rank resolves the group that contains it.
weft::plan::Bundle buildPipelineMlpBundle(const weft::test::MlpConfig &c) {
  using namespace weft::plan;
  using weft::test::detail::Builder;
  weft::test::MlpConfig ddp = c;
  ddp.variant = "ddp";
  // Model, training settings and kernels are those of the DP plan.
  Bundle bundle = weft::test::buildMlpBundle(ddp);
  const int64_t stages = 2;
  bundle.mesh = {c.dp, stages, 1};
  bundle.config = {{"dp", c.dp}, {"pp", stages}, {"tp", 1}, {"zero", 0}};
  const int64_t dpFamily = 0, ppFamily = 1;
  GroupFamily dpGroups{dpFamily, GroupKind::DP, {}};
  GroupFamily ppGroups{ppFamily, GroupKind::PP, {}};
  for (int64_t stage = 0; stage < stages; ++stage) {
    std::vector<int64_t> &group = dpGroups.groups.emplace_back();
    for (int64_t d = 0; d < c.dp; ++d)
      group.push_back(bundle.mesh.rankOf({d, stage, 0}));
  }
  for (int64_t d = 0; d < c.dp; ++d) {
    std::vector<int64_t> &group = ppGroups.groups.emplace_back();
    for (int64_t stage = 0; stage < stages; ++stage)
      group.push_back(bundle.mesh.rankOf({d, stage, 0}));
  }
  bundle.groups = {dpGroups, ppGroups};
  bundle.rankRoles.clear();
  for (int64_t rank = 0; rank < bundle.mesh.worldSize(); ++rank)
    bundle.rankRoles.push_back(bundle.mesh.coordOf(rank).pp);

  const int64_t R = c.microBatch * c.seqLen, V = c.vocab, H = c.hidden,
                F = c.ffn;
  enum { kEmbed, kEmbedBack, kGelu, kGeluBack, kLoss };
  auto sendRecv = [&](Builder &b, Opcode opcode, int64_t buffer, int64_t peer,
                      const std::string &phase) {
    bool send = opcode == Opcode::Send;
    Instruction &inst = b.emit(opcode,
                               send ? std::vector<BufferRange>{b.all(buffer)}
                                    : std::vector<BufferRange>{},
                               send ? std::vector<BufferRange>{}
                                    : std::vector<BufferRange>{b.all(buffer)},
                               phase);
    inst.group = ppFamily;
    inst.peer = peer;
    inst.count = R * F;
  };
  /// Gradient sync, global norm and AdamW for the stage's parameters.
  auto update = [&](Builder &b, const std::vector<int64_t> &params,
                    const std::vector<int64_t> &grads,
                    const std::vector<int64_t> &moments) {
    std::vector<BufferRange> gradRanges;
    for (int64_t grad : grads) {
      Instruction &sync =
          b.emit(Opcode::AllReduce, {b.all(grad)}, {b.all(grad)}, "grad sync");
      sync.group = dpFamily;
      sync.count = b.program.buffers[grad].size / 4;
      gradRanges.push_back(b.all(grad));
    }
    int64_t norm = b.add("grad.sumsq", Region::Persistent, 1);
    b.emit(Opcode::GradNorm, gradRanges, {b.all(norm)}, "clip").dtype =
        DType::F32;
    Instruction &total =
        b.emit(Opcode::AllReduce, {b.all(norm)}, {b.all(norm)}, "clip");
    total.group = ppFamily;
    total.count = 1;
    std::vector<BufferRange> clipReads = {b.all(norm)};
    clipReads.insert(clipReads.end(), gradRanges.begin(), gradRanges.end());
    b.emit(Opcode::Clip, clipReads, gradRanges, "clip").dtype = DType::F32;
    for (size_t i = 0; i < params.size(); ++i)
      b.emit(
           Opcode::OptimizerStep,
           {b.all(params[i]), b.all(grads[i]), b.all(moments[2 * i]),
            b.all(moments[2 * i + 1])},
           {b.all(params[i]), b.all(moments[2 * i]), b.all(moments[2 * i + 1])},
           "adamw")
          .count = b.program.buffers[params[i]].size / 4;
  };
  auto addParameter = [&](Builder &b, const std::string &name, int64_t elements,
                          std::vector<int64_t> &params,
                          std::vector<int64_t> &grads,
                          std::vector<int64_t> &moments) {
    params.push_back(b.add(name, Region::Persistent, elements));
    grads.push_back(b.add(name + ".grad", Region::Persistent, elements));
    moments.push_back(b.add(name + ".exp_avg", Region::Persistent, elements));
    moments.push_back(
        b.add(name + ".exp_avg_sq", Region::Persistent, elements));
    return params.back();
  };

  // Stage 0: embedding, w1, GELU.
  Builder first;
  std::vector<Instruction> firstCompute;
  first.stream = &firstCompute;
  first.program.role = 0;
  std::vector<int64_t> firstParams, firstGrads, firstMoments;
  int64_t wte =
      addParameter(first, "wte", V * H, firstParams, firstGrads, firstMoments);
  int64_t w1 =
      addParameter(first, "w1", H * F, firstParams, firstGrads, firstMoments);
  int64_t tokens = first.add("tokens", Region::Arena, R, DType::I32);
  int64_t x = first.add("x", Region::Arena, R * H);
  int64_t h = first.add("h", Region::Arena, R * F);
  int64_t a = first.add("a", Region::Arena, R * F);
  int64_t da = first.add("a.grad", Region::Arena, R * F);
  int64_t dx = first.add("x.grad", Region::Arena, R * H);
  first
      .emit(Opcode::Fill, {},
            {first.all(firstGrads[0]), first.all(firstGrads[1])}, "zero grads")
      .dtype = DType::F32;
  for (int64_t mb = 0; mb < c.accum; ++mb) {
    std::string fwd = "fwd mb" + std::to_string(mb);
    std::string bwd = "bwd mb" + std::to_string(mb);
    first.emit(Opcode::LoadBatch, {}, {first.all(tokens)}, "data").microbatch =
        mb;
    first.kernel(kEmbed, {first.all(tokens), first.all(wte)}, {first.all(x)},
                 fwd);
    first.rowGemm(false, false, R, F, H, x, H, w1, F, h, F, 0, fwd);
    first.kernel(kGelu, {first.all(h)}, {first.all(a)}, fwd);
    sendRecv(first, Opcode::Send, a, 1, fwd);
    sendRecv(first, Opcode::Recv, da, 1, bwd);
    first.kernel(kGeluBack, {first.all(h), first.all(da)}, {first.all(da)},
                 bwd);
    first.rowGemm(true, false, H, F, R, x, H, da, F, firstGrads[1], F, 1, bwd);
    first.rowGemm(false, true, R, H, F, da, F, w1, F, dx, H, 0, bwd);
    first.kernel(kEmbedBack, {first.all(tokens), first.all(dx)},
                 {first.all(firstGrads[0])}, bwd);
  }
  update(first, firstParams, firstGrads, firstMoments);

  // Stage 1: w2 and the loss.
  Builder last;
  std::vector<Instruction> lastCompute;
  last.stream = &lastCompute;
  last.program.role = 1;
  std::vector<int64_t> lastParams, lastGrads, lastMoments;
  int64_t w2 =
      addParameter(last, "w2", F * V, lastParams, lastGrads, lastMoments);
  int64_t loss = last.add("loss", Region::Persistent, 1);
  int64_t lastTokens = last.add("tokens", Region::Arena, R, DType::I32);
  int64_t targets = last.add("targets", Region::Arena, R, DType::I32);
  int64_t lastA = last.add("a", Region::Arena, R * F);
  int64_t logits = last.add("logits", Region::Arena, R * V);
  int64_t lastDa = last.add("a.grad", Region::Arena, R * F);
  last.emit(Opcode::Fill, {}, {last.all(lastGrads[0])}, "zero grads").dtype =
      DType::F32;
  last.emit(Opcode::Fill, {}, {last.all(loss)}, "zero loss").dtype = DType::F32;
  for (int64_t mb = 0; mb < c.accum; ++mb) {
    std::string fwd = "fwd mb" + std::to_string(mb);
    std::string bwd = "bwd mb" + std::to_string(mb);
    last.emit(Opcode::LoadBatch, {}, {last.all(lastTokens), last.all(targets)},
              "data")
        .microbatch = mb;
    sendRecv(last, Opcode::Recv, lastA, 0, fwd);
    last.rowGemm(false, false, R, V, F, lastA, F, w2, V, logits, V, 0, fwd);
    last.kernel(kLoss, {last.all(logits), last.all(targets)},
                {last.all(loss), last.all(logits)}, "loss");
    last.rowGemm(true, false, F, V, R, lastA, F, logits, V, lastGrads[0], V, 1,
                 bwd);
    last.rowGemm(false, true, R, F, V, logits, V, w2, V, lastDa, F, 0, bwd);
    sendRecv(last, Opcode::Send, lastDa, 0, bwd);
  }
  update(last, lastParams, lastGrads, lastMoments);

  bundle.programs.clear();
  bundle.prediction.peakMemoryBytes.clear();
  for (auto [builder, stream] :
       {std::pair{&first, &firstCompute}, std::pair{&last, &lastCompute}}) {
    builder->program.persistentBytes = builder->persistentEnd;
    builder->program.arenaBytes = builder->arenaEnd;
    builder->program.streams.push_back({"compute", *stream});
    bundle.prediction.peakMemoryBytes.push_back(builder->persistentEnd +
                                                builder->arenaEnd);
    bundle.programs.push_back(builder->program);
  }

  const std::vector<std::vector<int64_t>> shapes = {{V, H}, {H, F}, {F, V}};
  const std::pair<int64_t, int64_t> holders[3] = {{0, wte}, {0, w1}, {1, w2}};
  const char *names[3] = {"wte", "w1", "w2"};
  bundle.parameters.clear();
  for (int i = 0; i < 3; ++i) {
    Parameter p;
    p.name = names[i];
    p.shape = shapes[i];
    p.init = {"normal", 0.2};
    p.hfName = names[i];
    int64_t elements = shapes[i][0] * shapes[i][1];
    p.shards.push_back(
        {holders[i].first, holders[i].second, 0, -1, 0, 0, 1, elements});
    bundle.parameters.push_back(p);
  }
  return bundle;
}

int mlp(char **argv) {
  weft::test::MlpConfig config;
  config.variant = argv[0];
  config.dp = std::stoll(argv[1]);
  config.microBatch = std::stoll(argv[2]);
  config.accum = std::stoll(argv[3]);
  weft::plan::writeBundle(config.variant == "pipe"
                              ? buildPipelineMlpBundle(config)
                              : weft::test::buildMlpBundle(config),
                          argv[4]);
  return 0;
}

/// Rank 0 all-reduces with a rank 1 that never joins.
int deadlock(const std::string &out) {
  using namespace weft::plan;
  weft::test::MlpConfig config;
  config.variant = "ddp";
  config.dp = 2;
  config.microBatch = 2;
  Bundle bundle = weft::test::buildMlpBundle(config);
  Program idle = bundle.programs[0];
  idle.role = 1;
  idle.numEvents = 0;
  idle.streams = {{"compute", {}}};
  Instruction fill;
  fill.opcode = Opcode::Fill;
  fill.writes = {{0, 0, 4}};
  fill.phase = "idle";
  idle.streams[0].instructions.push_back(fill);
  bundle.programs.push_back(idle);
  bundle.rankRoles = {0, 1};
  bundle.prediction.peakMemoryBytes.push_back(0);
  writeBundle(bundle, out);
  return 0;
}

int check(char **argv) {
  std::ifstream in(argv[0]);
  if (!in) {
    std::fprintf(stderr, "check: cannot open %s\n", argv[0]);
    return 1;
  }
  int64_t steps = std::stoll(argv[2]);
  weft::test::MlpConfig config;
  config.microBatch = std::stoll(argv[4]);
  std::vector<weft::test::ReferenceStep> expected =
      weft::test::referenceTraining(config, argv[1], steps,
                                    std::stoull(argv[3]));
  std::string line;
  int64_t step = 0;
  int failures = 0;
  while (std::getline(in, line)) {
    nlohmann::json metric = nlohmann::json::parse(line);
    if (step >= steps || metric.at("step").get<int64_t>() != step + 1) {
      std::fprintf(stderr, "check: unexpected line %s\n", line.c_str());
      return 1;
    }
    const weft::test::ReferenceStep &ref = expected[size_t(step)];
    double loss = metric.at("loss").get<double>();
    double norm = metric.at("grad_norm").get<double>();
    double lossErr = std::abs(loss - ref.loss) / std::abs(ref.loss);
    double normErr = std::abs(norm - ref.gradNorm) / std::abs(ref.gradNorm);
    bool ok = lossErr <= 1e-5 && normErr <= 1e-4;
    std::printf("step %lld: loss %.9g (reference %.9g, rel %.2e), grad norm "
                "%.6g (reference %.6g, rel %.2e)%s\n",
                (long long)step + 1, loss, ref.loss, lossErr, norm,
                ref.gradNorm, normErr, ok ? "" : "  MISMATCH");
    failures += !ok;
    ++step;
  }
  if (step != steps) {
    std::fprintf(stderr, "check: %lld steps in the metrics, expected %lld\n",
                 (long long)step, (long long)steps);
    return 1;
  }
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string command = argc > 1 ? argv[1] : "";
  try {
    if (command == "mlp" && argc == 7)
      return mlp(argv + 2);
    if (command == "deadlock" && argc == 3)
      return deadlock(argv[2]);
    if (command == "check" && argc == 7)
      return check(argv + 2);
  } catch (const std::exception &error) {
    std::fprintf(stderr, "weft-e2e-bundle: error: %s\n", error.what());
    return 1;
  }
  std::fputs("usage: weft-e2e-bundle mlp VARIANT DP MICRO ACCUM OUT | deadlock "
             "OUT | check METRICS DATA STEPS SEED GLOBAL_BATCH\n",
             stderr);
  return 2;
}
