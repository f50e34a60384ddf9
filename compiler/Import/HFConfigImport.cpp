//===- HFConfigImport.cpp - Hugging Face config.json -> weft model IR -----===//
//
// Reads the field names transformers writes for each family and builds the
// model with Hugging Face's parameter names, layouts and initializers, so a
// checkpoint exported from the IR loads into transformers unchanged.
//
//===----------------------------------------------------------------------===//
#include "weft/Compiler/Import.h"

#include "Weft/IR/WeftOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>

using namespace mlir;
using namespace mlir::weft;
using llvm::json::Object;

namespace {

/// Reads typed fields of a config object. The first problem is kept and
/// reported as "<origin>: field '<key>': <reason>"; later reads return
/// defaults so callers can read everything and check once.
class FieldReader {
public:
  FieldReader(const Object &object, StringRef origin)
      : object(object), origin(origin) {}

  /// A required positive integer (a size, at most kMaxDimension).
  int64_t positiveInt(StringRef key) { return required(key, kMaxDimension); }
  /// A required layer count (at most kMaxLayers).
  int64_t layerCount(StringRef key) { return required(key, kMaxLayers); }
  /// An optional positive integer; absent or null gives `fallback`.
  int64_t positiveInt(StringRef key, int64_t fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    return readPositiveInt(key, *value, kMaxDimension);
  }
  int64_t integer(StringRef key, int64_t fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    if (std::optional<int64_t> result = value->getAsInteger())
      return *result;
    fail(key, llvm::formatv("expected an integer, got {0}", *value));
    return fallback;
  }
  double positiveNumber(StringRef key, double fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    std::optional<double> number = value->getAsNumber();
    if (number && *number > 0 && std::isfinite(*number))
      return *number;
    fail(key, llvm::formatv("expected a positive number, got {0}", *value));
    return fallback;
  }
  bool boolean(StringRef key, bool fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback;
    if (std::optional<bool> result = value->getAsBoolean())
      return *result;
    fail(key, llvm::formatv("expected true or false, got {0}", *value));
    return fallback;
  }
  std::string string(StringRef key, StringRef fallback) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null)
      return fallback.str();
    if (std::optional<StringRef> result = value->getAsString())
      return result->str();
    fail(key, llvm::formatv("expected a string, got {0}", *value));
    return fallback.str();
  }

  void fail(StringRef key, const llvm::Twine &reason) {
    if (!error)
      error = (origin + ": field '" + key + "': " + reason).str();
  }
  bool failed() const { return error.has_value(); }
  llvm::Error takeError() {
    return llvm::createStringError(error ? *error : std::string("no error"));
  }

private:
  // Bounds keep element counts far from int64 overflow and the IR (one block
  // per layer) small enough to build.
  static constexpr int64_t kMaxDimension = int64_t(1) << 24;
  static constexpr int64_t kMaxLayers = 4096;

  int64_t required(StringRef key, int64_t limit) {
    const llvm::json::Value *value = object.get(key);
    if (!value || value->kind() == llvm::json::Value::Null) {
      fail(key, "missing (expected a positive integer)");
      return 1;
    }
    return readPositiveInt(key, *value, limit);
  }

  int64_t readPositiveInt(StringRef key, const llvm::json::Value &value,
                          int64_t limit) {
    std::optional<int64_t> result = value.getAsInteger();
    if (!result || *result <= 0) {
      fail(key, llvm::formatv("expected a positive integer, got {0}", value));
      return 1;
    }
    if (*result > limit) {
      fail(key, llvm::formatv("{0} exceeds the supported maximum {1}", *result,
                              limit));
      return 1;
    }
    return *result;
  }

  const Object &object;
  StringRef origin;
  std::optional<std::string> error;
};

/// Maps transformers' activation names onto the dialect's.
std::optional<StringRef> activationFromHF(StringRef name) {
  return llvm::StringSwitch<std::optional<StringRef>>(name)
      .Case("gelu_new", StringRef("gelu_tanh"))
      .Case("gelu_pytorch_tanh", StringRef("gelu_tanh"))
      .Case("gelu_fast", StringRef("gelu_tanh"))
      .Case("gelu", StringRef("gelu"))
      .Case("relu", StringRef("relu"))
      .Case("silu", StringRef("silu"))
      .Case("swish", StringRef("silu"))
      .Default(std::nullopt);
}

/// Shapes and options common to every family, after validation.
struct Dims {
  int64_t vocab, hidden, ffn, layers, heads, kvHeads, positions;
  StringRef activation;
  double normEps, initStd;
  bool tied;
};

