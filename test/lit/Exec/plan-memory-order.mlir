// RUN: weft-opt %s -split-input-file -weft-plan-memory | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-plan-memory=report -o /dev/null | FileCheck %s --check-prefix=REPORT

// Programs are planned independently (in parallel); the report lists them in
// program order.

// CHECK-LABEL: weftx.program @first ranks [0] arena 256 persistent 64 {
// CHECK-NEXT: weftx.buffer @w persistent size 64 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @a arena size 128 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @b arena size 128 align 64 offset 128 : f32
// CHECK-LABEL: weftx.program @second ranks [1] arena 128 persistent 0 {
// CHECK-NEXT: weftx.buffer @a arena size 128 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @b arena size 128 align 64 offset 0 : f32
// CHECK-LABEL: weftx.program @third ranks [2] arena 0 persistent 0 {
// REPORT: weft-plan-memory: program @first (role 0): arena 256 B (live lower bound 256 B), persistent 64 B, planned peak 320 B, predicted 1000 B
// REPORT-NEXT: weft-plan-memory: program @second (role 1): arena 128 B (live lower bound 128 B), persistent 0 B, planned peak 128 B, predicted 2000 B
// REPORT-NEXT: weft-plan-memory: program @third (role 2): arena 0 B (live lower bound 0 B), persistent 0 B, planned peak 0 B, predicted 3000 B
module attributes {weftx.prediction = #weftx.prediction<step_time_s = 1.0, peak_memory_bytes = [1000, 2000, 3000], mfu = 0.5>} {
  weftx.mesh dp 1 pp 1 tp 3
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @first ranks [0] {
    weftx.buffer @w persistent size 64 align 64 : f32
    weftx.buffer @a arena size 128 align 64 : f32
    weftx.buffer @b arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k reads(@w[0 +: 64]) writes(@a[0 +: 128])
      weftx.launch @k reads(@a[0 +: 128]) writes(@b[0 +: 128])
    }
  }
  weftx.program @second ranks [1] {
    weftx.buffer @a arena size 128 align 64 : f32
    weftx.buffer @b arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@a[0 +: 128])
      weftx.fill f32 0.0 writes(@b[0 +: 128])
    }
  }
  weftx.program @third ranks [2] {
    weftx.stream "compute" {
    }
  }
}

// -----

// Holes and alignment. @long lives through the whole stream. @x3 reuses
// @x1's bytes; @t, live with @long and @x3, takes the best-fitting hole
// (64 after @x3). @u, live with the same, does not fit the 128 bytes left
// at 128 at its alignment of 256 and goes after all of them (320 rounded
// up), although the arena then grows.

// CHECK-LABEL: weftx.program @gaps ranks [0] arena 576 persistent 0 {
// CHECK-NEXT: weftx.buffer @long arena size 64 align 64 offset 256 : f32
// CHECK-NEXT: weftx.buffer @x1 arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @x2 arena size 64 align 64 offset 320 : f32
// CHECK-NEXT: weftx.buffer @x3 arena size 64 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @t arena size 64 align 64 offset 64 : f32
// CHECK-NEXT: weftx.buffer @u arena size 64 align 256 offset 512 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @gaps ranks [0] {
    weftx.buffer @long arena size 64 align 64 : f32
    weftx.buffer @x1 arena size 256 align 64 : f32
    weftx.buffer @x2 arena size 64 align 64 : f32
    weftx.buffer @x3 arena size 64 align 64 : f32
    weftx.buffer @t arena size 64 align 64 : f32
    weftx.buffer @u arena size 64 align 256 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@long[0 +: 64], @x1[0 +: 256])
      weftx.fill f32 0.0 writes(@x1[0 +: 256], @x2[0 +: 64])
      weftx.fill f32 0.0 writes(@x2[0 +: 64], @x3[0 +: 64])
      weftx.fill f32 0.0 writes(@x3[0 +: 64], @t[0 +: 64], @u[0 +: 64])
      weftx.fill f32 0.0 writes(@long[0 +: 64])
    }
  }
}

// -----

// An event chain across three streams. @e (placed first, the largest),
// written on "b" after its wait, follows @a through event 0 and shares its
// bytes. "c" waits for "b"'s record, which comes before @e, so @c is
// unordered with @e and goes after it. @d, written on "c" before the wait,
// is unordered with @a and @e (although it comes after @a in the
// interleaving) but ordered before @c, whose bytes it shares.

// CHECK-LABEL: weftx.program @chain3 ranks [0] arena 320 persistent 0 {
// CHECK-NEXT: weftx.buffer @a arena size 128 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @c arena size 128 align 64 offset 192 : f32
// CHECK-NEXT: weftx.buffer @d arena size 128 align 64 offset 192 : f32
// CHECK-NEXT: weftx.buffer @e arena size 192 align 64 offset 0 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @chain3 ranks [0] {
    weftx.buffer @a arena size 128 align 64 : f32
    weftx.buffer @c arena size 128 align 64 : f32
    weftx.buffer @d arena size 128 align 64 : f32
    weftx.buffer @e arena size 192 align 64 : f32
    weftx.stream "a" {
      weftx.fill f32 0.0 writes(@a[0 +: 128])
      weftx.record_event 0
    }
    weftx.stream "b" {
      weftx.wait_event 0
      weftx.record_event 1
      weftx.fill f32 0.0 writes(@e[0 +: 192])
    }
    weftx.stream "c" {
      weftx.fill f32 0.0 writes(@d[0 +: 128])
      weftx.wait_event 1
      weftx.fill f32 0.0 writes(@c[0 +: 128])
    }
  }
}
