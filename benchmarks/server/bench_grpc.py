#!/usr/bin/env python3
"""gRPC (and HTTP, for context) through perf_analyzer, jitembed-server against a real Triton, side by side in one run.

The same model work on both: a text embedding of 8 floats per row, one caption per request, dynamic batching
(max batch 64, 2 ms queue delay). Triton serves tests/triton/models/jit_text (Python backend, numpy, the
tritonserver of .venv-triton); jitembed-server serves its reference text-embed with text_dim 8 and
text_max_length 8 (C++). perf_analyzer (.venv/perf_analyzer) drives both at concurrency 1 and 32 with
-i grpc and -i http; the arms run in interleaved rounds (best round kept) on the same cores.
Target (issue #20): gRPC jitembed >= 2x Triton's requests/s at c=1 and c=32, at <= its p99.

  .venv/bin/python benchmarks/server/bench_grpc.py [--build build/release] [--rounds 2] [--seconds 3]

Prints a table, then one JSON object per result line.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "tests" / "triton"))

import interop_util  # noqa: E402
import run_tritonserver  # noqa: E402

CAPTIONS = ["a photo of a cat", "a red car parked by the sea", "two dogs on a sofa", "x"]


def perf(pa, env, url, protocol, model, c, seconds, data, out_csv):
    cmd = [pa, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", str(c), "--input-data", data,
           "--measurement-interval", str(int(seconds * 1000)), "--max-trials", "3", "--stability-percentage", "999",
           "-f", out_csv]
    p = subprocess.run(cmd, env=env, capture_output=True, timeout=120 + 6 * seconds)
    out = (p.stdout + p.stderr).decode(errors="replace")
    if p.returncode != 0 or "had error" in out:
        raise RuntimeError(f"perf_analyzer {protocol} {url} c={c} failed ({p.returncode}):\n{out[-3000:]}")
    with open(out_csv) as f:
        row = list(csv.DictReader(f))[0]
    return float(row["Inferences/Second"]), float(row["p99 latency"]) / 1000.0  # ms


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "release")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0, help="perf_analyzer measurement window")
    ap.add_argument("--concurrency", default="1,32")
    a = ap.parse_args()

    found = interop_util.find_perf_analyzer(str(ROOT / ".venv"))
    if found is None:
        sys.exit("bench_grpc: perf_analyzer not found (scripts/install-deps.sh)")
    pa, env = found
    ts = run_tritonserver.find_tritonserver(ROOT / ".venv-triton")
    if ts is None:
        sys.exit("bench_grpc: tritonserver not found in .venv-triton (scripts/install-deps.sh)")
    server_bin = a.build / "tools" / "jitembed-server"

    tmp = Path(tempfile.mkdtemp(prefix="bench_grpc_"))
    data = tmp / "data.json"
    data.write_text(json.dumps({"data": [{"text": [t]} for t in CAPTIONS]}))

    grpc_port = interop_util.free_port()
    jit = interop_util.Server(str(server_bin), ["--grpc-port", str(grpc_port), "--model",
                                                "text-embed:text_dim=8,text_max_length=8", "--max-batch", "64",
                                                "--max-queue-delay-us", "2000"], log_path=str(tmp / "jitembed.log"))
    tport = run_tritonserver.free_port()
    triton = run_tritonserver.Server(ts, ROOT / ".venv-triton", ROOT / "tests" / "triton" / "models", tmp / "triton.log",
                                     ["--allow-grpc=true", f"--grpc-port={tport}", "--grpc-address=127.0.0.1"])
    if not triton.start(90.0):
        jit.stop()
        sys.exit(f"bench_grpc: tritonserver did not start:\n{run_tritonserver.tail(tmp / 'triton.log')}")
    targets = {
        ("jitembed", "grpc"): (f"127.0.0.1:{grpc_port}", "text-embed"),
        ("jitembed", "http"): (jit.url, "text-embed"),
        ("triton", "grpc"): (f"127.0.0.1:{tport}", "jit_text"),
        ("triton", "http"): (triton.url.replace("http://", ""), "jit_text"),
    }
    conc = [int(c) for c in a.concurrency.split(",")]
    best = {}
    try:
        for r in range(a.rounds):
            order = list(targets.items())
            order = order[r % len(order):] + order[:r % len(order)]
            for c in conc:
                for (server, proto), (url, model) in order:
                    rps, p99 = perf(pa, env, url, proto, model, c, a.seconds, str(data), str(tmp / "pa.csv"))
                    k = (server, proto, c)
                    if k not in best or rps > best[k][0]:
                        best[k] = (rps, p99)
                    print(f"bench_grpc: round {r + 1} {server:8s} {proto:4s} c={c:<3d} {rps:9.0f} req/s  p99 {p99:7.2f} ms",
                          file=sys.stderr, flush=True)
    finally:
        jit_rc = jit.stop()
        triton.stop()
    print(f"{'server':10s} {'proto':6s} {'c':>4s} {'req/s':>10s} {'p99 ms':>8s}")
    for (server, proto, c), (rps, p99) in sorted(best.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        print(f"{server:10s} {proto:6s} {c:4d} {rps:10.0f} {p99:8.2f}")
    lines = []
    for (server, proto, c), (rps, p99) in sorted(best.items()):
        lines.append({"bench": "grpc", "server": server, "protocol": proto, "concurrency": c, "req_per_s": round(rps, 1),
                      "p99_ms": round(p99, 3)})
    ok = True
    for proto in ("grpc", "http"):
        for c in conc:
            j, t = best[("jitembed", proto, c)], best[("triton", proto, c)]
            ratio = j[0] / t[0]
            met = ratio >= 2.0 and j[1] <= t[1]
            if proto == "grpc":
                ok &= met
            print(f"{proto} c={c}: jitembed / triton = {ratio:.2f}x req/s, p99 {j[1]:.2f} vs {t[1]:.2f} ms"
                  + (f"  (target >= 2x at <= p99: {'met' if met else 'MISSED'})" if proto == "grpc" else ""))
            lines.append({"bench": "grpc_ratio", "protocol": proto, "concurrency": c, "jitembed_over_triton": round(ratio, 3),
                          "p99_jitembed_ms": round(j[1], 3), "p99_triton_ms": round(t[1], 3),
                          **({"target_met": met} if proto == "grpc" else {})})
    for line in lines:
        print(json.dumps(line))
    if jit_rc != 0:
        print(f"bench_grpc: jitembed-server exited {jit_rc}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
