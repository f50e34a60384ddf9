// The ZeRO-3 example of docs/plan-format.md as weftx IR, before memory
// planning: the weight shard is gathered on the "allgather" stream, the
// compute stream waits for it, uses it and releases it.
module attributes {
  weftx.model = #weftx.model<name = "tiny", family = "gpt2">,
  weftx.training = #weftx.training<global_batch = 2, seq_len = 16,
    precision = "fp32", micro_batch = 1, grad_accum = 1, steps_per_plan = 1,
    lr = 6.0e-4, min_lr = 6.0e-5, warmup_steps = 10, decay_steps = 1000,
    weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1.0e-8,
    grad_clip = 1.0, loss_scale = <dynamic = false, initial = 1.0,
    growth_interval = 0, backoff = 0.5>>,
  weftx.prediction = #weftx.prediction<step_time_s = 0.125,
    peak_memory_bytes = [4096], mfu = 0.4>,
  weftx.config = {dp = 2, pp = 1, tp = 1, zero = 3, schedule = "1f1b"}
} {
  weftx.mesh dp 2 pp 1 tp 1
  weftx.group @dp dp [[0, 1]]
  weftx.kernel @embed file "kernels/embed.cu"
      constants {hidden = 16, vocab = 64} source "// embed kernel\n"
  weftx.parameter "wte" [2, 16] f32 init normal(0.02) hf "transformer.wte.weight"
      shards [#weftx.shard<role = @all, buffer = @w.shard, offset = 0, dim = -1,
              start = 0, length = 0, zero_shards = 2, padded_elements = 64>]
  weftx.program @all ranks [0, 1] {
    weftx.buffer @w.shard persistent size 128 align 64 : f32
    weftx.buffer @w.full arena size 256 align 64 : f32
    weftx.buffer @act arena size 256 align 64 : f32
    weftx.buffer @tokens arena size 64 align 64 : i32
    weftx.stream "compute" {
      weftx.load_batch 0 writes(@tokens[0 +: 64]) phase "data"
      weftx.wait_event 0 phase "fwd L0"
      weftx.launch @embed reads(@tokens[0 +: 64], @w.full[0 +: 256])
          writes(@act[0 +: 256]) phase "fwd L0"
      weftx.release writes(@w.full[0 +: 256]) phase "fwd L0"
    }
    weftx.stream "allgather" {
      weftx.all_gather 32 x f32 on @dp reads(@w.shard[0 +: 128])
          writes(@w.full[0 +: 256]) phase "gather L0"
      weftx.record_event 0 phase "gather L0"
    }
  }
}
