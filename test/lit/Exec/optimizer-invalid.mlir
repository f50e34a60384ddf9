// RUN: weft-opt %s -split-input-file -weft-optimizer -verify-diagnostics

// expected-error @+1 {{weft-optimizer: program @role0 has no 'exp_avg_sq' buffer}}
weftx.program @role0 ranks [0] {
  weftx.buffer @params persistent size 128 align 64 : f32
  weftx.buffer @grads persistent size 128 align 64 : f32
  weftx.buffer @exp_avg persistent size 128 align 64 : f32
  weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
  weftx.stream "compute" {
  }
}
weftx.mesh dp 1 pp 1 tp 1

// -----

// expected-error @+1 {{weft-optimizer: program @role0 has no compute stream}}
weftx.program @role0 ranks [0] {
  weftx.buffer @params persistent size 128 align 64 : f32
}
weftx.mesh dp 1 pp 1 tp 1

// -----

// ZeRO (a gradient shard) needs the master shard.
// expected-error @+1 {{weft-optimizer: program @role0 has no 'master' buffer}}
weftx.program @role0 ranks [0, 1] {
  weftx.buffer @params persistent size 128 align 64 : f32
  weftx.buffer @grads persistent size 128 align 64 : f32
  weftx.buffer @grads.shard persistent size 64 align 64 : f32
  weftx.buffer @exp_avg persistent size 64 align 64 : f32
  weftx.buffer @exp_avg_sq persistent size 64 align 64 : f32
  weftx.buffer @grad.sumsq persistent size 4 align 64 : f32
  weftx.stream "compute" {
  }
}
weftx.mesh dp 2 pp 1 tp 1
