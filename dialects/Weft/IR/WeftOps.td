//===- WeftOps.td - Weft model dialect operations ----------*- tablegen -*-===//
#ifndef WEFT_OPS_TD
#define WEFT_OPS_TD

include "Weft/IR/WeftDialect.td"
include "Weft/IR/WeftInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Weft_InitKind : I32EnumAttr<"InitKind", "how a parameter is initialized", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
  ]> {
  let cppNamespace = "::mlir::weft";
}

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def Weft_ParamOp : Weft_Op<"param"> {
  let summary = "A named trainable parameter";
  let description = [{
    Declares one trainable tensor: its unique `name`, its global (unsharded)
    shape and element type, how it is initialized (`zeros`, `ones`, or
    `normal` with standard deviation `init_std`), and how Hugging Face names
    and lays it out (`hf_name`, defaulting to `name`; `hf_transposed` when the
    checkpoint stores `[out, in]`). A tied weight is one `weft.param` used
    twice, so it is counted, sharded and checkpointed once.

    ```mlir
    %w = weft.param "h.0.attn.c_attn.weight" init(normal, 2.000000e-02) : tensor<768x2304xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name, Weft_InitKind:$init,
                       OptionalAttr<F64Attr>:$init_std,
                       OptionalAttr<StrAttr>:$hf_name, UnitAttr:$hf_transposed);
  let results = (outs AnyStaticShapeTensor:$result);
  let assemblyFormat = [{
    $name `init` `(` $init (`,` $init_std^)? `)` attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The tensor name in a Hugging Face checkpoint.
    ::llvm::StringRef getCheckpointName() {
      return getHfName() ? *getHfName() : getName();
    }
    int64_t getNumElements() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType()).getNumElements();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

def Weft_EmbeddingOp : Weft_Op<"embedding", [Pure, AttrSizedOperandSegments]> {
  let summary = "Token embedding, plus learned position and token-type tables";
  let description = [{
    Looks up `tokens` (`[batch, seq]` integers) in `table` (`[vocab, hidden]`)
    and adds the learned `positions` row for each sequence index (shifted by
    `position_offset`, 2 for RoBERTa) and the `token_types` row of segment 0.
    Models with rotary positions have no position table.
  }];
  let arguments = (ins RankedTensorOf<[AnyInteger]>:$tokens,
                       AnyRankedTensor:$table,
                       Optional<AnyRankedTensor>:$positions,
                       Optional<AnyRankedTensor>:$token_types,
                       DefaultValuedAttr<I64Attr, "0">:$position_offset);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $table (`positions` `(` $positions^ `)`)?
    (`token_types` `(` $token_types^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_LayerNormOp : Weft_Op<"layer_norm", [Pure,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "LayerNorm over the hidden dimension, with scale and shift";
  let description = [{
    `state`, when present (weft-autodiff adds it where the backward keeps
    it), returns what `weft.layer_norm_grad` reads: the mean and the
    reciprocal standard deviation of every row (`[batch, seq]`, f32
    whatever the input type).
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$weight,
                       AnyRankedTensor:$bias, F64Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` type($input) `,` type($weight) `,` type($bias)
    (`->` `state` type($state)^)?
  }];
  let hasVerifier = 1;
}

def Weft_RMSNormOp : Weft_Op<"rms_norm", [Pure,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "RMSNorm over the hidden dimension, with scale";
  let description = [{
    `state`, when present, returns what `weft.rms_norm_grad` reads: the
    reciprocal root mean square of every row (`[batch, seq]`, f32).
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$weight, F64Attr:$epsilon);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight)
    (`->` `state` type($state)^)?
  }];
  let hasVerifier = 1;
}

