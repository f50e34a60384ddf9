//===- weftc.cpp - The Weft compiler driver -------------------------------===//
//
// weftc import   <config.json|preset|model.mlir> [-o model.mlir]
// weftc presets  [--json]
// weftc summary  <config.json|preset|model.mlir> [--seq-len N] [--json]
// weftc plan     --model M --cluster C --global-batch B --seq-len S [...]
// weftc compile  --model M --cluster C --global-batch B --seq-len S [...]
//                -o BUNDLE_DIR [--emit-mlir=STAGE]
// weftc emit-bundle <exec.mlir> -o DIR   (developer: weftx IR to a bundle)
//
// Exit status: 0 success, 2 bad input, 3 no plan fits (plan).
// Bad input gets one line on stderr naming the file, the field and the
// reason, and exit status 2.
//
//===----------------------------------------------------------------------===//
#include "Weft/Analysis/ModelAnalysis.h"
#include "weft/Compiler/Import.h"
#include "weft/Compiler/InitAll.h"
#include "weft/Compiler/ModelSpecBuilder.h"

#include "Pipelines/LoweringPipeline.h"
#include "PlanCommand.h"

#include "Weft/Transforms/Passes.h"
#include "WeftExec/IR/WeftExecOps.h"
#include "WeftExec/Transforms/Passes.h"
#include "weft/Target/EmitBundle.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;
using llvm::StringRef;

