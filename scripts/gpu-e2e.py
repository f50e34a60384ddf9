#!/usr/bin/env python3
"""weft-run on a GPU: the CUDA backend against the CPU backend, and throughput.

Two stages, because the GPU machine cannot build Weft (no MLIR, no MPI
headers) and this machine has no GPU:

  scripts/gpu-e2e.py stage [--build build] [--out .gpu/e2e]
      here (scripts/gpu-prepare.sh runs it): tokenizes data/corpus.txt and
      compiles the bundles below with weftc; records each bundle's predicted
      step time and planned memory (weft-inspect summary --json) in
      cases.json.
  scripts/gpu-e2e.py check [--tools .gpu/tools] [DIR]   (default .gpu/e2e)
      there (scripts/gpu-check.sh runs it; carry .gpu):
      * agreement cases: the same bundle, seed and data through
        `weft-run --backend cpu`, `--backend cuda` (graph replay from step 2)
        and `--backend cuda --no-graph`; every step's loss and gradient norm
        must agree within the precision's tolerance (fp32 1e-4 relative,
        half precision 1e-2 for the loss and 5e-2 for the gradient norm: issue
        6), and the loss must fall;
      * multi-GPU cases (DP, TP and PP over 2 ranks through NCCL): where the
        machine has as many GPUs, `mpirun -np N weft-run --backend cuda`
        against `--backend cpu` as the agreement cases; else one visible
        SKIP line each (NCCL refuses two ranks on one GPU);
      * throughput cases (GPT-2 with the baseline's 50304-word vocabulary,
        THROUGHPUT_MODELS): `--backend cuda` alone (and --no-graph), the median
        step time of the steps after warm-up, tokens/s and MFU against the
        planner's prediction, and the GPU memory nvidia-smi saw against the
        plan.
      Exits 1 when an agreement fails or a run fails; prints a table last.
      WEFT_E2E_DRY_RUN=1 rehearses it without a GPU: every weft-run on the
      CPU backend with the CUDA-only flags dropped, the throughput rows on
      gpt2-tiny-bf16 (`check --quick --tools build/bin`; ctest
      e2e.gpu-e2e-dry-run), so a mistake in this script costs no device time.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# lr 3e-3: at 1e-2 the tiny models train on the edge of stability, and even
# two CPU runs that differ only in reduction order (serial against DP2) drift
# apart within 12 steps (llama-tiny bf16: grad norms 160% apart by step 11).
TINY = ["--cluster", os.path.join(ROOT, "test/lit/weftc/Inputs/cpu-sim-1.json"),
        "--global-batch", "4", "--seq-len", "32", "--lr", "3e-3",
        "--warmup-steps", "2", "--decay-steps", "20", "--dp", "1"]
# Two ranks (the multi-GPU cases): the same, on a 2-GPU cluster.
TINY2 = [f if f != TINY[1] else os.path.join(ROOT, "test/lit/weftc/Inputs/cpu-sim-2.json")
         for f in TINY[:-2]]
# name -> (kind, weftc compile arguments)
CASES = {
    # Its generated kernels are also compiled ahead for the H100/H200 (a
    # fatbin per kernel); the other bundles' go through NVRTC at load.
    "gpt2-tiny-fp32": ("agree", ["--model", "gpt2-tiny", "--micro-batch", "4",
                                 "--precision", "fp32", "--cuda-arch", "sm_90"]
                       + TINY),
    "gpt2-tiny-fp32-accum2": ("agree", ["--model", "gpt2-tiny", "--micro-batch",
                                        "2", "--precision", "fp32"] + TINY),
    "llama-tiny-fp32": ("agree", ["--model", "llama-tiny", "--micro-batch", "4",
                                  "--precision", "fp32"] + TINY),
    "gpt2-tiny-bf16": ("agree", ["--model", "gpt2-tiny", "--micro-batch", "4",
                                 "--precision", "bf16"] + TINY),
    "llama-tiny-bf16": ("agree", ["--model", "llama-tiny", "--micro-batch", "4",
                                  "--precision", "bf16"] + TINY),
    # fp16 with a static loss scale: the f16 kernels, epilogues and cuDNN
    # graphs.
    "gpt2-tiny-fp16": ("agree", ["--model", "gpt2-tiny", "--micro-batch", "4",
                                 "--precision", "fp16", "--loss-scale", "1024"]
                       + TINY),
    # Dynamic scaling from 2^20: the f16 gradients overflow until the scale
    # has backed off (the optimizer_steps skip on the device), then it grows
    # every 3 applied steps; each change captures the step graph again. The
    # skips and scales must be the CPU's, step for step.
    "gpt2-tiny-fp16-dynamic": ("agree", ["--model", "gpt2-tiny", "--micro-batch",
                                         "4", "--precision", "fp16",
                                         "--initial-loss-scale", "1048576",
                                         "--loss-scale-window", "3"] + TINY),
    # Full recomputation: the first forward's GELU outputs reuse the bytes
    # of their gemm's input, which the epilogues must leave alone.
    "gpt2-tiny-bf16-full": ("agree", ["--model", "gpt2-tiny", "--micro-batch", "4",
                                      "--precision", "bf16", "--recompute", "full"]
                            + TINY),
    # A 263-word vocabulary: the logits' rows padded to 264 (aligned GEMMs).
    "gpt2-odd-bf16": ("agree", ["--model", "gpt2-odd", "--micro-batch", "4",
                                "--precision", "bf16"] + TINY),
    # Several GPUs, one rank each (NCCL: the unique id over MPI, group
    # communicators split from the world): gradients all-reduced and the
    # ZeRO-1 shards gathered, TP's activation all-reduces, PP's send/recv.
    "gpt2-tiny-dp2-zero1-bf16": ("multi", ["--model", "gpt2-tiny", "--dp", "2",
                                           "--zero", "1", "--micro-batch", "2",
                                           "--precision", "bf16"] + TINY2),
    "gpt2-tiny-tp2-fp32": ("multi", ["--model", "gpt2-tiny", "--tp", "2", "--dp", "1",
                                     "--micro-batch", "4", "--precision", "fp32"]
                           + TINY2),
    "llama-tiny-pp2-bf16": ("multi", ["--model", "llama-tiny", "--pp", "2", "--dp", "1",
                                      "--micro-batch", "1", "--schedule", "1f1b",
                                      "--precision", "bf16"] + TINY2),
    # Also profiled with --device-times (gpu-check.sh, profile below).
    "gpt2-124m-bf16-b32": ("speed", ["--model", "@gpt2-124m", "--cluster", "h100-1gpu",
                                     "--global-batch", "32", "--micro-batch",
                                     "32", "--seq-len", "1024", "--precision",
                                     "bf16"]),
    "gpt2-350m-bf16-b16": ("speed", ["--model", "@gpt2-350m", "--cluster",
                                     "h100-1gpu", "--global-batch", "16",
                                     "--micro-batch", "16", "--seq-len", "1024",
                                     "--precision", "bf16"]),
    # Timed only without --quick (the 1.5B baseline of gpu-check.sh likewise).
    # The preset's 50257 words (logits rows padded to 50264 by the lowering).
    "gpt2-124m-v50257-bf16-b32": ("speed-full", ["--model", "gpt2", "--cluster",
                                                 "h100-1gpu", "--global-batch",
                                                 "32", "--micro-batch", "32",
                                                 "--seq-len", "1024",
                                                 "--precision", "bf16"]),
    "gpt2-1.5b-bf16-b8": ("speed-full", ["--model", "@gpt2-1.5b", "--cluster",
                                         "h100-1gpu", "--global-batch", "8",
                                         "--micro-batch", "8", "--seq-len", "1024",
                                         "--precision", "bf16"]),
}
AGREE_STEPS, SPEED_STEPS, SPEED_WARMUP = 12, 20, 5
# The throughput models ("@name" above): GPT-2 as bench/gpu/torch_gpt2_baseline.py
# (nanoGPT) trains it, with the vocabulary padded to 50304 words (a multiple of
# 128: 16-byte aligned rows for the LM head's GEMMs), so Weft and PyTorch time
# the same model. (n_embd, n_layer, n_head.)
THROUGHPUT_MODELS = {"gpt2-124m": (768, 12, 12), "gpt2-350m": (1024, 24, 16),
                     "gpt2-1.5b": (1600, 48, 25)}
NANOGPT_VOCAB = 50304


def throughput_config(name, out):
    """Writes the Hugging Face config.json of throughput model `name`."""
    n_embd, n_layer, n_head = THROUGHPUT_MODELS[name]
    path = os.path.join(out, "configs", f"{name}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
               "vocab_size": NANOGPT_VOCAB, "n_positions": 1024, "n_embd": n_embd,
               "n_layer": n_layer, "n_head": n_head, "n_inner": None,
               "activation_function": "gelu_new", "layer_norm_epsilon": 1e-05,
               "initializer_range": 0.02, "tie_word_embeddings": True},
              open(path, "w"), indent=1)
    return path


# The suffix of a bundle's twin compiled with the compiler's fusions:
# --gemm-epilogues --residual-norms.
EPILOGUES = "-epilogues"
FUSIONS = ["--gemm-epilogues", "--residual-norms"]


def stage(args):
    tool = lambda name: os.path.join(args.build, "bin", name)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    subprocess.run([tool("weft-make-tokens"), os.path.join(ROOT, "data/corpus.txt"),
                    os.path.join(args.out, "tokens.bin")], check=True,
                   stdout=subprocess.DEVNULL)
    cases = {}
    for name, (kind, flags) in CASES.items():
        bundle = os.path.join(args.out, name)
        flags = [throughput_config(f[1:], args.out) if f.startswith("@") else f
                 for f in flags]
        subprocess.run([tool("weftc"), "compile"] + flags + ["-o", bundle],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([tool("weftc"), "compile"] + flags +
                       FUSIONS + ["-o", bundle + EPILOGUES],
                       check=True, stdout=subprocess.DEVNULL)
        fused = json.loads(subprocess.run(
            [tool("weft-inspect"), bundle + EPILOGUES, "summary", "--json"],
            check=True, capture_output=True, text=True).stdout)
        summary = json.loads(subprocess.run(
            [tool("weft-inspect"), bundle, "summary", "--json"], check=True,
            capture_output=True, text=True).stdout)
        role = summary["roles"][0]
        cases[name] = {"kind": kind, "precision": summary["training"]["precision"],
                       "ranks": summary["mesh"]["world"],
                       "fatbins": "--cuda-arch" in flags,
                       "tokens_per_step": summary["training"]["global_batch"] *
                       summary["training"]["seq_len"],
                       "predicted_step_s": summary["prediction"]["step_time_s"],
                       # The twin's: the planner costs the fused GEMMs
                       # and norms.
                       "predicted_step_s_epilogues":
                           fused["prediction"]["step_time_s"],
                       "predicted_mfu": summary["prediction"]["mfu"],
                       "planned_bytes": role["planned_bytes"],
                       # The twin's memory plan (the GELU aux, the fused
                       # norms' buffers) for the rows that run it.
                       "planned_bytes_epilogues": fused["roles"][0]["planned_bytes"]}
    json.dump(cases, open(os.path.join(args.out, "cases.json"), "w"), indent=1)
    print(f"staged {len(cases)} bundles in {args.out}")


class GpuMemorySampler:
    """The most GPU memory nvidia-smi reports in use while a run lasts."""

    def __init__(self):
        self.peak_mib, self.stop = 0, threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while not self.stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=5)
                self.peak_mib = max(self.peak_mib, int(out.stdout.split()[0]))
            except Exception:
                pass
            self.stop.wait(1.0)  # nvidia-smi takes driver locks: rarely

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def gpu_count():
    """How many GPUs nvidia-smi lists (0 without it); $WEFT_E2E_GPUS
    overrides it (a dry run of the multi-GPU cases' launch on a machine
    without them: their CPU runs work, the CUDA ones fail)."""
    if os.environ.get("WEFT_E2E_GPUS"):
        return int(os.environ["WEFT_E2E_GPUS"])
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def device_cluster():
    """The single-GPU cluster preset of this machine's GPU, where Weft has
    one (the throughput bundles are planned for h100-1gpu; an H200 has the
    same compute and 1.4x its HBM bandwidth), else None."""
    try:
        name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "H200" in name:
        return "h200-1gpu"
    if "H100" in name:
        return "h100-1gpu"
    return None


def simulated_ms(tools, bundle, cluster):
    """weft-inspect's simulated step of `bundle` on `cluster`, in ms."""
    out = subprocess.run([os.path.join(tools, "weft-inspect"), bundle, "timeline",
                          "--cluster", cluster, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)["simulated_step_time_s"] * 1e3


def mpirun(ranks):
    """The launcher prefix for `ranks` processes (none for one)."""
    if ranks == 1:
        return []
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)]


