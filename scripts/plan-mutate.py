#!/usr/bin/env python3
"""Mutated plans against the loader, the verifier and the runtime (CPU).

    scripts/plan-mutate.py [--build build] [--mutations 200] [--seed 1]
                           [--work /tmp/weft-mutate] [--keep-failures]

A plan bundle is a promise: what `weft-run` accepts, it runs, within its
regions and without deadlock (docs/plan-format.md, "Verifier"). This takes
valid bundles of several layouts (serial, DP 2 ZeRO-3, TP 2 x PP 2, a bf16
LLaMA with fused epilogues and norms, optimizer offload), changes one thing
in a copy of plan.json -- a number anywhere in the programs, buffers,
groups, parameters and training settings (to 0, -1, +-1, twice, a huge
value or another number in range), an enumerated string (opcode, dtype,
region, reduction, ...) to another value its key takes in the plan, or an
instruction of a stream deleted, duplicated or swapped with its
neighbour, or a kernel's write set to the range of one of its reads or
writes of the same size (in place where the kernel allows it) -- writes the
content hash again
(so the change reaches the checks behind it), and runs
`weft-inspect BUNDLE verify` (and, on a plan it verifies, `summary`,
`timeline`, `memory --rank 0` and `state`, which must show it or say why
in one line) and then `weft-run` for 2 steps. Every outcome
must be one of:

  REJECTED  the loader or the verifier refuses it: one line naming
            plan.json (weft-inspect exit 2 / verify diagnostics exit 1, and
            weft-run's one `weft-run: error:` line, exit non-zero);
  RAN       accepted, and both steps ran (the change was harmless, or only
            changed the numbers: a learning rate, a kernel constant);
  CAUGHT    accepted, and weft-run stopped with one `weft-run: error:` line
            (a check at run time: the watchdog, a non-finite loss, ...).

Anything else -- a crash (signal), a hang past the timeout, an exit with no
error line or several, weft-inspect and weft-run disagreeing on whether the
plan loads -- is a FAIL line with the mutation and the directory kept to
reproduce it (--keep-failures). Ends with the counts and `N passed, N
failed` (passed: the three outcomes above); exits 1 on any failure. Not a
ctest (random, minutes): run it after changes to the plan format, the
verifier or the executor.
"""
import copy
import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import at, is_number, leaves  # noqa: E402
import mutation  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "test/lit/weftc/Inputs"

# name: (model, ranks, precision, flags)
BASES = {
    "serial": ("gpt2-tiny", 1, "fp32", ["--dp", "1", "--micro-batch", "2"]),
    "dp2-zero3": ("gpt2-tiny", 2, "fp32",
                  ["--dp", "2", "--zero", "3", "--micro-batch", "1"]),
    "tp2-pp2": ("llama-tiny", 4, "fp32",
                ["--tp", "2", "--pp", "2", "--dp", "1", "--micro-batch", "1",
                 "--schedule", "1f1b"]),
    "bf16-fused": ("llama-tiny", 2, "bf16",
                   ["--dp", "2", "--zero", "1", "--micro-batch", "1",
                    "--gemm-epilogues", "--residual-norms"]),
    "offload": ("gpt2-tiny", 1, "fp32",
                ["--dp", "1", "--micro-batch", "2", "--offload",
                 "optimizer"]),
}
# Where a number may be changed: everything the executor reads.
MUTABLE_ROOTS = ("programs", "groups", "parameters", "training", "mesh",
                 "rank_roles", "kernels")


def content_hash(manifest, directory):
    """plan-format.md's content_hash of `manifest` (without the key)."""
    body = {k: v for k, v in manifest.items() if k != "content_hash"}
    digest = hashlib.sha256(json.dumps(body, separators=(",", ":"),
                                       sort_keys=True,
                                       ensure_ascii=False).encode())
    for entry in sorted(manifest.get("files", []),
                        key=lambda f: f["path"].encode()):
        data = (directory / entry["path"]).read_bytes()
        digest.update(entry["path"].encode() + b"\0" +
                      struct.pack("<Q", len(data)) + data)
    return digest.hexdigest()


def instruction_lists(manifest):
    """Paths of every stream's instruction list."""
    for p, program in enumerate(manifest.get("programs", [])):
        for s, stream in enumerate(program.get("streams", [])):
            if len(stream.get("instructions", [])) > 0:
                yield ("programs", p, "streams", s, "instructions")


