// RUN: weft-opt %s | FileCheck %s
// RUN: weft-opt %s | weft-opt | FileCheck %s
// RUN: weft-opt %s --mlir-print-op-generic | weft-opt | FileCheck %s
// Every weftx op and attribute, printed back in its custom form.

// CHECK-LABEL: module attributes
// CHECK-SAME: weftx.config = {dp = 2 : i64, schedule = "1f1b", sp = false}
// CHECK-SAME: weftx.model = #weftx.model<name = "tiny", family = "gpt2">
// CHECK-SAME: weftx.prediction = #weftx.prediction<step_time_s = 1.250000e-01, peak_memory_bytes = [4096, 4096], mfu = 4.000000e-01>
// CHECK-SAME: weftx.training = #weftx.training<global_batch = 4, seq_len = 16, precision = "fp32", micro_batch = 1, grad_accum = 2, steps_per_plan = 1, lr = 6.000000e-04, min_lr = 6.000000e-05, warmup_steps = 10, decay_steps = 1000, weight_decay = 1.000000e-01, beta1 = 9.000000e-01, beta2 = 0.94999999999999996, eps = 1.000000e-08, grad_clip = 1.000000e+00, loss_scale = <dynamic = true, initial = 6.553600e+04, growth_interval = 1000, backoff = 5.000000e-01>>
module attributes {
  weftx.model = #weftx.model<name = "tiny", family = "gpt2">,
  weftx.training = #weftx.training<global_batch = 4, seq_len = 16,
    precision = "fp32", micro_batch = 1, grad_accum = 2, steps_per_plan = 1,
    lr = 6.0e-4, min_lr = 6.0e-5, warmup_steps = 10, decay_steps = 1000,
    weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8,
    grad_clip = 1.0, loss_scale = #weftx.loss_scale<dynamic = true,
    initial = 65536.0, growth_interval = 1000, backoff = 0.5>>,
  weftx.prediction = #weftx.prediction<step_time_s = 0.125,
    peak_memory_bytes = [4096, 4096], mfu = 0.4>,
  weftx.config = {dp = 2, schedule = "1f1b", sp = false}
} {
  // CHECK: weftx.mesh dp 2 pp 1 tp 1
  weftx.mesh dp 2 pp 1 tp 1
  // CHECK: weftx.group @dp0 dp {{\[\[}}0, 1]]
  weftx.group @dp0 dp [[0, 1]]
  // CHECK: weftx.group @pair custom {{\[\[}}1, 0]]
  weftx.group @pair custom [[1, 0]]
  // CHECK: weftx.group @halves custom {{\[\[}}1], [0]]
  weftx.group @halves custom [[1], [0]]
  // CHECK: weftx.kernel @embed file "kernels/embed.cu" constants {hidden = 16 : i64} source "// embed\0A"
  weftx.kernel @embed file "kernels/embed.cu" constants {hidden = 16} source "// embed\n"
  // CHECK: weftx.parameter "wte" [64, 16] f32 init normal(2.000000e-02) hf "transformer.wte.weight" shards [#weftx.shard<role = @first, buffer = @w, offset = 0, dim = -1, start = 0, length = 0, zero_shards = 2, padded_elements = 1024>]
  weftx.parameter "wte" [64, 16] f32 init normal(0.02) hf "transformer.wte.weight"
      shards [#weftx.shard<role = @first, buffer = @w, offset = 0, dim = -1,
              start = 0, length = 0, zero_shards = 2, padded_elements = 1024>]
  // CHECK: weftx.parameter "ln.bias" [16] bf16 init zeros hf "ln_f.bias" hf_transposed shards []
  weftx.parameter "ln.bias" [16] bf16 init zeros hf "ln_f.bias" hf_transposed shards []

  // CHECK-LABEL: weftx.program @first ranks [0] arena 4096 persistent 2048 {
  weftx.program @first ranks [0] arena 4096 persistent 2048 {
    // CHECK: weftx.buffer @w persistent size 2048 align 256 offset 0 : f32
    weftx.buffer @w persistent size 2048 align 256 offset 0 : f32
    // CHECK: weftx.buffer @tokens arena size 64 align 64 : i32
    weftx.buffer @tokens arena size 64 align 64 : i32
    // CHECK: weftx.buffer @act arena size 1024 align 64 : f32
    weftx.buffer @act arena size 1024 align 64 : f32
    // CHECK: weftx.buffer @half arena size 512 align 64 : bf16
    weftx.buffer @half arena size 512 align 64 : bf16
    // CHECK: weftx.buffer @norm arena size 4 align 4 : f32
    weftx.buffer @norm arena size 4 align 4 : f32
    // CHECK: weftx.buffer @bytes arena size 16 align 16 : ui8
    weftx.buffer @bytes arena size 16 align 16 : ui8
    // CHECK: weftx.stream "compute" {
    weftx.stream "compute" {
      // CHECK: weftx.load_batch 1 writes(@tokens[0 +: 64]) phase "data"
      weftx.load_batch 1 writes(@tokens[0 +: 64]) phase "data"
      // CHECK: weftx.launch @embed args [3, -1] reads(@tokens[0 +: 64], @w[0 +: 1024]) writes(@act[0 +: 1024]) phase "fwd L0"
      weftx.launch @embed args [3, -1] reads(@tokens[0 +: 64], @w[0 +: 1024]) writes(@act[0 +: 1024]) phase "fwd L0"
      // CHECK: weftx.launch @embed reads(@act[0 +: 64]) writes(@act[64 +: 64])
      weftx.launch @embed reads(@act[0 +: 64]) writes(@act[64 +: 64])
      // CHECK: weftx.gemm f32 trans_b m 4 n 4 k 8 lda 4 ldb 4 ldc 4 alpha 1.000000e+00 beta 1.000000e+00 reads(@act[0 +: 128], @act[128 +: 128], @act[256 +: 64]) writes(@act[256 +: 64])
      weftx.gemm f32 trans_b m 4 n 4 k 8 lda 4 ldb 4 ldc 4 alpha 1.0 beta 1.0 reads(@act[0 +: 128], @act[128 +: 128], @act[256 +: 64]) writes(@act[256 +: 64])
      // CHECK: weftx.gemm bf16 trans_a trans_b m 2 n 2 k 2 lda 2 ldb 2 ldc 2 alpha 5.000000e-01 beta 0.000000e+00 reads(@half[0 +: 8], @half[8 +: 8]) writes(@half[16 +: 8])
      weftx.gemm bf16 trans_a trans_b m 2 n 2 k 2 lda 2 ldb 2 ldc 2 alpha 0.5 beta 0.0 reads(@half[0 +: 8], @half[8 +: 8]) writes(@half[16 +: 8])
      // CHECK: weftx.copy reads(@act[0 +: 16]) writes(@bytes[0 +: 16])
      weftx.copy reads(@act[0 +: 16]) writes(@bytes[0 +: 16])
      // CHECK: weftx.fill f32 0.000000e+00 writes(@act[0 +: 64], @act[512 +: 8])
      weftx.fill f32 0.0 writes(@act[0 +: 64], @act[512 +: 8])
      // CHECK: weftx.send 16 x f32 on @pair to 1 reads(@act[0 +: 64]) phase "fwd send"
      weftx.send 16 x f32 on @pair to 1 reads(@act[0 +: 64]) phase "fwd send"
      // CHECK: weftx.recv 16 x f32 on @pair from 1 writes(@act[0 +: 64])
      weftx.recv 16 x f32 on @pair from 1 writes(@act[0 +: 64])
      // CHECK: weftx.record_event 0
      weftx.record_event 0
      // CHECK: weftx.wait_event 1
      weftx.wait_event 1
      // CHECK: weftx.grad_norm bf16 reads(@half[0 +: 256], @half[256 +: 256]) writes(@norm[0 +: 4])
      weftx.grad_norm bf16 reads(@half[0 +: 256], @half[256 +: 256]) writes(@norm[0 +: 4])
      // CHECK: weftx.clip bf16 reads(@norm[0 +: 4], @half[0 +: 256]) writes(@half[0 +: 256])
      weftx.clip bf16 reads(@norm[0 +: 4], @half[0 +: 256]) writes(@half[0 +: 256])
      // CHECK: weftx.optimizer_step 16 x f32 reads(@w[0 +: 64], @act[0 +: 64], @act[64 +: 64], @act[128 +: 64]) writes(@w[0 +: 64], @act[64 +: 64], @act[128 +: 64], @half[0 +: 32])
      weftx.optimizer_step 16 x f32 reads(@w[0 +: 64], @act[0 +: 64], @act[64 +: 64], @act[128 +: 64]) writes(@w[0 +: 64], @act[64 +: 64], @act[128 +: 64], @half[0 +: 32])
      // CHECK: weftx.release writes(@act[0 +: 1024])
      weftx.release writes(@act[0 +: 1024])
    }
    // CHECK: weftx.stream "comm" {
    weftx.stream "comm" {
      // CHECK: weftx.wait_event 0
      weftx.wait_event 0
      // CHECK: weftx.all_reduce sum 256 x f32 on @dp0 reads(@act[0 +: 1024]) writes(@act[0 +: 1024]) phase "dp"
      weftx.all_reduce sum 256 x f32 on @dp0 reads(@act[0 +: 1024]) writes(@act[0 +: 1024]) phase "dp"
      // CHECK: weftx.reduce_scatter max 128 x f32 on @dp0 reads(@act[0 +: 1024]) writes(@act[0 +: 512])
      weftx.reduce_scatter max 128 x f32 on @dp0 reads(@act[0 +: 1024]) writes(@act[0 +: 512])
      // CHECK: weftx.all_gather 48 x f32 on @dp0 reads(@act[0 +: 128], @act[128 +: 64]) writes(@act[256 +: 256], @act[512 +: 128])
      weftx.all_gather 48 x f32 on @dp0 reads(@act[0 +: 128], @act[128 +: 64]) writes(@act[256 +: 256], @act[512 +: 128])
      // CHECK: weftx.all_gather 128 x bf16 on @dp0 reads(@half[0 +: 256]) writes(@half[0 +: 512])
      weftx.all_gather 128 x bf16 on @dp0 reads(@half[0 +: 256]) writes(@half[0 +: 512])
      // CHECK: weftx.broadcast 4 x ui8 on @dp0 root 1 writes(@bytes[0 +: 4])
      weftx.broadcast 4 x ui8 on @dp0 root 1 writes(@bytes[0 +: 4])
      // CHECK: weftx.record_event 1
      weftx.record_event 1
    }
  }

  // CHECK-LABEL: weftx.program @last ranks [1] {
  weftx.program @last ranks [1] {
    // CHECK: weftx.buffer @x arena size 64 align 64 : f32
    weftx.buffer @x arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.recv 16 x f32 on @pair from 0 writes(@x[0 +: 64])
      weftx.send 16 x f32 on @pair to 0 reads(@x[0 +: 64])
    }
  }
}