# The CUDA-only flags of weft-run, with whether each takes a value.
CUDA_FLAGS = {"--no-graph": False, "--half-kernels": False, "--cudnn-attention": False,
              "--gemm-autotune": False, "--generated-kernels": False,
              "--kernel-cache": True, "--device-times": False}


DRY_RUN = bool(os.environ.get("WEFT_E2E_DRY_RUN"))
# What a dry run times in place of each throughput bundle.
DRY_RUN_SPEED_BUNDLE = "gpt2-tiny-bf16"


def on_the_cpu(extra):
    """`extra` with the CUDA backend replaced by the CPU one and the
    CUDA-only flags dropped: $WEFT_E2E_DRY_RUN's rehearsal of check on a
    machine without a GPU (its loops, comparisons and output; the tiny
    bundles' runs then agree trivially)."""
    out, skip = [], False
    for i, e in enumerate(extra):
        if skip:
            skip = False
        elif e in CUDA_FLAGS:
            skip = CUDA_FLAGS[e]
        elif e == "cuda" and i > 0 and extra[i - 1] == "--backend":
            out.append("cpu")
        else:
            out.append(e)
    return out


def weft_run(tools, bundle, tokens, steps, metrics, log, *extra, ranks=1):
    # The GEMM epilogues are the compiler's: their rows run the bundle's
    # twin compiled with them and the residual norms (stage()).
    if "--gemm-epilogues" in extra:
        extra = [e for e in extra if e != "--gemm-epilogues"]
        bundle += EPILOGUES
    if DRY_RUN:
        extra = on_the_cpu(list(extra))
    cmd = mpirun(ranks) + [os.path.join(tools, "weft-run"), bundle, "--data", tokens,
                           "--steps", str(steps), "--metrics", metrics] + list(extra)
    with open(log, "w") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                timeout=90 if steps == AGREE_STEPS else 150).returncode
        except subprocess.TimeoutExpired as e:
            rc = f"timed out after {e.timeout} s"
    text = open(log).read()
    if rc != 0:
        # weft-run's own error line (under mpirun the tail is mpirun's).
        errors = [l for l in text.splitlines() if l.startswith("weft-run: error:")]
        tail = errors[:1] or text.strip().splitlines()[-3:]
        return None, f"{rc if isinstance(rc, str) else f'exit {rc}'}: " + " / ".join(tail)
    return [json.loads(line) for line in open(metrics)], text


