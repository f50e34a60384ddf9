//===- weftc.cpp - The Weft compiler driver -------------------------------===//
//
// weftc import   <config.json|preset|model.mlir> [-o model.mlir]
// weftc presets  [--json]
// weftc summary  <config.json|preset|model.mlir> [--seq-len N] [--json]
//
// Bad input gets one line on stderr naming the file, the field and the
// reason, and exit status 2.
//
//===----------------------------------------------------------------------===//
#include "Weft/Analysis/ModelAnalysis.h"
#include "weft/Compiler/Import.h"
#include "weft/Compiler/InitAll.h"
#include "weft/Compiler/ModelSpecBuilder.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

namespace cl = llvm::cl;
using llvm::StringRef;

namespace {
constexpr int kExitBadInput = 2;

cl::SubCommand importCmd("import", "Import a Hugging Face config.json or "
                                   "preset as weft model IR");
cl::SubCommand presetsCmd("presets", "List the built-in model presets");
cl::SubCommand summaryCmd("summary", "Import a model and summarize its "
                                     "parameters, shapes and FLOPs");

cl::opt<std::string> modelSource(cl::Positional, cl::Required,
                                 cl::desc("<config.json|preset|model.mlir>"),
                                 cl::sub(importCmd), cl::sub(summaryCmd));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"),
                                cl::sub(importCmd));
cl::opt<int64_t> seqLen("seq-len",
                        cl::desc("Sequence length for FLOP counts "
                                 "(default: the model's maximum positions)"),
                        cl::init(0), cl::sub(summaryCmd));
cl::opt<bool> jsonOutput("json", cl::desc("Print JSON for scripts"),
                         cl::sub(presetsCmd), cl::sub(summaryCmd));

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

int runImport(mlir::MLIRContext &context) {
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

llvm::Expected<weft::planner::ModelSpec>
loadSpec(mlir::MLIRContext &context, StringRef source) {
  auto module = weft::importModel(source, context);
  if (!module)
    return module.takeError();
  return weft::buildModelSpec(mlir::weft::getModels(**module).front(), source);
}

int runSummary(mlir::MLIRContext &context) {
  auto spec = loadSpec(context, modelSource);
  if (!spec)
    return fail(spec.takeError());
  int64_t seq = seqLen > 0 ? seqLen.getValue()
                           : (spec->maxPositions ? spec->maxPositions : 2048);
  if (jsonOutput) {
    llvm::outs() << llvm::formatv("{0:2}\n", llvm::json::Value(specToJson(*spec, seq)));
    return 0;
  }
  llvm::raw_ostream &os = llvm::outs();
  double forward = spec->forwardFlopsPerToken(seq);
  os << "model " << spec->name << " (" << spec->family << "): "
     << withCommas(spec->totalParams) << " parameters\n";
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
    llvm::outs() << llvm::formatv("{0:2}\n", llvm::json::Value(std::move(presets)));
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::DialectRegistry registry;
  weft::registerAllDialects(registry);
  mlir::MLIRContext context(registry);

  if (!cl::ParseCommandLineOptions(argc, argv,
                                   "weftc: the Weft compiler\n\n"
                                   "  weftc import <model> [-o out.mlir]\n"
                                   "  weftc presets\n"
                                   "  weftc summary <model>\n",
                                   &llvm::errs()))
    return kExitBadInput;
  if (importCmd)
    return runImport(context);
  if (presetsCmd)
    return runPresets(context);
  if (summaryCmd)
    return runSummary(context);
  return fail("no command given; run `weftc --help`");
}
