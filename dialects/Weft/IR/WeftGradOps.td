//===- WeftGradOps.td - Backward ops of the weft dialect ----*- tablegen -*-===//
//
// Included by WeftOps.td. Emitted by weft-autodiff; see docs/autodiff.md.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_GRADOPS_TD
#define WEFT_GRADOPS_TD

//===----------------------------------------------------------------------===//
// Layer gradients
//===----------------------------------------------------------------------===//

// Every `weft.<op>_grad` takes the gradient of the forward op's result
// followed by exactly the forward op's operands and attributes, and returns
// one gradient per floating-point operand of the forward op, in operand order
// (integer tokens and labels have none). The internal state a kernel needs
// (norm statistics, attention log-sum-exp, projections) is recomputed from
// those operands, unless the grad op of a Weft_OpStateInterface layer takes
// the forward's `state` results as trailing `state` operands; see
// docs/autodiff.md for the cost.
class Weft_GradOp<string mnemonic, list<Trait> traits = []>
    : Weft_Op<mnemonic, !listconcat(traits, [Pure])> {
  let results = (outs Variadic<AnyRankedTensor>:$grads);
  let hasVerifier = 1;
}

def Weft_EmbeddingGradOp : Weft_GradOp<"embedding_grad",
                                       [AttrSizedOperandSegments]> {
  let summary = "Gradients of the embedding tables";
  let description = [{
    Scatter-adds `grad` (`[batch, seq, hidden]`) into the tables of a
    `weft.embedding`: `d table[tokens[b, s]] += grad[b, s]`,
    `d positions[s + position_offset] += grad[b, s]` and
    `d token_types[0] += grad[b, s]`. Returns one gradient per table present,
    in operand order; the tables themselves are read only for their types.

    ```mlir
    %dwte, %dwpe = weft.embedding_grad %g, %tokens, %wte positions(%wpe)
        : (tensor<?x?x64xf32>, tensor<?x?xi32>, tensor<256x64xf32>,
           tensor<128x64xf32>) -> (tensor<256x64xf32>, tensor<128x64xf32>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$grad,
                       RankedTensorOf<[AnyInteger]>:$tokens,
                       AnyRankedTensor:$table,
                       Optional<AnyRankedTensor>:$positions,
                       Optional<AnyRankedTensor>:$token_types,
                       DefaultValuedAttr<I64Attr, "0">:$position_offset);
  let assemblyFormat = [{
    $grad `,` $tokens `,` $table (`positions` `(` $positions^ `)`)?
    (`token_types` `(` $token_types^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_LayerNormGradOp : Weft_GradOp<"layer_norm_grad",
    [DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Gradients of a LayerNorm";
  let description = [{
    With `xhat = (x - mean) * rstd` per row (`rstd = 1/sqrt(var + epsilon)`,
    biased variance; `mean` and `rstd` from `state`, the forward's state
    results, or recomputed from `input`) and `gy = grad * weight`:
    `dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat))`,
    `d weight = sum_rows(grad * xhat)`, `d bias = sum_rows(grad)`.
    Returns `(dx, d weight, d bias)`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$weight, AnyRankedTensor:$bias,
                       F64Attr:$epsilon, Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `,` $bias (`state` `(` $state^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_RMSNormGradOp : Weft_GradOp<"rms_norm_grad",
    [DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Gradients of an RMSNorm";
  let description = [{
    With `rstd = 1/sqrt(mean(x^2) + epsilon)` per row (from `state`, the
    forward's state result, or recomputed from `input`) and
    `gy = grad * weight`:
    `dx = rstd * (gy - x * rstd^2 * mean(gy * x))`,
    `d weight = sum_rows(grad * x * rstd)`. Returns `(dx, d weight)`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$weight, F64Attr:$epsilon,
                       Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight (`state` `(` $state^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_AttentionGradOp : Weft_GradOp<"attention_grad",
                                       [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Gradients of multi-head self-attention and its projections";
  let description = [{
    Takes the forward's queries, keys and values (after projections, biases
    and rotary embedding), the attention context `c` and the log-sum-exp of
    every score row from `state` (`weft.attention`'s state results) or, without
    it, recomputes them; then back-propagates `grad`:
    `dc = grad @ out_weight^T`, `d out_weight = c^T @ grad`,
    `d out_bias = sum_rows(grad)`; the attention backward from the
    log-sum-exp (`P = exp(S - lse)`, `dV = P^T dc`,
    `dS = P * (dc V^T - rowsum(dc * c))`, `dQ = scale dS K`,
    `dK = scale dS^T Q`, summed over each key/value head's query group);
    the transposed rotation for rotary models; and the projections:
    `dx = sum_i dQKV_i @ W_i^T`, `dW_i = x^T @ dQKV_i`,
    `db_i = sum_rows(dQKV_i)`. Returns `(dx, d qkv weights..., d qkv biases...,
    d out weight[, d out bias])`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       Variadic<AnyRankedTensor>:$qkv_weights,
                       Variadic<AnyRankedTensor>:$qkv_biases,
                       AnyRankedTensor:$out_weight,
                       Optional<AnyRankedTensor>:$out_bias,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads, I64Attr:$head_dim,
                       BoolAttr:$causal, OptionalAttr<F64Attr>:$rope_theta,
                       Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $grad `,` $input `qkv` `(` $qkv_weights `)` (`qkv_bias` `(` $qkv_biases^ `)`)?
    `out` `(` $out_weight (`,` $out_bias^)? `)` (`state` `(` $state^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_MLPGradOp : Weft_GradOp<"mlp_grad", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Gradients of a (gated) MLP";
  let description = [{
    Takes the up projection `u = x @ up + up_bias` (and `g = x @ gate`) and
    the hidden activation `h = act(u)` (or `act(g) * u`) from `state`
    (`weft.mlp`'s state results) or, without it, recomputes them; then:
    `dh = grad @ down^T`, `d down = h^T @ grad`, `d down_bias = sum_rows(grad)`;
    ungated `du = dh * act'(u)`; gated `du = dh * act(g)`,
    `dg = dh * u * act'(g)`; `dx = du @ up^T (+ dg @ gate^T)`,
    `d up = x^T @ du`, `d up_bias = sum_rows(du)`, `d gate = x^T @ dg`.
    Returns `(dx, d up[, d up bias][, d gate], d down[, d down bias])`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$up_weight,
                       Optional<AnyRankedTensor>:$up_bias,
                       Optional<AnyRankedTensor>:$gate_weight,
                       AnyRankedTensor:$down_weight,
                       Optional<AnyRankedTensor>:$down_bias,
                       StrAttr:$activation,
                       Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $grad `,` $input `up` `(` $up_weight (`,` $up_bias^)? `)` (`gate` `(` $gate_weight^ `)`)?
    `down` `(` $down_weight (`,` $down_bias^)? `)` (`state` `(` $state^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_LinearGradOp : Weft_GradOp<"linear_grad"> {
  let summary = "Gradients of a dense projection with optional activation";
  let description = [{
    With `z = x @ weight + bias` recomputed when there is an activation:
    `dz = grad * act'(z)` (`dz = grad` without one), `dx = dz @ weight^T`,
    `d weight = x^T @ dz`, `d bias = sum_rows(dz)`.
    Returns `(dx, d weight[, d bias])`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$weight, Optional<AnyRankedTensor>:$bias,
                       OptionalAttr<StrAttr>:$activation);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_LMHeadGradOp : Weft_GradOp<"lm_head_grad"> {
  let summary = "Gradients of the vocabulary projection";
  let description = [{
    For `logits = x @ weight^T + bias` (`weight` is `[vocab, hidden]`):
    `dx = grad @ weight`, `d weight = grad^T @ x`, `d bias = sum_rows(grad)`.
    Returns `(dx, d weight[, d bias])`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       AnyRankedTensor:$weight, Optional<AnyRankedTensor>:$bias);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_CrossEntropyGradOp : Weft_GradOp<"cross_entropy_grad"> {
  let summary = "Gradient of the mean token cross-entropy";
  let description = [{
    `grad` is the scalar gradient of the loss (1, or the loss scale).
    With `n` the number of labels that are not `ignore_index` and the
    log-sum-exp of each row recomputed from `logits`:
    `d logits[r] = grad * (softmax(logits[r]) - onehot(labels[r])) / n`, and 0
    for ignored rows (everywhere when `n = 0`). Returns `(d logits)`.
  }];
  let arguments = (ins 0DTensorOf<[AnyFloat]>:$grad, AnyRankedTensor:$logits,
                       RankedTensorOf<[AnyInteger]>:$labels,
                       OptionalAttr<I64Attr>:$ignore_index);
  let assemblyFormat = [{
    $grad `,` $logits `,` $labels attr-dict `:` functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Gradients of the tensor-parallel ops (WeftParallelOps.td)
//===----------------------------------------------------------------------===//

def Weft_BiasGradOp : Weft_Op<"bias_grad", [Pure]> {
  let summary = "Gradient of a bias added along the last dimension";
  let description = [{
    `result[i] = sum over all other dimensions of grad[..., i]`: the bias
    gradient of `weft.bias_add`, whose input gradient is `grad` itself.
  }];
  let arguments = (ins AnyRankedTensor:$grad);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$grad attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Weft_VocabEmbeddingGradOp : Weft_GradOp<"vocab_embedding_grad"> {
  let summary = "Gradient of this rank's vocabulary shard of the token table";
  let description = [{
    Scatter-adds `grad[b, s]` into row `tokens[b, s] - r * L` of `table` for
    the tokens this rank owns (see `weft.vocab_embedding`); other tokens
    contribute nothing. No communication: `grad` is the replicated gradient
    of the reduced lookup. Returns `(d table)`.
  }];
  let arguments = (ins AnyRankedTensor:$grad,
                       RankedTensorOf<[AnyInteger]>:$tokens,
                       AnyRankedTensor:$table, I64Attr:$vocab_size,
                       FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$grid_axes);
  let assemblyFormat = [{
    $grad `,` $tokens `,` $table `on` $grid `grid_axes` `=` $grid_axes attr-dict `:`
    functional-type(operands, results)
  }];
}

def Weft_PositionEmbeddingGradOp : Weft_GradOp<"position_embedding_grad",
                                               [AttrSizedOperandSegments]> {
  let summary = "Gradients of the position and token-type tables";
  let description = [{
    `d input = grad`, `d positions[s + position_offset] += grad[b, s]`,
    `d token_types[0] += grad[b, s]`. Returns
    `(d input[, d positions][, d token_types])`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       Optional<AnyRankedTensor>:$positions,
                       Optional<AnyRankedTensor>:$token_types,
                       DefaultValuedAttr<I64Attr, "0">:$position_offset);
  let assemblyFormat = [{
    $grad `,` $input (`positions` `(` $positions^ `)`)?
    (`token_types` `(` $token_types^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Weft_TPAttentionGradOp : Weft_GradOp<"tp_attention_grad",
                                         [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Gradients of self-attention over this rank's heads";
  let description = [{
    `weft.attention_grad` on the local heads, without an output bias. The
    input gradient is this rank's partial sum; the `weft.tp_copy` before the
    layer all-reduces it. Returns `(dx, d qkv weights..., d qkv biases...,
    d out weight)`.
  }];
  let arguments = (ins AnyRankedTensor:$grad, AnyRankedTensor:$input,
                       Variadic<AnyRankedTensor>:$qkv_weights,
                       Variadic<AnyRankedTensor>:$qkv_biases,
                       AnyRankedTensor:$out_weight,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, I64Attr:$tp_size,
                       BoolAttr:$causal, OptionalAttr<F64Attr>:$rope_theta,
                       Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $grad `,` $input `qkv` `(` $qkv_weights `)` (`qkv_bias` `(` $qkv_biases^ `)`)?
    `out` `(` $out_weight `)` (`state` `(` $state^ `)`)? attr-dict `:` functional-type(operands, results)
  }];
}

def Weft_VocabParallelCrossEntropyGradOp
    : Weft_GradOp<"vocab_parallel_cross_entropy_grad"> {
  let summary = "Gradient of the cross-entropy of vocabulary-sharded logits";
  let description = [{
    `d logits = grad * (softmax - onehot(label)) / count` on this rank's
    columns, zero on padding columns and ignored positions. Recomputing the
    global row max and sum of exponentials takes the same two all-reduces
    over the group as the forward (the target logit is not needed). Returns
    `(d logits)`.
  }];
  let arguments = (ins 0DTensorOf<[AnyFloat]>:$grad, AnyRankedTensor:$logits,
                       RankedTensorOf<[AnyInteger]>:$labels,
                       I64Attr:$vocab_size, OptionalAttr<I64Attr>:$ignore_index,
                       FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$grid_axes);
  let assemblyFormat = [{
    $grad `,` $logits `,` $labels `on` $grid `grid_axes` `=` $grid_axes attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Weft_BlockGradOp : Weft_Op<"block_grad", [IsolatedFromAbove, SingleBlock]> {
  let summary = "The backward of one transformer layer";
  let description = [{
    The body maps the gradient of a `weft.block`'s result (the entry block's
    argument) to the gradient of its input and of each of its parameters,
    yielded by `weft.grad_yield` in that order; `params` names the parameter
    of each parameter gradient. Like `weft.block` it is isolated from above:
    the body re-declares the layer's parameters, reads what the forward saved
    with `weft.restore`, re-runs the forward ops the recompute policy chose,
    and then holds the layer's grad ops in reverse order. `layer` is the
    forward block's index.
  }];
  let arguments = (ins AnyRankedTensor:$grad, I64Attr:$layer,
                       StrArrayAttr:$params);
  let results = (outs AnyRankedTensor:$input_grad,
                      Variadic<AnyRankedTensor>:$param_grads);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $layer `(` $grad `)` `:` type($grad) `->` type(results) attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

def Weft_GradYieldOp : Weft_Op<"grad_yield", [Pure, Terminator, ReturnLike,
                                              HasParent<"BlockGradOp">]> {
  let summary = "Yields a layer's input and parameter gradients";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}

//===----------------------------------------------------------------------===//
// Saved activations
//===----------------------------------------------------------------------===//

def Weft_SaveOp : Weft_Op<"save", [MemoryEffects<[MemWrite]>]> {
  let summary = "Keeps a forward activation for the backward";
  let description = [{
    Stashes `value` in slot `slot` of the enclosing function's micro-batch;
    the matching `weft.restore` in the backward reads it back. Slots are
    numbered 0, 1, ... in forward program order within a function. The
    memory planner keeps the tensor alive from here to its restore.
  }];
  let arguments = (ins AnyRankedTensor:$value, I64Attr:$slot);
  let assemblyFormat = "$value `slot` $slot attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Weft_RestoreOp : Weft_Op<"restore", [MemoryEffects<[MemRead]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Reads back an activation saved by a forward function";
  let description = [{
    The value that `weft.save ... slot <slot>` stashed in function `forward`
    for the same micro-batch. `forward` must be a `func.func` in which
    exactly one `weft.save` writes `slot`, with the result's type.

    ```mlir
    %x = weft.restore @gpt2_tiny slot 3 : tensor<?x?x64xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$forward, I64Attr:$slot);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$forward `slot` $slot attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // WEFT_GRADOPS_TD
