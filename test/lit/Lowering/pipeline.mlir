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