/// Builds the IR of one model into a function body.
class ModelBuilder {
public:
  ModelBuilder(MLIRContext &context, const Dims &dims)
      : builder(&context), loc(UnknownLoc::get(&context)), dims(dims),
        f32(builder.getF32Type()) {}

  Value param(StringRef name, ArrayRef<int64_t> shape, InitKind init,
              bool hfTransposed = false, double std = 0) {
    auto op = ParamOp::create(
        builder, loc, RankedTensorType::get(shape, f32),
        builder.getStringAttr(name),
        InitKindAttr::get(builder.getContext(), init),
        init == InitKind::normal ? builder.getF64FloatAttr(std) : FloatAttr(),
        StringAttr(), hfTransposed ? builder.getUnitAttr() : UnitAttr());
    return op.getResult();
  }
  Value weight(StringRef name, ArrayRef<int64_t> shape, bool hfTransposed,
               double std) {
    return param(name, shape, InitKind::normal, hfTransposed, std);
  }
  Value weight(StringRef name, ArrayRef<int64_t> shape, bool hfTransposed) {
    return weight(name, shape, hfTransposed, dims.initStd);
  }
  Value zeros(StringRef name, int64_t size) {
    return param(name, {size}, InitKind::zeros);
  }
  Value ones(StringRef name, int64_t size) {
    return param(name, {size}, InitKind::ones);
  }
  RankedTensorType hiddenType(int64_t width) {
    return RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic, width}, f32);
  }
  Value layerNorm(Value input, StringRef prefix) {
    Value gamma = ones((prefix + ".weight").str(), dims.hidden);
    Value beta = zeros((prefix + ".bias").str(), dims.hidden);
    return LayerNormOp::create(builder, loc, input.getType(),
                               /*state=*/TypeRange(), input, gamma, beta,
                               builder.getF64FloatAttr(dims.normEps))
        .getResult();
  }
  Value rmsNorm(Value input, StringRef name) {
    Value gamma = ones(name, dims.hidden);
    return RMSNormOp::create(builder, loc, input.getType(),
                             /*state=*/TypeRange(), input, gamma,
                             builder.getF64FloatAttr(dims.normEps))
        .getResult();
  }
  Value add(Value lhs, Value rhs) {
    return arith::AddFOp::create(builder, loc, lhs, rhs);
  }
  Value attention(Value input, ValueRange qkvWeights, ValueRange qkvBiases,
                  Value outWeight, Value outBias, bool causal,
                  std::optional<double> ropeTheta) {
    return AttentionOp::create(
               builder, loc, input.getType(), /*state=*/TypeRange(), input,
               qkvWeights, qkvBiases, outWeight, outBias,
               builder.getI64IntegerAttr(dims.heads),
               builder.getI64IntegerAttr(dims.kvHeads),
               builder.getI64IntegerAttr(dims.hidden / dims.heads),
               builder.getBoolAttr(causal),
               ropeTheta ? builder.getF64FloatAttr(*ropeTheta) : FloatAttr())
        .getResult();
  }

  /// Creates `func.func @name(tokens, labels) -> loss` and leaves the
  /// builder in its body.
  func::FuncOp beginModel(ModuleOp module, StringRef name, StringRef family) {
    builder.setInsertionPointToEnd(module.getBody());
    auto ids = RankedTensorType::get(
        {ShapedType::kDynamic, ShapedType::kDynamic}, builder.getI32Type());
    auto loss = RankedTensorType::get({}, f32);
    auto func = func::FuncOp::create(builder, loc, name,
                                     builder.getFunctionType({ids, ids}, loss));
    func->setAttr(WeftDialect::kModelAttrName, builder.getStringAttr(family));
    func.setArgAttr(0, "weft.input", builder.getStringAttr("tokens"));
    func.setArgAttr(1, "weft.input", builder.getStringAttr("labels"));
    builder.setInsertionPointToStart(func.addEntryBlock());
    return func;
  }

  /// Emits `weft.block layer (input) { body }`; `body` builds the layer from
  /// the block argument and returns its output.
  Value block(int64_t layer, Value input,
              llvm::function_ref<Value(Value)> body) {
    auto op = BlockOp::create(builder, loc, input.getType(), input,
                              builder.getI64IntegerAttr(layer));
    Block *entry = builder.createBlock(&op.getBody(), {}, input.getType(), loc);
    Value output = body(entry->getArgument(0));
    YieldOp::create(builder, loc, output);
    builder.setInsertionPointAfter(op);
    return op.getResult();
  }

  Value lossOf(Value logits, Value labels) {
    return CrossEntropyOp::create(builder, loc, RankedTensorType::get({}, f32),
                                  logits, labels,
                                  builder.getI64IntegerAttr(-100));
  }
  void finish(Value loss) { func::ReturnOp::create(builder, loc, loss); }

  OpBuilder builder;
  Location loc;
  Dims dims;
  Type f32;
};

