// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step | FileCheck %s --check-prefix=SERIAL
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1 bucket-bytes=100000' --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step | FileCheck %s --check-prefix=ZERO1
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step --weft-plan-memory | weft-opt | FileCheck %s --check-prefix=PLACED

// Optimizer offload (docs/lowering.md, "Optimizer offload"): the fp32 master
// weights and AdamW moments live in the host region, with host copies of the
// gradients, of their sum of squares and of the updated weights; the device
// keeps the working copy (and, with ZeRO, the shard the all-gathers read).
// Each gradient slot goes to the host on `d2h` as soon as the backward (or
// the DP reduce-scatter) is done with it; the norm is computed on the device
// and copied over; AdamW runs on the host (clipping each gradient on its way
// in), and the weights come back on `h2d`.

// SERIAL-LABEL: weftx.program @role0 ranks [0] {
// SERIAL-NEXT: weftx.buffer @params persistent size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @grads persistent size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @exp_avg host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @exp_avg_sq host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @master host size 498688 align 64 : f32
// SERIAL: weftx.buffer @grads.host host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @params.host host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @grad.sumsq.host host size 4 align 64 : f32
// The final norm's bias gradient is the backward's first: its copy is first.
// SERIAL: weftx.launch @layer_norm_backward {{.*}} writes({{.*}}, @grads[498176 +: 256], @grads[498432 +: 256]) phase "bwd mb0"
// SERIAL-NEXT: weftx.record_event [[LNF:[0-9]+]] phase "bwd mb0"
// SERIAL: weftx.grad_norm f32 reads(@grads[0 +: 498688]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// SERIAL-NEXT: weftx.record_event [[NORM:[0-9]+]] phase "grad norm"
// SERIAL-NEXT: weftx.wait_event [[COPIED:[0-9]+]] phase "adamw"
// SERIAL-NEXT: weftx.optimizer_step 124672 x f32 reads(@master[0 +: 498688], @grads.host[0 +: 498688], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688], @grad.sumsq.host[0 +: 4]) writes(@master[0 +: 498688], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688], @params.host[0 +: 498688]) phase "adamw"
// SERIAL-NEXT: weftx.record_event [[STEPPED:[0-9]+]] phase "adamw"
// SERIAL-NEXT: }
// SERIAL-NEXT: weftx.stream "d2h" {
// SERIAL-NEXT: weftx.wait_event [[LNF]] phase "offload grads"
// SERIAL-NEXT: weftx.copy reads(@grads[498176 +: 256]) writes(@grads.host[498176 +: 256]) phase "offload grads"
// SERIAL-NEXT: weftx.copy reads(@grads[498432 +: 256]) writes(@grads.host[498432 +: 256]) phase "offload grads"
// SERIAL: weftx.wait_event [[NORM]] phase "offload grads"
// SERIAL-NEXT: weftx.copy reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq.host[0 +: 4]) phase "offload grads"
// SERIAL-NEXT: weftx.record_event [[COPIED]] phase "offload grads"
// SERIAL-NEXT: }
// SERIAL-NEXT: weftx.stream "h2d" {
// SERIAL-NEXT: weftx.wait_event [[STEPPED]] phase "reload params"
// SERIAL-NEXT: weftx.copy reads(@params.host[0 +: 498688]) writes(@params[0 +: 498688]) phase "reload params"
// SERIAL-NEXT: weftx.record_event {{[0-9]+}} phase "reload params"
// The working copy and the host master both start from the initializer.
// SERIAL: weftx.parameter "transformer.wte.weight" {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, {{.*}}>, #weftx.shard<role = @role0, buffer = @master, offset = 0, {{.*}}>]