def kernel_launches(manifest):
    """Every kernel instruction (per-role variants included), with a path."""
    for path in instruction_lists(manifest):
        for i, inst in enumerate(at(manifest, path)):
            for j, variant in enumerate(inst.get("per_role", [inst])):
                if variant.get("op") == "kernel":
                    where = "/".join(map(str, path)) + f"[{i}]" + \
                        (f"/per_role[{j}]" if "per_role" in inst else "")
                    yield where, variant


def alias(rng, manifest):
    """One kernel write set to the range of one of its reads or of another
    write of the same size: an in-place form the kernel may or may not
    list. None when no launch has such a pair."""
    pairs = []
    for where, inst in kernel_launches(manifest):
        writes = inst.get("writes", [])
        for w, write in enumerate(writes):
            for kind, ranges in (("reads", inst.get("reads", [])),
                                 ("writes", writes)):
                for r, other in enumerate(ranges):
                    if (kind, r) != ("writes", w) and other != write and \
                            other["bytes"] == write["bytes"]:
                        pairs.append((where, inst, w, kind, r))
    if not pairs:
        return None
    where, inst, w, kind, r = rng.choice(pairs)
    inst["writes"][w] = dict(inst[kind][r])
    return f"{where}: writes[{w}] over {kind}[{r}]"


def mutate(rng, manifest):
    """Changes `manifest` in place; returns what was done."""
    if rng.random() < 0.1:
        done = alias(rng, manifest)
        if done:
            return done
    if rng.random() < 0.2:
        lists = list(instruction_lists(manifest))
        path = rng.choice(lists)
        instructions = at(manifest, path)
        i = rng.randrange(len(instructions))
        where = "/".join(map(str, path)) + f"[{i}]"
        kind = rng.choice(["delete", "duplicate", "swap"])
        if kind == "delete":
            del instructions[i]
        elif kind == "duplicate":
            instructions.insert(i, copy.deepcopy(instructions[i]))
        else:
            if i + 1 >= len(instructions):
                i -= 1
            instructions[i], instructions[i + 1] = \
                instructions[i + 1], instructions[i]
        return f"{kind} {where}"
    if rng.random() < 0.2:
        # An enumerated string (opcode, dtype, region, reduce, ...) set to
        # another value the same key takes elsewhere in the plan.
        by_key = {}
        for path, value in leaves(manifest, lambda v: isinstance(v, str)):
            if path and path[0] in MUTABLE_ROOTS and \
                    isinstance(path[-1], str) and path[-1] != "name":
                by_key.setdefault(path[-1], []).append((path, value))
        choices = {k: v for k, v in by_key.items()
                   if 2 <= len({x for _, x in v}) <= 40}
        if choices:
            key = rng.choice(sorted(choices))
            path, value = rng.choice(choices[key])
            new = rng.choice(sorted({x for _, x in choices[key]} - {value}))
            at(manifest, path[:-1])[path[-1]] = new
            return f"{'/'.join(map(str, path))}: {value!r} -> {new!r}"
    numbers = [(p, v) for p, v in leaves(manifest, is_number)
               if p and p[0] in MUTABLE_ROOTS]
    path, value = rng.choice(numbers)
    if isinstance(value, int):
        new = rng.choice([0, -1, value + 1, value - 1, value * 2,
                          1 << 40, rng.randrange(0, 2 * abs(value) + 2)])
    else:
        new = rng.choice([0.0, -1.0, value * 2, value / 2, float("1e30"),
                          -value])
    if new == value:
        new = value + 1
    parent = at(manifest, path[:-1])
    parent[path[-1]] = new
    return f"{'/'.join(map(str, path))}: {value} -> {new}"


