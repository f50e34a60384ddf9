#!/usr/bin/env python3
"""Cross-check weft-export against Hugging Face transformers.

Loads a safetensors file written by weft-export into transformers'
GPT2LMHeadModel / LlamaForCausalLM (built from the preset's config.json),
computes the mean next-token cross-entropy on the batch weft-run trained on at
the same step, and compares it with weft-run's logged loss (the model runs in
float64, TF32 off; relative 1e-5 for fp32 plans, 2e-3 for bf16 and 2e-4 for
fp16 plans, whose forward rounds weights and activations). It also trains the
same 8 steps with transformers and torch's AdamW (fp64) from the step-0
weights, with weft's LR schedule and clipping, and compares every step's loss
(relative 1e-5 fp32, 1e-2 bf16, 2e-3 fp16). Two stages, because the GPU machine has
torch but cannot build Weft, and this machine builds Weft but has no torch:

  scripts/hf-crosscheck.py stage [--build build] [--out .gpu/hf-crosscheck]
      (after scripts/gpu-prepare.sh, which recreates .gpu)
      here: for gpt2-tiny and llama-tiny in fp32, gpt2-tiny in bf16 and
      llama-tiny in fp16, weftc compile (serial), weft-run
      8 steps with checkpoints at 0 and 7, weft-export of step-0 and step-7;
      writes per model config.json, tokens.bin, step0/step7 safetensors and
      expected.json (weft-run's losses of step 1 and step 8, which are
      computed from exactly those weights).
  scripts/hf-crosscheck.py check [DIR]   (default .gpu/hf-crosscheck)
      there (scripts/gpu-check.sh runs it; carry .gpu): loads each model into
      transformers and compares. Prints one visible "SKIP:" line and exits 0
      when torch or transformers is missing or nothing was staged.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

# (model, precision): the staged directory is the model's name, with
# "-PRECISION" for half-precision plans.
# gpt2-odd: a 263-word vocabulary, whose logits rows the plan pads to 264.
CASES = (("gpt2-tiny", "fp32"), ("llama-tiny", "fp32"), ("gpt2-tiny", "bf16"),
         ("llama-tiny", "fp16"), ("gpt2-odd", "fp32"))
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-3, "fp16": 2e-4}
# Training 8 steps with torch's AdamW: half-precision rounding compounds.
TRAIN_TOLERANCE = {"fp32": 1e-5, "bf16": 1e-2, "fp16": 2e-3}


def case_dir(model, precision):
    return model if precision == "fp32" else f"{model}-{precision}"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLMC_MAGIC = 20240520
BATCH, SEQ_LEN = 4, 32


def stage(args):
    bin_dir = os.path.join(args.build, "bin")
    tools = {t: os.path.join(bin_dir, t)
             for t in ("weftc", "weft-run", "weft-export", "weft-make-tokens")}
    for name, path in tools.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"hf-crosscheck: error: {path} not built (ninja -C "
                     f"{args.build} {name})")
    run = lambda *cmd, **kw: subprocess.run(cmd, check=True, **kw)
    for model, precision in CASES:
        out = os.path.join(args.out, case_dir(model, precision))
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        work = os.path.join(out, "work")
        os.makedirs(work)
        preset = os.path.join(ROOT, "compiler/Import/presets", model + ".json")
        shutil.copy(preset, os.path.join(out, "config.json"))
        tokens = os.path.join(out, "tokens.bin")
        run(tools["weft-make-tokens"], os.path.join(ROOT, "data/corpus.txt"),
            tokens, stdout=subprocess.DEVNULL)
        bundle = os.path.join(work, "bundle")
        run(tools["weftc"], "compile", "--model", model, "--cluster",
            os.path.join(ROOT, "test/lit/weftc/Inputs/cpu-sim-1.json"),
            "--global-batch", str(BATCH), "--seq-len", str(SEQ_LEN),
            "--lr", "1e-2", "--warmup-steps", "2", "--decay-steps", "20",
            "--dp", "1", "--micro-batch", str(BATCH), "--precision",
            precision, "-o", bundle,
            stdout=subprocess.DEVNULL)
        ck = os.path.join(work, "ck")
        run(tools["weft-run"], bundle, "--data", tokens, "--steps", "0",
            "--checkpoint-dir", ck, "--quiet")
        metrics = os.path.join(work, "run.jsonl")
        run(tools["weft-run"], bundle, "--data", tokens, "--steps", "8",
            "--checkpoint-dir", ck, "--checkpoint-every", "7", "--metrics",
            metrics, "--quiet")
        for step in (0, 7):
            run(tools["weft-export"], bundle, os.path.join(ck, f"step-{step}"),
                "-o", os.path.join(out, f"step{step}.safetensors"),
                stdout=subprocess.DEVNULL)
        losses = [json.loads(line)["loss"] for line in open(metrics)]
        training = json.load(open(os.path.join(bundle, "plan.json")))["training"]
        json.dump({"batch": BATCH, "seq_len": SEQ_LEN, "precision": precision,
                   "tolerance": TOLERANCE[precision],
                   "train_tolerance": TRAIN_TOLERANCE[precision],
                   "training": training,
                   "losses": losses,
                   "checks": [{"weights": "step0.safetensors", "step": 1,
                               "loss": losses[0]},
                              {"weights": "step7.safetensors", "step": 8,
                               "loss": losses[7]}]},
                  open(os.path.join(out, "expected.json"), "w"), indent=1)
        shutil.rmtree(work)
        print(f"staged {out}: step-1 loss {losses[0]:.6f}, step-8 loss "
              f"{losses[7]:.6f}")


def load_safetensors(torch, path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        begin, end = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]),
                                     dtype=torch.float32).reshape(t["shape"])
    return out


def batch(torch, tokens_path, step, size, seq_len):
    """weft-run's batch of 1-based `step` (docs/runtime.md, "Data")."""
    raw = open(tokens_path, "rb").read()
    magic, _, count = struct.unpack("<iii", raw[:12])
    body = raw[1024:1024 + 2 * count] if magic == LLMC_MAGIC else raw
    tokens = torch.frombuffer(bytearray(body), dtype=torch.int16).to(
        torch.int64) & 0xFFFF
    sequences = (len(tokens) - 1) // seq_len
    rows = torch.stack([tokens[i * seq_len:i * seq_len + seq_len + 1]
                        for i in (((step - 1) * size + j) % sequences
                                  for j in range(size))])
    return rows[:, :-1], rows[:, 1:]


