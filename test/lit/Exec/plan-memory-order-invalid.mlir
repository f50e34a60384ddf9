// RUN: weft-opt %s -weft-plan-memory -verify-diagnostics
// Programs are planned in parallel, but the error is the first blocked
// program's only: @fine plans, @cycle cannot (each stream waits for the
// other's later record), @cycle2 is not reported.

module {
  weftx.mesh dp 1 pp 1 tp 3
  weftx.program @fine ranks [0] {
    weftx.buffer @a arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@a[0 +: 64])
    }
  }
  weftx.program @cycle ranks [1] {
    weftx.stream "compute" {
      // expected-error @+1 {{waits for an event that is never recorded before it in any order of the streams; the program cannot be memory-planned}}
      weftx.wait_event 1
      weftx.record_event 0
    }
    weftx.stream "side" {
      weftx.wait_event 0
      weftx.record_event 1
    }
  }
  weftx.program @cycle2 ranks [2] {
    weftx.stream "compute" {
      weftx.wait_event 3
      weftx.record_event 2
    }
    weftx.stream "side" {
      weftx.wait_event 2
      weftx.record_event 3
    }
  }
}
