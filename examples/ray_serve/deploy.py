#!/usr/bin/env python3
"""Deploys the jitembed embedding service on a Ray cluster (Ray Serve) and keeps it running.

  # on a running cluster (ray start --head ... on the head node; see docs/ray.md):
  RAY_ADDRESS=auto python examples/ray_serve/deploy.py --app embed --models text-embed image-latent:max_batch_size=32 \\
      --min-replicas 1 --max-replicas 8 --num-gpus 0.5
  # trainers: client_options.endpoints.url = "http://<head>:8000/embed/endpoints"

  # a model update in place (user_config -> each replica's hot swap; the old version is unloaded):
  RAY_ADDRESS=auto python examples/ray_serve/deploy.py ... --update text-embed=2:text-embed:text_dim=64

  # everything on this machine, for a try (a loopback cluster started and stopped by the script):
  python examples/ray_serve/deploy.py --local --seconds 30
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
import urllib.request

import ray
from ray import serve

import jitembed.ray as jray


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--app", default="embed", help="Serve application name; also the route prefix /<app>")
    ap.add_argument("--models", nargs="+", default=["text-embed"], help="model specs as jitembed-server --model takes them")
    ap.add_argument("--replicas", type=int, help="a fixed number of replicas (instead of autoscaling)")
    ap.add_argument("--min-replicas", type=int, default=1)
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--target-rows", type=float, default=16, help="admitted rows per replica the autoscaler aims at")
    ap.add_argument("--num-gpus", type=float, default=0.0, help="GPUs per replica (fractional allowed)")
    ap.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica")
    ap.add_argument("--update", action="append", default=[], metavar="NAME=VERSION:SPEC",
                    help="load this model version in place through user_config (hot swap)")
    ap.add_argument("--http-port", type=int, default=8000, help="Serve's proxy port (when this script starts Serve)")
    ap.add_argument("--local", action="store_true", help="start a loopback Ray cluster for this run")
    ap.add_argument("--seconds", type=float, default=0, help="exit (and delete the app) after this long; 0: keep running")
    args = ap.parse_args()

    user_config = None
    if args.update:
        entries = []
        for u in args.update:
            head, _, spec = u.partition(":")
            name, _, version = head.partition("=")
            entries.append({"name": name, "version": version or "1", "spec": f"{spec}" if spec else None})
        user_config = {"models": entries}
    scaling = {} if args.replicas else {"autoscaling": jray.autoscaling_config(
        min_replicas=args.min_replicas, max_replicas=args.max_replicas, target_rows_per_replica=args.target_rows)}
    app = jray.build_app(args.models, num_replicas=args.replicas, num_gpus=args.num_gpus, num_cpus=args.num_cpus,
                         user_config=user_config, **scaling)

    with contextlib.ExitStack() as stack:
        if args.local:
            from jitembed.ray.local import local_cluster

            cluster = stack.enter_context(local_cluster(num_cpus=4, http_port=args.http_port))
            http = cluster["http"]
        else:
            ray.init(address="auto", namespace="jitembed")
            serve.start(http_options={"host": "0.0.0.0", "port": args.http_port})
            http = f"{ray.util.get_node_ip_address()}:{args.http_port}"
        serve.run(app, name=args.app, route_prefix=f"/{args.app}", blocking=False)
        url = f"http://{http}/{args.app}/endpoints"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    listed = [l for l in r.read().decode().splitlines() if l.startswith("http://")]
                if listed:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        print(f"jitembed on Ray Serve: app '{args.app}', endpoints URL {url}")
        print("  " + "\n  ".join(listed) if listed else "  (no replica registered yet)")
        print(f"  KServe v2 through Ray's proxy: http://{http}/{args.app}/v2/models/<model>/infer")
        if args.seconds > 0:
            time.sleep(args.seconds)
            serve.delete(args.app)
            jray.kill_registry(args.app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
