// RUN: weft-opt %s -split-input-file -weft-overlap-grad-sync -verify-diagnostics

// The gradient sync must be one run: something between two of its
// collectives could read a slot the moved sync has not finished.
module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @grads persistent size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 128])
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64])
      weftx.launch @k reads(@grads[0 +: 64]) writes(@grads[64 +: 64])
      // expected-error @+1 {{weft-overlap-grad-sync: the gradient sync collectives of program @role0 are not one contiguous run}}
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads[64 +: 64])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @grads persistent size 128 align 64 : f32
    weftx.buffer @grads.shard persistent size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@grads[0 +: 128])
      // expected-error @+1 {{weft-overlap-grad-sync: program @role0 mixes gradient all-reduces and reduce-scatters}}
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64])
      weftx.reduce_scatter sum 8 x f32 on @dp reads(@grads[64 +: 64]) writes(@grads.shard[0 +: 32])
    }
  }
}

// -----

module {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.program @role0 ranks [0, 1] {
    weftx.buffer @grads persistent size 128 align 64 : f32
    weftx.stream "compute" {
      // expected-error @+1 {{weft-overlap-grad-sync: nothing on compute writes the gradient slot this collective reads}}
      weftx.all_reduce sum 16 x f32 on @dp reads(@grads[0 +: 64]) writes(@grads[0 +: 64])
    }
  }
}
