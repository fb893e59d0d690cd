#!/usr/bin/env python3
"""System shared memory vs binary HTTP vs gRPC on one host, through perf_analyzer, side by side in one run.

For each output size (64 KiB, 1 MiB, 16 MiB per row) one jitembed-server (--grpc-port) serves the reference
text-embed with text_dim D and text_max_length L chosen so that one row's outputs (sequence [L, D] f32 +
mask [L] u8 + pooled [D] f32; perf_analyzer asks for every output) are about that size. perf_analyzer
(.venv, tests/python/interop_util.py) drives it with one caption per request at --concurrency, in three
arms: -i http (binary tensors), -i grpc, and -i http --shared-memory system --output-shared-memory-size
(inputs and outputs through POSIX shared-memory regions; only the small JSON travels on the socket). The
arms run in interleaved rounds (best round kept) against the same server.
Target (issue #20): shm >= 3x the socket's requests/s at 16 MiB.

The model's own time per request (compute_infer from the server's statistics, the same in every arm) is
printed next to the arms: it bounds what any transport can reach (model_bound_ceiling_req_per_s). All three
arms use perf_analyzer's own client, so its costs (e.g. reading a 16 MiB HTTP body) are part of the socket arms.

  .venv/bin/python benchmarks/server/bench_shm.py [--build build/release] [--rounds 2] [--seconds 2]

Prints a table, then one JSON object per result line.
"""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

import interop_util  # noqa: E402

# label -> (text_dim D, text_max_length L, rows per request): per row sequence L*D*4 bytes + L (mask) + 4*D
# (pooled). text-embed allows L <= 512, D <= 4096: 16 MiB is two rows of 8 MiB (perf_analyzer -b 2).
SIZES = {"64KiB": (1024, 16, 1), "1MiB": (1024, 256, 1), "16MiB": (4096, 512, 2)}
CAPTIONS = ["a photo of a cat", "a red car parked by the sea", "two dogs on a sofa", "x"]


def out_bytes(d, l, b):
    return b * (l * d * 4 + l + d * 4)


def perf(pa, env, arm, url_http, url_grpc, c, seconds, data, out_csv, shm_size, batch):
    cmd = [pa, "-m", "text-embed", "-b", str(batch), "--concurrency-range", str(c), "--input-data", data,
           "--measurement-interval", str(int(seconds * 1000)), "--max-trials", "3", "--stability-percentage", "999",
           "-f", out_csv]
    if arm == "grpc":
        cmd += ["-u", url_grpc, "-i", "grpc"]
    else:
        cmd += ["-u", url_http, "-i", "http"]
    if arm == "shm":
        cmd += ["--shared-memory", "system", "--output-shared-memory-size", str(shm_size)]
    p = subprocess.run(cmd, env=env, capture_output=True, timeout=120 + 6 * seconds)
    out = (p.stdout + p.stderr).decode(errors="replace")
    if p.returncode != 0 or "had error" in out:
        raise RuntimeError(f"perf_analyzer {arm} c={c} failed ({p.returncode}):\n{out[-3000:]}")
    with open(out_csv) as f:
        row = list(csv.DictReader(f))[0]
    return float(row["Inferences/Second"]) / batch, float(row["p99 latency"]) / 1000.0  # requests/s, ms


