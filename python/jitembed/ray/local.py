"""A throwaway single-node Ray cluster on loopback, for tests, benchmarks and the example:
``ray start --head --node-ip-address 127.0.0.1`` (dashboard off, explicit CPUs, small object store, its own
temp dir), a driver connected to it and Serve's HTTP proxy on 127.0.0.1. At the end it stops that cluster's
processes only (found by its temp dir and GCS address, with their children), not ``ray stop --force``, which
would kill every Ray cluster of this user on the machine (two test runs at once killed each other's)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import signal
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterator, Optional, Set


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cluster_pids(temp_dir: str, gcs_address: str) -> Set[int]:
    """The processes of the cluster started with this temp dir: those whose command line names the temp dir
    (GCS, raylet, monitors, dashboard) or the GCS address (Ray's client server), and all their descendants
    (workers and agents are the raylet's children)."""
    parent: Dict[int, int] = {}
    roots: Set[int] = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        parent[int(d)] = ppid
        if temp_dir in cmd or f"--address={gcs_address}" in cmd or f"--gcs-address={gcs_address}" in cmd:
            roots.add(int(d))
    pids, grown = set(roots), True
    while grown:
        kids = {p for p, pp in parent.items() if pp in pids and p not in pids}
        grown = bool(kids)
        pids |= kids
    pids.discard(os.getpid())
    return pids


def _stop_cluster(temp_dir: str, gcs_address: str, grace_s: float = 2.0) -> None:
    """SIGTERM to this cluster's processes, SIGKILL to those left after grace_s. Short: the driver has shut
    Serve down and disconnected already, and Ray 2.60's gcs_server, raylet, monitor and runtime-env agent do
    not exit on SIGTERM (measured: still asleep 10 s later), so a longer grace only waited (10 s a test run)."""
    pids = _cluster_pids(temp_dir, gcs_address)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 2.0)
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if os.path.exists(f"/proc/{p}") and not _zombie(p)}
            time.sleep(0.1)
        if not pids:
            return


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@contextlib.contextmanager
def local_cluster(num_cpus: int = 4, object_store_mb: int = 150, http_port: Optional[int] = None, num_gpus: int = 0,
                  extra_env: Optional[Dict[str, str]] = None, start_timeout_s: float = 120,
                  serve: bool = True) -> Iterator[Dict[str, str]]:
    """Yields {"gcs": "127.0.0.1:P", "http": "127.0.0.1:P", "temp_dir": ...} ("http" empty with serve=False: no
    Serve proxy, e.g. for jitembed.ray.hybrid). Workers get this process's environment plus PYTHONPATH naming
    the directory that holds the jitembed package (replicas and actors import it)."""
    import ray

    ray_bin = str(Path(sys.executable).with_name("ray"))
    pkg_root = os.path.abspath(str(Path(__file__).parents[2]))
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's unix socket paths have a length limit
    gcs_port = free_port()
    env = dict(os.environ)
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH", "")) if p)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    # Ray replaces a loopback --node-ip-address by the machine's address unless "Ray clusters" are off
    # (its local-only mode for macOS/Windows): then the node, the driver and every worker use 127.0.0.1.
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # In that mode Ray 2.60 turns token authentication on; loopback only, a throwaway cluster: off.
    env["RAY_AUTH_MODE"] = "disabled"
    # Serve kills a proxy that is not ready within 5 s (then 10, 15 s, ...) and a proxy or replica whose health
    # check takes over 10 s. On a small machine under load (2 cores busy compiling) the proxy's first start
    # (importing Serve, FastAPI, uvicorn) takes longer, and serve.start() fails on the killed proxy: wait 60 s.
    for k in ("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"):
        env.setdefault(k, "60")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for k in ("PYTHONPATH", "RAY_USAGE_STATS_ENABLED", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE",
              "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", *(extra_env or {})):
        os.environ[k] = env[k]
    # This driver imported Ray before: its constant was read at import time.
    import ray._private.ray_constants as ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False
    cmd = [ray_bin, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(gcs_port), "--include-dashboard=false",
           "--num-cpus", str(num_cpus), "--num-gpus", str(num_gpus), "--object-store-memory", str(object_store_mb * 1024 * 1024),
           "--temp-dir", temp_dir, "--disable-usage-stats"]
    started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=start_timeout_s)
    try:
        if started.returncode != 0:
            raise RuntimeError(f"ray start failed: {started.stdout}\n{started.stderr}")
        ray.init(address=f"127.0.0.1:{gcs_port}", namespace="jitembed", log_to_driver=False)
        http = ""
        if serve:
            from ray import serve as ray_serve

            port = http_port or free_port()
            ray_serve.start(http_options={"host": "127.0.0.1", "port": port})
            http = f"127.0.0.1:{port}"
        yield {"gcs": f"127.0.0.1:{gcs_port}", "http": http, "temp_dir": temp_dir}
    finally:
        if ray.is_initialized() and serve:  # (serve.shutdown() would start a Ray instance of its own otherwise)
            from ray import serve as ray_serve

            with contextlib.suppress(Exception):
                ray_serve.shutdown()
        if ray.is_initialized():
            with contextlib.suppress(Exception):
                ray.shutdown()
        _stop_cluster(temp_dir, f"127.0.0.1:{gcs_port}")
        shutil.rmtree(temp_dir, ignore_errors=True)
