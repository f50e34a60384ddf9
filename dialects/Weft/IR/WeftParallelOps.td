//===- WeftParallelOps.td - Tensor-parallel ops of weft ----*- tablegen -*-===//
//
// Included by WeftOps.td. The ops weft-partition-tensor introduces where a
// TP-local computation differs from the L0 op (docs/lowering.md, step 2).
// Communication that is a plain collective is an upstream `shard` op
// (`shard.all_reduce`, `all_gather`, `reduce_scatter`, `all_slice`); the ops
// here are the ones the shard dialect has no word for.
//
//===----------------------------------------------------------------------===//
#ifndef WEFT_PARALLELOPS_TD
#define WEFT_PARALLELOPS_TD

include "mlir/IR/SymbolInterfaces.td"

/// An op whose meaning depends on this rank's index in the group of `grid`
/// along `grid_axes` (the TP group, axis 2 of @weft_mesh).
class Weft_GroupOp<string mnemonic, list<Trait> traits = []>
    : Weft_Op<mnemonic, !listconcat(traits,
          [DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  dag groupArgs = (ins FlatSymbolRefAttr:$grid, DenseI16ArrayAttr:$grid_axes);
}

def Weft_TPCopyOp : Weft_GroupOp<"tp_copy", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "Megatron's `f`: identity forward, all-reduce backward";
  let description = [{
    Forward: `result = input` (no communication). Backward: the adjoint of
    `input` is the sum over the group of the adjoints of `result`, i.e. a
    `shard.all_reduce` (sum) over `grid_axes`. It sits before every
    column-parallel consumer of a replicated activation, whose input gradient
    is only this rank's partial sum.

    ```mlir
    %y = weft.tp_copy %x on @weft_mesh grid_axes = [2] : tensor<?x?x768xf32>
    ```
  }];
  let arguments = !con((ins AnyRankedTensor:$input), groupArgs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `on` $grid `grid_axes` `=` $grid_axes attr-dict `:` type($input)
  }];
}

def Weft_BiasAddOp : Weft_Op<"bias_add", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "Adds a bias along the last dimension";
  let description = [{
    `result[..., i] = input[..., i] + bias[i]`. The bias of a row-parallel
    layer, added once after the reduction of the partial products (adding it
    before would count it once per TP rank).
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$bias);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias)
  }];
  let hasVerifier = 1;
}

def Weft_VocabEmbeddingOp : Weft_GroupOp<"vocab_embedding", [Pure]> {
  let summary = "Masked token lookup in this rank's vocabulary shard";
  let description = [{
    `table` holds rows `[r * L, (r + 1) * L)` of the token table padded to
    `L * group size` rows, where `r` is this rank's index in the group and `L`
    the table's local row count. A token `t` with `r * L <= t < (r + 1) * L`
    yields row `t - r * L`; every other token yields zeros. The result is this
    rank's partial sum: a `shard.all_reduce` (or `reduce_scatter`) over the
    group completes the lookup. `vocab_size` is the unpadded global
    vocabulary; rows at or past it are padding that no token selects.
    Backward: the adjoint scatters into the rows this rank selected; tokens
    outside the shard contribute nothing.
  }];
  let arguments = !con((ins RankedTensorOf<[AnyInteger]>:$tokens,
                            AnyRankedTensor:$table, I64Attr:$vocab_size),
                       groupArgs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $table `on` $grid `grid_axes` `=` $grid_axes attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_PositionEmbeddingOp : Weft_Op<"position_embedding", [Pure,
    AttrSizedOperandSegments, AllTypesMatch<["input", "result"]>]> {
  let summary = "Adds learned position and token-type rows to a hidden state";
  let description = [{
    The part of `weft.embedding` after the token lookup: adds the `positions`
    row of each sequence index (shifted by `position_offset`) and the
    `token_types` row 0, exactly as `weft.embedding` does. Used once the
    vocabulary-parallel lookup has been reduced, so the tables (replicated)
    are added once.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Optional<AnyRankedTensor>:$positions,
                       Optional<AnyRankedTensor>:$token_types,
                       DefaultValuedAttr<I64Attr, "0">:$position_offset);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $input (`positions` `(` $positions^ `)`)?
    (`token_types` `(` $token_types^ `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_TPAttentionOp : Weft_Op<"tp_attention", [Pure,
    AttrSizedOperandSegments, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<Weft_OpStateInterface>]> {
  let summary = "Self-attention over this tensor-parallel rank's heads";
  let description = [{
    `weft.attention` restricted to one TP rank's heads, with the same math:
    `input` is the full `[batch, seq, hidden]` state, the query/key/value
    weights (fused `[q|k|v]` or three) and biases hold this rank's
    `num_heads` query heads and `num_kv_heads` key/value heads, and
    `hidden = num_heads * head_dim * tp_size`. The output projection
    `out_weight` (`[num_heads * head_dim, hidden]`, this rank's rows) yields
    this rank's partial sum of the attention output, without bias: a
    `shard.all_reduce` over TP completes it and the output bias follows as a
    `weft.bias_add`. Backward is `weft.attention`'s on the local heads; the
    adjoint of `input` is partial (completed by the `weft.tp_copy` before it).
    `state` is `weft.attention`'s, on the local heads.
  }];
  let arguments = (ins AnyRankedTensor:$input,
                       Variadic<AnyRankedTensor>:$qkv_weights,
                       Variadic<AnyRankedTensor>:$qkv_biases,
                       AnyRankedTensor:$out_weight,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, I64Attr:$tp_size,
                       BoolAttr:$causal, OptionalAttr<F64Attr>:$rope_theta);
  let results = (outs AnyRankedTensor:$result,
                      Variadic<AnyRankedTensor>:$state);
  let assemblyFormat = [{
    $input `qkv` `(` $qkv_weights `)` (`qkv_bias` `(` $qkv_biases^ `)`)?
    `out` `(` $out_weight `)` attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Weft_VocabParallelCrossEntropyOp
    : Weft_GroupOp<"vocab_parallel_cross_entropy", [Pure]> {
  let summary = "Cross-entropy of vocabulary-sharded logits";
  let description = [{
    `logits` are this rank's columns `[r * L, (r + 1) * L)` of the logits
    over the vocabulary padded to `L * group size`; columns at or past
    `vocab_size` are padding and excluded (as if `-inf`). The op computes
    `weft.cross_entropy` of the full logits: per position the local max,
    all-reduced with max over the group; the local sum of `exp(logit - max)`,
    all-reduced with sum; the target logit (from the rank that owns the
    label, zero elsewhere), all-reduced with sum; the loss is the mean of
    `log(sum) + max - target` over labels other than `ignore_index`. The
    group collectives are inside the op (the kernels' `crossEntropyShard*`
    phases). Backward needs no communication: the adjoint of `logits` is
    `(softmax - onehot(label)) * dloss / count` on the local columns, zero on
    padding columns and ignored positions.
  }];
  let arguments = !con((ins AnyRankedTensor:$logits,
                            RankedTensorOf<[AnyInteger]>:$labels,
                            I64Attr:$vocab_size,
                            OptionalAttr<I64Attr>:$ignore_index),
                       groupArgs);
  let results = (outs 0DTensorOf<[AnyFloat]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels `on` $grid `grid_axes` `=` $grid_axes attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // WEFT_PARALLELOPS_TD