def model_us_per_request(url):
    """Mean compute_infer microseconds per request from the server's statistics (the model's own time)."""
    with urllib.request.urlopen(f"http://{url}/v2/models/text-embed/stats", timeout=5) as r:
        st = json.loads(r.read())["model_stats"][0]
    inf = st["inference_stats"]
    n = max(1, int(inf["success"]["count"]))
    return int(inf["compute_infer"]["ns"]) / n / 1000.0, int(st.get("execution_count", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "release")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=2.0, help="perf_analyzer measurement window")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--sizes", default=",".join(SIZES))
    a = ap.parse_args()

    found = interop_util.find_perf_analyzer(str(ROOT / ".venv"))
    if found is None:
        sys.exit("bench_shm: perf_analyzer not found (scripts/install-deps.sh)")
    pa, env = found
    server_bin = a.build / "tools" / "jitembed-server"
    tmp = Path(tempfile.mkdtemp(prefix="bench_shm_"))
    data = tmp / "data.json"
    data.write_text(json.dumps({"data": [{"text": [t]} for t in CAPTIONS]}))
    arms = ("http", "grpc", "shm")
    best, model_us = {}, {}
    for size in a.sizes.split(","):
        d, l, b = SIZES[size]
        nbytes = out_bytes(d, l, b)
        grpc_port = interop_util.free_port()
        srv = interop_util.Server(str(server_bin), ["--grpc-port", str(grpc_port), "--model",
                                                    f"text-embed:text_dim={d},text_max_length={l}",
                                                    "--max-batch", str(b), "--max-queue-delay-us", "0"],
                                  log_path=str(tmp / f"server_{size}.log"))
        try:
            for r in range(a.rounds):
                order = arms[r % 3:] + arms[:r % 3]
                for arm in order:
                    rps, p99 = perf(pa, env, arm, srv.url, f"127.0.0.1:{grpc_port}", a.concurrency, a.seconds,
                                    str(data), str(tmp / "pa.csv"), b * l * d * 4, b)
                    k = (size, arm)
                    if k not in best or rps > best[k][0]:
                        best[k] = (rps, p99)
                    print(f"bench_shm: round {r + 1} {size:6s} {arm:4s} {rps:9.1f} req/s {rps * nbytes / 1e6:9.1f} MB/s "
                          f"p99 {p99:7.2f} ms", file=sys.stderr, flush=True)
            model_us[size] = model_us_per_request(srv.url)[0]
        finally:
            rc = srv.stop()
            if rc != 0:
                print(f"bench_shm: jitembed-server exited {rc}", file=sys.stderr)

    print(f"{'size':6s} {'out bytes':>10s} {'arm':5s} {'req/s':>9s} {'MB/s out':>9s} {'p99 ms':>8s} {'model ms/req':>12s}")
    lines = []
    for size in a.sizes.split(","):
        d, l, b = SIZES[size]
        nbytes = out_bytes(d, l, b)
        for arm in arms:
            rps, p99 = best[(size, arm)]
            print(f"{size:6s} {nbytes:10d} {arm:5s} {rps:9.1f} {rps * nbytes / 1e6:9.1f} {p99:8.2f} {model_us[size] / 1000:12.3f}")
            lines.append({"bench": "shm", "size": size, "output_bytes_per_request": nbytes, "arm": arm,
                          "req_per_s": round(rps, 1), "output_mb_per_s": round(rps * nbytes / 1e6, 1),
                          "p99_ms": round(p99, 3), "model_ms_per_request": round(model_us[size] / 1000, 3),
                          "concurrency": a.concurrency, "text_dim": d, "text_max_length": l, "rows_per_request": b})
    print()
    ok = True
    for size in a.sizes.split(","):
        shm = best[(size, "shm")][0]
        r_http, r_grpc = shm / best[(size, "http")][0], shm / best[(size, "grpc")][0]
        line = {"bench": "shm_ratio", "size": size, "shm_over_http": round(r_http, 3), "shm_over_grpc": round(r_grpc, 3),
                "model_ms_per_request": round(model_us[size] / 1000, 3),
                "model_bound_ceiling_req_per_s": round(1e6 / model_us[size], 1) if model_us[size] else None}
        msg = f"{size}: shm / http = {r_http:.2f}x, shm / grpc = {r_grpc:.2f}x"
        if size == "16MiB":
            met = min(r_http, r_grpc) >= 3.0
            ok &= met
            line.update({"target": 3.0, "target_met": met})
            msg += f"  (target >= 3x the socket: {'met' if met else 'MISSED'})"
        print(msg)
        lines.append(line)
    for line in lines:
        print(json.dumps(line))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
