// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step | FileCheck %s --check-prefix=SERIAL
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower='dp=2 zero=1' --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step | FileCheck %s --check-prefix=ZERO1
// RUN: weftc import gpt2-tiny | weft-opt --weft-lower --weft-autodiff --weft-schedule='seq-len=8 offload-optimizer=1' --weft-step --weft-plan-memory | weft-opt | FileCheck %s --check-prefix=PLACED

// Optimizer offload (docs/lowering.md, "Optimizer offload"): the fp32 master
// weights and AdamW moments live in the host region, with a host copy of the
// clipped gradients and of the updated weights; the device keeps the
// working copy (and, with ZeRO, the shard the all-gathers read). After the
// clip the gradients are copied to the host, AdamW runs there and writes the
// weights into `params.host`, which is copied back.

// SERIAL-LABEL: weftx.program @role0 ranks [0] {
// SERIAL-NEXT: weftx.buffer @params persistent size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @grads persistent size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @exp_avg host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @exp_avg_sq host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @master host size 498688 align 64 : f32
// SERIAL: weftx.buffer @grads.host host size 498688 align 64 : f32
// SERIAL-NEXT: weftx.buffer @params.host host size 498688 align 64 : f32
// SERIAL: weftx.clip f32 reads(@grad.sumsq[0 +: 4], @grads[0 +: 498688]) writes(@grads[0 +: 498688]) phase "clip"
// SERIAL-NEXT: weftx.copy reads(@grads[0 +: 498688]) writes(@grads.host[0 +: 498688]) phase "offload grads"
// SERIAL-NEXT: weftx.optimizer_step 124672 x f32 reads(@master[0 +: 498688], @grads.host[0 +: 498688], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688]) writes(@master[0 +: 498688], @exp_avg[0 +: 498688], @exp_avg_sq[0 +: 498688], @params.host[0 +: 498688]) phase "adamw"
// SERIAL-NEXT: weftx.copy reads(@params.host[0 +: 498688]) writes(@params[0 +: 498688]) phase "reload params"
// SERIAL-NEXT: }
// The working copy and the host master both start from the initializer.
// SERIAL: weftx.parameter "transformer.wte.weight" {{.*}} shards [#weftx.shard<role = @role0, buffer = @params, offset = 0, {{.*}}>, #weftx.shard<role = @role0, buffer = @master, offset = 0, {{.*}}>]

// ZeRO-1: the host holds this rank's shard of the state; the updated
// weights return into `params.shard`, which the next step's all-gathers
// read (they must be done before the copy overwrites it; the host's AdamW
// does not wait for them).
// ZERO1-LABEL: weftx.program @role0 ranks [0, 1] {
// ZERO1-NEXT: weftx.buffer @params persistent size 498688
// ZERO1-NEXT: weftx.buffer @grads persistent size 498688
// ZERO1-NEXT: weftx.buffer @exp_avg host size 249344
// ZERO1-NEXT: weftx.buffer @exp_avg_sq host size 249344
// ZERO1-NEXT: weftx.buffer @master host size 249344
// ZERO1-NEXT: weftx.buffer @grads.shard persistent size 249344
// ZERO1-NEXT: weftx.buffer @params.shard persistent size 249344
// ZERO1: weftx.copy reads(@grads.shard[0 +: 249344]) writes(@grads.host[0 +: 249344]) phase "offload grads"
// ZERO1-NEXT: weftx.optimizer_step 62336 x f32 reads(@master[0 +: 249344], @grads.host[0 +: 249344], {{.*}}) writes(@master[0 +: 249344], {{.*}}, @params.host[0 +: 249344]) phase "adamw"
// ZERO1-NEXT: weftx.wait_event [[GATHERED:[0-9]+]] phase "reload params"
// ZERO1-NEXT: weftx.copy reads(@params.host[0 +: 249344]) writes(@params.shard[0 +: 249344]) phase "reload params"
// ZERO1-LABEL: weftx.stream "allgather" {
// ZERO1-NEXT: weftx.all_gather 8192 x f32 on @dp reads(@params.shard[0 +: 32768]) writes(@params[0 +: 65536]) phase "param gather"
// ZERO1: weftx.record_event [[GATHERED]] phase "param gather"

// weft-plan-memory packs host buffers into a region of their own.
// PLACED: weftx.program @role0 ranks [0] arena {{[0-9]+}} persistent 997444 host 2493440 {
// PLACED: weftx.buffer @exp_avg host size 498688 align 64 offset 0 : f32
// PLACED-NEXT: weftx.buffer @exp_avg_sq host size 498688 align 64 offset 498688 : f32
// PLACED-NEXT: weftx.buffer @master host size 498688 align 64 offset 997376 : f32
