// RUN: weft-opt %s -weft-plan-memory -verify-diagnostics
// Each stream waits for the other's later record: no order of the streams
// exists, so the program cannot be planned.

module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @cycle ranks [0] {
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
}