def Weft_AttentionOp : Weft_Op<"attention", [Pure, AttrSizedOperandSegments,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Multi-head self-attention with its projections";
  let description = [{
    Projects `input` (`[batch, seq, hidden]`) to queries, keys and values,
    applies scaled dot-product attention (causal or bidirectional) and the
    output projection. The query/key/value weights are either one fused
    matrix `[hidden, (num_heads + 2 * num_kv_heads) * head_dim]` (GPT-2's
    `c_attn`) or three matrices `[hidden, heads * head_dim]`; biases, when
    present, follow the weights one for one. `num_kv_heads < num_heads` is
    grouped-query attention. With `rope_theta` present, rotary position
    embeddings are applied to queries and keys.

    `state`, when present (weft-autodiff adds it where the backward keeps
    it), returns what `weft.attention_grad` reads: the queries, keys and
    values after bias and rotation (`[batch, seq, heads * head_dim]`,
    `[batch, seq, kv_heads * head_dim]` twice), the context before the
    output projection (`[batch, seq, heads * head_dim]`) and the log-sum-exp
    of every score row (`[batch, seq, heads]`, f32 whatever the input type).
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Variadic<AnyRankedTensor>:$qkv_weights,
                       Variadic<AnyRankedTensor>:$qkv_biases,
                       AnyRankedTensor:$out_weight,
                       Optional<AnyRankedTensor>:$out_bias,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       BoolAttr:$causal, OptionalAttr<F64Attr>:$rope_theta);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $input `qkv` `(` $qkv_weights `)` (`qkv_bias` `(` $qkv_biases^ `)`)?
    `out` `(` $out_weight (`,` $out_bias^)? `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_MLPOp : Weft_Op<"mlp", [Pure, AttrSizedOperandSegments,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Two-layer MLP, optionally gated (SwiGLU)";
  let description = [{
    `down(act(input @ up + up_bias) @ ...)`: without `gate`, the activation is
    applied to the up projection; with `gate` (SwiGLU-style), the result is
    `act(input @ gate) * (input @ up)`. `activation` is one of `gelu`
    (erf form), `gelu_tanh`, `relu` or `silu`.

    `state`, when present, returns what `weft.mlp_grad` reads, each
    `[batch, seq, ffn]`: the up projection after its bias, the gate
    projection (gated only) and the hidden activation.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$up_weight,
                       Optional<AnyRankedTensor>:$up_bias,
                       Optional<AnyRankedTensor>:$gate_weight,
                       AnyRankedTensor:$down_weight,
                       Optional<AnyRankedTensor>:$down_bias,
                       StrAttr:$activation);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $input `up` `(` $up_weight (`,` $up_bias^)? `)` (`gate` `(` $gate_weight^ `)`)?
    `down` `(` $down_weight (`,` $down_bias^)? `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_LinearOp : Weft_Op<"linear", [Pure]> {
  let summary = "Dense projection with optional bias and activation";
  let description = [{
    `act(input @ weight + bias)` with `weight` stored `[in, out]`; used where a
    projection stands alone, e.g. the transform of BERT's masked-LM head.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$weight,
                       Optional<AnyRankedTensor>:$bias,
                       OptionalAttr<StrAttr>:$activation);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_LMHeadOp : Weft_Op<"lm_head", [Pure]> {
  let summary = "Projection of hidden states onto the vocabulary";
  let description = [{
    `input @ transpose(weight) + bias` with `weight` laid out `[vocab, hidden]`
    like the token embedding, so a tied head uses the embedding's parameter.
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$weight,
                       Optional<AnyRankedTensor>:$bias);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_CrossEntropyOp : Weft_Op<"cross_entropy", [Pure]> {
  let summary = "Mean token cross-entropy of logits against labels";
  let description = [{
    Softmax cross-entropy averaged over the labels that are not
    `ignore_index` (masked-LM heads score only the masked positions).
  }];
  let arguments = (ins AnyRankedTensor:$logits, RankedTensorOf<[AnyInteger]>:$labels,
                       OptionalAttr<I64Attr>:$ignore_index);
  let results = (outs 0DTensorOf<[AnyFloat]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Weft_BlockOp : Weft_Op<"block", [IsolatedFromAbove,
    SingleBlock, AllTypesMatch<["input", "result"]>]> {
  let summary = "One transformer layer: the unit that repeats";
  let description = [{
    The body maps the hidden state (the entry block's argument) to the next
    hidden state and owns the layer's parameters. It is isolated from above,
    so a block can be moved to another pipeline stage as a whole. `layer` is
    its index; a model's blocks are numbered 0, 1, ... in order.
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$layer);
  let results = (outs AnyRankedTensor:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $layer `(` $input `)` `:` type($input) attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

def Weft_YieldOp : Weft_Op<"yield", [Pure, Terminator, ReturnLike, HasParent<"BlockOp">]> {
  let summary = "Yields a block's output hidden state";
  let arguments = (ins AnyRankedTensor:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

// Ops introduced by the lowering (docs/lowering.md).
include "Weft/IR/WeftParallelOps.td"
include "Weft/IR/WeftGradOps.td"

#endif // WEFT_OPS_TD