def cudnn_line(text):
    """weft-run's line on cuDNN attention: how many kernels run on it, or
    why none does."""
    match = re.search(r"weft-run: cuda: (warning: no cuDNN attention.*|"
                      r"\d+ of \d+ 16-bit attention kernels run on cuDNN.*)", text)
    return match.group(1) if match else "no cuDNN attention line"


def autotune_line(text):
    """weft-run's --gemm-autotune line: shapes timed and the step's GEMM
    time under the heuristic's choice and the fastest."""
    match = re.search(r"weft-run: cuda: (cuBLASLt autotune: .*)", text)
    return match.group(1) if match else "no cuBLASLt autotune line"


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def check(args):
    cases = json.load(open(os.path.join(args.dir, "cases.json")))
    tokens = os.path.join(args.dir, "tokens.bin")
    out = os.environ.get("OUT", "gpu-out")
    os.makedirs(out, exist_ok=True)
    failed, rows = 0, []
    gpus = gpu_count()
    cluster = device_cluster()
    # $WEFT_E2E_DEADLINE (seconds since the epoch; gpu-check.sh sets it from
    # its budget): cases that would start after it are skipped, one line
    # each, so the stages after this one still run.
    deadline = float(os.environ.get("WEFT_E2E_DEADLINE", "inf"))
    for name, case in cases.items():
        kind = {"speed-full": "speed", "multi": "agree"}.get(case["kind"], case["kind"])
        if (args.only and kind != args.only) or \
                (args.quick and case["kind"] == "speed-full"):
            continue
        if time.time() > deadline:
            print(f"SKIP {name}: past the deadline of WEFT_E2E_DEADLINE (the device budget)")
            rows.append((name, "skipped", "past the budget's deadline", ""))
            continue
        bundle = os.path.join(args.dir, name)
        if DRY_RUN and kind == "speed":
            # The throughput rows' code on a bundle the CPU steps quickly.
            bundle = os.path.join(args.dir, DRY_RUN_SPEED_BUNDLE)
        log = lambda tag: (os.path.join(out, f"{name}.{tag}.jsonl"),
                           os.path.join(out, f"{name}.{tag}.log"))
        ranks = case.get("ranks", 1)
        if case["kind"] == "multi" and gpus < ranks:
            print(f"SKIP {name}: {ranks} ranks need {ranks} GPUs, this machine has "
                  f"{gpus} (NCCL refuses two ranks on one GPU)")
            rows.append((name, "skipped", f"needs {ranks} GPUs", ""))
            continue
        if kind == "agree":
            tolerance = 1e-4 if case["precision"] == "fp32" else 1e-2
            # Half-precision gradients are rounded to bf16/f16 element by
            # element (cuBLASLt and the CPU GEMM round different sums), so
            # their norm gets 5x the loss tolerance (llama-tiny bf16 on an
            # H100: 1.3e-2 at step 12, losses within 2e-4).
            tolerances = {"loss": tolerance,
                          "grad_norm": tolerance * (1 if case["precision"] == "fp32" else 5)}
            runs = {}
            variants = [("cpu", ["--backend", "cpu"]),
                        ("cuda", ["--backend", "cuda"]),
                        ("cuda-nograph", ["--backend", "cuda", "--no-graph"])]
            if case["precision"] != "fp32":
                # The 16-bit kernels (tensor-core attention, norms, loss, ...)
                # on the same bundle, then with the GEMM epilogues too.
                variants.append(("cuda-half", ["--backend", "cuda", "--half-kernels"]))
                variants.append(("cuda-fast", ["--backend", "cuda", "--half-kernels",
                                               "--gemm-epilogues"]))
                # ... and cuDNN's fused attention instead of Weft's, with
                # the GEMM algorithms timed at load.
                variants.append(("cuda-cudnn", ["--backend", "cuda", "--half-kernels",
                                                "--gemm-epilogues", "--cudnn-attention",
                                                "--gemm-autotune"]))
            else:
                variants.append(("cuda-epilogue", ["--backend", "cuda", "--gemm-epilogues"]))
            if args.quick:
                # Eager replay runs in the profile (--device-times); the
                # 16-bit kernels alone in cuda-fast with the epilogues.
                variants = [v for v in variants
                            if v[0] not in ("cuda-nograph", "cuda-half")]
            if case["kind"] == "multi":
                # The communication is what is new here: the default path
                # and the fastest one.
                variants = [v for v in variants
                            if v[0] in ("cpu", "cuda", "cuda-fast", "cuda-epilogue")]
            else:
                # The bundle's generated kernels instead of the library's (its
                # fatbins, else NVRTC through a kernel cache in $OUT).
                variants.append(("cuda-generated", [
                    "--backend", "cuda", "--generated-kernels", "--kernel-cache",
                    os.path.join(out, "kernel-cache")]))
            for tag, extra in variants:
                runs[tag], text = weft_run(args.tools, bundle, tokens, AGREE_STEPS,
                                           *log(tag), *extra, ranks=ranks)
                if runs[tag] is None:
                    print(f"FAIL {name} {tag}: {text}")
                elif DRY_RUN and tag != "cpu":
                    pass  # the CUDA backend's own lines: nothing to find
                elif tag == "cuda-generated":
                    # "... run generated code: F modules from the bundle's
                    # fatbins, C compiled by NVRTC ..., H from the cache ..."
                    match = re.search(r"run generated code: (\d+) modules from the "
                                      r"bundle's fatbins(.*)", text)
                    print(f"{name} {tag}: {match.group(0) if match else 'no generated-code line'}")
                    if not match or (case["fatbins"] and int(match.group(1)) == 0):
                        print(f"FAIL {name} {tag}: the generated code was not "
                              f"loaded {'from the fatbins' if case['fatbins'] else ''}")
                        runs[tag] = None
                elif tag == "cuda-cudnn":
                    print(f"{name} {tag}: {cudnn_line(text)}")
                    print(f"{name} {tag}: {autotune_line(text)}")
            if any(r is None for r in runs.values()):
                failed += 1
                rows.append((name, "run failed", "", ""))
                continue
            cpu = runs["cpu"]
            worst, ok = {"loss": 0.0, "grad_norm": 0.0}, True
            for tag in runs:
                if tag == "cpu":
                    continue
                ok = ok and len(runs[tag]) == AGREE_STEPS
                for step, (c, g) in enumerate(zip(cpu, runs[tag]), 1):
                    # Dynamic loss scaling: the same skips and scales (a
                    # skipped step reports no grad norm).
                    for key in ("skipped", "loss_scale"):
                        if c.get(key) != g.get(key):
                            ok = False
                            print(f"FAIL {name} {tag} step {step} {key}: cpu "
                                  f"{c.get(key)!r} cuda {g.get(key)!r}")
                    if c.get("skipped") or g.get("skipped"):
                        continue
                    for key in worst:
                        worst[key] = max(worst[key], relative(g[key], c[key]))
                        if relative(g[key], c[key]) > tolerances[key]:
                            ok = False
                            print(f"FAIL {name} {tag} step {step} {key}: cpu "
                                  f"{c[key]!r} cuda {g[key]!r}")
            ok = ok and cpu[-1]["loss"] < cpu[0]["loss"]
            failed += not ok
            rows.append((name, "ok" if ok else "FAIL",
                         f"loss max rel {worst['loss']:.1e} (tol {tolerances['loss']:.0e}), "
                         f"grad norm {worst['grad_norm']:.1e} (tol {tolerances['grad_norm']:.0e})",
                         f"loss {cpu[0]['loss']:.4f} -> {cpu[-1]['loss']:.4f}"))
        else:
            variants = [("cuda", []), ("cuda-nograph", ["--no-graph"]),
                        ("cuda-half", ["--half-kernels"]),
                        ("cuda-fast", ["--half-kernels", "--gemm-epilogues"]),
                        ("cuda-cudnn", ["--half-kernels", "--gemm-epilogues", "--gemm-autotune",
                                        "--cudnn-attention"])]
            if args.quick:  # the default path and the fastest ones only
                variants = [v for v in variants
                            if v[0] in ("cuda", "cuda-fast", "cuda-cudnn")]
            for tag, extra in variants:
                with GpuMemorySampler() as sampler:
                    metrics, text = weft_run(args.tools, bundle, tokens, SPEED_STEPS,
                                             *log(tag), "--backend", "cuda", *extra)
                if metrics is None:
                    print(f"FAIL {name} {tag}: {text}")
                    failed += 1
                    rows.append((f"{name} {tag}", "run failed", "", ""))
                    continue
                if tag == "cuda-cudnn" and not DRY_RUN:
                    print(f"{name} {tag}: {cudnn_line(text)}")
                    print(f"{name} {tag}: {autotune_line(text)}")
                # weft-run's start line: the backend's workspace beside the plan.
                match = re.search(r"device workspace beyond the plan: ([0-9.]+) MiB", text)
                workspace = float(match.group(1)) * 2**20 if match else 0.0
                # Measured by the backend (cudaMemGetInfo, context excluded),
                # after the steps: the plan-fidelity figure.
                match = re.search(r"allocated by the run after the steps: ([0-9.]+) MiB", text)
                allocated = float(match.group(1)) * 2**20 if match else 0.0
                timed = [m["step_time_s"] for m in metrics[SPEED_WARMUP:]]
                step = statistics.median(timed)
                # Host overhead per step (issue 6: < 50 us with graph replay).
                issue = statistics.median(m["issue_s"] for m in metrics[SPEED_WARMUP:])
                finish = statistics.median(m["finish_s"] for m in metrics[SPEED_WARMUP:])
                tok = case["tokens_per_step"] / step
                mfu = case["predicted_mfu"] * case["predicted_step_s"] / step
                fused = "--gemm-epilogues" in extra
                predicted = case["predicted_step_s_epilogues" if fused
                                 else "predicted_step_s"]
                planned = case.get("planned_bytes_epilogues" if fused else "planned_bytes",
                                   case["planned_bytes"])
                # The bundles are planned for h100-1gpu: on another GPU Weft
                # has a preset for, the plan simulated on it too.
                elsewhere = ""
                if cluster and cluster != "h100-1gpu":
                    sim = simulated_ms(args.tools, bundle + (EPILOGUES if fused else ""),
                                       cluster)
                    elsewhere = f", simulated on {cluster} {sim:.1f} ms" if sim else ""
                # Host overhead per step: issue and finish of the same step.
                host = statistics.median(m["issue_s"] + m["finish_s"]
                                         for m in metrics[SPEED_WARMUP:])
                rows.append((f"{name} {tag}", f"{step * 1e3:.1f} ms",
                             f"{tok:,.0f} tok/s, MFU {mfu * 100:.1f}% "
                             f"(predicted {predicted * 1e3:.1f} ms{elsewhere}), host "
                             f"{host * 1e6:.0f} us a step (issue {issue * 1e6:.0f} + "
                             f"finish {finish * 1e6:.0f})",
                             f"GPU mem {sampler.peak_mib / 1024:.2f} GiB, allocated "
                             f"{allocated / 2**30:.2f} GiB "
                             f"({allocated / (planned + workspace):.3f}x the plan and the "
                             f"workspace), plan {planned / 2**30:.2f} GiB + workspace "
                             f"{workspace / 2**30:.2f} GiB, loss "
                             f"{metrics[0]['loss']:.3f} -> {metrics[-1]['loss']:.3f}"))
                json.dump({"case": name, "mode": tag, "step_ms": step * 1e3,
                           "tokens_per_s": tok, "mfu": mfu,
                           "predicted_step_ms": predicted * 1e3,
                           "gpu_mem_peak_mib": sampler.peak_mib,
                           "planned_bytes": planned,
                           "host_s": host,
                           "workspace_bytes": workspace,
                           "allocated_bytes": allocated,
                           "issue_s": issue, "finish_s": finish,
                           "step_times_s": [m["step_time_s"] for m in metrics],
                           "losses": [m["loss"] for m in metrics]},
                          open(os.path.join(out, f"{name}.{tag}.summary.json"), "w"))
    print("== weft-run on the GPU")
    for row in rows:
        print("  ".join(str(c) for c in row))
    print(f"gpu-e2e: {len(rows) - failed} ok, {failed} failed")
    return 1 if failed else 0