std::string layerPrefix(StringRef base, int64_t layer) {
  return (base + "." + llvm::Twine(layer)).str();
}

//===----------------------------------------------------------------------===//
// Families
//===----------------------------------------------------------------------===//

void buildGPT2(ModelBuilder &b, func::FuncOp func) {
  const Dims &d = b.dims;
  Value tokens = func.getArgument(0), labels = func.getArgument(1);
  Value wte = b.weight("transformer.wte.weight", {d.vocab, d.hidden}, false);
  Value wpe =
      b.weight("transformer.wpe.weight", {d.positions, d.hidden}, false);
  Value x = EmbeddingOp::create(b.builder, b.loc, b.hiddenType(d.hidden),
                                tokens, wte, wpe, Value(), 0);
  // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer).
  double residualStd = d.initStd / std::sqrt(2.0 * d.layers);
  for (int64_t l = 0; l < d.layers; ++l) {
    std::string p = layerPrefix("transformer.h", l);
    x = b.block(l, x, [&](Value in) {
      Value n1 = b.layerNorm(in, p + ".ln_1");
      Value qkv =
          b.weight(p + ".attn.c_attn.weight", {d.hidden, 3 * d.hidden}, false);
      Value qkvBias = b.zeros(p + ".attn.c_attn.bias", 3 * d.hidden);
      Value proj = b.weight(p + ".attn.c_proj.weight", {d.hidden, d.hidden},
                            false, residualStd);
      Value projBias = b.zeros(p + ".attn.c_proj.bias", d.hidden);
      Value a = b.attention(n1, qkv, qkvBias, proj, projBias, /*causal=*/true,
                            std::nullopt);
      Value r1 = b.add(in, a);
      Value n2 = b.layerNorm(r1, p + ".ln_2");
      Value fc = b.weight(p + ".mlp.c_fc.weight", {d.hidden, d.ffn}, false);
      Value fcBias = b.zeros(p + ".mlp.c_fc.bias", d.ffn);
      Value down = b.weight(p + ".mlp.c_proj.weight", {d.ffn, d.hidden}, false,
                            residualStd);
      Value downBias = b.zeros(p + ".mlp.c_proj.bias", d.hidden);
      Value m =
          MLPOp::create(b.builder, b.loc, n2.getType(), /*state=*/TypeRange(),
                        n2, fc, fcBias, Value(), down, downBias, d.activation)
              .getResult();
      return b.add(r1, m);
    });
  }
  Value final = b.layerNorm(x, "transformer.ln_f");
  Value head =
      d.tied ? wte : b.weight("lm_head.weight", {d.vocab, d.hidden}, false);
  Value logits = LMHeadOp::create(b.builder, b.loc, b.hiddenType(d.vocab),
                                  final, head, Value());
  b.finish(b.lossOf(logits, labels));
}

struct LlamaOptions {
  double ropeTheta;
  bool attentionBias;
};