def lr_at(t, step):
    """weft-run's LR schedule at 1-based `step` (docs/runtime.md)."""
    import math
    if step <= t["warmup_steps"]:
        return t["lr"] * step / t["warmup_steps"]
    if step >= t["decay_steps"]:
        return t["min_lr"]
    ratio = (step - t["warmup_steps"]) / (t["decay_steps"] - t["warmup_steps"])
    return t["min_lr"] + 0.5 * (1 + math.cos(math.pi * ratio)) * (
        t["lr"] - t["min_lr"])


def train(torch, net, expected, tokens, device):
    """torch's own AdamW training from the step-0 weights, in fp64: the loss
    of every step (before its update), with weft's schedule and clipping (by
    grad_clip / norm when the global norm exceeds it, no epsilon)."""
    t = expected["training"]
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=t["lr"], betas=(t["beta1"], t["beta2"]),
                            eps=t["eps"], weight_decay=t["weight_decay"])
    losses = []
    for step in range(1, len(expected["losses"]) + 1):
        ids, targets = batch(torch, tokens, step, expected["batch"],
                             expected["seq_len"])
        logits = net(input_ids=ids.to(device)).logits
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).to(device))
        opt.zero_grad()
        loss.backward()
        norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in params
                              if p.grad is not None))
        if t["grad_clip"] > 0 and norm > t["grad_clip"]:
            for p in params:
                if p.grad is not None:
                    p.grad.mul_(t["grad_clip"] / norm)
        for group in opt.param_groups:
            group["lr"] = lr_at(t, step)
        opt.step()
        losses.append(loss.item())
    return losses


