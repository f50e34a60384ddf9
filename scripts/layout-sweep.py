#!/usr/bin/env python3
"""Random parallel layouts of `weftc compile` against the serial run (CPU).

    scripts/layout-sweep.py [--build build] [--cases 40] [--seed 1]
                            [--steps 10] [--work /tmp/weft-sweep] [--keep]

The e2e tests (test/e2e/compile-parallel.sh) check a fixed list of layouts;
this draws combinations of every dimension `weftc compile` takes -- DP, TP,
PP (GPipe, 1F1B, interleaved), ZeRO 0-3 and its knobs, sequence parallelism,
micro-batch and accumulation, recompute, precision, optimizer offload, small
buckets, GEMM epilogues and residual norms -- over the tiny models, trains
each on the CPU backend (mpirun, one process per rank) and requires every
step's loss and gradient norm to match the serial run of the same model,
precision and global batch: relative 1e-5 / 1e-4 in fp32 (as in
compile-parallel.sh); in bf16/fp16 2e-3 for the loss and 15% for the
gradient norm (see mismatch()), or twice the serial run's own distance from
the fp32 serial run at that step where that is more. Half the
passing cases (--continue-fraction) are also trained half way with a
checkpoint and continued: resumed under the same bundle (every step
bit-identical to the straight run; the resumed half sometimes on the
cpu-staged backend and offloading random state groups between steps, which
must not change a bit either), or converted by weft-reshard to another
random layout (and now and then precision) of the same model and resumed
there (the serial run's tolerance). A quarter of the cases
(--planner-fraction) leave some of DP, ZeRO, micro-batch, recompute and the
schedule to the planner, whose choices must lower and train like any. A layout
weftc refuses must say why in one `weftc: error:` line and exit non-zero
(REFUSED, not a failure); a crash, a hang (timeout), a malformed refusal or a
mismatch is a FAIL line with the command that reproduces it. Ends with two
`fidelity:` lines (over the compiled cases, the planner's step time against
weft-inspect's simulation of the bundle and its peak memory against the
plan's: median and worst relative error, reported, not judged) and `N
passed, N refused, N failed`; exits 1 on any failure.

Not a ctest (random, minutes long): run it after changes to the lowering,
the schedule or the runtime (docs/benchmarks.md records runs).
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "test/lit/weftc/Inputs"
MODELS = ["gpt2-tiny", "llama-tiny", "gpt2-odd",
          str(INPUTS / "gpt2-tiny-4layers.json"),
          str(INPUTS / "llama-tiny-4layers.json"),
          str(INPUTS / "llama-odd.json")]
SEQ = 32
# Written into the work directory: 4 KV heads and 4 layers (so TP 4, PP 4 and
# interleaving apply), an untied GPT-2 with an odd vocabulary, a tied LLaMA.
GENERATED = {
    "llama-mha-4l": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 4, "max_position_embeddings": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "initializer_range": 0.02, "tie_word_embeddings": True,
        "attention_bias": False, "mlp_bias": False},
    "gpt2-untied-4l": {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "vocab_size": 300, "n_positions": 128, "n_embd": 64, "n_layer": 4,
        "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "initializer_range": 0.02,
        "tie_word_embeddings": False},
}


def parse_bytes(text):
    """weft-inspect's sizes: '3.92 MiB', '161.12 KiB', '8 B'."""
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20,
                            "GiB": 1 << 30, "TiB": 1 << 40}[unit]


def cluster_file(work, ranks):
    """A cpu-sim cluster of `ranks` GPUs on one node, with a host (offload)."""
    path = work / f"cluster-{ranks}.json"
    if not path.exists():
        cluster = json.loads((INPUTS / "cpu-sim-8-host.json").read_text())
        cluster["name"] = f"cpu-sim-{ranks}-host"
        cluster["gpus_per_node"] = ranks
        path.write_text(json.dumps(cluster))
    return path


