// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='recompute=full' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=FULL
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='recompute=selective' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=SELECTIVE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='tp=2 sequence-parallel=1 recompute=full' --weft-autodiff --weft-schedule='seq-len=8' --weft-step | FileCheck %s --check-prefix=SP
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=3 recompute=full bucket-bytes=1' --weft-autodiff --weft-schedule='seq-len=8 persist-threshold=0 max-live-gathered-bytes=1000000000' --weft-step | FileCheck %s --check-prefix=ZERO3
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='recompute=none' --weft-autodiff --weft-schedule='seq-len=8' --weft-step --weft-plan-memory | FileCheck %s --check-prefix=ARENA-NONE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='recompute=selective' --weft-autodiff --weft-schedule='seq-len=8' --weft-step --weft-plan-memory | FileCheck %s --check-prefix=ARENA-SELECTIVE
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='recompute=full' --weft-autodiff --weft-schedule='seq-len=8' --weft-step --weft-plan-memory | FileCheck %s --check-prefix=ARENA-FULL

// Activation recompute (docs/autodiff.md, "Recompute modes"): the re-run
// forward ops at the top of each weft.block_grad lower like their forward,
// on `compute` in the backward's phase, reading the activations the forward
// saved.

// Full: layer 1's backward (the first one) starts from its saved input
// (`residual.1`, the residual stream after layer 0) and re-runs ln_1, the
// attention (QKV, core, output projection and bias) and the residual add,
// then ln_2, before the grad ops; attention_grad later reads the re-run's
// q, k, v, context and lse (its op state).
// FULL-LABEL: weftx.stream "compute" {
// FULL: weftx.launch @cross_entropy {{.*}} phase "bwd mb0"
// FULL: weftx.launch @layer_norm_backward {{.*}} writes(@layer_norm.grad[0 +: 2048]
// FULL-NEXT: weftx.launch @layer_norm_forward reads(@residual.1[0 +: 2048], {{.*}}) writes(@layer_norm.5[0 +: 2048], {{.*}}) phase "bwd mb0"
// FULL-NEXT: weftx.gemm {{.*}} reads({{.*}}, @layer_norm.5[0 +: 2048]) writes(@attn.q.2[0 +: 2048]) phase "bwd mb0"
// FULL: weftx.launch @attention_forward reads(@attn.q.2[0 +: 2048], @attn.k.2[0 +: 2048], @attn.v.2[0 +: 2048]) writes(@attn.context.2[0 +: 2048], @attn.lse.2[0 +: 128]) phase "bwd mb0"
// FULL-NEXT: weftx.gemm {{.*}} reads({{.*}}, @attn.context.2[0 +: 2048]) writes(@attn.out.2[0 +: 2048]) phase "bwd mb0"
// FULL-NEXT: weftx.launch @bias_add {{.*}} writes(@attn.out.2[0 +: 2048]) phase "bwd mb0"
// FULL-NEXT: weftx.launch @residual_add reads(@residual.1[0 +: 2048], @attn.out.2[0 +: 2048]) writes(@residual.4[0 +: 2048]) phase "bwd mb0"
// FULL-NEXT: weftx.launch @layer_norm_forward reads(@residual.4[0 +: 2048], {{.*}}) writes(@layer_norm.6[0 +: 2048], {{.*}}) phase "bwd mb0"
// The MLP is not re-run: mlp_grad recomputes its hidden state from the
// re-run ln_2 output.
// FULL-NEXT: weftx.gemm {{.*}} reads({{.*}}, @layer_norm.6[0 +: 2048]) writes(@mlp.up.2[0 +: 8192]) phase "bwd mb0"
// FULL: weftx.launch @layer_norm_backward reads(@residual.4[0 +: 2048], {{.*}}, @mlp.grad[0 +: 2048])
// FULL: weftx.launch @attention_backward reads(@attn.q.2[0 +: 2048], @attn.k.2[0 +: 2048], @attn.v.2[0 +: 2048], @attn.context.2[0 +: 2048], @attn.lse.2[0 +: 128], @attn.context.grad[0 +: 2048])
// FULL: weftx.launch @layer_norm_backward reads(@residual.1[0 +: 2048],
// Layer 0 the same, from the embedding output.
// FULL: weftx.launch @layer_norm_forward reads(@embedding[0 +: 2048], {{.*}}) phase "bwd mb0"

// Selective: only the norms are re-run; the residual between attention and
// MLP (`residual.2`) is saved.
// SELECTIVE-LABEL: weftx.stream "compute" {
// SELECTIVE: weftx.launch @layer_norm_backward {{.*}} writes(@layer_norm.grad[0 +: 2048]
// SELECTIVE-NEXT: weftx.launch @layer_norm_forward reads(@residual.1[0 +: 2048], {{.*}}) writes(@layer_norm.5[0 +: 2048], {{.*}}) phase "bwd mb0"
// SELECTIVE-NEXT: weftx.launch @layer_norm_forward reads(@residual.2[0 +: 2048], {{.*}}) writes(@layer_norm.6[0 +: 2048], {{.*}}) phase "bwd mb0"
// SELECTIVE-NEXT: weftx.gemm {{.*}} reads({{.*}}, @layer_norm.6[0 +: 2048]) writes(@mlp.up.2[0 +: 8192]) phase "bwd mb0"
// SELECTIVE-NOT: weftx.launch @residual_add reads(@residual.1
// SELECTIVE: weftx.launch @attention_backward

