// weft-lower is attach-mesh, partition-tensor and split-stages, with
// attach-mesh's options.
// RUN: weftc import gpt2-odd | weft-opt --weft-lower="tp=2 pp=2" > %t.pipeline
// RUN: weftc import gpt2-odd | weft-opt --weft-attach-mesh="tp=2 pp=2" --weft-partition-tensor --weft-split-stages | diff - %t.pipeline
// RUN: FileCheck %s < %t.pipeline

// CHECK: shard.grid @weft_mesh(shape = 1x2x2)
// CHECK-LABEL: func.func @gpt2_odd_stage0
// CHECK: weft.tp_attention
// CHECK-LABEL: func.func @gpt2_odd_stage1
// CHECK: weft.vocab_parallel_cross_entropy

// weft-compile is every stage of `weftc compile`, from weft-lower's and
// weft-schedule's options; weft-step is weft-optimizer and the overlap
// passes. Both build the same passes as the stepwise command line.
// RUN: weftc import gpt2-tiny | weft-opt --weft-compile='lower={dp=2 zero=1 tp=2} schedule={seq-len=8 precision=bf16}' > %t.compile
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 tp=2' --weft-autodiff --weft-schedule='seq-len=8 precision=bf16' --weft-step --weft-fold-zero-fills --weft-plan-memory --weft-generate-kernels > %t.step
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 tp=2' --weft-autodiff --weft-schedule='seq-len=8 precision=bf16' --weft-optimizer --weft-overlap-grad-sync --weft-overlap-param-gathers --weft-overlap-tp-collectives --weft-fold-zero-fills --weft-plan-memory --weft-generate-kernels | diff - %t.step
// RUN: diff %t.compile %t.step
// RUN: FileCheck %s --check-prefix=COMPILE < %t.compile
// RUN: not weft-opt %s --weft-compile='schedule={seq-len=8 no-such-option=1}' 2>&1 | FileCheck %s --check-prefix=BAD-OPTION
// With gemm-epilogues, weft-fuse-gemm-epilogues runs between weft-step and
// weft-plan-memory; with residual-norms, weft-fuse-residual-norms after it.
// RUN: weftc import gpt2-tiny | weft-opt --weft-compile='lower={dp=2 zero=1 tp=2} schedule={seq-len=8 precision=bf16} gemm-epilogues=true' > %t.fused
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 tp=2' --weft-autodiff --weft-schedule='seq-len=8 precision=bf16' --weft-step --weft-fold-zero-fills --weft-fuse-gemm-epilogues --weft-plan-memory --weft-generate-kernels | diff - %t.fused
// RUN: FileCheck %s --check-prefix=FUSED < %t.fused
// RUN: weftc import gpt2-tiny | weft-opt --weft-compile='lower={dp=2 zero=1 tp=2} schedule={seq-len=8 precision=bf16} gemm-epilogues=true residual-norms=true' > %t.norms
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 tp=2' --weft-autodiff --weft-schedule='seq-len=8 precision=bf16' --weft-step --weft-fold-zero-fills --weft-fuse-gemm-epilogues --weft-fuse-residual-norms --weft-plan-memory --weft-generate-kernels | diff - %t.norms
// RUN: FileCheck %s --check-prefix=NORMS < %t.norms

// COMPILE: weftx.program @role0 ranks [0, 2] arena
// COMPILE: weftx.stream "reducescatter"
// COMPILE: weftx.stream "allgather"
// COMPILE: weftx.stream "tp"
// BAD-OPTION: no-such-option
// FUSED: weftx.gemm bf16 {{.*}} epilogue gelu_bias
// NORMS: weftx.launch @residual_layer_norm_forward
// NORMS: weftx.launch @layer_norm_backward_add
