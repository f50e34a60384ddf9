// RUN: weft-opt %s -split-input-file -weft-overlap-param-gathers | FileCheck %s

// ZeRO-1/2: the gathers after the optimizer step move to the start of the
// step on `allgather`, in order of first use (slot 1 is read first, slot 0
// later, slot 2 never), as the members of coalesced all-gathers of at most
// 128 gathered bytes (`bucket_bytes`); compute waits for a bucket right
// before its first member's first reader, and for all before the step
// overwrites the shards they read.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.stream "compute" {
// CHECK-NEXT: weftx.wait_event [[FIRST:[0-9]+]] phase "fwd"
// CHECK-NEXT: weftx.launch @k reads(@params[64 +: 64]) writes(@x[0 +: 64]) phase "fwd"
// CHECK-NEXT: weftx.launch @k reads(@params[0 +: 64], @x[0 +: 64]) writes(@x[0 +: 64]) phase "fwd"
// CHECK-NEXT: weftx.wait_event [[ALL:[0-9]+]] phase "adamw"
// CHECK-NEXT: weftx.optimizer_step
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "allgather" {
// CHECK-NEXT: weftx.all_gather 16 x f32 on @dp reads(@master[32 +: 32], @master[0 +: 32]) writes(@params[64 +: 64], @params[0 +: 64]) phase "param gather"
// CHECK-NEXT: weftx.record_event [[FIRST]] phase "param gather"
// CHECK-NEXT: weftx.all_gather 8 x f32 on @dp reads(@master[64 +: 32]) writes(@params[128 +: 64]) phase "param gather"
// CHECK-NEXT: weftx.record_event [[ALL]] phase "param gather"
// CHECK-NEXT: }
module attributes {weftx.config = {bucket_bytes = 128 : i64}} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @x arena size 64 align 64 : f32
    weftx.buffer @params persistent size 192 align 64 : f32
    weftx.buffer @master persistent size 96 align 64 : f32
    weftx.buffer @grads.shard persistent size 96 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k reads(@params[64 +: 64]) writes(@x[0 +: 64]) phase "fwd"
      weftx.launch @k reads(@params[0 +: 64], @x[0 +: 64]) writes(@x[0 +: 64]) phase "fwd"
      weftx.optimizer_step 24 x f32 reads(@master[0 +: 96], @grads.shard[0 +: 96], @master[0 +: 96], @master[0 +: 96]) writes(@master[0 +: 96], @master[0 +: 96], @master[0 +: 96]) phase "adamw"
      weftx.all_gather 8 x f32 on @dp reads(@master[0 +: 32]) writes(@params[0 +: 64]) phase "param gather"
      weftx.all_gather 8 x f32 on @dp reads(@master[32 +: 32]) writes(@params[64 +: 64]) phase "param gather"
      weftx.all_gather 8 x f32 on @dp reads(@master[64 +: 32]) writes(@params[128 +: 64]) phase "param gather"
    }
  }
}

// -----

// A program that already gathers on `allgather` (ZeRO-3) keeps its
// post-step gathers of persistent parameters where they are.

// CHECK-LABEL: weftx.program @role0
// CHECK: weftx.optimizer_step
// CHECK-NEXT: weftx.all_gather 8 x f32 on @dp reads(@master[0 +: 32]) writes(@params[0 +: 64]) phase "param gather"
// CHECK-NEXT: }
// CHECK-NEXT: weftx.stream "allgather" {
// CHECK-NEXT: weftx.all_gather 8 x f32 on @dp reads(@master[32 +: 32]) writes(@w.gathered[0 +: 64])
// CHECK-NEXT: }
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @params persistent size 64 align 64 : f32
    weftx.buffer @w.gathered arena size 64 align 64 : f32
    weftx.buffer @master persistent size 64 align 64 : f32
    weftx.buffer @grads.shard persistent size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k reads(@params[0 +: 64], @w.gathered[0 +: 64])
      weftx.optimizer_step 16 x f32 reads(@master[0 +: 64], @grads.shard[0 +: 64], @master[0 +: 64], @master[0 +: 64]) writes(@master[0 +: 64], @master[0 +: 64], @master[0 +: 64]) phase "adamw"
      weftx.all_gather 8 x f32 on @dp reads(@master[0 +: 32]) writes(@params[0 +: 64]) phase "param gather"
    }
    weftx.stream "allgather" {
      weftx.all_gather 8 x f32 on @dp reads(@master[32 +: 32]) writes(@w.gathered[0 +: 64])
    }
  }
}