class Mutator:
    def __init__(self, args):
        self.args = args
        self.bin = Path(args.build).resolve() / "bin"
        self.work = Path(args.work)

    def build_bases(self):
        cluster = json.loads((INPUTS / "cpu-sim-8-host.json").read_text())
        for name, (model, ranks, precision, flags) in BASES.items():
            cluster["gpus_per_node"] = ranks
            cluster_path = self.work / f"cluster-{ranks}.json"
            cluster_path.write_text(json.dumps(cluster))
            subprocess.run(
                [str(self.bin / "weftc"), "compile", "--model", model,
                 "--cluster", str(cluster_path), "--global-batch", "4",
                 "--seq-len", "16", "--precision", precision] + flags +
                ["-o", str(self.work / f"base-{name}")],
                check=True, capture_output=True, text=True)

    def run(self, bundle, ranks):
        return mutation.weft_run(self.bin, bundle, self.work / "tokens.bin",
                                 ranks, ["--steps", "2"], 10, 90)

    def one(self, index, rng):
        base = rng.choice(list(BASES))
        ranks = BASES[base][1]
        source = self.work / f"base-{base}"
        target = self.work / f"mutant-{index}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)
        manifest = json.loads((target / "plan.json").read_text())
        what = f"{base}: {mutate(rng, manifest)}"
        manifest["content_hash"] = content_hash(manifest, target)
        (target / "plan.json").write_text(json.dumps(manifest, indent=1))
        verify = subprocess.run([str(self.bin / "weft-inspect"), str(target),
                                 "verify"], capture_output=True, text=True,
                                timeout=120)
        if verify.returncode not in (0, 1, 2):
            return "FAIL", f"{what}: weft-inspect verify exited " \
                           f"{verify.returncode}: {verify.stderr[-300:]}"
        if verify.returncode == 0:
            # What weft-inspect shows of a plan it verifies, it shows
            # without crashing (or says why in one line).
            for command in (["summary"], ["timeline"], ["memory", "--rank",
                                                        "0"], ["state"]):
                try:
                    shown = subprocess.run(
                        [str(self.bin / "weft-inspect"), str(target)] +
                        command, capture_output=True, text=True, timeout=120)
                except subprocess.TimeoutExpired:
                    return "FAIL", f"{what}: weft-inspect {command[0]} hung"
                lines = [l for l in shown.stderr.splitlines() if l.strip()]
                if shown.returncode != 0 and (shown.returncode >= 128 or
                                              shown.returncode < 0 or
                                              len(lines) != 1):
                    return "FAIL", f"{what}: weft-inspect {command[0]} " \
                                   f"exited {shown.returncode}: " \
                                   f"{shown.stderr.strip()[-300:]}"
        run = self.run(target, ranks)
        if run is None:
            return "FAIL", f"{what}: weft-run hung (90 s)"
        errors = mutation.error_lines(run.stderr, "weft-run: error:")
        if mutation.crashed(run):
            return "FAIL", f"{what}: weft-run crashed (exit " \
                           f"{run.returncode}): {run.stderr.strip()[-400:]}"
        if verify.returncode != 0:
            # Rejected: weft-run must refuse it too, in one line.
            if run.returncode == 0:
                return "FAIL", f"{what}: weft-inspect rejects it " \
                               f"({verify.stdout.strip()[:200]}" \
                               f"{verify.stderr.strip()[:200]}) but " \
                               f"weft-run ran it"
            if len(errors) != 1:
                return "FAIL", f"{what}: rejected, but weft-run printed " \
                               f"{len(errors)} distinct error lines: " \
                               f"{run.stderr.strip()[-400:]}"
            return "REJECTED", f"{what}: {errors[0][:200]}"
        if run.returncode == 0:
            return "RAN", what
        if len(errors) != 1:
            return "FAIL", f"{what}: verified, weft-run exited " \
                           f"{run.returncode} with {len(errors)} " \
                           f"distinct error lines: {run.stderr.strip()[-400:]}"
        return "CAUGHT", f"{what}: {errors[0][:200]}"

    def main(self):
        mutation.fresh_work_dir(self.work, self.bin)
        self.build_bases()
        for name in BASES:  # the rehash reproduces weftc's hash
            base = self.work / f"base-{name}"
            manifest = json.loads((base / "plan.json").read_text())
            if content_hash(manifest, base) != manifest["content_hash"]:
                sys.exit(f"content_hash of {base} not reproduced: "
                         "plan-format.md and this script disagree")
        return mutation.run_cases(
            self.args, self.one, lambda i: self.work / f"mutant-{i}",
            {"REJECTED": "rejected", "RAN": "ran",
             "CAUGHT": "caught at run time"})


def main():
    sys.exit(Mutator(mutation.parse_args(__doc__, "/tmp/weft-mutate")).main())

if __name__ == "__main__":
    main()
