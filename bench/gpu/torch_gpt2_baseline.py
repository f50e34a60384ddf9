#!/usr/bin/env python3
"""PyTorch baseline for GPT-2 training throughput on one GPU, nanoGPT-style:
bf16 autocast, fused AdamW, flash SDPA, tied LM head; eager and torch.compile.

Reports tokens/s and MFU. Model FLOPs per token follow nanoGPT/PaLM:
6 * N (parameters without the position table) + 12 * layers * hidden * seq,
recompute not counted (N includes biases and norms, which Weft's matmul-weight
count leaves out: this MFU reads about 0.1% higher for the same step time; the
tokens/s ratio does not depend on it). Peak is the dense bf16 rate given by --peak-tflops
(989 for H100 SXM). Weft's CUDA backend is compared against this script's
numbers taken in the same run on the same GPU.
"""
import argparse, json, math, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {"124m": (12, 12, 768), "350m": (24, 16, 1024), "774m": (36, 20, 1280),
         "1.5b": (48, 25, 1600)}

class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.c_attn, self.c_proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.c_fc, self.mlp_proj = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, h))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self, layers, heads, h, vocab, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, h), nn.Embedding(seq, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))

def run(size, batch, seq, vocab, steps, compiled, peak):
    layers, heads, h = SIZES[size]
    torch.manual_seed(0)
    model = GPT(layers, heads, h, vocab, seq).cuda()
    n_params = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    if compiled:
        # Dynamo's automatic-dynamic state is per code object, shared by the
        # sizes one process compiles: without a reset the second size would
        # compile dynamic shapes (slower code, a weaker baseline).
        torch._dynamo.reset()
        step_model = torch.compile(model, dynamic=False)
    else:
        step_model = model
    data = torch.randint(0, vocab, (steps + 5, batch, seq + 1), device="cuda")
    # Each step's tokens are copied into the same contiguous buffers (as a
    # data loader's upload): views of `data` would change storage offset
    # every step (a recompile under torch.compile) and be misaligned.
    x = torch.empty(batch, seq, dtype=data.dtype, device="cuda")
    y = torch.empty_like(x)

    def step(i):
        x.copy_(data[i, :, :-1])
        y.copy_(data[i, :, 1:])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for i in range(5):
        step(i)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    # Each step timed apart (a synchronize after each, as weft-run's step
    # times end with one), reported as the median of the steps as Weft's.
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = step(5 + i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    dt = statistics.median(times)
    tokens = batch * seq
    flops_per_token = 6 * n_params + 12 * layers * h * seq
    res = {"size": size, "mode": "compiled" if compiled else "eager", "batch": batch, "seq": seq,
           "params": n_params, "step_ms": round(dt * 1e3, 2), "tokens_per_s": round(tokens / dt),
           "model_tflops": round(flops_per_token * tokens / dt / 1e12, 1),
           "mfu": round(flops_per_token * tokens / dt / (peak * 1e12), 4),
           "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
           # What the caching allocator held (closer to what nvidia-smi
           # shows for Weft, less the CUDA context).
           "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
           # The device's memory in use after the steps, context and
           # cuBLAS workspaces included: what nvidia-smi shows, as gpu-e2e.py
           # samples it for Weft.
           "device_used_gib": round((lambda f, t: (t - f) / 2**30)(*torch.cuda.mem_get_info()), 2),
           "mean_step_ms": round(sum(times) / len(times) * 1e3, 2),
           "warmup_s": round(warm_s, 1), "final_loss": round(loss.item(), 3)}
    assert math.isfinite(res["final_loss"]), "loss is not finite"
    del model, opt, step_model, data, x, y
    torch.cuda.empty_cache()
    return res

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="124m,350m")
    ap.add_argument("--batch", default="124m=32,350m=16,774m=12,1.5b=8")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--modes", default="eager,compiled")
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    args = ap.parse_args()
    batches = dict(kv.split("=") for kv in args.batch.split(","))
    for size in args.sizes.split(","):
        for mode in args.modes.split(","):
            r = run(size, int(batches[size]), args.seq, args.vocab, args.steps,
                    mode == "compiled", args.peak_tflops)
            print(json.dumps(r), flush=True)

if __name__ == "__main__":
    sys.exit(main())