void buildLlama(ModelBuilder &b, func::FuncOp func, const LlamaOptions &opt) {
  const Dims &d = b.dims;
  Value tokens = func.getArgument(0), labels = func.getArgument(1);
  Value embed =
      b.weight("model.embed_tokens.weight", {d.vocab, d.hidden}, false);
  Value x = EmbeddingOp::create(b.builder, b.loc, b.hiddenType(d.hidden),
                                tokens, embed, Value(), Value(), 0);
  int64_t headDim = d.hidden / d.heads;
  int64_t qWidth = d.heads * headDim, kvWidth = d.kvHeads * headDim;
  for (int64_t l = 0; l < d.layers; ++l) {
    std::string p = layerPrefix("model.layers", l);
    x = b.block(l, x, [&](Value in) {
      Value n1 = b.rmsNorm(in, p + ".input_layernorm.weight");
      std::string attn = p + ".self_attn.";
      SmallVector<Value> weights = {
          b.weight(attn + "q_proj.weight", {d.hidden, qWidth}, true),
          b.weight(attn + "k_proj.weight", {d.hidden, kvWidth}, true),
          b.weight(attn + "v_proj.weight", {d.hidden, kvWidth}, true)};
      SmallVector<Value> biases;
      if (opt.attentionBias)
        biases = {b.zeros(attn + "q_proj.bias", qWidth),
                  b.zeros(attn + "k_proj.bias", kvWidth),
                  b.zeros(attn + "v_proj.bias", kvWidth)};
      Value out = b.weight(attn + "o_proj.weight", {qWidth, d.hidden}, true);
      Value outBias =
          opt.attentionBias ? b.zeros(attn + "o_proj.bias", d.hidden) : Value();
      Value a = b.attention(n1, weights, biases, out, outBias, /*causal=*/true,
                            opt.ropeTheta);
      Value r1 = b.add(in, a);
      Value n2 = b.rmsNorm(r1, p + ".post_attention_layernorm.weight");
      std::string mlp = p + ".mlp.";
      Value gate = b.weight(mlp + "gate_proj.weight", {d.hidden, d.ffn}, true);
      Value up = b.weight(mlp + "up_proj.weight", {d.hidden, d.ffn}, true);
      Value down = b.weight(mlp + "down_proj.weight", {d.ffn, d.hidden}, true);
      Value m =
          MLPOp::create(b.builder, b.loc, n2.getType(), /*state=*/TypeRange(),
                        n2, up, Value(), gate, down, Value(), d.activation)
              .getResult();
      return b.add(r1, m);
    });
  }
  Value final = b.rmsNorm(x, "model.norm.weight");
  Value head =
      d.tied ? embed : b.weight("lm_head.weight", {d.vocab, d.hidden}, false);
  Value logits = LMHeadOp::create(b.builder, b.loc, b.hiddenType(d.vocab),
                                  final, head, Value());
  b.finish(b.lossOf(logits, labels));
}

struct EncoderOptions {
  StringRef prefix;     // "bert" or "roberta"
  StringRef headPrefix; // "cls.predictions" or "lm_head"
  int64_t typeVocab;
  int64_t positionOffset;
};

void buildEncoder(ModelBuilder &b, func::FuncOp func,
                  const EncoderOptions &opt) {
  const Dims &d = b.dims;
  Value tokens = func.getArgument(0), labels = func.getArgument(1);
  std::string emb = (opt.prefix + ".embeddings.").str();
  Value words =
      b.weight(emb + "word_embeddings.weight", {d.vocab, d.hidden}, false);
  Value positions = b.weight(emb + "position_embeddings.weight",
                             {d.positions, d.hidden}, false);
  Value types = b.weight(emb + "token_type_embeddings.weight",
                         {opt.typeVocab, d.hidden}, false);
  Value x =
      EmbeddingOp::create(b.builder, b.loc, b.hiddenType(d.hidden), tokens,
                          words, positions, types, opt.positionOffset);
  x = b.layerNorm(x, emb + "LayerNorm");
  for (int64_t l = 0; l < d.layers; ++l) {
    std::string p = layerPrefix((opt.prefix + ".encoder.layer").str(), l);
    x = b.block(l, x, [&](Value in) {
      std::string self = p + ".attention.self.";
      SmallVector<Value> weights, biases;
      for (StringRef proj : {"query", "key", "value"}) {
        weights.push_back(b.weight(self + proj.str() + ".weight",
                                   {d.hidden, d.hidden}, true));
        biases.push_back(b.zeros(self + proj.str() + ".bias", d.hidden));
      }
      Value out = b.weight(p + ".attention.output.dense.weight",
                           {d.hidden, d.hidden}, true);
      Value outBias = b.zeros(p + ".attention.output.dense.bias", d.hidden);
      Value a = b.attention(in, weights, biases, out, outBias,
                            /*causal=*/false, std::nullopt);
      // Post-LN: normalize after each residual add.
      Value n1 = b.layerNorm(b.add(in, a), p + ".attention.output.LayerNorm");
      Value up =
          b.weight(p + ".intermediate.dense.weight", {d.hidden, d.ffn}, true);
      Value upBias = b.zeros(p + ".intermediate.dense.bias", d.ffn);
      Value down =
          b.weight(p + ".output.dense.weight", {d.ffn, d.hidden}, true);
      Value downBias = b.zeros(p + ".output.dense.bias", d.hidden);
      Value m =
          MLPOp::create(b.builder, b.loc, n1.getType(), /*state=*/TypeRange(),
                        n1, up, upBias, Value(), down, downBias, d.activation)
              .getResult();
      return b.layerNorm(b.add(n1, m), p + ".output.LayerNorm");
    });
  }
  // Masked-LM head: transform (dense + activation + LayerNorm), then the
  // decoder tied to the word embeddings with its own bias.
  bool isBert = opt.headPrefix == "cls.predictions";
  std::string transform =
      (opt.headPrefix + (isBert ? ".transform." : ".")).str();
  Value dense =
      b.weight(transform + "dense.weight", {d.hidden, d.hidden}, true);
  Value denseBias = b.zeros(transform + "dense.bias", d.hidden);
  Value t = LinearOp::create(b.builder, b.loc, x.getType(), x, dense, denseBias,
                             b.builder.getStringAttr(d.activation));
  t = b.layerNorm(t, transform + (isBert ? "LayerNorm" : "layer_norm"));
  Value decoder = d.tied ? words
                         : b.weight((opt.headPrefix + ".decoder.weight").str(),
                                    {d.vocab, d.hidden}, false);
  Value decoderBias = b.zeros((opt.headPrefix + ".bias").str(), d.vocab);
  Value logits = LMHeadOp::create(b.builder, b.loc, b.hiddenType(d.vocab), t,
                                  decoder, decoderBias);
  b.finish(b.lossOf(logits, labels));
}