// Sequence parallelism with full recompute: the re-run ops issue their
// sequence collectives on the TP group again (every TP rank runs the same
// program, so they match): the gather of the re-run ln_1 output before the
// attention, the reduce-scatter of its partial output, the gather of the
// re-run ln_2 output for mlp_grad.
// The collectives run on the `tp` stream in compute's order.
// SP-LABEL: weftx.program @role0 ranks [0] {
// SP: weftx.launch @layer_norm_forward reads(@residual.1[0 +: 1024], {{.*}}) writes(@layer_norm.5[0 +: 1024], {{.*}}) phase "bwd mb0"
// SP-NEXT: weftx.record_event
// SP: weftx.launch @attention_forward {{.*}} phase "bwd mb0"
// SP: weftx.launch @layer_norm_forward reads(@residual.4[0 +: 1024], {{.*}}) writes(@layer_norm.6[0 +: 1024], {{.*}}) phase "bwd mb0"
// SP-NEXT: weftx.record_event
// SP: weftx.launch @attention_backward
// SP-LABEL: weftx.stream "tp" {
// SP: weftx.reduce_scatter sum 256 x f32 on @tp reads(@lm_head.grad[0 +: 2048]) writes(@sp.scatter.4[0 +: 1024]) phase "bwd mb0"
// SP: weftx.all_gather 256 x f32 on @tp reads(@layer_norm.5[0 +: 1024]) writes(@sp.gather.5[0 +: 2048]) phase "bwd mb0"
// SP: weftx.reduce_scatter sum 256 x f32 on @tp reads(@attn.out.2[0 +: 2048]) writes(@sp.scatter.5[0 +: 1024]) phase "bwd mb0"
// SP: weftx.all_gather 256 x f32 on @tp reads(@layer_norm.6[0 +: 1024]) writes(@sp.gather.6[0 +: 2048]) phase "bwd mb0"
// SP-LABEL: weftx.program @role1 ranks [1] {
// SP: weftx.all_gather 256 x f32 on @tp reads(@layer_norm.5[0 +: 1024]) writes(@sp.gather.5[0 +: 2048]) phase "bwd mb0"
// SP: weftx.reduce_scatter sum 256 x f32 on @tp reads(@attn.out.2[0 +: 2048]) writes(@sp.scatter.5[0 +: 1024]) phase "bwd mb0"

// ZeRO-3 with full recompute: a parameter read by both the re-run ops and
// the grad ops is gathered once for each (like the forward's and the
// backward's gathers), so the layer's parameters are not all held across
// its backward: the re-run's copy (`.gathered.1`) is released after the
// re-run's last use, attention_grad reads a fresh gather (`.gathered.2`)
// for its input gradient (its q, k, v come from the re-run).
// ZERO3-LABEL: weftx.program @role0 ranks [0, 1] {
// ZERO3: weftx.buffer @transformer.h.1.attn.c_attn.weight.gathered.1 arena size 49152
// ZERO3: weftx.buffer @transformer.h.1.attn.c_attn.weight.gathered.2 arena size 49152
// ZERO3-LABEL: weftx.stream "compute" {
// ZERO3: weftx.launch @layer_norm_forward reads(@residual.1[0 +: 2048], @transformer.h.1.ln_1.weight.gathered.1[0 +: 256], @transformer.h.1.ln_1.bias.gathered.1[0 +: 256]) {{.*}} phase "bwd mb0"
// ZERO3: weftx.gemm {{.*}} reads(@transformer.h.1.attn.c_attn.weight.gathered.1[512 +: 48640], @layer_norm.5[0 +: 2048]) writes(@attn.v.2[0 +: 2048]) phase "bwd mb0"
// ZERO3-NEXT: weftx.release writes(@transformer.h.1.attn.c_attn.weight.gathered.1[0 +: 49152]) phase "bwd mb0"
// ZERO3: weftx.gemm {{.*}} reads(@transformer.h.1.attn.c_attn.weight.gathered.2[0 +: 48640], @attn.q.grad[0 +: 2048]) writes(@attn.grad[0 +: 2048]) phase "bwd mb0"
// ZERO3: weftx.release writes(@transformer.h.1.attn.c_attn.weight.gathered.2[0 +: 49152]) phase "bwd mb0"
// ZERO3-LABEL: weftx.stream "allgather" {
// ZERO3: weftx.all_gather {{.*}} writes(@transformer.h.1.attn.c_attn.weight.gathered.1[0 +: 49152]) phase "gather transformer.h.1.attn.c_attn.weight (bwd mb0)"
// ZERO3: weftx.all_gather {{.*}} writes(@transformer.h.1.attn.c_attn.weight.gathered.2[0 +: 49152]) phase "gather transformer.h.1.attn.c_attn.weight (bwd mb0)"

// The arena shrinks with recompute (one micro-batch of 8 tokens; the
// parameters' persistent region is the same). Without recompute the layers
// also keep their op state (the norms' row statistics; q, k, v, context,
// lse; the MLP's up and activation: 2 x 24960 bytes, 64-byte aligned) and
// the grad ops recompute nothing; with recompute the re-run norms' and (full)
// attention's state is live through the MLP's backward (full: 8576 bytes
// more than when the grad ops recomputed it).
// ARENA-NONE: weftx.program @role0 ranks [0] arena 80800 persistent 1994820
// ARENA-SELECTIVE: weftx.program @role0 ranks [0] arena 31008 persistent 1994820
// ARENA-FULL: weftx.program @role0 ranks [0] arena 37280 persistent 1994820