def draw(rng):
    """One random layout: (ranks, global batch, precision, flags)."""
    while True:
        dp, tp, pp = (rng.choice([1, 1, 2, 4]) for _ in range(3))
        if 1 < dp * tp * pp <= 8:
            break
    batch = rng.choice([4, 8])
    per_replica = batch // dp
    micro = rng.choice([m for m in (1, 2, 4) if per_replica % m == 0])
    flags = ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
             "--micro-batch", str(micro)]
    if pp > 1:
        schedule = rng.choice(["gpipe", "1f1b", "interleaved"])
        flags += ["--schedule", schedule]
        if schedule == "interleaved":
            flags += ["--virtual-stages", "2"]
    if tp > 1 and rng.random() < 0.5:
        flags += ["--sequence-parallel", "on"]
    zero = rng.choice([0, 1, 2, 3]) if dp > 1 else 0
    flags += ["--zero", str(zero)]
    if zero == 3 and rng.random() < 0.4:
        flags += ["--zero3-persist-threshold", str(rng.choice([0, 100, 1000]))]
    if zero == 3 and rng.random() < 0.3:
        flags += ["--zero3-max-live-bytes", str(rng.choice([40000, 70000]))]
    if zero == 3 and rng.random() < 0.3:
        flags += ["--prefetch-depth", str(rng.choice([1, 2, 3]))]
    if zero == 2 and rng.random() < 0.3:
        flags += ["--max-live-grad-bytes", "20000"]
    if zero < 3 and rng.random() < 0.3:
        flags += ["--bucket-bytes", str(rng.choice([4096, 65536]))]
    flags += ["--recompute", rng.choice(["none", "none", "selective", "full"])]
    precision = rng.choice(["fp32", "fp32", "bf16", "fp16"])
    if precision == "fp16":
        flags += ["--loss-scale", "1024"]
    if rng.random() < 0.25:
        flags += ["--offload", "optimizer"]
    if rng.random() < 0.4:
        flags.append("--gemm-epilogues")
    if rng.random() < 0.4:
        flags.append("--residual-norms")
    return dp * tp * pp, batch, precision, flags


def leave_to_planner(rng, flags):
    """`flags` without some of the dimensions `weftc compile` searches when
    they are not given (DP, ZeRO, micro-batch, recompute, the schedule), so
    that the planner's own choices are lowered and trained too."""
    def value(flag):
        return flags[flags.index(flag) + 1] if flag in flags else None
    droppable = ["--dp", "--micro-batch", "--recompute"]
    # Knobs that only apply to a ZeRO stage or a schedule keep theirs.
    if not any(f in flags for f in ("--zero3-persist-threshold",
                                    "--zero3-max-live-bytes",
                                    "--prefetch-depth",
                                    "--max-live-grad-bytes")):
        droppable.append("--zero")
    if value("--schedule") not in (None, "interleaved"):
        droppable.append("--schedule")
    dropped = {f for f in droppable if rng.random() < 0.5} or {"--dp"}
    kept = []
    i = 0
    while i < len(flags):
        if flags[i] in dropped:
            i += 2
            continue
        kept.append(flags[i])
        i += 1
    return kept


