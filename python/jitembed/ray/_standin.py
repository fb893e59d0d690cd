"""A development stand-in for ``jitembed.Server`` with the same methods, running the ``jitembed-server``
program as a child process (killed with its parent through PR_SET_PDEATHSIG). The deployment uses the
in-process binding whenever it is importable; this exists for environments where the extension is not built
(set ``JITEMBED_RAY_SERVER=subprocess`` to force it, ``JITEMBED_SERVER_BIN`` to name the program)."""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import shutil
import signal
import subprocess
import threading
from typing import Dict, List, Optional, Sequence, Tuple


class StandinError(RuntimeError):
    """A failed call on the stand-in (the binding raises jitembed.Error subclasses instead)."""


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _spec_params(spec: str) -> Dict[str, str]:
    params: Dict[str, str] = {}
    _, _, rest = spec.partition(":")
    for kv in filter(None, rest.split(",")):
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise StandinError(f"model spec '{spec}': '{kv}' is not key=value")
        params[k] = v
    return params


class SubprocessServer:
    def __init__(self, models: Sequence[str], host: str = "127.0.0.1", port: int = 0, io_threads: int = 1,
                 preprocess_threads: int = 0, drain_grace_ms: int = 0, binary: Optional[str] = None):
        binary = binary or os.environ.get("JITEMBED_SERVER_BIN") or shutil.which("jitembed-server")
        if not binary:
            raise StandinError("jitembed-server not found (set JITEMBED_SERVER_BIN)")
        args = [binary, "--host", host, "--port", str(port), "--io-threads", str(io_threads),
                "--preprocess-threads", str(preprocess_threads), "--drain-grace-ms", str(drain_grace_ms),
                "--device", "cpu"]
        for m in models:
            args += ["--model", m]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      preexec_fn=_die_with_parent)
        line = self._proc.stdout.readline()
        if "listening on" not in line:
            err = self._proc.stderr.read()
            self._proc.wait()
            raise StandinError(f"jitembed-server did not start: {line.strip()} {err.strip()}")
        self.url = line.strip().rsplit("http://", 1)[-1]
        self.host, _, p = self.url.rpartition(":")
        self.port = int(p)
        threading.Thread(target=self._proc.stdout.read, daemon=True).start()  # never let a pipe fill up
        threading.Thread(target=self._proc.stderr.read, daemon=True).start()
        self._local = threading.local()
        self._draining = False

    # -- HTTP to the child -------------------------------------------------------------------------------
    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        return c

    def handle(self, method: str, target: str, headers: Dict[str, str], body: bytes) -> Tuple[int, Dict[str, str], bytes]:
        for attempt in (0, 1):  # a kept-alive connection the server closed is reopened once
            c = self._conn()
            try:
                c.request(method, target, body=body or None, headers=dict(headers or {}))
                r = c.getresponse()
                data = r.read()
                return r.status, {k: v for k, v in r.getheaders()}, data
            except (ConnectionError, http.client.HTTPException, OSError):
                c.close()
                self._local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _json(self, method: str, target: str, body: Optional[dict] = None):
        status, _, data = self.handle(method, target, {"Content-Type": "application/json"},
                                      json.dumps(body).encode() if body is not None else b"")
        if status != 200:
            raise StandinError(f"{method} {target}: {status} {data.decode(errors='replace')}")
        return json.loads(data) if data else None

    # -- the jitembed.Server methods ---------------------------------------------------------------------
    def load(self, name: str, version: str = "1", spec: Optional[str] = None) -> None:
        params: Dict[str, str] = _spec_params(spec) if spec else {}
        params["version"] = str(version)
        self._json("POST", f"/v2/repository/models/{name}/load", {"parameters": params})

    def unload(self, name: str, version: Optional[str] = None) -> None:
        body = {"parameters": {"version": str(version)}} if version is not None else {}
        self._json("POST", f"/v2/repository/models/{name}/unload", body)

    def loaded(self) -> List[Tuple[str, str]]:
        return [(m["name"], m["version"]) for m in self._json("POST", "/v2/repository/index")]

    def stats(self) -> Dict[str, dict]:
        """Per model: queued rows (jitembed_pending_requests) and in-flight rows (jitembed_inflight_rows)."""
        status, _, data = self.handle("GET", "/metrics", {}, b"")
        out: Dict[str, dict] = {}
        for line in data.decode().splitlines():
            for metric, key in (("jitembed_pending_requests{", "queued_rows"), ("jitembed_inflight_rows{", "inflight_rows")):
                if line.startswith(metric):
                    labels, _, value = line[len(metric):].partition("} ")
                    name = labels.split('model="', 1)[1].split('"', 1)[0]
                    out.setdefault(name, {"queued_rows": 0, "inflight_rows": 0})[key] += int(float(value))
        return out

    def status(self) -> Dict[str, dict]:
        """The load part of stats() (the binding's status() is the cheap subset; here both read /metrics)."""
        return self.stats()

    def ready(self) -> bool:
        try:
            return self.handle("GET", "/v2/health/ready", {}, b"")[0] == 200
        except OSError:
            return False

    def begin_drain(self) -> None:
        # The program drains on SIGTERM (readiness and new infers 503 for --drain-grace-ms, then stop).
        if not self._draining and self._proc.poll() is None:
            self._draining = True
            self._proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        self.begin_drain()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