def check(args):
    try:
        import torch
        import transformers
    except ImportError as error:
        print(f"SKIP: hf-crosscheck: {error.name} is not installed")
        return 0
    if not os.path.isdir(args.dir):
        print(f"SKIP: hf-crosscheck: nothing staged in {args.dir} (run "
              f"scripts/hf-crosscheck.py stage on the build machine)")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    status = 0
    for name, precision in CASES:
        model = case_dir(name, precision)
        d = os.path.join(args.dir, model)
        if not os.path.isdir(d):
            print(f"SKIP: hf-crosscheck {model}: not staged")
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))
        expected = json.load(open(os.path.join(d, "expected.json")))
        family = cfg["model_type"]
        config = transformers.AutoConfig.for_model(**cfg)
        config._attn_implementation = "eager"
        cls = (transformers.GPT2LMHeadModel if family == "gpt2"
               else transformers.LlamaForCausalLM)
        for c in expected["checks"]:
            net = cls(config).to(torch.float64)
            weights = load_safetensors(torch, os.path.join(d, c["weights"]))
            missing, unexpected = net.load_state_dict(
                {k: v.to(torch.float64) for k, v in weights.items()},
                strict=False)
            net.tie_weights()
            # Only the tied head may be absent (transformers re-ties it).
            missing = [k for k in missing if k != "lm_head.weight" or
                       not cfg.get("tie_word_embeddings", family == "gpt2")]
            if missing or unexpected:
                print(f"FAIL: hf-crosscheck {model}: missing {missing}, "
                      f"unexpected {unexpected}")
                status = 1
                continue
            net = net.to(device).eval()
            ids, targets = batch(torch, os.path.join(d, "tokens.bin"),
                                 c["step"], expected["batch"],
                                 expected["seq_len"])
            with torch.no_grad():
                logits = net(input_ids=ids.to(device)).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    targets.reshape(-1).to(device)).item()
            rel = abs(loss - c["loss"]) / abs(c["loss"])
            ok = rel <= expected.get("tolerance", 1e-5)
            status |= 0 if ok else 1
            print(f"{'PASS' if ok else 'FAIL'}: hf-crosscheck {model} step "
                  f"{c['step']}: weft-run {c['loss']:.7f}, transformers "
                  f"{transformers.__version__} ({device}, fp64) {loss:.7f}, "
                  f"relative {rel:.1e}")
        if "losses" not in expected:
            continue
        # Training: transformers + torch's AdamW from the same step-0 weights
        # against every step's loss of weft-run.
        net = cls(config).to(torch.float64)
        weights = load_safetensors(torch, os.path.join(d, "step0.safetensors"))
        net.load_state_dict({k: v.to(torch.float64)
                             for k, v in weights.items()}, strict=False)
        net.tie_weights()
        net = net.to(device).eval()  # eval: no dropout; gradients still flow
        theirs = train(torch, net, expected, os.path.join(d, "tokens.bin"),
                       device)
        ours = expected["losses"]
        rel = max(abs(a - b) / abs(a) for a, b in zip(ours, theirs))
        tolerance = expected["train_tolerance"]
        ok = rel <= tolerance
        status |= 0 if ok else 1
        print(f"{'PASS' if ok else 'FAIL'}: hf-crosscheck {model} training "
              f"{len(ours)} steps against torch {torch.__version__} AdamW "
              f"({device}, fp64): max relative loss difference {rel:.1e} "
              f"(tolerance {tolerance:.0e}); step {len(ours)} weft-run "
              f"{ours[-1]:.6f}, torch {theirs[-1]:.6f}")
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stage", help="build machine: make the inputs")
    s.add_argument("--build", default=os.environ.get("WEFT_BUILD_DIR", "build"))
    s.add_argument("--out", default=".gpu/hf-crosscheck")
    c = sub.add_parser("check", help="torch machine: compare")
    c.add_argument("dir", nargs="?", default=".gpu/hf-crosscheck")
    args = ap.parse_args()
    if args.command == "stage":
        stage(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
