#!/usr/bin/env python3
"""jitembed on Ray Serve: req/s and p50/p99 through
  (a) the replicas directly (the C++ JIT client following /<app>/endpoints), 1 vs 2 replicas,
  (b) the compatibility path: KServe v2 through Ray's HTTP proxy into the deployment (Server.handle),
  (c) a plain no-op Ray Serve deployment behind the same proxy (a canned KServe answer, no model).
Goals: (a) 2 replicas >= 1.8x 1 replica; (b) >= 1.5x (c).

One load generator for every case: ray_embed_client (the C++ JIT client as a program, closed loop,
--concurrency requests in flight, one row per request, the same body). (a) uses a `sleep_us` model with
max_batch_size 4, so a replica's capacity is fixed by its emulated latency rather than by the 2 cores;
(b) uses the model without sleep (the proxy is the cost being measured), (c) answers without any model.

  .venv/bin/python benchmarks/python/bench_ray.py --client build/h-ray/tests/python/ray/ray_embed_client \\
      --server build/h-ray/tools/jitembed-server [--seconds 8] [--concurrency 16]

Prints a table, then one JSON object per result line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from ray import serve  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402

import jitembed.ray as jray  # noqa: E402
from jitembed.ray.local import local_cluster  # noqa: E402

SLEEP_MODEL = "text-embed:text_dim=16,text_max_length=16,max_batch_size=4,max_queue_delay_us=200,sleep_us=10000"
FAST_MODEL = "text-embed:text_dim=16,text_max_length=16,max_batch_size=32,max_queue_delay_us=200"


@serve.deployment(name="noop", max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.25})
class NoOp:
    """Answers every POST with one canned KServe response and every GET with one canned metadata body."""

    def __init__(self, infer_body: bytes, infer_headers: dict, meta_body: bytes):
        self.infer_body, self.infer_headers, self.meta_body = infer_body, infer_headers, meta_body

    async def __call__(self, request: Request) -> Response:
        if request.method == "POST":
            await request.body()
            return Response(self.infer_body, headers=self.infer_headers)
        return Response(self.meta_body, media_type="application/json")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def wait_for(pred, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            v = pred()
            if v:
                return v
        except Exception:
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


def endpoints(http: str, prefix: str):
    return [l.strip() for l in get(f"http://{http}{prefix}/endpoints").splitlines() if l.strip() and not l.startswith("#")]


def load(client: str, target_args, seconds: float, concurrency: int) -> dict:
    cmd = [client, *target_args, "--duration-s", str(seconds), "--concurrency", str(concurrency), "--rows-per-request", "1",
           "--timeout-ms", "30000"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError(f"client failed: {p.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--client", default=str(ROOT / "build/h-ray/tests/python/ray/ray_embed_client"))
    ap.add_argument("--server", default=str(ROOT / "build/h-ray/tools/jitembed-server"))
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    results = []

    def record(case: str, replicas: int, s: dict, note: str = ""):
        r = {"case": case, "replicas": replicas, "concurrency": args.concurrency, "req_per_s": round(s["req_per_s"], 1),
             "p50_ms": round(s["p50_ms"], 2), "p99_ms": round(s["p99_ms"], 2), "failed": s["failed"], "requests": s["requests"]}
        if note:
            r["note"] = note
        results.append(r)
        print(f"  {case:<28} replicas={replicas} req/s={r['req_per_s']:>9} p50={r['p50_ms']:>8} ms p99={r['p99_ms']:>8} ms"
              f" failed={r['failed']}", file=sys.stderr, flush=True)

    with local_cluster(num_cpus=4, object_store_mb=150, extra_env={"JITEMBED_SERVER_BIN": args.server}) as c:
        http = c["http"]
        small = {"server_options": {"io_threads": 1, "preprocess_threads": 1}, "num_cpus": 0.25, "health_check_period_s": 5.0}
        # (a) replicas directly, 1 then 2.
        for n in (1, 2):
            serve.run(jray.build_app([SLEEP_MODEL], num_replicas=n, **small), name="direct", route_prefix="/direct", blocking=False)
            wait_for(lambda: len(endpoints(http, "/direct")) == n, 120, f"{n} replicas")
            s = load(args.client, ["--endpoints-url", f"http://{http}/direct/endpoints"], args.seconds, args.concurrency)
            record("a_direct_sleep10ms_b4", n, s)
        serve.delete("direct")
        jray.kill_registry("direct")

        # (b) compatibility path through Ray's proxy (route prefix "/": the client's /v2/... paths), 1 replica.
        serve.run(jray.build_app([FAST_MODEL], num_replicas=1, max_ongoing_requests=256, **small), name="compat", route_prefix="/",
                  blocking=False)
        wait_for(lambda: len(endpoints(http, "")) == 1, 120, "compat replica")
        direct_ep = endpoints(http, "")[0]
        s = load(args.client, ["--endpoints", f"http://{http}"], args.seconds, args.concurrency)
        record("b_compat_via_proxy", 1, s)
        # The same replica's server directly (no Ray in the path), for scale.
        s = load(args.client, ["--endpoints", direct_ep], args.seconds, args.concurrency)
        record("b_ref_same_server_direct", 1, s, "the compat replica's server without Ray's proxy")
        # Canned answers for the no-op deployment, from the real server.
        headers, body = jray.kserve_bytes_request("text", [b"bench-row-0"])
        req = urllib.request.Request(f"{direct_ep}/v2/models/text-embed/infer", data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            infer_body = r.read()
            infer_headers = {k: v for k, v in r.headers.items() if k.lower() in ("content-type", "inference-header-content-length")}
        meta_body = get(f"{direct_ep}/v2/models/text-embed").encode()
        serve.delete("compat")
        jray.kill_registry("compat")

        # (c) a plain no-op deployment behind the same proxy.
        serve.run(NoOp.bind(infer_body, infer_headers, meta_body), name="noop", route_prefix="/", blocking=False)
        wait_for(lambda: get(f"http://{http}/v2/models/text-embed"), 120, "no-op deployment")
        s = load(args.client, ["--endpoints", f"http://{http}"], args.seconds, args.concurrency)
        record("c_noop_via_proxy", 1, s)
        serve.delete("noop")

    by = {(r["case"], r["replicas"]): r for r in results}
    a1, a2 = by[("a_direct_sleep10ms_b4", 1)]["req_per_s"], by[("a_direct_sleep10ms_b4", 2)]["req_per_s"]
    b, cc = by[("b_compat_via_proxy", 1)]["req_per_s"], by[("c_noop_via_proxy", 1)]["req_per_s"]
    ratios = [
        {"goal": "a: 2 replicas / 1 replica >= 1.8", "ratio": round(a2 / a1, 2) if a1 else None, "pass": bool(a1) and a2 / a1 >= 1.8},
        {"goal": "b: compat path / no-op deployment >= 1.5", "ratio": round(b / cc, 2) if cc else None, "pass": bool(cc) and b / cc >= 1.5},
    ]
    print(f"{'case':<28} {'replicas':>8} {'req/s':>10} {'p50 ms':>9} {'p99 ms':>9} {'failed':>7}")
    for r in results:
        print(f"{r['case']:<28} {r['replicas']:>8} {r['req_per_s']:>10} {r['p50_ms']:>9} {r['p99_ms']:>9} {r['failed']:>7}")
    for g in ratios:
        print(f"{g['goal']}: {g['ratio']} ({'pass' if g['pass'] else 'MISSED'})")
    for r in results + ratios:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
