#!/usr/bin/env python3
"""What ptxas gives every CUDA kernel of the runtime: registers, spills, stack
and shared memory per kernel and architecture, checked against a budget.

    kernel-resources.py --compile-commands build/compile_commands.json \
        --budget test/cuda-compile/kernel-resources.json [--under runtime/]
        [--json OUT] [--jobs N]

Every `.cu` file of compile_commands.json below --under (relative to the
source tree) is compiled again by the same nvcc command, once per
architecture it names, with `--resource-usage -cubin` (device code only, to a
scratch file). Without a GPU this is what can be known about a kernel's
speed: a spill moves registers to local memory (DRAM through L1), and the
registers a thread holds bound how many blocks an SM keeps resident.

The budget (JSON) is a list of rules, the first whose `kernel` regex matches
the demangled name (and `arch`, where given) applies:
    {"kernel": "mmaForward<.*, (16|32|64)>", "arch": "sm_90",
     "max_registers": 168, "max_spill_bytes": 0, "why": "..."}
A kernel no rule matches may not spill (max_spill_bytes 0). A rule that
matches no kernel is an error too (the budget describes kernels that exist).
Prints one line per kernel and architecture, then one `FAIL: ...` line per
kernel over its budget, last `N kernels within budget, N over`; exits 1 when
any is over (or a command fails), 0 otherwise.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                   r"(\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")


def device_command(entry):
    """The nvcc command of a compile_commands entry without its outputs and
    code generation flags, and the architectures it generated code for."""
    words = shlex.split(entry["command"]) if "command" in entry \
        else list(entry["arguments"])
    while words and not os.path.basename(words[0]).startswith("nvcc"):
        words.pop(0)  # a launcher (ccache)
    if not words:
        raise ValueError(f"{entry['file']}: no nvcc in its command")
    kept, archs, skip = [], [], False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        if word in ("-o", "-gencode", "--generate-code", "-arch", "--gpu-architecture"):
            skip = True
            if word in ("-gencode", "--generate-code") and i + 1 < len(words):
                archs += re.findall(r"sm_(\d+)", words[i + 1])
            continue
        if word.startswith(("--generate-code=", "-gencode=", "-arch=",
                            "--gpu-architecture=")):
            archs += re.findall(r"sm_(\d+)", word)
            continue
        if word in ("-c", entry["file"]) or word.endswith(".o"):
            continue
        kept.append(word)
    return kept, sorted(set(archs)) or ["90"]


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), text=True,
                         capture_output=True)
    lines = out.stdout.splitlines() if out.returncode == 0 else names
    return dict(zip(names, lines))


def parse(text):
    """[(mangled, arch, registers, spill bytes, stack bytes, smem bytes)]."""
    kernels, current, frame, properties = [], None, None, None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            current, frame = (m.group(1), m.group(2)), (0, 0, 0)
            continue
        if current is None:
            continue
        if m := PROPERTIES.search(line):
            properties = m.group(1)  # the entry's, or a called function's
        elif (m := FRAME.search(line)) and properties == current[0]:
            frame = tuple(int(g) for g in m.groups())
        elif m := USED.search(line):
            smem = SMEM.search(line)
            kernels.append((current[0], current[1], int(m.group(1)),
                            frame[1] + frame[2], frame[0],
                            int(smem.group(1)) if smem else 0))
            current = None
    return kernels


def compile_one(source, command, arch, directory):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as scratch:
        argv = command + [f"-arch=sm_{arch}", "-cubin", "--resource-usage",
                          "-o", scratch.name, source]
        run = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
    if run.returncode != 0:
        first = next((l for l in run.stderr.splitlines() if "error" in l),
                     run.stderr.strip().splitlines()[-1:] or ["?"])
        return source, arch, None, f"nvcc failed: {first}"
    return source, arch, parse(run.stdout + run.stderr), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-commands", required=True)
    parser.add_argument("--budget", required=True)
    parser.add_argument("--source-dir", default=None,
                        help="the source tree (default: the budget's ../..)")
    parser.add_argument("--under", default="runtime/")
    parser.add_argument("--json", default=None, help="write every kernel's figures")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    source_dir = os.path.realpath(args.source_dir or os.path.join(
        os.path.dirname(os.path.realpath(args.budget)), "..", ".."))
    try:
        entries = json.load(open(args.compile_commands))
        rules = json.load(open(args.budget))
        for i, rule in enumerate(rules):
            re.compile(rule["kernel"])
            for key in rule:
                if key not in ("kernel", "arch", "max_registers",
                               "max_spill_bytes", "max_stack_bytes", "why"):
                    raise ValueError(f"rule {i}: unknown field '{key}'")
            if not rule.get("why"):
                raise ValueError(f"rule {i}: no 'why'")
    except (OSError, ValueError, KeyError, TypeError, re.error) as error:
        sys.exit(f"kernel-resources: {error}")

    under = os.path.join(source_dir, args.under)
    jobs = []
    for entry in entries:
        path = os.path.realpath(os.path.join(entry.get("directory", "."), entry["file"]))
        if not path.endswith(".cu") or not path.startswith(under):
            continue
        command, archs = device_command(entry)
        for arch in archs:
            jobs.append((path, command, arch, entry.get("directory", ".")))
    if not jobs:
        sys.exit(f"kernel-resources: no .cu file below {under} in {args.compile_commands}")

    results, failures = [], []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for source, arch, kernels, error in pool.map(lambda j: compile_one(*j), jobs):
            rel = os.path.relpath(source, source_dir)
            if error:
                failures.append(f"FAIL: {rel} (sm_{arch}): {error}")
                continue
            if not kernels:
                failures.append(f"FAIL: {rel} (sm_{arch}): ptxas reported no kernel")
            results += [(rel,) + k for k in kernels]
    names = demangle(sorted({r[1] for r in results}))

    used = [False] * len(rules)
    rows, within = [], 0
    for rel, mangled, arch, registers, spill, stack, smem in sorted(
            results, key=lambda r: (r[0], names[r[1]], r[2])):
        name = names[mangled]
        index = next((i for i, rule in enumerate(rules)
                      if re.search(rule["kernel"], name)
                      and rule.get("arch", arch) == arch), None)
        rule = rules[index] if index is not None else {}
        if index is not None:
            used[index] = True
        over = []
        if spill > rule.get("max_spill_bytes", 0):
            over.append(f"{spill} bytes of spills > {rule.get('max_spill_bytes', 0)}")
        if "max_registers" in rule and registers > rule["max_registers"]:
            over.append(f"{registers} registers > {rule['max_registers']}")
        if "max_stack_bytes" in rule and stack > rule["max_stack_bytes"]:
            over.append(f"{stack} bytes of stack > {rule['max_stack_bytes']}")
        print(f"{arch} {registers:4d} regs {spill:4d} B spill {stack:4d} B stack "
              f"{smem:6d} B smem  {name}  ({rel})")
        rows.append({"source": rel, "kernel": name, "arch": arch,
                     "registers": registers, "spill_bytes": spill,
                     "stack_bytes": stack, "smem_bytes": smem})
        if over:
            why = f" ({rule['why']})" if rule.get("why") else ""
            failures.append(f"FAIL: {arch} {name}: {', '.join(over)}{why}")
        else:
            within += 1
    for i, rule in enumerate(rules):
        if not used[i]:
            failures.append(f"FAIL: {args.budget}: rule {i} ('{rule['kernel']}'"
                            f"{', ' + rule['arch'] if 'arch' in rule else ''}) "
                            "matches no kernel")
    if args.json:
        with open(args.json + ".tmp", "w") as out:
            json.dump(rows, out, indent=1)
        os.replace(args.json + ".tmp", args.json)
    for line in failures:
        print(line)
    print(f"{within} kernels within budget, {len(rows) - within} over"
          + (f", {len(failures)} problems" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