// ZeRO-1 with AdamW in buckets of at most 100000 bytes: the host holds this
// rank's shard of the state; each gradient shard piece goes to the host
// after its reduce-scatter; each bucket's weights return into
// `params.shard` while the next bucket steps. The next step's all-gathers
// read `params.shard`: the first copy back waits until they are done.
// ZERO1-LABEL: weftx.program @role0 ranks [0, 1] {
// ZERO1-NEXT: weftx.buffer @params persistent size 498688
// ZERO1-NEXT: weftx.buffer @grads persistent size 498688
// ZERO1-NEXT: weftx.buffer @exp_avg host size 249344
// ZERO1-NEXT: weftx.buffer @exp_avg_sq host size 249344
// ZERO1-NEXT: weftx.buffer @master host size 249344
// ZERO1-NEXT: weftx.buffer @grads.shard persistent size 249344
// ZERO1-NEXT: weftx.buffer @params.shard persistent size 249344
// ZERO1: weftx.all_reduce sum 1 x f32 on @dp reads(@grad.sumsq[0 +: 4]) writes(@grad.sumsq[0 +: 4]) phase "grad norm"
// ZERO1-NEXT: weftx.record_event {{[0-9]+}} phase "grad norm"
// ZERO1-NEXT: weftx.wait_event {{[0-9]+}} phase "adamw"
// ZERO1-NEXT: weftx.optimizer_step 20736 x f32 reads(@master[0 +: 82944], @grads.host[0 +: 82944], {{.*}}, @grad.sumsq.host[0 +: 4]) writes(@master[0 +: 82944], {{.*}}, @params.host[0 +: 82944]) phase "adamw"
// ZERO1-NEXT: weftx.record_event [[BUCKET0:[0-9]+]] phase "adamw"
// ZERO1-NEXT: weftx.optimizer_step 24992 x f32 reads(@master[82944 +: 99968], @grads.host[82944 +: 99968], {{.*}}) phase "adamw"
// ZERO1-NEXT: weftx.record_event [[BUCKET1:[0-9]+]] phase "adamw"
// ZERO1-NEXT: weftx.optimizer_step 16608 x f32
// ZERO1-LABEL: weftx.stream "reducescatter" {
// ZERO1: weftx.reduce_scatter sum 12288 x f32 on @dp reads(@grads[0 +: 65536], @grads[65536 +: 32768]) writes(@grads.shard[0 +: 32768], @grads.shard[32768 +: 16384]) phase "grad sync"
// ZERO1-NEXT: weftx.record_event [[WTE:[0-9]+]] phase "grad sync"
// ZERO1-LABEL: weftx.stream "d2h" {
// ZERO1: weftx.wait_event [[WTE]] phase "offload grads"
// ZERO1-NEXT: weftx.copy reads(@grads.shard[0 +: 32768]) writes(@grads.host[0 +: 32768]) phase "offload grads"
// ZERO1-LABEL: weftx.stream "h2d" {
// ZERO1-NEXT: weftx.wait_event [[BUCKET0]] phase "reload params"
// ZERO1-NEXT: weftx.wait_event [[GATHERED:[0-9]+]] phase "reload params"
// ZERO1-NEXT: weftx.copy reads(@params.host[0 +: 82944]) writes(@params.shard[0 +: 82944]) phase "reload params"
// ZERO1-NEXT: weftx.wait_event [[BUCKET1]] phase "reload params"
// ZERO1-NEXT: weftx.copy reads(@params.host[82944 +: 99968]) writes(@params.shard[82944 +: 99968]) phase "reload params"
// ZERO1-LABEL: weftx.stream "allgather" {
// ZERO1-NEXT: weftx.all_gather 12352 x f32 on @dp reads(@params.shard[0 +: 32768], {{.*}}) writes(@params[0 +: 65536], {{.*}}) phase "param gather"
// ZERO1: weftx.record_event [[GATHERED]] phase "param gather"

// weft-plan-memory packs host buffers into a region of their own.
// PLACED: weftx.program @role0 ranks [0] arena {{[0-9]+}} persistent 997444 host 2493444 {
// PLACED: weftx.buffer @exp_avg host size 498688 align 64 offset 0 : f32
// PLACED-NEXT: weftx.buffer @exp_avg_sq host size 498688 align 64 offset 498688 : f32
// PLACED-NEXT: weftx.buffer @master host size 498688 align 64 offset 997376 : f32
