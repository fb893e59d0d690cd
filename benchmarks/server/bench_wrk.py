#!/usr/bin/env python3
"""jitembed-server against a real Triton under the same `wrk` load: KServe v2 JSON infer over keep-alive HTTP.

The request is one caption as a JSON BYTES tensor, the answer 8 floats as JSON, so both servers do the least
model work there is and the figure is the serving path: HTTP parse, KServe decode, scheduling, encode. Triton
serves tests/triton/models/jit_text (Python backend, the tritonserver of .venv-triton) copied into a temporary
repository without its dynamic batching, since a 2 ms queue delay would cap Triton at c=1 near 400 req/s;
jitembed-server serves its reference text-embed with text_dim 8 and text_max_length 8 and no queue delay. wrk (Debian's, installed by scripts/install-deps.sh test) drives each at concurrency 1
(1 thread, 1 connection) and 32 (2 threads, 32 connections); the arms alternate in rounds, best round kept.
Every answer must be 200 (wrk's non-2xx count is checked). Issue #33's figure: jitembed / Triton req/s.

  .venv/bin/python benchmarks/server/bench_wrk.py [--build build/release] [--server PATH] [--rounds 3] [--seconds 4]

Prints a table, then one JSON object per result line.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "triton"))

import interop_util  # noqa: E402
import run_tritonserver  # noqa: E402

BODY = {"inputs": [{"name": "text", "shape": [1, 1], "datatype": "BYTES", "data": ["a photo of a cat"]}]}
SCRIPT = """wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["Content-Type"] = "application/json"
"""
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_wrk(out: str):
    """Requests/s, p99 in ms and the non-2xx count from wrk --latency's report."""
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    if not rps or not p99:
        raise RuntimeError(f"bench_wrk: cannot read wrk's report:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return float(rps.group(1)), float(p99.group(1)) * UNITS[p99.group(2)], int(bad.group(1)) if bad else 0, \
        errors.group(0) if errors else ""


def run_wrk(wrk, script, url, c, seconds):
    threads = 1 if c == 1 else 2
    cmd = [wrk, f"-t{threads}", f"-c{c}", f"-d{seconds}s", "--latency", "-s", script, url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 2 * seconds)
    if p.returncode != 0:
        raise RuntimeError(f"bench_wrk: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return parse_wrk(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "release")
    ap.add_argument("--server", type=Path, help="the jitembed-server binary (default: BUILD/tools/jitembed-server)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4, help="wrk's duration per arm and round")
    ap.add_argument("--concurrency", default="1,32")
    a = ap.parse_args()

    wrk = shutil.which("wrk")
    if wrk is None:
        sys.exit("bench_wrk: wrk not found (scripts/install-deps.sh test installs Debian's wrk)")
    ts = run_tritonserver.find_tritonserver(ROOT / ".venv-triton")
    if ts is None:
        sys.exit("bench_wrk: tritonserver not found in .venv-triton (scripts/install-deps.sh)")
    server_bin = a.server or a.build / "tools" / "jitembed-server"

    tmp = Path(tempfile.mkdtemp(prefix="bench_wrk_"))
    script = tmp / "post.lua"
    script.write_text(SCRIPT.format(body=json.dumps(BODY, separators=(",", ":"))))
    repo = tmp / "models"
    shutil.copytree(ROOT / "tests" / "triton" / "models" / "jit_text", repo / "jit_text",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cfg = repo / "jit_text" / "config.pbtxt"
    cfg.write_text("".join(l for l in cfg.read_text().splitlines(keepends=True) if not l.startswith("dynamic_batching")))
    jit = interop_util.Server(str(server_bin), ["--model", "text-embed:text_dim=8,text_max_length=8", "--max-batch",
                                                "64", "--max-queue-delay-us", "0"], log_path=str(tmp / "jitembed.log"))
    triton = run_tritonserver.Server(ts, ROOT / ".venv-triton", repo, tmp / "triton.log", [])
    if not triton.start(90.0):
        jit.stop()
        sys.exit(f"bench_wrk: tritonserver did not start:\n{run_tritonserver.tail(tmp / 'triton.log')}")
    targets = {"jitembed": f"{jit.url}/v2/models/text-embed/infer",
               "triton": f"{triton.url}/v2/models/jit_text/infer"}
    targets = {k: (v if v.startswith("http") else "http://" + v) for k, v in targets.items()}
    conc = [int(c) for c in a.concurrency.split(",")]
    best, failures = {}, []
    try:
        for r in range(a.rounds):
            order = list(targets.items())
            if r % 2:
                order.reverse()
            for c in conc:
                for server, url in order:
                    rps, p99, bad, sock = run_wrk(wrk, str(script), url, c, a.seconds)
                    if bad:
                        failures.append(f"{server} c={c}: {bad} non-2xx answers")
                    if (server, c) not in best or rps > best[(server, c)][0]:
                        best[(server, c)] = (rps, p99)
                    print(f"bench_wrk: round {r + 1} {server:8s} c={c:<3d} {rps:9.0f} req/s  p99 {p99:7.2f} ms {sock}",
                          file=sys.stderr, flush=True)
    finally:
        jit_rc = jit.stop()
        triton.stop()
    print(f"{'server':10s} {'c':>4s} {'req/s':>10s} {'p99 ms':>8s}")
    for (server, c), (rps, p99) in sorted(best.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{server:10s} {c:4d} {rps:10.0f} {p99:8.2f}")
    lines = [{"bench": "wrk", "server": s, "concurrency": c, "req_per_s": round(v[0], 1), "p99_ms": round(v[1], 3)}
             for (s, c), v in sorted(best.items())]
    for c in conc:
        j, t = best[("jitembed", c)], best[("triton", c)]
        print(f"c={c}: jitembed / triton = {j[0] / t[0]:.2f}x req/s, p99 {j[1]:.2f} vs {t[1]:.2f} ms")
        lines.append({"bench": "wrk_ratio", "concurrency": c, "jitembed_over_triton": round(j[0] / t[0], 3),
                      "p99_jitembed_ms": round(j[1], 3), "p99_triton_ms": round(t[1], 3)})
    for line in lines:
        print(json.dumps(line))
    for f in failures:
        print(f"bench_wrk: {f}", file=sys.stderr)
    if jit_rc != 0:
        print(f"bench_wrk: jitembed-server exited {jit_rc}", file=sys.stderr)
    return 1 if failures or jit_rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