namespace {
using weft::kExitBadInput;

/// The first bad number a flag was given, as weftc's error line says it
/// ("--tp: expected an integer, got 'abc'"): LLVM's own parsers print
/// "weftc: for the --tp option: 'abc' value invalid for long argument!".
std::string flagValueError;

/// The parser of number flags: a value that is not one is recorded in
/// flagValueError, not printed (main prints it as one `weftc: error:` line).
template <typename T> class NumberParser : public cl::parser<T> {
public:
  using cl::parser<T>::parser;
  bool parse(cl::Option &, StringRef name, StringRef arg, T &value) {
    bool bad;
    if constexpr (std::is_floating_point_v<T>) {
      double parsed = 0;
      bad = arg.trim().getAsDouble(parsed);
      value = T(parsed);
    } else {
      bad = arg.trim().getAsInteger(0, value);
    }
    if (bad && flagValueError.empty())
      flagValueError =
          "--" + name.str() + ": expected " +
          (std::is_floating_point_v<T> ? "a number" : "an integer") +
          ", got '" + arg.str() + "'";
    return bad;
  }
};
template <typename T> using NumberFlag = cl::opt<T, false, NumberParser<T>>;
/// A 64-bit integer flag (long long: LLVM's parser<long>, int64_t's, is
/// final).
using IntegerFlag = NumberFlag<long long>;

cl::OptionCategory weftcCategory("weftc options");

cl::SubCommand importCmd("import", "Import a Hugging Face config.json or "
                                   "preset as weft model IR");
cl::SubCommand presetsCmd("presets", "List the built-in model presets");
cl::SubCommand summaryCmd("summary", "Import a model and summarize its "
                                     "parameters, shapes and FLOPs");

cl::SubCommand planCmd("plan", "Search parallel configurations for a model "
                               "on a cluster and explain the choice");
cl::SubCommand compileCmd("compile",
                          "Plan, lower and write a verified plan bundle");
cl::SubCommand emitBundleCmd("emit-bundle",
                             "Developer: write the plan bundle of a weftx "
                             "module (planning memory if offsets are missing)");

cl::opt<std::string> modelSource(cl::Positional,
                                 cl::desc("<config.json|preset|model.mlir>"),
                                 cl::sub(importCmd), cl::sub(summaryCmd));

// `weftc plan` and `weftc compile` options.
cl::OptionCategory planCategory("Planning options");
cl::opt<std::string> planModel("model",
                               cl::desc("Model: config.json, preset or .mlir"),
                               cl::value_desc("model"), cl::sub(planCmd),
                               cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<std::string>
    planCluster("cluster", cl::desc("Cluster: JSON file or preset[:nodes]"),
                cl::value_desc("cluster"), cl::sub(planCmd),
                cl::sub(compileCmd), cl::cat(planCategory));
IntegerFlag planGlobalBatch("global-batch",
                            cl::desc("Sequences per optimizer step"),
                            cl::sub(planCmd), cl::sub(compileCmd),
                            cl::cat(planCategory));
IntegerFlag planSeqLen("seq-len", cl::desc("Tokens per sequence"),
                       cl::sub(planCmd), cl::sub(compileCmd),
                       cl::cat(planCategory));
cl::opt<std::string> planPrecision("precision", cl::desc("bf16|fp16|fp32"),
                                   cl::init("bf16"), cl::sub(planCmd),
                                   cl::sub(compileCmd), cl::cat(planCategory));
IntegerFlag planTp("tp", cl::desc("Fix the tensor-parallel degree"),
                   cl::sub(planCmd), cl::sub(compileCmd),
                   cl::cat(planCategory));
IntegerFlag planPp("pp", cl::desc("Fix the pipeline-parallel degree"),
                   cl::sub(planCmd), cl::sub(compileCmd),
                   cl::cat(planCategory));
IntegerFlag planDp("dp", cl::desc("Fix the data-parallel degree"),
                   cl::sub(planCmd), cl::sub(compileCmd),
                   cl::cat(planCategory));
IntegerFlag planZero("zero", cl::desc("Fix the ZeRO stage (0-3)"),
                     cl::sub(planCmd), cl::sub(compileCmd),
                     cl::cat(planCategory));
IntegerFlag planMicroBatch("micro-batch", cl::desc("Fix the micro-batch size"),
                           cl::sub(planCmd), cl::sub(compileCmd),
                           cl::cat(planCategory));
cl::opt<std::string>
    planRecompute("recompute", cl::desc("Fix recompute: none|selective|full"),
                  cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<std::string>
    planSchedule("schedule",
                 cl::desc("Fix the schedule: gpipe|1f1b|interleaved"),
                 cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
IntegerFlag planVirtualStages(
    "virtual-stages", cl::desc("Fix the model chunks per pipeline rank"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
IntegerFlag planPrefetchDepth(
    "prefetch-depth",
    cl::desc("Fix the ZeRO-3 prefetch depth: gather units issued ahead of "
             "compute (searched over 1, 2, 4)"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<std::string> planSequenceParallel(
    "sequence-parallel", cl::desc("Fix sequence parallelism: on|off"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<std::string> planOffload(
    "offload",
    cl::desc("Optimizer offload: none|optimizer|auto (plan: auto, searched "
             "where the cluster describes its hosts; compile: none)"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<std::string>
    planAttention("attention",
                  cl::desc("Attention implementation: flash|eager (flash)"),
                  cl::init("flash"), cl::sub(planCmd), cl::cat(planCategory));
cl::opt<bool> gemmEpilogues(
    "gemm-epilogues",
    cl::desc("Fold the bias adds, tanh GELUs (and their backward) and bias "
             "gradients right after a gemm into the gemm's epilogue "
             "(compile: weft-fuse-gemm-epilogues, one cuBLASLt call on a GPU, "
             "the CPU backend runs the same kernels after the gemm; plan and "
             "compile: the planner costs them so)"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<bool> residualNorms(
    "residual-norms",
    cl::desc("Run each residual add inside the norm next to it: the "
             "forward's in the norm after it, the backward's in the norm "
             "backward before it, which then stores no input gradient "
             "(compile: weft-fuse-residual-norms, bit for bit the same "
             "results on the CPU backend; plan and compile: the planner "
             "costs them so)"),
    cl::sub(planCmd), cl::sub(compileCmd), cl::cat(planCategory));
cl::opt<bool> planTpAcrossNodes("allow-tp-across-nodes",
                                cl::desc("Let TP groups span nodes"),
                                cl::sub(planCmd), cl::sub(compileCmd),
                                cl::cat(planCategory));
cl::opt<std::string> planFromDeepSpeed(
    "from-deepspeed",
    cl::desc("Evaluate a DeepSpeed config and compare with Weft's best plan"),
    cl::value_desc("ds_config.json"), cl::sub(planCmd), cl::cat(planCategory));
NumberFlag<int> planTop("top", cl::desc("Plans to list (default 5)"),
                        cl::init(5), cl::sub(planCmd), cl::cat(planCategory));
cl::opt<bool> planExplain("explain",
                          cl::desc("Explain the winner, runner-ups and "
                                   "rejected regions"),
                          cl::sub(planCmd), cl::cat(planCategory));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::sub(importCmd), cl::cat(weftcCategory));
IntegerFlag seqLen("seq-len",
                   cl::desc("Sequence length for FLOP counts "
                            "(default: the model's maximum positions)"),
                   cl::init(0), cl::sub(summaryCmd), cl::cat(weftcCategory));
cl::opt<bool> jsonOutput("json", cl::desc("Print JSON for scripts"),
                         cl::sub(presetsCmd), cl::sub(summaryCmd),
                         cl::sub(planCmd), cl::cat(weftcCategory));

cl::opt<std::string> execInput(cl::Positional, cl::desc("<exec.mlir>"),
                               cl::sub(emitBundleCmd));
cl::opt<std::string> bundleDir("o", cl::desc("Bundle directory"),
                               cl::value_desc("dir"), cl::sub(emitBundleCmd),
                               cl::sub(compileCmd), cl::cat(weftcCategory));

// `weftc compile` only: debugging output and training settings.
cl::OptionCategory compileCategory("Compile options");
cl::opt<std::string> emitMlir(
    "emit-mlir",
    cl::desc("Print the IR after a stage instead of writing the bundle: "
             "model|lower|autodiff|exec"),
    cl::value_desc("stage"), cl::sub(compileCmd), cl::cat(compileCategory));
cl::opt<bool> timing("timing",
                     cl::desc("Print the wall time of every pass and of "
                              "bundle emission to stderr"),
                     cl::sub(compileCmd), cl::cat(compileCategory));
cl::opt<bool> verifyEach(
    "verify-each",
    cl::desc("Verify the weftx IR after every pass of the exec stage too "
             "(the model and lowering stages always are; the bundle is "
             "verified, IR and plan, before it is written)"),
    cl::sub(compileCmd), cl::cat(compileCategory));
cl::opt<std::string> cudaArch(
    "cuda-arch",
    cl::desc("Also compile every generated kernel with nvcc into a fatbin in "
             "the bundle, for these GPU architectures (sm_80,sm_90; the "
             "last also as PTX). Without it the CUDA backend compiles them "
             "with NVRTC at load"),
    cl::value_desc("sm_NN,..."), cl::sub(compileCmd), cl::sub(emitBundleCmd),
    cl::cat(weftcCategory));
cl::opt<std::string> nvccPath(
    "nvcc",
    cl::desc("The nvcc for --cuda-arch (default: $CUDA_HOME/bin/nvcc, PATH, "
             "/usr/local/cuda/bin/nvcc)"),
    cl::value_desc("path"), cl::sub(compileCmd), cl::sub(emitBundleCmd),
    cl::cat(weftcCategory));

IntegerFlag stepsPerPlan("steps-per-plan",
                         cl::desc("Optimizer steps per replay (1)"),
                         cl::init(1), cl::sub(compileCmd),
                         cl::cat(compileCategory));
IntegerFlag zero3PersistThreshold(
    "zero3-persist-threshold",
    cl::desc("ZeRO-3: parameters of at most this many elements stay whole "
             "on every DP rank, never gathered (-1: min(100000, largest "
             "parameter / 64); 0: none)"),
    cl::init(-1), cl::sub(compileCmd), cl::cat(compileCategory));
IntegerFlag zero3MaxLiveBytes(
    "zero3-max-live-bytes",
    cl::desc("ZeRO-3: bound on gathered-and-not-released parameter bytes "
             "(0: the largest gather plus prefetch depth + 1 times the second "
             "largest)"),
    cl::init(0), cl::sub(compileCmd), cl::cat(compileCategory));
IntegerFlag maxLiveGradBytes(
    "max-live-grad-bytes",
    cl::desc("ZeRO-2/3: bound on micro-batch gradient bytes not yet known "
             "reduce-scattered (0: the largest parameter gradient plus three "
             "times the second largest)"),
    cl::init(0), cl::sub(compileCmd), cl::cat(compileCategory));
IntegerFlag bucketBytes(
    "bucket-bytes",
    cl::desc("ZeRO 0-2: the bucket size in bytes of the DP gradient "
             "all-reduces and reduce-scatters, the parameter all-gathers and "
             "offloaded AdamW (0: 25 MiB)"),
    cl::init(0), cl::sub(compileCmd), cl::cat(compileCategory));
NumberFlag<double> trainLr("lr", cl::desc("Peak learning rate (3e-4)"),
                           cl::init(3e-4), cl::sub(compileCmd),
                           cl::cat(compileCategory));
NumberFlag<double> trainMinLr("min-lr", cl::desc("Final learning rate (lr/10)"),
                              cl::sub(compileCmd), cl::cat(compileCategory));
IntegerFlag trainWarmup("warmup-steps", cl::desc("Linear warmup steps (100)"),
                        cl::init(100), cl::sub(compileCmd),
                        cl::cat(compileCategory));
IntegerFlag trainDecay("decay-steps",
                       cl::desc("Step at which cosine decay ends (10000)"),
                       cl::init(10000), cl::sub(compileCmd),
                       cl::cat(compileCategory));
NumberFlag<double> trainWeightDecay("weight-decay",
                                    cl::desc("AdamW weight decay (0.1)"),
                                    cl::init(0.1), cl::sub(compileCmd),
                                    cl::cat(compileCategory));
NumberFlag<double> trainGradClip("grad-clip",
                                 cl::desc("Global gradient-norm clip, 0 = off "
                                          "(1.0)"),
                                 cl::init(1.0), cl::sub(compileCmd),
                                 cl::cat(compileCategory));
NumberFlag<double> trainLossScale(
    "loss-scale",
    cl::desc("Loss scale: 0 = dynamic for fp16 (from --initial-loss-scale), "
             "none for bf16 and fp32; > 0 = a static scale (0)"),
    cl::init(0), cl::sub(compileCmd), cl::cat(compileCategory));
NumberFlag<double> trainInitialLossScale(
    "initial-loss-scale",
    cl::desc("Dynamic loss scaling: the first step's scale (65536)"),
    cl::init(65536), cl::sub(compileCmd), cl::cat(compileCategory));
IntegerFlag trainLossScaleWindow(
    "loss-scale-window",
    cl::desc("Dynamic loss scaling: applied steps before the scale doubles "
             "(1000)"),
    cl::init(1000), cl::sub(compileCmd), cl::cat(compileCategory));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "weftc") << message << "\n";
  return kExitBadInput;
}

int fail(llvm::Error error) { return fail(llvm::toString(std::move(error))); }

std::string withCommas(int64_t value) {
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

int requireModelSource() {
  return fail("expected a model: a config.json, a preset (`weftc presets`) "
              "or a .mlir file");
}

int runImport(mlir::MLIRContext &context) {
  if (modelSource.empty())
    return requireModelSource();
  auto module = weft::importModel(modelSource, context);
  if (!module)
    return fail(module.takeError());
  std::string error;
  auto output = mlir::openOutputFile(outputFile, &error);
  if (!output)
    return fail(outputFile + ": " + error);
  (*module)->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}

llvm::json::Object specToJson(const weft::planner::ModelSpec &spec,
                              int64_t seq) {
  return llvm::json::Object{
      {"name", spec.name},
      {"family", spec.family},
      {"params", spec.totalParams},
      {"embedding_params", spec.embeddingParams},
      {"layer_params", spec.layerParams},
      {"head_params", spec.headParams},
      {"vocab_size", spec.vocabSize},
      {"hidden_size", spec.hiddenSize},
      {"ffn_size", spec.ffnSize},
      {"num_layers", spec.numLayers},
      {"num_heads", spec.numHeads},
      {"num_kv_heads", spec.numKvHeads},
      {"head_dim", spec.headDim},
      {"max_positions", spec.maxPositions},
      {"causal", spec.causal},
      {"rotary", spec.rotary},
      {"gated_mlp", spec.gatedMlp},
      {"tied_head", spec.tiedHead},
      {"rms_norm", spec.rmsNorm},
      {"seq_len", seq},
      {"forward_flops_per_token", spec.forwardFlopsPerToken(seq)},
  };
}

llvm::Expected<weft::planner::ModelSpec> loadSpec(mlir::MLIRContext &context,
                                                  StringRef source) {
  auto module = weft::importModel(source, context);
  if (!module)
    return module.takeError();
  return weft::buildModelSpec(mlir::weft::getModels(**module).front(), source);
}

int runSummary(mlir::MLIRContext &context) {
  if (modelSource.empty())
    return requireModelSource();
  auto spec = loadSpec(context, modelSource);
  if (!spec)
    return fail(spec.takeError());
  int64_t seq = seqLen > 0 ? seqLen.getValue()
                           : (spec->maxPositions ? spec->maxPositions : 2048);
  if (jsonOutput) {
    llvm::outs() << llvm::formatv("{0:2}\n",
                                  llvm::json::Value(specToJson(*spec, seq)));
    return 0;
  }
  llvm::raw_ostream &os = llvm::outs();
  double forward = spec->forwardFlopsPerToken(seq);
  os << "model " << spec->name << " (" << spec->family
     << "): " << withCommas(spec->totalParams) << " parameters\n";
  os << llvm::formatv("  {0,-10} {1,18}\n", "embedding",
                      withCommas(spec->embeddingParams));
  os << llvm::formatv("  {0,-10} {1,18}   ({2} x {3})\n", "blocks",
                      withCommas(spec->numLayers * spec->layerParams),
                      spec->numLayers, withCommas(spec->layerParams));
  os << llvm::formatv("  {0,-10} {1,18}   ({2})\n", "head",
                      withCommas(spec->headParams),
                      spec->tiedHead ? "projection tied to the embedding"
                                     : "untied projection");
  os << llvm::formatv("  hidden {0}, ffn {1}{2}, {3} layers, {4} heads "
                      "({5} kv, head dim {6}), vocab {7}, positions {8}\n",
                      spec->hiddenSize, spec->ffnSize,
                      spec->gatedMlp ? " (gated)" : "", spec->numLayers,
                      spec->numHeads, spec->numKvHeads, spec->headDim,
                      spec->vocabSize, spec->maxPositions);
  os << llvm::formatv("  {0} attention, {1} positions, {2}\n",
                      spec->causal ? "causal" : "bidirectional",
                      spec->rotary ? "rotary" : "learned",
                      spec->rmsNorm ? "RMSNorm" : "LayerNorm");
  os << llvm::formatv("  FLOPs per token at seq {0}: forward {1:e3}, "
                      "training (fwd + bwd) {2:e3}\n",
                      seq, forward, 3 * forward);
  return 0;
}

/// The option parser's error lines as one: each without its program-name
/// prefix, joined by "; ".
std::string oneLine(StringRef text) {
  llvm::SmallVector<StringRef> lines;
  text.split(lines, '\n', -1, /*KeepEmpty=*/false);
  std::string joined;
  for (StringRef line : lines) {
    line = line.trim();
    if (size_t colon = line.find(": ");
        colon != StringRef::npos && !line.take_front(colon).contains(' '))
      line = line.drop_front(colon + 2); // "weftc: " or "./bin/weftc: "
    if (!joined.empty())
      joined += "; ";
    joined += line.str();
  }
  return joined;
}

/// `value` as a user wrote it: -5, 0.1, nan, inf.
std::string numberText(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

template <typename T, typename Parser>
std::optional<T> optionalFlag(const cl::opt<T, false, Parser> &flag) {
  if (flag.getNumOccurrences() == 0)
    return std::nullopt;
  return flag.getValue();
}

/// The planning flags shared by `plan` and `compile` (`command` prefixes
/// errors); returns 0 or the exit code of a reported error.
int collectPlanOptions(StringRef command, weft::PlanOptions &options) {
  if (planModel.empty())
    return fail(command + ": --model is required");
  if (planCluster.empty())
    return fail(command + ": --cluster is required");
  options.cluster = planCluster;
  options.globalBatch = optionalFlag(planGlobalBatch);
  options.seqLen = optionalFlag(planSeqLen);
  options.precision = planPrecision;
  options.tp = optionalFlag(planTp);
  options.pp = optionalFlag(planPp);
  options.dp = optionalFlag(planDp);
  options.zero = optionalFlag(planZero);
  options.microBatch = optionalFlag(planMicroBatch);
  options.virtualStages = optionalFlag(planVirtualStages);
  options.prefetchDepth = optionalFlag(planPrefetchDepth);
  options.recompute = optionalFlag(planRecompute);
  options.schedule = optionalFlag(planSchedule);
  options.sequenceParallel = optionalFlag(planSequenceParallel);
  options.allowTpAcrossNodes = planTpAcrossNodes;
  options.gemmEpilogues = gemmEpilogues;
  options.residualNorms = residualNorms;
  options.bucketBytes = std::max<int64_t>(0, bucketBytes);
  for (auto [flag, value] :
       {std::pair{"--global-batch", options.globalBatch},
        std::pair{"--seq-len", options.seqLen}, std::pair{"--tp", options.tp},
        std::pair{"--pp", options.pp}, std::pair{"--dp", options.dp},
        std::pair{"--micro-batch", options.microBatch},
        std::pair{"--virtual-stages", options.virtualStages},
        std::pair{"--prefetch-depth", options.prefetchDepth}})
    if (value && *value <= 0)
      return fail(command + ": " + flag +
                  ": expected a positive integer, got " + llvm::Twine(*value));
  return 0;
}

int runPlan(mlir::MLIRContext &context) {
  weft::PlanOptions options;
  if (int status = collectPlanOptions("plan", options))
    return status;
  auto spec = loadSpec(context, planModel);
  if (!spec)
    return fail(spec.takeError());
  options.fromDeepSpeed = optionalFlag(planFromDeepSpeed);
  options.offload = optionalFlag(planOffload);
  options.attention = planAttention;
  options.top = planTop;
  options.explain = planExplain;
  options.json = jsonOutput;
  if (planTop <= 0)
    return fail("plan: --top: expected a positive integer");
  return weft::runPlan(*spec, options);
}

/// Whether weft-plan-memory still has to place some buffer.
bool needsMemoryPlan(mlir::ModuleOp module) {
  bool missing = false;
  for (auto program : module.getOps<mlir::weftx::ProgramOp>()) {
    missing |= !program.getArenaSize() || !program.getPersistentSize();
    for (auto buffer : program.getBuffers())
      missing |= !buffer.getOffset();
  }
  return missing;
}

/// --cuda-arch and --nvcc, checked before anything is compiled.
llvm::Expected<weft::KernelFatbinOptions> fatbinOptions() {
  weft::KernelFatbinOptions options;
  if (cudaArch.getNumOccurrences() == 0) {
    if (nvccPath.getNumOccurrences())
      return llvm::createStringError("--nvcc needs --cuda-arch");
    return options;
  }
  auto archs = weft::parseCudaArchs(cudaArch);
  if (!archs)
    return archs.takeError();
  auto nvcc = weft::findNvcc(nvccPath);
  if (!nvcc)
    return nvcc.takeError();
  options.archs = std::move(*archs);
  options.nvcc = std::move(*nvcc);
  return options;
}

int runEmitBundle(mlir::MLIRContext &context) {
  if (execInput.empty())
    return fail("emit-bundle: expected a weftx .mlir file");
  if (bundleDir.empty())
    return fail("emit-bundle: -o DIR is required");
  llvm::Expected<weft::KernelFatbinOptions> fatbins = fatbinOptions();
  if (!fatbins)
    return fail("emit-bundle: " + llvm::toString(fatbins.takeError()));
  // Report only the first error, as one line.
  std::string firstError;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() != mlir::DiagnosticSeverity::Error ||
        !firstError.empty())
      return mlir::success();
    llvm::raw_string_ostream os(firstError);
    if (auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(diag.getLocation()))
      os << loc.getFilename().getValue() << ":" << loc.getLine() << ":"
         << loc.getColumn() << ": ";
    os << diag;
    return mlir::success();
  });
  auto module = mlir::parseSourceFile<mlir::ModuleOp>(execInput, &context);
  if (!module)
    return fail(firstError.empty() ? execInput + ": cannot be parsed"
                                   : firstError);
  if (needsMemoryPlan(*module)) {
    mlir::PassManager pm(&context);
    pm.addPass(mlir::weftx::createWeftPlanMemory());
    if (mlir::failed(pm.run(*module)))
      return fail(firstError);
  }
  if (llvm::Error error = weft::emitBundle(*module, bundleDir, {}, *fatbins))
    return fail(llvm::Twine(execInput) + ": " +
                llvm::toString(std::move(error)));
  return 0;
}

int runCompile(mlir::MLIRContext &context) {
  std::optional<weft::CompileStage> printAfter;
  bool printModel = emitMlir == "model";
  if (!emitMlir.empty() && !printModel) {
    auto stage = llvm::StringSwitch<std::optional<weft::CompileStage>>(emitMlir)
                     .Case("lower", weft::CompileStage::Lower)
                     .Case("autodiff", weft::CompileStage::Autodiff)
                     .Case("exec", weft::CompileStage::Exec)
                     .Default(std::nullopt);
    if (!stage)
      return fail("compile: --emit-mlir: expected model, lower, autodiff or "
                  "exec, got '" +
                  emitMlir + "'");
    printAfter = stage;
  }
  if (emitMlir.empty() && bundleDir.empty())
    return fail("compile: -o BUNDLE_DIR is required");
  // Checked before the (long) lowering: a bad --cuda-arch fails at once.
  llvm::Expected<weft::KernelFatbinOptions> fatbins = fatbinOptions();
  if (!fatbins)
    return fail("compile: " + llvm::toString(fatbins.takeError()));
  if (stepsPerPlan != 1)
    return fail("compile: --steps-per-plan: only 1 is supported");

  // fp32 is the default here (plan's is bf16): the CPU backend computes
  // every dtype in fp32, so fp32 storage costs it nothing. TP, PP, ZeRO and
  // recompute are not searched: they default to what every
  // cluster can run, and flags choose the rest.
  weft::PlanOptions options;
  if (int status = collectPlanOptions("compile", options))
    return status;
  options.offload = optionalFlag(planOffload);
  if (planPrecision.getNumOccurrences() == 0)
    options.precision = "fp32";
  options.tp = options.tp.value_or(1);
  options.pp = options.pp.value_or(1);
  options.zero = options.zero.value_or(0);
  options.recompute = options.recompute.value_or("none");
  options.sequenceParallel = options.sequenceParallel.value_or("off");

  auto module = weft::importModel(planModel, context);
  if (!module)
    return fail(module.takeError());
  auto spec =
      weft::buildModelSpec(mlir::weft::getModels(**module).front(), planModel);
  if (!spec)
    return fail(spec.takeError());
  weft::planner::Estimate plan;
  std::string clusterJson;
  if (int status = weft::selectPlan(*spec, options, plan, clusterJson))
    return status;
  const double minLr =
      trainMinLr.getNumOccurrences() ? trainMinLr.getValue() : trainLr / 10;
  // NaN and infinity would reach plan.json as null (JSON has neither), a
  // bundle no tool loads; a negative rate, decay or clip means nothing.
  for (auto [flag, value] :
       {std::pair{"--lr", trainLr.getValue()}, std::pair{"--min-lr", minLr},
        std::pair{"--weight-decay", trainWeightDecay.getValue()},
        std::pair{"--grad-clip", trainGradClip.getValue()},
        std::pair{"--loss-scale", trainLossScale.getValue()},
        std::pair{"--initial-loss-scale", trainInitialLossScale.getValue()}})
    if (!std::isfinite(value))
      return fail(llvm::Twine("compile: ") + flag +
                  " must be a finite number, got " + numberText(value));
  for (auto [flag, value] :
       {std::pair{"--lr", trainLr.getValue()}, std::pair{"--min-lr", minLr},
        std::pair{"--weight-decay", trainWeightDecay.getValue()},
        std::pair{"--grad-clip", trainGradClip.getValue()},
        std::pair{"--loss-scale", trainLossScale.getValue()},
        std::pair{"--warmup-steps", double(trainWarmup.getValue())},
        std::pair{"--decay-steps", double(trainDecay.getValue())}})
    if (value < 0)
      return fail(llvm::Twine("compile: ") + flag + " must be >= 0, got " +
                  numberText(value));
  if (trainInitialLossScale <= 0)
    return fail(llvm::formatv("compile: --initial-loss-scale must be > 0, "
                              "got {0}",
                              trainInitialLossScale.getValue())
                    .str());
  if (trainLossScaleWindow < 1)
    return fail(llvm::formatv("compile: --loss-scale-window must be >= 1, "
                              "got {0}",
                              trainLossScaleWindow.getValue())
                    .str());
  // The ZeRO-3 knobs mean nothing to another plan: say so rather than
  // silently ignore them.
  for (const IntegerFlag *knob : {&zero3PersistThreshold, &zero3MaxLiveBytes})
    if (knob->getNumOccurrences() && plan.config.zero != 3)
      return fail(llvm::formatv("compile: --{0} applies to ZeRO-3 plans only "
                                "(this plan uses ZeRO-{1})",
                                knob->ArgStr, plan.config.zero)
                      .str());
  if (maxLiveGradBytes.getNumOccurrences() &&
      (plan.config.zero < 2 || plan.config.dp == 1))
    return fail(llvm::formatv("compile: --max-live-grad-bytes applies to "
                              "ZeRO-2/3 plans with DP > 1 only (this plan "
                              "uses ZeRO-{0} with DP {1})",
                              plan.config.zero, plan.config.dp)
                    .str());
  if (maxLiveGradBytes < 0)
    return fail(llvm::formatv("compile: --max-live-grad-bytes must not be "
                              "negative, got {0}",
                              maxLiveGradBytes.getValue())
                    .str());
  if (bucketBytes.getNumOccurrences() && plan.config.zero == 3)
    return fail("compile: --bucket-bytes applies to ZeRO 0-2 plans (ZeRO-3's "
                "gather buckets are the planner's choice)");
  if (bucketBytes < 0)
    return fail(llvm::formatv("compile: --bucket-bytes must be >= 0, got {0}",
                              bucketBytes.getValue())
                    .str());
  if (plan.config.gradAccum > mlir::weft::kMaxGradAccum)
    return fail(llvm::formatv("compile: {0} accumulation steps (global batch "
                              "{1} / (micro-batch {2} x DP {3})): a step "
                              "unrolls at most {4} micro-batches; pass a "
                              "larger --micro-batch",
                              plan.config.gradAccum,
                              plan.config.microBatch * plan.config.gradAccum *
                                  plan.config.dp,
                              plan.config.microBatch, plan.config.dp,
                              mlir::weft::kMaxGradAccum)
                    .str());
  if (printModel) {
    (*module)->print(llvm::outs());
    llvm::outs() << "\n";
    return 0;
  }

  weft::LoweringOptions lowering;
  lowering.tp = plan.config.tp;
  lowering.pp = plan.config.pp;
  lowering.dp = plan.config.dp;
  lowering.zero = plan.config.zero;
  lowering.microBatch = plan.config.microBatch;
  lowering.gradAccum = plan.config.gradAccum;
  lowering.recompute =
      std::string(weft::planner::toString(plan.config.recompute));
  lowering.schedule =
      std::string(weft::planner::toString(plan.config.schedule));
  lowering.virtualStages = plan.config.virtualStages;
  // The planner balances a non-interleaved pipeline's layers against the
  // embedding and head on the end stages; its estimate is of that split.
  if (plan.config.pp > 1 &&
      plan.config.schedule != weft::planner::Schedule::Interleaved)
    lowering.layersPerStage = llvm::ArrayRef<int64_t>(plan.layersPerStage);
  lowering.sequenceParallel = plan.config.sequenceParallel;
  lowering.prefetchDepth = plan.config.prefetchDepth;
  lowering.bucketBytes =
      plan.config.zero == 3 ? plan.config.bucketBytes : bucketBytes.getValue();
  mlir::weft::WeftScheduleOptions schedule;
  schedule.seqLen = *options.seqLen;
  schedule.family = spec->family;
  schedule.lr = trainLr;
  schedule.minLr = minLr;
  schedule.warmupSteps = trainWarmup;
  schedule.decaySteps = trainDecay;
  schedule.weightDecay = trainWeightDecay;
  schedule.gradClip = trainGradClip;
  schedule.precision = options.precision;
  schedule.lossScale = trainLossScale;
  schedule.initialLossScale = trainInitialLossScale;
  schedule.lossScaleWindow = trainLossScaleWindow;
  schedule.offloadOptimizer =
      plan.config.offload == weft::planner::Offload::Optimizer;
  schedule.stepsPerPlan = stepsPerPlan;
  schedule.persistThreshold = zero3PersistThreshold;
  schedule.maxLiveGatheredBytes = zero3MaxLiveBytes;
  schedule.maxLiveGradBytes = maxLiveGradBytes;
  schedule.predictedStepTimeS = plan.stepTimeS;
  schedule.predictedMfu = plan.mfu;
  // What the compiled plan allocates itself (persistent state and arena),
  // so weft-inspect compares it with the bundle's regions like for like.
  schedule.predictedPeakBytes = int64_t(plan.memory.staticPlanBytes());
  schedule.clusterJson = clusterJson;

  // Report only the first error, as one line.
  std::string firstError;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
        firstError.empty())
      llvm::raw_string_ostream(firstError) << diag;
    return mlir::success();
  });
  mlir::DefaultTimingManager timingManager;
  timingManager.setEnabled(timing);
  mlir::TimingScope rootTimer = timingManager.getRootScope();
  // The timing report keys pass timers by the pass objects' addresses: the
  // pass managers stay alive until emission is timed, so no later timer can
  // be allocated at a freed pass's address and be merged into its row.
  std::vector<std::unique_ptr<mlir::PassManager>> passManagers;
  for (weft::CompileStage stage :
       {weft::CompileStage::Lower, weft::CompileStage::Autodiff,
        weft::CompileStage::Exec}) {
    mlir::PassManager &pm = *passManagers.emplace_back(
        std::make_unique<mlir::PassManager>(&context));
    pm.enableTiming(rootTimer);
    // The exec stage's module is large (every rank's instructions): one
    // full verification per pass costs ~0.3 s each at 175B, and emission
    // verifies the result anyway (verify-weftx and the plan verifier).
    pm.enableVerifier(stage != weft::CompileStage::Exec || verifyEach);
    weft::buildCompileStage(pm, stage, lowering, schedule,
                            {gemmEpilogues, residualNorms});
    if (mlir::failed(pm.run(**module)))
      return fail("compile: " + firstError);
    if (printAfter == stage) {
      (*module)->print(llvm::outs());
      llvm::outs() << "\n";
      return 0;
    }
  }
  if (llvm::Error error = weft::emitBundle(
          **module, bundleDir, rootTimer.nest("emit-bundle"), *fatbins))
    return fail("compile: " + llvm::toString(std::move(error)));
  rootTimer.stop();
  llvm::outs() << llvm::formatv(
      "weftc: wrote {0}: {1} (dp {2}, micro-batch {3} x {4} accumulation "
      "steps, seq {5})\n",
      bundleDir, spec->name, plan.config.dp, plan.config.microBatch,
      plan.config.gradAccum, *options.seqLen);
  return 0;
}

int runPresets(mlir::MLIRContext &context) {
  llvm::json::Array presets;
  for (StringRef name : weft::presetNames()) {
    auto spec = loadSpec(context, name);
    if (!spec)
      return fail(spec.takeError());
    if (jsonOutput) {
      presets.push_back(specToJson(*spec, spec->maxPositions));
      continue;
    }
    llvm::outs() << llvm::formatv("{0,-14} {1,-8} {2,16} params\n", name,
                                  spec->family, withCommas(spec->totalParams));
  }
  if (jsonOutput)
    llvm::outs() << llvm::formatv("{0:2}\n",
                                  llvm::json::Value(std::move(presets)));
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  weft::registerAllDialects(registry);
  mlir::MLIRContext context(registry);

  // Show weftc's own options only, not the ones LLVM's libraries register.
  const cl::OptionCategory *shown[] = {&weftcCategory, &planCategory,
                                       &compileCategory};
  cl::HideUnrelatedOptions(shown);
  // LLVM's parser reports an unknown argument in "weftc: ..." lines (with a
  // "Did you mean" line): they become one `weftc: error:` line.
  std::string parserText;
  llvm::raw_string_ostream parserErrors(parserText);
  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "weftc: the Weft compiler\n\n"
                                   "  weftc import <model> [-o out.mlir]\n"
                                   "  weftc presets\n"
                                   "  weftc summary <model>\n"
                                   "  weftc plan --model M --cluster C "
                                   "--global-batch B --seq-len S\n"
                                   "  weftc compile --model M --cluster C "
                                   "--global-batch B --seq-len S -o DIR\n"
                                   "  weftc emit-bundle <exec.mlir> -o DIR\n",
                                   &parserErrors))
    return fail(!flagValueError.empty() ? flagValueError
                : parserText.empty()    ? "cannot parse the command line"
                                        : oneLine(parserText));
  if (importCmd)
    return runImport(context);
  if (presetsCmd)
    return runPresets(context);
  if (summaryCmd)
    return runSummary(context);
  if (planCmd)
    return runPlan(context);
  if (compileCmd)
    return runCompile(context);
  if (emitBundleCmd)
    return runEmitBundle(context);
  return fail("no command given; run `weftc --help`");
}
