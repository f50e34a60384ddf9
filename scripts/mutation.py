"""What the mutation sweeps share (scripts/*-mutate.py): walking a JSON
document's leaves, reaching one by its path, and the values a number is
changed to."""


def leaves(node, want=lambda value: True, path=()):
    """(path, value) of every leaf under `node` that `want(value)` takes."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, want, path + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, want, path + (index,))
    elif want(node):
        yield path, node


def at(node, path):
    """The value at `path` (keys and indices) under `node`."""
    for key in path:
        node = node[key]
    return node


def show(path):
    return "/".join(map(str, path)) or "(root)"


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def new_number(rng, value, more_floats=()):
    """Another value for the number `value`: 0, -1, +-1, twice, a huge one,
    a random one in range (a float: 0, -1, twice, half, 1e30, its negation,
    and `more_floats`)."""
    if isinstance(value, int):
        new = rng.choice([0, -1, value + 1, value - 1, value * 2, 1 << 40,
                          rng.randrange(0, 2 * abs(value) + 2)])
    else:
        new = rng.choice([0.0, -1.0, value * 2, value / 2, 1e30, -value] +
                         list(more_floats))
    return new if new != value else value + 1


def parse_args(doc, work):
    """The sweeps' command line: --build, --mutations, --seed, --work,
    --keep-failures."""
    import argparse
    import os
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--build",
                        default=os.environ.get("WEFT_BUILD_DIR", "build"))
    parser.add_argument("--mutations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", default=work)
    parser.add_argument("--keep-failures", action="store_true")
    return parser.parse_args()


def run_cases(args, one, case_dir, outcomes, report=None):
    """Runs args.mutations cases, `one(index, rng)` -> (outcome, text), with
    the generator seeded by args.seed; prints each; removes each case's
    directory `case_dir(index)` unless it failed under --keep-failures. Ends
    with the counts per outcome (`outcomes`: outcome -> label, FAIL aside),
    whatever `report()` prints, and `N passed, N failed`; returns the exit
    status (1 on any failure)."""
    import random
    import shutil
    import time
    rng = random.Random(args.seed)
    counts = dict.fromkeys(list(outcomes) + ["FAIL"], 0)
    start = time.time()
    for index in range(args.mutations):
        status, text = one(index, rng)
        counts[status] += 1
        print(f"{status}: [{index}] {text}", flush=True)
        if status != "FAIL" or not args.keep_failures:
            shutil.rmtree(case_dir(index), ignore_errors=True)
    seconds = time.time() - start
    if report:
        report()
    print(f"seed {args.seed}, {seconds:.0f} s: " +
          ", ".join(f"{counts[k]} {label}" for k, label in outcomes.items()))
    print(f"{args.mutations - counts['FAIL']} passed, {counts['FAIL']} failed")
    return 1 if counts["FAIL"] else 0


def error_lines(text, prefix):
    """The distinct lines of `text` that start with `prefix`, sorted (ranks
    print the same agreed line each)."""
    return sorted({l for l in text.splitlines() if l.startswith(prefix)})


def crashed(run):
    """Whether the finished process `run` died of a signal (directly, or
    as mpirun reports it) rather than exiting with an error."""
    return run.returncode < 0 or run.returncode >= 128 or \
        "Segmentation" in run.stderr or "signal" in run.stderr


def weft_run(bin_dir, bundle, tokens, ranks, extra, watchdog_s, timeout_s):
    """`weft-run BUNDLE --data TOKENS --quiet` under mpirun with `ranks`
    ranks and `extra` flags: the finished process, or None on a hang."""
    import subprocess
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
           str(ranks), str(bin_dir / "weft-run"), str(bundle), "--data",
           str(tokens), "--quiet", "--watchdog-s", str(watchdog_s)] + extra
    try:
        return subprocess.run(cmd, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def fresh_work_dir(work, bin_dir):
    """Empties `work` and tokenizes data/corpus.txt into work/tokens.bin."""
    import shutil
    import subprocess
    from pathlib import Path
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    root = Path(__file__).resolve().parent.parent
    subprocess.run([str(bin_dir / "weft-make-tokens"),
                    str(root / "data/corpus.txt"), str(work / "tokens.bin")],
                   check=True, capture_output=True)
    return work / "tokens.bin"
