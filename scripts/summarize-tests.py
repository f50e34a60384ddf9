#!/usr/bin/env python3
"""Counts test cases from ctest's JUnit file (one entry per GoogleTest case;
the `lit` entry stands for the whole lit suite) and lit's xUnit file (one entry
per lit test), lists skipped tests with their reason, and prints the closing
line `N passed, N failed[, N skipped]`. Exits 1 if anything failed or no test
ran."""
import os
import sys
import xml.etree.ElementTree as ET


def cases(path):
    if not os.path.exists(path):
        return []
    return list(ET.parse(path).getroot().iter("testcase"))


def skip_reason(case):
    """The line after gtest's "Skipped" marker, e.g. "no CUDA device: ..."."""
    out = case.findtext("system-out") or ""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.endswith(": Skipped") and i + 1 < len(lines):
            return lines[i + 1].strip()
    skipped = case.find("skipped")
    return skipped.get("message", "") if skipped is not None else ""


def outcome(case):
    if case.find("failure") is not None or case.find("error") is not None:
        return "failed"
    skipped = case.find("skipped")
    if skipped is not None or case.get("status") in ("notrun", "disabled"):
        return "skipped"
    return "passed"


def main():
    ctest_path, lit_path = sys.argv[1], sys.argv[2]
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    lit_cases = cases(lit_path)
    for case in cases(ctest_path):
        if case.get("name") == "lit" and lit_cases:
            continue  # counted per lit test below
        result = outcome(case)
        counts[result] += 1
        if result == "skipped":
            print(f"skipped: {case.get('name')} ({skip_reason(case)})")
        elif result == "failed":
            print(f"failed: {case.get('name')}")
    for case in lit_cases:
        result = outcome(case)
        counts[result] += 1
        if result != "passed":
            print(f"{result}: lit {case.get('classname')}.{case.get('name')}")
    total = sum(counts.values())
    line = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["skipped"]:
        line += f", {counts['skipped']} skipped"
    print(line)
    return 0 if counts["failed"] == 0 and total > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
