#!/usr/bin/env python3
"""Tests order threads by waiting on conditions, not by sleeping (issue 10): no `sleep_for` / `sleep_until` /
usleep / nanosleep under tests/ outside scripts/lint/sleep_allowlist.txt.

Each allowlist line is `<path under tests/> <count> <reason>`: the file may hold at most <count> sleeps, and
the reason says why each is not ordering threads (a polling helper with a deadline, a test that emulates a
slow peer or slow compute). A file with more sleeps than allowed, or with sleeps and no line, fails; a line
whose count is now too high (lower it) or whose file has none left (remove it) is reported as a warning.
Usage: no_sleep_in_tests.py [repo root]
"""
import os
import re
import sys

SLEEP = re.compile(r"\b(sleep_for|sleep_until|usleep|nanosleep)\s*\(")
EXTS = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".cc")


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    tests = os.path.join(root, "tests")
    allow = {}
    errors = []
    with open(os.path.join(root, "scripts", "lint", "sleep_allowlist.txt"), encoding="utf-8") as f:
        for no, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or not parts[1].isdigit():
                errors.append(f"sleep_allowlist.txt:{no}: want '<path> <count> <reason>', got {line!r}")
                continue
            allow[parts[0]] = int(parts[1])
    found = {}
    warnings = []
    for d, dirs, files in os.walk(tests):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(EXTS):
                continue
            path = os.path.join(d, name)
            rel = os.path.relpath(path, tests).replace(os.sep, "/")
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = [(i, l) for i, l in enumerate(f, 1) if SLEEP.search(l.split("//", 1)[0])]
            if lines:
                found[rel] = lines
    for rel, lines in sorted(found.items()):
        want = allow.get(rel, 0)
        if len(lines) > want:
            where = ", ".join(str(i) for i, _ in lines)
            errors.append(f"tests/{rel}: {len(lines)} sleeps (lines {where}), {want} allowed: wait on a condition "
                          f"(a condition variable, a future, a latch, or jitembed::test::eventually from "
                          f"tests/batching/eventually.hpp) instead of sleeping")
        elif len(lines) < want:
            warnings.append(f"warning: scripts/lint/sleep_allowlist.txt: tests/{rel} allows {want} sleeps but has "
                            f"{len(lines)}: lower the count")
    for rel in sorted(set(allow) - set(found)):
        warnings.append(f"warning: scripts/lint/sleep_allowlist.txt: tests/{rel} has no sleep left: remove its line")
    for e in errors + warnings:
        print(e)
    print(f"no_sleep_in_tests: {sum(len(v) for v in found.values())} sleeps in {len(found)} files, "
          f"{len(allow)} allowlist lines, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
