#!/usr/bin/env python3
"""Include cost of a minimal trainer (examples/minimal_trainer): preprocessed lines and compile time of its
one translation unit, header-only (the default) against separate compilation (JITEMBED_SEPARATE_COMPILATION:
the client and loader compiled once, in jitembed_client_src.cpp). Both compiles use the build's own
command for minimal_trainer.cpp (ninja -t commands), interleaved, best of N.

    python3 benchmarks/build/include_cost.py BUILD_DIR [--runs 3]

Prints a table, then one JSON object per result line."""
import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tu_command(build: Path, target: str, source: str) -> list:
    out = subprocess.run(["ninja", "-C", str(build), "-t", "commands", target], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if re.search(r" -c \S*" + re.escape(source) + r"\b", line):
            args = shlex.split(line)
            # drop the dependency-file flags and the output: each run writes to a temporary file
            drop = {"-MD"}
            res, skip = [], False
            for a in args:
                if skip:
                    skip = False
                    continue
                if a in ("-MT", "-MF", "-o"):
                    skip = True
                    continue
                if a in drop:
                    continue
                res.append(a)
            return res
    sys.exit(f"include_cost: no compile command for {source} in target {target} (configure with -DJITEMBED_BUILD_EXAMPLES=ON)")


def run(cmd: list, out: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd + ["-o", out], check=True, cwd=BUILD)
    return time.perf_counter() - t0


def lines(cmd: list) -> int:
    pre = [a for a in cmd if a != "-c"] + ["-E"]
    return subprocess.run(pre + ["-o", "-"], check=True, capture_output=True, text=True, cwd=BUILD).stdout.count("\n")


ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("build", type=Path)
ap.add_argument("--runs", type=int, default=3)
a = ap.parse_args()
BUILD = a.build
header_only = tu_command(a.build, "minimal_trainer", "minimal_trainer.cpp")
separate = tu_command(a.build, "minimal_trainer_separate", "minimal_trainer.cpp")
src = tu_command(a.build, "minimal_trainer_separate", "jitembed_client_src.cpp")
times = {"header_only": [], "separate": []}
with tempfile.TemporaryDirectory() as tmp:
    o = str(Path(tmp) / "tu.o")
    for _ in range(a.runs):
        times["header_only"].append(run(header_only, o))
        times["separate"].append(run(separate, o))
    src_time = run(src, o)
lh, ls_ = lines(header_only), lines(separate)
best = {k: min(v) for k, v in times.items()}
print(f"{'mode':<14}{'preprocessed lines':>20}{'compile s (best of %d)' % a.runs:>26}")
print(f"{'header-only':<14}{lh:>20,}{best['header_only']:>26.2f}")
print(f"{'separate':<14}{ls_:>20,}{best['separate']:>26.2f}")
print(f"separate / header-only: lines {ls_ / lh:.2f}, time {best['separate'] / best['header_only']:.2f} "
      f"(target <= 0.40); the one-off client/loader TU: {src_time:.2f} s")
for mode, n in (("header_only", lh), ("separate", ls_)):
    print(json.dumps({"bench": "include_cost", "mode": mode, "preprocessed_lines": n, "compile_s": round(best[mode], 3),
                      "runs": [round(t, 3) for t in times[mode]]}))
print(json.dumps({"bench": "include_cost", "mode": "ratio", "lines_ratio": round(ls_ / lh, 3),
                  "time_ratio": round(best["separate"] / best["header_only"], 3), "src_tu_s": round(src_time, 3)}))