def profile(args):
    """Per-instruction time of one step of a `weft-run --trace` taken with
    --device-times (or CUDA_LAUNCH_BLOCKING=1 --no-graph: every launch waited
    for, so host time is device time plus the launch), summed per kind of
    instruction (opcode, kernel, GEMM shape, the backend's note) as
    `weft-inspect fidelity` sums them."""
    result = subprocess.run([os.path.join(args.tools, "weft-inspect"), args.bundle,
                             "fidelity", "--measured", args.trace, "--json"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        print(f"FAIL profile: {result.stderr.strip()}")
        return 1
    d = json.loads(result.stdout)
    total = d["measured_s"] * 1e3
    print(f"step {d['step']}: {total:.1f} ms in {d['instructions']} instructions "
          f"({d['skipped']['count']} run inside others)")
    for kind in d["kinds"][:args.top]:
        ms = kind["measured_s"] * 1e3
        print(f"{ms:10.2f} ms {100 * ms / total:5.1f}% x{kind['count']:<4d} {kind['kind']}")
    return 0


def fidelity(args):
    """The cost model fitted to one profiled step (weft-inspect fidelity on a
    --device-times trace, which writes a calibrated cluster file), then
    every throughput bundle simulated on that cluster against its step as
    timed in `mode` (check's summaries in $OUT): out-of-sample for every
    bundle but the profiled one."""
    out = os.environ.get("OUT", "gpu-out")
    inspect = os.path.join(args.tools, "weft-inspect")
    calibrated = os.path.join(out, f"calibrated-{args.mode}.json")
    # Fitted from this GPU's preset where Weft has one (an H200's bandwidth
    # is not the bundles' h100-1gpu's), else the bundle's cluster.
    cluster = device_cluster()
    fitted = subprocess.run([inspect, args.bundle, "fidelity", "--measured", args.trace,
                             "--write-cluster", calibrated] +
                            (["--cluster", cluster] if cluster else []),
                            capture_output=True, text=True)
    print(fitted.stdout, end="")
    if fitted.returncode != 0:
        print(f"FAIL fidelity: {fitted.stderr.strip()}")
        return 1
    cases = json.load(open(os.path.join(args.dir, "cases.json")))
    failed = 0
    print(f"== plan fidelity with the constants fitted to {os.path.basename(args.bundle)} "
          f"({args.mode}; issue 6 target: within 3%)")
    for name, case in cases.items():
        summary = os.path.join(out, f"{name}.{args.mode}.summary.json")
        if not case["kind"].startswith("speed") or not os.path.exists(summary):
            continue
        measured = json.load(open(summary))["step_ms"]
        # The modes with GEMM epilogues timed the bundle's twin.
        bundle = os.path.join(args.dir, name) + (
            EPILOGUES if args.mode in ("cuda-fast", "cuda-cudnn") else "")
        timeline = subprocess.run([inspect, bundle, "timeline",
                                   "--cluster", calibrated, "--json"],
                                  capture_output=True, text=True)
        if timeline.returncode != 0:
            print(f"FAIL {name}: {timeline.stderr.strip()}")
            failed += 1
            continue
        simulated = json.loads(timeline.stdout)["simulated_step_time_s"] * 1e3
        sample = "in-sample" if os.path.samefile(bundle, args.bundle) else "out-of-sample"
        print(f"{name} {args.mode}: measured {measured:.1f} ms, simulated with the fitted "
              f"constants {simulated:.1f} ms ({(simulated / measured - 1) * 100:+.1f}%, "
              f"{sample}), the bundle's prediction "
              f"{case['predicted_step_s_epilogues' if bundle.endswith(EPILOGUES) else 'predicted_step_s'] * 1e3:.1f} ms")
    return 1 if failed else 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="stage", required=True)
    s = sub.add_parser("stage")
    s.add_argument("--build", default="build")
    s.add_argument("--out", default=".gpu/e2e")
    c = sub.add_parser("check")
    c.add_argument("--tools", default=".gpu/tools")
    c.add_argument("dir", nargs="?", default=".gpu/e2e")
    c.add_argument("--only", choices=["agree", "speed"])
    c.add_argument("--quick", action="store_true",
                   help="agree without the --no-graph and --half-kernels-only runs; time "
                        "only the default path, cuda-fast and cuda-cudnn, and not the 1.5B "
                        "bundle")
    pr = sub.add_parser("profile")
    pr.add_argument("bundle")
    pr.add_argument("trace")
    pr.add_argument("--top", type=int, default=25)
    pr.add_argument("--tools", default=".gpu/tools")
    f = sub.add_parser("fidelity")
    f.add_argument("bundle")
    f.add_argument("trace")
    f.add_argument("--mode", required=True,
                   help="the check mode whose timed steps to compare (cuda, cuda-fast, ...)")
    f.add_argument("--tools", default=".gpu/tools")
    f.add_argument("--dir", default=".gpu/e2e")
    args = parser.parse_args()
    if args.stage == "profile":
        return profile(args)
    if args.stage == "fidelity":
        return fidelity(args)
    if args.stage == "stage":
        stage(args)
        return 0
    if not os.path.exists(os.path.join(args.dir, "cases.json")):
        print(f"SKIP: nothing staged in {args.dir} (scripts/gpu-prepare.sh)")
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