std::string symbolFor(StringRef origin, StringRef family) {
  StringRef stem = llvm::sys::path::stem(origin);
  if (stem.empty() || stem == "config")
    stem = family;
  std::string symbol;
  for (char c : stem)
    symbol.push_back(llvm::isAlnum(c) ? c : '_');
  if (!llvm::isAlpha(symbol.front()))
    symbol.insert(0, "m_");
  return symbol;
}

} // namespace

namespace weft {

llvm::Expected<OwningOpRef<ModuleOp>>
importHFConfig(StringRef jsonText, StringRef origin, MLIRContext &context) {
  context.loadDialect<WeftDialect, arith::ArithDialect, func::FuncDialect>();
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(jsonText);
  if (!parsed)
    return llvm::createStringError(
        origin + ": invalid JSON: " + llvm::toString(parsed.takeError()));
  const Object *object = parsed->getAsObject();
  if (!object)
    return llvm::createStringError(origin +
                                   ": expected a JSON object at the top level");
  FieldReader read(*object, origin);
  std::string family = read.string("model_type", "");
  if (read.failed())
    return read.takeError();
  if (!object->get("model_type"))
    return llvm::createStringError(origin + ": field 'model_type': missing");
  bool isGPT2 = family == "gpt2";
  bool isLlama = family == "llama" || family == "mistral";
  bool isEncoder = family == "bert" || family == "roberta";
  if (!isGPT2 && !isLlama && !isEncoder)
    return llvm::createStringError(
        origin + ": field 'model_type': unsupported model type '" + family +
        "' (supported: gpt2, llama, mistral, bert, roberta)");

  Dims d{};
  StringRef headsKey = isGPT2 ? "n_head" : "num_attention_heads";
  StringRef hiddenKey = isGPT2 ? "n_embd" : "hidden_size";
  StringRef activationKey = isGPT2 ? "activation_function" : "hidden_act";
  d.vocab = read.positiveInt("vocab_size");
  d.hidden = read.positiveInt(hiddenKey);
  d.layers = read.layerCount(isGPT2 ? "n_layer" : "num_hidden_layers");
  d.heads = read.positiveInt(headsKey);
  d.initStd = read.positiveNumber("initializer_range", 0.02);
  if (isGPT2) {
    d.positions = read.positiveInt("n_positions");
    d.ffn = read.positiveInt("n_inner", 4 * d.hidden);
    d.normEps = read.positiveNumber("layer_norm_epsilon", 1e-5);
    d.kvHeads = d.heads;
  } else {
    d.positions = read.positiveInt("max_position_embeddings");
    d.ffn = read.positiveInt("intermediate_size");
    d.kvHeads =
        isLlama ? read.positiveInt("num_key_value_heads", d.heads) : d.heads;
    d.normEps = isLlama ? read.positiveNumber("rms_norm_eps", 1e-6)
                        : read.positiveNumber("layer_norm_eps", 1e-12);
  }
  d.tied = read.boolean("tie_word_embeddings", !isLlama);
  std::string hfActivation = read.string(activationKey, isGPT2    ? "gelu_new"
                                                        : isLlama ? "silu"
                                                                  : "gelu");
  if (read.failed())
    return read.takeError();

  std::optional<StringRef> activation = activationFromHF(hfActivation);
  if (!activation)
    read.fail(activationKey, "unknown activation '" + hfActivation +
                                 "' (supported: gelu, gelu_new, "
                                 "gelu_pytorch_tanh, relu, silu)");
  else
    d.activation = *activation;
  if (d.hidden % d.heads != 0)
    read.fail(hiddenKey, llvm::formatv("{0} is not divisible by {1} = {2}",
                                       d.hidden, headsKey, d.heads));
  else if (d.heads % d.kvHeads != 0)
    read.fail("num_key_value_heads",
              llvm::formatv("{0} does not divide {1} = {2}", d.kvHeads,
                            headsKey, d.heads));
  if (isLlama && object->get("head_dim") &&
      read.positiveInt("head_dim", d.hidden / d.heads) != d.hidden / d.heads)
    read.fail("head_dim", llvm::formatv("only hidden_size / {0} = {1} is "
                                        "supported",
                                        headsKey, d.hidden / d.heads));
  if (read.failed())
    return read.takeError();

  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(&context));
  ModelBuilder builder(context, d);
  func::FuncOp func =
      builder.beginModel(*module, symbolFor(origin, family), family);
  if (isGPT2) {
    buildGPT2(builder, func);
  } else if (isLlama) {
    LlamaOptions options;
    options.ropeTheta = read.positiveNumber("rope_theta", 10000.0);
    options.attentionBias = read.boolean("attention_bias", false);
    // The gated MLP has no bias on its gate projection yet.
    if (read.boolean("mlp_bias", false))
      read.fail("mlp_bias", "true is not supported (gated MLPs without "
                            "biases only)");
    if (read.failed())
      return read.takeError();
    buildLlama(builder, func, options);
  } else {
    EncoderOptions options;
    bool isRoberta = family == "roberta";
    options.prefix = family;
    options.headPrefix = isRoberta ? "lm_head" : "cls.predictions";
    options.typeVocab = read.positiveInt("type_vocab_size", 2);
    // RoBERTa numbers positions from padding_idx + 1.
    int64_t padding = isRoberta ? read.integer("pad_token_id", 1) : -1;
    if (isRoberta && (padding < 0 || padding >= d.positions - 1))
      read.fail("pad_token_id",
                llvm::formatv("positions start at pad_token_id + 1 = {0}, "
                              "leaving none of max_position_embeddings = {1}",
                              padding + 1, d.positions));
    options.positionOffset = padding + 1;
    if (read.failed())
      return read.takeError();
    buildEncoder(builder, func, options);
  }

