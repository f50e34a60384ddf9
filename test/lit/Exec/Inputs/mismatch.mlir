// Two roles whose gradient all-reduces on the same group disagree on the
// element count: each program is valid IR, the bundle is not.
module attributes {
  weftx.model = #weftx.model<name = "tiny", family = "gpt2">,
  weftx.training = #weftx.training<global_batch = 2, seq_len = 16,
    precision = "fp32", micro_batch = 1, grad_accum = 1, steps_per_plan = 1,
    lr = 6.0e-4, min_lr = 6.0e-5, warmup_steps = 10, decay_steps = 1000,
    weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8,
    grad_clip = 1.0, loss_scale = <dynamic = false, initial = 1.0,
    growth_interval = 0, backoff = 0.5>>,
  weftx.prediction = #weftx.prediction<step_time_s = 0.125,
    peak_memory_bytes = [64, 64], mfu = 0.4>
} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.program @r0 ranks [0] {
    weftx.buffer @grad persistent size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.all_reduce sum 16 x f32 on @dp reads(@grad[0 +: 64])
          writes(@grad[0 +: 64]) phase "grads"
    }
  }
  weftx.program @r1 ranks [1] {
    weftx.buffer @grad persistent size 64 align 64 : f32
    weftx.stream "compute" {
      weftx.all_reduce sum 8 x f32 on @dp reads(@grad[0 +: 32])
          writes(@grad[0 +: 32]) phase "grads"
    }
  }
}
