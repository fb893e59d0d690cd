#!/usr/bin/env python3
"""Arm p of bench_models.py: jitembed.Server(model_repository=...) in this Python process: the repository's
TorchScript files run by the Python torch as jitembed.Model (python/jitembed/_repository.py), everything else
(HTTP, preprocessing, batching) the same C++ as jitembed-server.

  python_server.py --repo DIR --port P --threads T
Serves until SIGTERM."""
import argparse
import signal
import threading


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    import jitembed

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with jitembed.Server(model_repository=args.repo, host="127.0.0.1", port=args.port, io_threads=1, preprocess_threads=1):
        print(f"python_server: serving {args.repo} on 127.0.0.1:{args.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