  // A backstop: the importer's checks above should make this unreachable.
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (diagnostics.empty())
        diagnostics = diag.str();
      return success();
    });
    if (failed(verify(*module)))
      return llvm::createStringError(origin +
                                     ": imported model does not "
                                     "verify: " +
                                     diagnostics);
  }
  return module;
}

llvm::Expected<OwningOpRef<ModuleOp>> importModel(StringRef source,
                                                  MLIRContext &context) {
  if (std::optional<StringRef> preset = ::weft::presetConfig(source))
    return importHFConfig(*preset, source, context);
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(source, /*IsText=*/true);
  if (!buffer) {
    std::string reason = buffer.getError().message();
    if (buffer.getError() == std::errc::no_such_file_or_directory)
      reason += " (not a file, nor a preset; `weftc presets` lists them)";
    return llvm::createStringError(source + ": cannot read: " + reason);
  }
  if (!source.ends_with(".mlir"))
    return importHFConfig((*buffer)->getBuffer(), source, context);

  context.loadDialect<WeftDialect, arith::ArithDialect, func::FuncDialect>();
  std::string diagnostics;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    if (diagnostics.empty()) {
      llvm::raw_string_ostream os(diagnostics);
      if (auto fileLoc = dyn_cast<FileLineColLoc>(diag.getLocation()))
        os << fileLoc.getLine() << ":" << fileLoc.getColumn() << ": ";
      os << diag.str();
    }
    return success();
  });
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return llvm::createStringError(source + ":" + diagnostics);
  auto isModel = [](func::FuncOp func) {
    return func->hasAttr(WeftDialect::kModelAttrName);
  };
  if (llvm::count_if(module->getOps<func::FuncOp>(), isModel) != 1)
    return llvm::createStringError(
        source + ": expected exactly one func.func marked weft.model");
  return module;
}

} // namespace weft
