// RUN: weft-opt %s -weft-overlap-param-gathers -verify-diagnostics | FileCheck %s

// Gathers whose sources lie in two buffers have no single range the step's
// writers could wait on: they stay after the step, with a warning.

// CHECK: weftx.optimizer_step
// CHECK-NEXT: weftx.all_gather 8 x f32 on @dp reads(@master[0 +: 32])
// CHECK-NEXT: weftx.all_gather 8 x f32 on @dp reads(@other[0 +: 32])
// CHECK-NOT: weftx.stream "allgather"
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @params persistent size 128 align 64 : f32
    weftx.buffer @master persistent size 64 align 64 : f32
    weftx.buffer @other persistent size 64 align 64 : f32
    weftx.buffer @grads.shard persistent size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k reads(@params[0 +: 128])
      weftx.optimizer_step 16 x f32 reads(@master[0 +: 64], @grads.shard[0 +: 64], @master[0 +: 64], @master[0 +: 64]) writes(@master[0 +: 64], @master[0 +: 64], @master[0 +: 64])
      weftx.all_gather 8 x f32 on @dp reads(@master[0 +: 32]) writes(@params[0 +: 64])
      // expected-warning @+1 {{weft-overlap-param-gathers: gathers read more than one buffer; left in place}}
      weftx.all_gather 8 x f32 on @dp reads(@other[0 +: 32]) writes(@params[64 +: 64])
    }
  }
}