class Sweep:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.build).resolve() / "bin"
        self.work = Path(args.work)
        self.serial = {}  # (model, precision, batch) -> metrics
        self.step_errors, self.memory_errors = [], []

    def compile(self, name, model, ranks, batch, precision, flags):
        cmd = [str(self.bin / "weftc"), "compile", "--model", model,
               "--cluster", str(cluster_file(self.work, ranks)),
               "--global-batch", str(batch), "--seq-len", str(SEQ),
               "--lr", "3e-3", "--warmup-steps", "2", "--decay-steps", "20",
               "--precision", precision] + flags + ["-o", str(self.work / name)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        return cmd, run

    def train(self, name, ranks, steps=None, extra=(), metrics_name=None):
        metrics = self.work / f"{metrics_name or name}.jsonl"
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
               str(ranks), str(self.bin / "weft-run"), str(self.work / name),
               "--data", str(self.work / "tokens.bin"),
               "--steps", str(steps or self.args.steps), "--metrics",
               str(metrics), "--quiet"] + list(extra)
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            return cmd, run, None
        return cmd, run, [json.loads(l) for l in metrics.read_text().splitlines()]

    def serial_run(self, model, precision, batch):
        key = (model, precision, batch)
        if key not in self.serial:
            name = f"serial-{len(self.serial)}"
            flags = ["--dp", "1", "--micro-batch", "4"]
            if precision == "fp16":
                flags += ["--loss-scale", "1024"]
            cmd, run = self.compile(name, model, 1, batch, precision, flags)
            if run.returncode != 0:
                sys.exit(f"serial compile failed: {shlex.join(cmd)}\n{run.stderr}")
            cmd, run, metrics = self.train(name, 1)
            if metrics is None:
                sys.exit(f"serial run failed: {shlex.join(cmd)}\n{run.stderr}")
            self.serial[key] = metrics
        return self.serial[key]

    @staticmethod
    def refusal(run):
        """The one `weftc: error:` line of a refused compile, else None."""
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        if run.returncode > 0 and len(lines) == 1 and \
                lines[0].startswith("weftc: error:"):
            return lines[0]
        return None

    @staticmethod
    def mismatch(want, got, reference=None, first_step=1):
        """The first step where `got` leaves the serial run's tolerance.
        `reference`, for half precision: the fp32 serial run; a step may be
        off the serial run by twice as much as the serial run is off it.
        The gradient norm's base tolerance in half precision is 15%: at a
        gradient spike of the tiny models the rounding is amplified (a TP 4
        fp16 run was 8% off the serial one at its step 8 and 2e-4 at step 9,
        while its fp32 twin matched the fp32 serial run to 1e-5 there); the
        loss, and the fp32 cases, are what catch a wrong layout."""
        half = reference is not None
        loss_tol, norm_tol = (2e-3, 0.15) if half else (1e-5, 1e-4)
        if len(got) != len(want):
            return f"{len(got)} steps, serial {len(want)}"
        for step, (x, y) in enumerate(zip(want, got), first_step):
            rel = abs(x["loss"] - y["loss"]) / abs(x["loss"])
            norm = abs(x["grad_norm"] - y["grad_norm"]) / x["grad_norm"]
            step_loss_tol, step_norm_tol = loss_tol, norm_tol
            if half:
                r = reference[step - 1]
                step_loss_tol = max(loss_tol,
                                    2 * abs(x["loss"] - r["loss"]) / r["loss"])
                step_norm_tol = max(norm_tol, 2 * abs(
                    x["grad_norm"] - r["grad_norm"]) / r["grad_norm"])
            if not rel <= step_loss_tol or not norm <= step_norm_tol:
                return (f"step {step} loss {y['loss']} (serial {x['loss']}), "
                        f"grad norm {y['grad_norm']} (serial "
                        f"{x['grad_norm']})")
        return None

    def continuation(self, rng, model, batch, precision, name, ranks,
                     straight, want):
        """Half the steps under this layout with a checkpoint, then the rest
        resumed: under the same bundle (bit-identical to the straight run)
        or, resharded by weft-reshard, under another layout (the serial
        run's tolerance). Returns a failure text or None, and what ran."""
        half_steps = self.args.steps // 2
        ck = self.work / f"{name}.ck"
        _, run, first = self.train(name, ranks, half_steps,
                                   ["--checkpoint-dir", str(ck)],
                                   f"{name}-first")
        if first is None:
            return f"first {half_steps} steps exited {run.returncode}: " \
                   f"{run.stderr.strip()[-400:]}", "resume"
        if rng.random() < 0.5:
            # The resumed half may run through the staged backend's copies
            # and offload state groups between steps: neither changes a bit.
            extra = ["--checkpoint-dir", str(ck), "--resume"]
            if rng.random() < 0.5:
                extra += ["--backend", "cpu-staged"]
            if rng.random() < 0.4:
                groups = [g for g in ("params", "master_params",
                                      "optimizer_states", "gradients",
                                      "activations", "other")
                          if rng.random() < 0.5] or ["all"]
                extra += ["--offload-between-steps", ",".join(groups),
                          "--offload-to", rng.choice(["pinned", "pageable"])]
            what = " ".join(["resume"] + extra[3:])
            _, run, rest = self.train(name, ranks, None, extra, f"{name}-rest")
            if rest is None:
                return f"resume exited {run.returncode}: " \
                       f"{run.stderr.strip()[-400:]}", what
            def key(metrics):
                return [(m["step"], m["loss"], m["grad_norm"]) for m in metrics]
            if key(first + rest) != key(straight):
                return "the resumed run differs from the straight one", what
            return None, what
        # Another layout of the same model and batch; sometimes in another
        # precision (the fp32 master weights carry over).
        target_precision = precision
        if rng.random() < 0.3:
            target_precision = rng.choice(
                [p for p in ("fp32", "bf16", "fp16") if p != precision])
        for attempt in range(20):
            ranks_b, batch_b, precision_b, flags_b = draw(rng)
            if batch_b != batch:
                continue
            if "--loss-scale" in flags_b:  # drawn for fp16
                at = flags_b.index("--loss-scale")
                del flags_b[at:at + 2]
            if target_precision == "fp16":
                flags_b += ["--loss-scale", "1024"]
            target = f"{name}-to"
            cmd, run = self.compile(target, model, ranks_b, batch,
                                    target_precision, flags_b)
            if run.returncode == 0:
                break
            if not self.refusal(run):
                return f"weftc exited {run.returncode} for the reshard " \
                       f"target: {run.stderr.strip()[-400:]}\n  " \
                       f"{shlex.join(cmd)}", "reshard"
        else:
            return None, "reshard (no target layout compiled)"
        what = f"reshard to {target_precision} {' '.join(flags_b)}"
        out = self.work / f"{target}.ck"
        cmd = [str(self.bin / "weft-reshard"), str(self.work / name),
               str(ck / f"step-{half_steps}"), str(self.work / target),
               str(out)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            return f"weft-reshard exited {run.returncode}: " \
                   f"{run.stderr.strip()[-400:]}\n  {shlex.join(cmd)}", what
        _, run, rest = self.train(target, ranks_b, None,
                                  ["--checkpoint-dir", str(out), "--resume"],
                                  f"{target}-rest")
        if rest is None:
            return f"resume after the reshard exited {run.returncode}: " \
                   f"{run.stderr.strip()[-400:]}", what
        # Judged against the serial run of the half precision involved, if
        # any (the first half ran in one precision, the second in another).
        judge = precision if precision != "fp32" else target_precision
        problem = self.mismatch(
            self.serial_run(model, judge, batch)[half_steps:], rest,
            self.reference(model, judge, batch), half_steps + 1)
        if problem:
            return f"after the reshard: {problem}", what
        if not self.args.keep:
            shutil.rmtree(self.work / target, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
        return None, what

    def fidelity(self, name, label):
        """The planner's step time and peak memory against weft-inspect's
        simulation and memory plan of the compiled bundle (reported, not
        judged: the tiny models on cpu-sim clusters are latency-bound)."""
        run = subprocess.run([str(self.bin / "weft-inspect"),
                              str(self.work / name), "summary"],
                             capture_output=True, text=True, timeout=120)
        step = re.search(r"predicted step: ([\d.]+) ms.*simulated step "
                         r"([\d.]+) ms", run.stdout)
        if step:
            planned, simulated = map(float, step.groups())
            self.step_errors.append((planned / simulated - 1, label))
        # The planner predicts the peak of the fullest stage: compared with
        # the largest role's plan.
        pairs = [(parse_bytes(planned), parse_bytes(predicted))
                 for planned, predicted in re.findall(
                     r"planned ([\d.]+ \w+) \(.*\), planner predicted "
                     r"([\d.]+ \w+)", run.stdout)]
        if pairs:
            planned = max(p for p, _ in pairs)
            predicted = max(q for _, q in pairs)
            self.memory_errors.append((predicted / planned - 1, label))

    def report_fidelity(self):
        for what, errors in (("step time, planner / simulator",
                              self.step_errors),
                             ("peak memory, planner / plan (largest role)",
                              self.memory_errors)):
            if not errors:
                continue
            errors.sort(key=lambda e: abs(e[0]))
            median = abs(errors[len(errors) // 2][0])
            worst = errors[-1]
            print(f"fidelity: {what}: {len(errors)} values, median |error| "
                  f"{median:.1%}, worst {worst[0]:+.1%} ({worst[1]})")

    def reference(self, model, precision, batch):
        """The fp32 serial run a half-precision case's noise is judged by."""
        if precision == "fp32":
            return None
        return self.serial_run(model, "fp32", batch)

    def case(self, index, rng):
        model = rng.choice(MODELS)
        ranks, batch, precision, flags = draw(rng)
        planned = rng.random() < self.args.planner_fraction
        if planned:
            flags = leave_to_planner(rng, flags)
        name = f"case-{index}"
        label = (f"{Path(model).stem} {precision} batch {batch} "
                 f"{' '.join(flags)}")
        cmd, run = self.compile(name, model, ranks, batch, precision, flags)
        if run.returncode != 0:
            if line := self.refusal(run):
                return "REFUSED", f"{label}: {line}"
            return "FAIL", (f"{label}: weftc exited {run.returncode}: "
                            f"{run.stderr.strip()[-600:]}\n  {shlex.join(cmd)}")
        if planned:  # what the planner chose, from the bundle's config
            config = json.loads((self.work / name / "plan.json").read_text())
            config = config["config"]
            label += (f" (planned: dp {config['dp']} zero {config['zero']} "
                      f"micro-batch {config['micro_batch']} x "
                      f"{config['grad_accum']} recompute "
                      f"{config['recompute']}"
                      f"{' ' + config['schedule'] if 'schedule' in config else ''})")
        self.fidelity(name, label)
        want = self.serial_run(model, precision, batch)
        try:
            train_cmd, run, got = self.train(name, ranks)
        except subprocess.TimeoutExpired:
            return "FAIL", f"{label}: weft-run timed out\n  {shlex.join(cmd)}"
        if got is None:
            return "FAIL", (f"{label}: weft-run exited {run.returncode}: "
                            f"{run.stderr.strip()[-600:]}\n  {shlex.join(cmd)}")
        problem = self.mismatch(want, got,
                                self.reference(model, precision, batch))
        if problem:
            return "FAIL", f"{label}: {problem}\n  {shlex.join(cmd)}"
        worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"])
                    for x, y in zip(want, got))
        then = ""
        if rng.random() < self.args.continue_fraction:
            problem, then = self.continuation(rng, model, batch, precision,
                                              name, ranks, got, want)
            if problem:
                return "FAIL", (f"{label}: {then}: {problem}\n  "
                                f"{shlex.join(cmd)}")
            then = f"; then {then}"
        if not self.args.keep:
            shutil.rmtree(self.work / name, ignore_errors=True)
            shutil.rmtree(self.work / f"{name}.ck", ignore_errors=True)
        return "PASS", (f"{label}: {ranks} ranks, max loss difference "
                        f"{worst:.1e}{then}")

    def run(self):
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        subprocess.run([str(self.bin / "weft-make-tokens"),
                        str(ROOT / "data/corpus.txt"),
                        str(self.work / "tokens.bin")],
                       check=True, capture_output=True)
        for name, config in GENERATED.items():
            path = self.work / f"{name}.json"
            path.write_text(json.dumps(config))
            MODELS.append(str(path))
        rng = random.Random(self.args.seed)
        counts = {"PASS": 0, "REFUSED": 0, "FAIL": 0}
        start = time.time()
        for index in range(self.args.cases):
            status, text = self.case(index, rng)
            counts[status] += 1
            print(f"{status}: [{index}] {text}", flush=True)
        self.report_fidelity()
        print(f"seed {self.args.seed}, {time.time() - start:.0f} s: "
              f"{counts['PASS']} passed, {counts['REFUSED']} refused, "
              f"{counts['FAIL']} failed")
        return 1 if counts["FAIL"] else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.environ.get("WEFT_BUILD_DIR", "build"))
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--work", default="/tmp/weft-sweep")
    parser.add_argument("--planner-fraction", type=float, default=0.25,
                        help="cases that leave some dimensions to the planner")
    parser.add_argument("--continue-fraction", type=float, default=0.5,
                        help="cases also trained half way, checkpointed and "
                             "resumed (same layout) or resharded (another)")
    parser.add_argument("--keep", action="store_true",
                        help="keep passing cases' bundles")
    sys.exit(Sweep(parser.parse_args()).run())


if __name__ == "__main__":
    main()
