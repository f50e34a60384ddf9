#!/usr/bin/env python3
"""Odd inputs against `weftc compile`, the verifier and the runtime (CPU).

    scripts/compile-mutate.py [--build build] [--mutations 200] [--seed 1]
                              [--work /tmp/weft-compile-mutate] [--keep-failures]

`weftc compile` takes a model (a preset or a Hugging Face config.json), a
cluster file and a few dozen flags, and promises either one error line and
no bundle, or a bundle that verifies and runs (docs/cli.md). This starts from
valid compiles of small models on small CPU clusters and changes one thing:

  cluster   a number (0, -1, x2, /2, huge, tiny, random), a string, a key
            deleted or added, a type changed;
  model     the same on a config.json of a tiny GPT-2 or LLaMA;
  flags     a flag's value (0, -1, huge, not a number, empty, a fraction,
            another value it takes), a flag dropped, or a flag added with a
            value (any of the dimension, schedule, ZeRO, precision, loss-scale,
            optimizer, offload, bucket and kernel flags).

Every outcome must be one of:

  REJECTED  a non-zero exit, one distinct `weftc` line on stderr naming the
            reason, and no bundle directory left behind;
  RAN       a bundle that `weft-inspect verify` accepts and that `weft-run`
            trains for 2 steps (plans of at most 4 ranks; larger ones are
            verified only: VERIFIED);
  CAUGHT    a bundle that verifies, and weft-run stops it in one line (a
            non-finite loss under an absurd learning rate, ...).

Anything else -- a crash, a hang, an exit 0 without a bundle, several error
lines, a bundle the verifier refuses, weft-run failing with no line or
crashing -- is a FAIL line (the inputs kept with --keep-failures). Prints
every distinct rejection reason at the end, so vague ones can be read
together. Ends with `N passed, N failed`; exits 1 on any failure. Not a
ctest (random, minutes).
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import at, is_number, leaves, new_number, show  # noqa: E402
import mutation  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "test/lit/weftc/Inputs"

# name: (model: a preset or an Inputs/ config, cluster file, flags)
BASES = {
    "gpt2-serial": ("gpt2-tiny", "cpu-sim-1-host.json",
                    ["--dp", "1", "--micro-batch", "2"]),
    "gpt2-dp2-zero3": ("gpt2-tiny", "cpu-sim-2-host.json",
                       ["--dp", "2", "--zero", "3"]),
    "llama-tp2-pp2": ("llama-tiny-4layers.json", "cpu-sim-4.json",
                      ["--tp", "2", "--pp", "2", "--dp", "1",
                       "--schedule", "1f1b"]),
    "gpt2-4l-search": ("gpt2-tiny-4layers.json", "cpu-sim-4.json", []),
    "llama-odd-bf16": ("llama-odd.json", "cpu-sim-2-host.json",
                       ["--precision", "bf16", "--dp", "2", "--zero", "1"]),
    "gpt2-fp16-offload": ("gpt2-tiny", "cpu-sim-1-host.json",
                          ["--precision", "fp16", "--offload", "optimizer",
                           "--dp", "1"]),
}
COMMON = {"--global-batch": "4", "--seq-len": "16"}
# Flags a mutation may add, with values worth trying.
EXTRA_FLAGS = {
    "--tp": ["1", "2", "3", "4", "8"], "--pp": ["1", "2", "3", "4"],
    "--dp": ["1", "2", "3", "4"], "--micro-batch": ["1", "2", "3", "4", "8"],
    "--zero": ["0", "1", "2", "3", "4"],
    "--schedule": ["gpipe", "1f1b", "interleaved", "zigzag"],
    "--virtual-stages": ["1", "2", "3"],
    "--recompute": ["none", "selective", "full", "some"],
    "--sequence-parallel": ["on", "off", "yes"],
    "--precision": ["fp32", "bf16", "fp16", "fp8"],
    "--loss-scale": ["0", "1", "1024", "-1", "1e-30"],
    "--initial-loss-scale": ["1", "65536", "0", "1e300"],
    "--loss-scale-window": ["1", "1000", "0"],
    "--lr": ["3e-4", "0", "-1", "1e30", "nan"],
    "--min-lr": ["0", "1", "-1"], "--warmup-steps": ["0", "-1", "100000000"],
    "--decay-steps": ["0", "1", "-5"], "--weight-decay": ["0", "-1", "10"],
    "--grad-clip": ["0", "-1", "1e-30", "inf"],
    "--offload": ["none", "optimizer", "params"],
    "--bucket-bytes": ["0", "1", "4096", "-5", "1099511627776"],
    "--prefetch-depth": ["0", "1", "2", "100"],
    "--zero3-persist-threshold": ["-1", "0", "1", "100000000"],
    "--zero3-max-live-bytes": ["0", "1", "4096"],
    "--max-live-grad-bytes": ["0", "1", "4096"],
    "--steps-per-plan": ["1", "2", "0"],
    "--global-batch": ["1", "2", "3", "8", "1048576"],
    "--seq-len": ["1", "8", "17", "4096", "1048576"],
    "--gemm-epilogues": None, "--residual-norms": None,
}
ODD_VALUES = ["0", "-1", "1099511627776", "9223372036854775807", "abc", "",
              "1.5", "2x", "1e3"]


def mutate_json(rng, document):
    """Changes one thing in `document` (a dict) in place; says what."""
    items = list(leaves(document))
    kind = rng.choice(["number", "number", "number", "string", "delete",
                       "add", "type"])
    numbers = [(p, v) for p, v in items if is_number(v)]
    if kind == "number" and numbers:
        path, value = rng.choice(numbers)
        new = new_number(rng, value, [1e-30])
        at(document, path[:-1])[path[-1]] = new
        return f"{show(path)}: {value} -> {new}"
    if kind == "string":
        strings = [(p, v) for p, v in items if isinstance(v, str)]
        if strings:
            path, value = rng.choice(strings)
            new = rng.choice(["", value + "x", value.upper(), "gelu",
                              "silu", "relu", "llama", "gpt2"])
            at(document, path[:-1])[path[-1]] = new
            return f"{show(path)}: {value!r} -> {new!r}"
    if kind == "delete":
        keys = sorted({p[:i] for p, _ in items for i in range(1, len(p) + 1)
                       if isinstance(p[i - 1], str)}, key=show)
        path = rng.choice(keys)
        del at(document, path[:-1])[path[-1]]
        return f"{show(path)} deleted"
    if kind == "add":
        key = rng.choice(["extra", "tie_word_embeddings", "num_key_value_heads",
                          "rope_scaling", "nodes", "gpus_per_node",
                          "sliding_window", "attention_bias"])
        value = rng.choice([1, 0, -1, True, "x", None, {"type": "linear"}])
        document[key] = value
        return f"{key} = {value!r} added"
    path, value = rng.choice(items)
    new = rng.choice([str(value), None, [value], {"v": value}, True])
    at(document, path[:-1])[path[-1]] = new
    return f"{show(path)}: {value!r} -> {new!r}"


def mutate_flags(rng, flags):
    """Changes one flag of the dict `flags` (flag -> value or None)."""
    kind = rng.choice(["value", "value", "drop", "add", "add", "add"])
    if kind == "value":
        flag = rng.choice([f for f, v in flags.items() if v is not None])
        old = flags[flag]
        choices = EXTRA_FLAGS.get(flag) or []
        flags[flag] = rng.choice(ODD_VALUES + choices)
        return f"{flag} {old!r} -> {flags[flag]!r}"
    if kind == "drop":
        flag = rng.choice(sorted(flags))
        del flags[flag]
        return f"{flag} dropped"
    flag = rng.choice(sorted(EXTRA_FLAGS))
    values = EXTRA_FLAGS[flag]
    flags[flag] = rng.choice(values) if values else None
    return f"{flag} {flags[flag] or ''} added".replace("  ", " ")


class Sweep:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.build).resolve() / "bin"
        self.work = Path(args.work)
        self.reasons = {}

    def compile(self, model, cluster, flags, out):
        cmd = [str(self.bin / "weftc"), "compile", "--model", model,
               "--cluster", str(cluster)]
        for flag, value in flags.items():
            cmd += [flag] if value is None else [flag, value]
        cmd += ["-o", str(out)]
        try:
            return cmd, subprocess.run(cmd, capture_output=True, text=True,
                                       timeout=180)
        except subprocess.TimeoutExpired:
            return cmd, None

    def run(self, bundle, ranks):
        return mutation.weft_run(self.bin, bundle, self.work / "tokens.bin",
                                 ranks, ["--steps", "2"], 20, 180)

    def one(self, index, rng):
        base = rng.choice(list(BASES))
        model, cluster_name, base_flags = BASES[base]
        case = self.work / f"case-{index}"
        shutil.rmtree(case, ignore_errors=True)
        case.mkdir()
        flags = dict(COMMON)
        i = 0
        while i < len(base_flags):
            flags[base_flags[i]] = base_flags[i + 1]
            i += 2
        cluster = json.loads((INPUTS / cluster_name).read_text())
        model_doc = None
        if model.endswith(".json"):
            model_doc = json.loads((INPUTS / model).read_text())
        where = rng.random()
        if where < 0.35:
            what = "cluster " + mutate_json(rng, cluster)
        elif where < 0.55 and model_doc is not None:
            what = "model " + mutate_json(rng, model_doc)
        else:
            what = "flags " + mutate_flags(rng, flags)
        (case / "cluster.json").write_text(json.dumps(cluster, indent=1))
        if model_doc is not None:
            (case / "config.json").write_text(json.dumps(model_doc, indent=1))
            model = str(case / "config.json")
        what = f"{base}: {what}"
        bundle = case / "bundle"
        cmd, result = self.compile(model, case / "cluster.json", flags, bundle)
        (case / "command").write_text(" ".join(map(repr, cmd)) + "\n")
        if result is None:
            return "FAIL", f"{what}: weftc hung (180 s)"
        stderr = [l for l in result.stderr.splitlines() if l.strip()]
        if result.returncode < 0 or result.returncode >= 128:
            return "FAIL", f"{what}: weftc crashed (exit " \
                           f"{result.returncode}): {result.stderr[-400:]}"
        if result.returncode != 0:
            if len(set(stderr)) != 1:
                return "FAIL", f"{what}: exit {result.returncode} with " \
                               f"{len(set(stderr))} distinct stderr lines: " \
                               f"{result.stderr.strip()[-400:]}"
            if bundle.exists():
                return "FAIL", f"{what}: rejected ({stderr[0][:160]}) but " \
                               f"{bundle.name}/ was left behind"
            reason = re.sub(r"/tmp/\S+", "PATH", stderr[0])
            reason = re.sub(r"-?\d[\d.e+-]*", "N", reason)
            self.reasons.setdefault(reason, what)
            return "REJECTED", f"{what}: {stderr[0][:220]}"
        if not (bundle / "plan.json").exists():
            return "FAIL", f"{what}: weftc exited 0 without a bundle"
        verify = subprocess.run([str(self.bin / "weft-inspect"), str(bundle),
                                 "verify"], capture_output=True, text=True,
                                timeout=300)
        if verify.returncode != 0:
            return "FAIL", f"{what}: weftc wrote a bundle the verifier " \
                           f"refuses: {(verify.stdout + verify.stderr)[:400]}"
        plan = json.loads((bundle / "plan.json").read_text())
        mesh = plan.get("mesh", {})
        ranks = 1
        for key in ("dp", "pp", "tp"):
            ranks *= int(mesh.get(key, 1))
        if ranks > 4:
            return "VERIFIED", f"{what} ({ranks} ranks, not run)"
        run = self.run(bundle, ranks)
        if run is None:
            return "FAIL", f"{what}: weft-run hung (180 s)"
        errors = mutation.error_lines(run.stderr, "weft-run: error:")
        if mutation.crashed(run):
            return "FAIL", f"{what}: weft-run crashed (exit " \
                           f"{run.returncode}): {run.stderr.strip()[-400:]}"
        if run.returncode == 0:
            return "RAN", f"{what} ({ranks} ranks)"
        if len(errors) != 1:
            return "FAIL", f"{what}: weft-run exited {run.returncode} with " \
                           f"{len(errors)} error lines: " \
                           f"{run.stderr.strip()[-400:]}"
        return "CAUGHT", f"{what}: {errors[0][:200]}"

    def main(self):
        mutation.fresh_work_dir(self.work, self.bin)
        for name, (model, cluster, flags) in BASES.items():  # valid bases
            if model.endswith(".json"):
                model = str(INPUTS / model)
            base = dict(COMMON)
            base.update(zip(flags[::2], flags[1::2]))
            _, result = self.compile(model, INPUTS / cluster, base,
                                     self.work / f"base-{name}")
            if result is None or result.returncode != 0:
                sys.exit(f"base {name} does not compile: "
                         f"{result.stderr if result else 'hung'}")
        def report():
            print("distinct rejection reasons (numbers and paths masked):")
            for reason, example in sorted(self.reasons.items()):
                print(f"  {reason}    <- {example}")
        return mutation.run_cases(
            self.args, self.one, lambda i: self.work / f"case-{i}",
            {"REJECTED": "rejected", "RAN": "ran", "VERIFIED": "verified",
             "CAUGHT": "caught"}, report)


def main():
    sys.exit(Sweep(mutation.parse_args(
        __doc__, "/tmp/weft-compile-mutate")).main())

if __name__ == "__main__":
    main()
