// PP 2 x DP 2 (rank = dp_idx * 2 + pp_idx): the DP replicas of each stage
// share one program. Stage 0 sends its activation to the next member of its
// own pipeline ([0, 1] for rank 0, [2, 3] for rank 2) and gets the gradient
// back; each stage all-reduces its weight gradient over its DP group.
module attributes {
  weftx.model = #weftx.model<name = "tiny", family = "gpt2">,
  weftx.training = #weftx.training<global_batch = 2, seq_len = 16,
    precision = "fp32", micro_batch = 1, grad_accum = 1, steps_per_plan = 1,
    lr = 6.0e-4, min_lr = 6.0e-5, warmup_steps = 10, decay_steps = 1000,
    weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8,
    grad_clip = 1.0, loss_scale = <dynamic = false, initial = 1.0,
    growth_interval = 0, backoff = 0.5>>,
  weftx.prediction = #weftx.prediction<step_time_s = 0.125,
    peak_memory_bytes = [4096, 4096], mfu = 0.4>,
  weftx.config = {dp = 2, pp = 2, tp = 1, zero = 0, schedule = "1f1b"}
} {
  weftx.mesh dp 2 pp 2 tp 1
  weftx.group @pp pp [[0, 1], [2, 3]]
  weftx.group @dp dp [[0, 2], [1, 3]]
  weftx.kernel @embed file "kernels/embed.cu"
      constants {hidden = 16, vocab = 64} source "// embed kernel\n"
  weftx.program @stage0 ranks [0, 2] {
    weftx.buffer @w persistent size 256 align 64 : f32
    weftx.buffer @w.grad persistent size 256 align 64 : f32
    weftx.buffer @tokens arena size 64 align 64 : i32
    weftx.buffer @act arena size 128 align 64 : f32
    weftx.buffer @act.grad arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.load_batch 0 writes(@tokens[0 +: 64]) phase "data"
      weftx.launch @embed reads(@tokens[0 +: 64], @w[0 +: 256])
          writes(@act[0 +: 128]) phase "fwd"
      weftx.send 32 x f32 on @pp to 1 reads(@act[0 +: 128]) phase "fwd"
      weftx.recv 32 x f32 on @pp from 1 writes(@act.grad[0 +: 128]) phase "bwd"
      weftx.launch @embed reads(@act.grad[0 +: 128], @tokens[0 +: 64])
          writes(@w.grad[0 +: 256]) phase "bwd"
      weftx.all_reduce sum 64 x f32 on @dp reads(@w.grad[0 +: 256])
          writes(@w.grad[0 +: 256]) phase "grad sync"
    }
  }
  weftx.program @stage1 ranks [1, 3] {
    weftx.buffer @w persistent size 256 align 64 : f32
    weftx.buffer @w.grad persistent size 256 align 64 : f32
    weftx.buffer @act arena size 128 align 64 : f32
    weftx.buffer @act.grad arena size 128 align 64 : f32
    weftx.stream "compute" {
      weftx.recv 32 x f32 on @pp from 0 writes(@act[0 +: 128]) phase "fwd"
      weftx.launch @embed reads(@act[0 +: 128], @w[0 +: 256])
          writes(@act.grad[0 +: 128]) phase "bwd"
      weftx.send 32 x f32 on @pp to 0 reads(@act.grad[0 +: 128]) phase "bwd"
      weftx.launch @embed reads(@act[0 +: 128], @act.grad[0 +: 128])
          writes(@w.grad[0 +: 256]) phase "bwd"
      weftx.all_reduce sum 64 x f32 on @dp reads(@w.grad[0 +: 256])
          writes(@w.grad[0 +: 256]) phase "grad sync"
    }
  }
}
