"""Fixtures of the Ray Serve tests: a local Ray cluster on loopback (started and stopped here, bounded in time),
Serve's proxy on 127.0.0.1, the C++ client program and jitembed-server for reference results.

Environment (set by the ctest registration, tests/python/ray/CMakeLists.txt):
  JITEMBED_SERVER_BIN      jitembed-server (reference results; the subprocess stand-in when the binding is absent)
  JITEMBED_RAY_CLIENT_BIN  ray_embed_client (the C++ JIT client as a program)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Callable, Dict, List, Optional, Set, Tuple

import pytest

def eventually(pred: Callable[[], object], timeout_s: float, what: str, step_s: float = 0.1):
    """Polls pred() until it returns something truthy (returned) or the deadline passes (fails the test)."""
    end = time.monotonic() + timeout_s
    last_exc: Optional[BaseException] = None
    while time.monotonic() < end:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - a poll may hit a replica that is still starting
            last_exc = e
        time.sleep(step_s)
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}" + (f" (last error: {last_exc!r})" if last_exc else ""))


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def http_post(url: str, body: bytes, headers: Dict[str, str], timeout: float = 10.0):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _listening_tcp() -> List[Tuple[str, int, str]]:
    """(address in /proc's hex, port, socket inode) of every listening TCP socket (IPv4 and IPv6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                parts = line.split()
                if parts[3] == "0A":  # TCP_LISTEN
                    addr, port = parts[1].rsplit(":", 1)
                    out.append((addr, int(port, 16), parts[9]))
    return out


def _socket_inodes(pid: str) -> Set[str]:
    """Inodes of the sockets process `pid` holds (empty when it is gone or not ours to read)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def wildcard_listeners() -> List[str]:
    """Listening TCP sockets on a wildcard or non-loopback address held by Ray's processes (ray::*, raylet,
    gcs_server, the dashboard agent, the Ray client server) or by jitembed servers, as "comm addr:port"."""
    owners = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if comm.startswith("ray::") or comm in ("raylet", "gcs_server") or "ray/" in cmdline or "jitembed" in comm:
            owners.update(dict.fromkeys(_socket_inodes(pid), comm))
    loopback = ("0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000")
    return [f"{owners[inode]} {addr}:{port}" for addr, port, inode in _listening_tcp() if inode in owners and addr not in loopback]


def listening_pids(port: int) -> List[int]:
    """Processes holding a listening TCP socket on `port` (from /proc: no external tool)."""
    inodes = {inode for _, p, inode in _listening_tcp() if p == port}
    return [int(pid) for pid in filter(str.isdigit, os.listdir("/proc")) if _socket_inodes(pid) & inodes]


def endpoint_lines(text: str) -> List[str]:
    return sorted(l.split("#", 1)[0].strip() for l in text.splitlines() if l.split("#", 1)[0].strip())


@pytest.fixture(scope="session")
def bins() -> Dict[str, str]:
    out = {}
    for key, env in (("server", "JITEMBED_SERVER_BIN"), ("client", "JITEMBED_RAY_CLIENT_BIN")):
        path = os.environ.get(env)
        if not path or not os.access(path, os.X_OK):
            pytest.fail(f"{env} is not set to a built program (run through ctest, label ray)")
        out[key] = path
    return out


def keep_logs_if_failed(session, temp_dir: str) -> None:
    """After a failed test, copies the cluster's logs (Serve's proxy and replica logs say why a request answered
    500) out of its temp dir, which the cluster's teardown removes, to /tmp/jitembed-ray-logs-<pid>."""
    if not session.testsfailed:
        return
    keep = Path(tempfile.gettempdir()) / f"jitembed-ray-logs-{os.getpid()}"
    try:
        shutil.copytree(Path(temp_dir) / "session_latest" / "logs", keep, dirs_exist_ok=True)
        print(f"\nray_cluster: a test failed; the cluster's logs are kept in {keep}", file=sys.stderr)
    except OSError as e:
        print(f"\nray_cluster: a test failed; its logs could not be kept: {e}", file=sys.stderr)


@pytest.fixture(scope="session")
def ray_cluster(bins, request):
    """A Ray cluster on 127.0.0.1 (jitembed.ray.local: dashboard off, 4 logical CPUs, 150 MB object store) and
    Serve's proxy on a free loopback port; at the end it stops that cluster's own processes (keeping its logs
    when a test failed)."""
    from jitembed.ray.local import local_cluster

    # one logical GPU (no device behind it): fractional num_gpus placement and ray.get_gpu_ids() are testable
    with local_cluster(num_cpus=4, num_gpus=1, object_store_mb=150, extra_env={"JITEMBED_SERVER_BIN": bins["server"]}) as c:
        yield c
        keep_logs_if_failed(request.session, c["temp_dir"])


class ClientRun:
    """ray_embed_client running in the background; result() waits for its summary."""

    def __init__(self, bins, args: List[str], out: Optional[Path]):
        self.out = out
        self.proc = subprocess.Popen([bins["client"], *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result(self, timeout_s: float = 120):
        try:
            stdout, stderr = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            stdout, stderr = self.proc.communicate()
            pytest.fail(f"ray_embed_client did not finish in {timeout_s} s: {stderr[-2000:]}")
        lines = [l for l in stdout.splitlines() if l.startswith("{")]
        assert lines, f"ray_embed_client printed no summary (rc {self.proc.returncode}): {stderr[-2000:]}"
        summary = json.loads(lines[-1])
        samples = [json.loads(l) for l in self.out.read_text().splitlines()] if self.out and self.out.exists() else []
        return summary, samples


@pytest.fixture
def run_client(bins, tmp_path):
    runs: List[ClientRun] = []

    def start(args: List[str], samples: bool = True) -> ClientRun:
        out = tmp_path / f"client{len(runs)}.jsonl" if samples else None
        r = ClientRun(bins, args + (["--out", str(out)] if out else []), out)
        runs.append(r)
        return r

    yield start
    for r in runs:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()


@pytest.fixture
def reference_server(bins):
    """jitembed-server processes started with given model specs (reference results); stopped at the end."""
    procs = []

    def start(models: List[str]) -> str:
        args = [bins["server"], "--host", "127.0.0.1", "--port", "0", "--device", "cpu", "--io-threads", "1", "--preprocess-threads", "1"]
        for m in models:
            args += ["--model", m]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert "listening on" in line, line
        return line.strip().rsplit(" ", 1)[-1]  # http://127.0.0.1:PORT

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=30)
