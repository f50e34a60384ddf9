// RUN: weft-opt %s -split-input-file -weft-plan-memory | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-plan-memory=report -o /dev/null | FileCheck %s --check-prefix=REPORT

// One stream: @c reuses the bytes of @a after @a's last use; @b, live at the
// same time as both, does not. Persistent buffers are packed with alignment;
// a buffer nothing accesses is placed at 0.

// CHECK-LABEL: weftx.program @chain ranks [0] arena 512 persistent 192 {
// CHECK-NEXT: weftx.buffer @w persistent size 100 align 64 offset 0 : ui8
// CHECK-NEXT: weftx.buffer @v persistent size 64 align 128 offset 128 : f32
// CHECK-NEXT: weftx.buffer @a arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @b arena size 256 align 64 offset 256 : f32
// CHECK-NEXT: weftx.buffer @c arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @unused arena size 64 align 64 offset 0 : f32
// REPORT: weft-plan-memory: program @chain (role 0): arena 512 B (live lower bound 512 B), persistent 192 B, planned peak 704 B, predicted 1000 B
module attributes {weftx.prediction = #weftx.prediction<step_time_s = 1.0, peak_memory_bytes = [1000], mfu = 0.5>} {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @chain ranks [0] {
    weftx.buffer @w persistent size 100 align 64 : ui8
    weftx.buffer @v persistent size 64 align 128 : f32
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.buffer @b arena size 256 align 64 : f32
    weftx.buffer @c arena size 256 align 64 : f32
    weftx.buffer @unused arena size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k reads(@w[0 +: 100]) writes(@a[0 +: 256])
      weftx.launch @k reads(@a[0 +: 256]) writes(@b[0 +: 256])
      weftx.launch @k reads(@b[0 +: 256], @v[0 +: 64]) writes(@c[0 +: 256])
    }
  }
}

// -----

// Alignment: @odd is live with @wide, so @wide goes to the first multiple of
// 256 after @odd's 96 bytes. Largest first: @odd is placed before @wide.

// CHECK-LABEL: weftx.program @aligned ranks [0] arena 320 persistent 0 {
// CHECK-NEXT: weftx.buffer @wide arena size 64 align 256 offset 256 : f32
// CHECK-NEXT: weftx.buffer @odd arena size 96 align 64 offset 0 : f32
// REPORT: weft-plan-memory: program @aligned (role 0): arena 320 B (live lower bound 160 B), persistent 0 B, planned peak 320 B{{$}}
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @aligned ranks [0] {
    weftx.buffer @wide arena size 64 align 256 : f32
    weftx.buffer @odd arena size 96 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@odd[0 +: 96], @wide[0 +: 64])
    }
  }
}

// -----

// Best fit: @small goes into the 128-byte hole that @mid left, not into the
// 256-byte hole that @big left, and not at the end.

// CHECK-LABEL: weftx.program @bestfit ranks [0] arena 768 persistent 0 {
// CHECK-NEXT: weftx.buffer @big arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @keep1 arena size 256 align 64 offset 256 : f32
// CHECK-NEXT: weftx.buffer @mid arena size 128 align 64 offset 512 : f32
// CHECK-NEXT: weftx.buffer @keep2 arena size 128 align 64 offset 640 : f32
// CHECK-NEXT: weftx.buffer @small arena size 128 align 64 offset 512 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @bestfit ranks [0] {
    weftx.buffer @big arena size 256 align 64 : f32
    weftx.buffer @keep1 arena size 256 align 64 : f32
    weftx.buffer @mid arena size 128 align 64 : f32
    weftx.buffer @keep2 arena size 128 align 64 : f32
    weftx.buffer @small arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@big[0 +: 256], @keep1[0 +: 256], @mid[0 +: 128], @keep2[0 +: 128])
      weftx.launch @k reads(@keep1[0 +: 256], @keep2[0 +: 128]) writes(@small[0 +: 128])
    }
  }
}

// -----

// Two streams. @c's accesses follow @a's and @b's through event 0, so @c may
// reuse their bytes. @d is written on "side" before the wait, unordered with
// @a and @b, so it conflicts with both; it is ordered before @c by stream
// order.

// CHECK-LABEL: weftx.program @streams ranks [0] arena 640 persistent 0 {
// CHECK-NEXT: weftx.buffer @a arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @b arena size 256 align 64 offset 256 : f32
// CHECK-NEXT: weftx.buffer @c arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @d arena size 128 align 64 offset 512 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @streams ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.buffer @b arena size 256 align 64 : f32
    weftx.buffer @c arena size 256 align 64 : f32
    weftx.buffer @d arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@a[0 +: 256])
      weftx.launch @k reads(@a[0 +: 256]) writes(@b[0 +: 256])
      weftx.record_event 0
    }
    weftx.stream "side" {
      weftx.launch @k writes(@d[0 +: 128])
      weftx.wait_event 0
      weftx.launch @k reads(@d[0 +: 128]) writes(@c[0 +: 256])
    }
  }
}

// -----

// Without the event, @c may run at the same time as @a and @b.

// CHECK-LABEL: weftx.program @unordered ranks [0] arena 896 persistent 0 {
// CHECK-NEXT: weftx.buffer @a arena size 256 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @b arena size 256 align 64 offset 256 : f32
// CHECK-NEXT: weftx.buffer @c arena size 256 align 64 offset 512 : f32
// CHECK-NEXT: weftx.buffer @d arena size 128 align 64 offset 768 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.kernel @k file "kernels/k.cu" constants {} source ""
  weftx.program @unordered ranks [0] {
    weftx.buffer @a arena size 256 align 64 : f32
    weftx.buffer @b arena size 256 align 64 : f32
    weftx.buffer @c arena size 256 align 64 : f32
    weftx.buffer @d arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.launch @k writes(@a[0 +: 256])
      weftx.launch @k reads(@a[0 +: 256]) writes(@b[0 +: 256])
    }
    weftx.stream "side" {
      weftx.launch @k writes(@d[0 +: 128])
      weftx.launch @k reads(@d[0 +: 128]) writes(@c[0 +: 256])
    }
  }
}

// -----

// Existing offsets are replanned.

// CHECK-LABEL: weftx.program @replan ranks [0] arena 64 persistent 64 {
// CHECK-NEXT: weftx.buffer @p persistent size 64 align 64 offset 0 : f32
// CHECK-NEXT: weftx.buffer @x arena size 64 align 64 offset 0 : f32
module {
  weftx.mesh dp 1 pp 1 tp 1
  weftx.program @replan ranks [0] arena 4096 persistent 4096 {
    weftx.buffer @p persistent size 64 align 64 offset 1024 : f32
    weftx.buffer @x arena size 64 align 64 offset 2048 : f32
    weftx.stream "compute" {
      weftx.fill f32 0.0 writes(@x[0 +: 64], @p[0 +: 64])
    }
  }
}
