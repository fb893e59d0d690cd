#!/usr/bin/env python3
"""Starts a real Triton Inference Server (the `tritonserver` binary from the nvidia-pytriton wheel in
.venv-triton, CPU only) on a free loopback port as a test peer, and optionally runs a command against it.

    run_tritonserver.py [options] -- COMMAND [ARGS...]
        starts the server, waits until it and every model are ready, runs COMMAND with
        JITEMBED_TRITON_URL=http://127.0.0.1:PORT in its environment, stops the server (whatever
        happens: the command failing, timing out, this script being interrupted) and exits with the
        command's exit status.
    run_tritonserver.py [options]
        starts the server, prints JITEMBED_TRITON_URL=... and serves until SIGINT / SIGTERM.

Only HTTP is served (127.0.0.1, a free port) unless --grpc (then gRPC too, JITEMBED_TRITON_GRPC_URL); metrics
are disabled. The server's log goes to a
file (--log, default a temporary file) whose tail is printed when something fails.

Exit status: the command's; 1 when the server cannot be set up or started; 77 (ctest's skip) when
tritonserver is not installed and JITEMBED_SKIP_TRITON=1 (without it a missing install is an error:
run scripts/install-deps.sh). Standard library only.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SKIP = 77


def log(msg: str) -> None:
    print(f"run_tritonserver: {msg}", file=sys.stderr, flush=True)


def find_tritonserver(venv: Path) -> Path | None:
    for sp in sorted(venv.glob("lib/python3*/site-packages/pytriton/tritonserver")):
        if (sp / "bin" / "tritonserver").is_file() and (sp / "backends/python/triton_python_backend_stub").is_file():
            return sp
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url: str, timeout: float = 1.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return 0


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _kill_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _server_preexec() -> None:
    # The server gets SIGKILL if this launcher dies, even by SIGKILL (ctest's timeout); the Python backend
    # stubs exit by themselves when the server is gone. Own session: the whole group can be signalled.
    os.setsid()
    _kill_with_parent()


class Server:
    def __init__(self, ts: Path, venv: Path, models: Path, log_path: Path, extra: list[str], grpc: bool = False):
        self.ts, self.venv, self.models, self.log_path, self.extra = ts, venv, models, log_path, extra
        self.grpc, self.grpc_port = grpc, 0
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float) -> bool:
        """Starts on a free port; retries on new ports if the server dies early (a port race)."""
        for attempt in range(3):
            self.port = free_port()
            self.grpc_port = free_port() if self.grpc else 0
            env = dict(os.environ)
            # The Python backend stub embeds libpython3.11; with the venv's bin first on PATH, the embedded
            # interpreter finds the venv's python3 and so its site-packages (numpy).
            env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
            env.pop("PYTHONHOME", None)
            env.pop("PYTHONPATH", None)
            cmd = [
                str(self.ts / "bin" / "tritonserver"),
                f"--model-repository={self.models}",
                f"--backend-directory={self.ts / 'backends'}",
                f"--cache-directory={self.ts / 'caches'}",
                "--http-address=127.0.0.1", f"--http-port={self.port}",
                *([f"--allow-grpc=true", "--grpc-address=127.0.0.1", f"--grpc-port={self.grpc_port}"] if self.grpc
                  else ["--allow-grpc=false"]),
                "--allow-metrics=false",
                "--pinned-memory-pool-byte-size=0",
                "--exit-timeout-secs=5",
                # unique shared-memory names: several servers (parallel ctest, other agents) on one machine
                f"--backend-config=python,shm-region-prefix-name=jitembed{os.getpid()}_{attempt}_",
                *self.extra,
            ]
            with open(self.log_path, "ab") as logf:
                logf.write(f"\n=== {' '.join(cmd)}\n".encode())
                logf.flush()
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                             env=env, preexec_fn=_server_preexec)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                if http_status(self.url + "/v2/health/ready") == 200:
                    return True
                time.sleep(0.1)
            if self.proc.poll() is None:
                log(f"not ready after {timeout:.0f} s")
                self.stop()
                return False
            log(f"tritonserver exited with {self.proc.returncode} during start (attempt {attempt + 1})")
            if "address already in use" not in tail(self.log_path, 20).lower():
                return False
        return False

    def stop(self, grace: float = 8.0) -> None:
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log("tritonserver did not stop on SIGTERM; SIGKILL")
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", type=Path, default=Path(os.environ.get("JITEMBED_TRITON_VENV", ROOT / ".venv-triton")))
    ap.add_argument("--models", type=Path, default=HERE / "models", help="model repository")
    ap.add_argument("--log", type=Path, help="server log file (default: a temporary file, kept on failure)")
    ap.add_argument("--url-file", type=Path, help="also write the URL to this file")
    ap.add_argument("--grpc", action="store_true",
                    help="also serve gRPC on 127.0.0.1 (JITEMBED_TRITON_GRPC_URL=grpc://127.0.0.1:PORT)")
    ap.add_argument("--start-timeout", type=float, default=90.0)
    ap.add_argument("--timeout", type=float, default=0.0, help="kill COMMAND after this many seconds (0: none)")
    ap.add_argument("--server-arg", action="append", default=[], help="extra tritonserver argument (repeatable)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    ts = find_tritonserver(args.venv)
    if ts is None:
        msg = (f"no tritonserver with the Python backend stub under {args.venv} "
               "(run scripts/install-deps.sh, which installs nvidia-pytriton into .venv-triton)")
        if os.environ.get("JITEMBED_SKIP_TRITON") == "1":
            log(f"SKIP: {msg}; JITEMBED_SKIP_TRITON=1")
            return SKIP
        log(f"ERROR: {msg}; set JITEMBED_SKIP_TRITON=1 to skip the Triton tests instead")
        return 1

    tmp_log = args.log is None
    if tmp_log:
        fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    else:
        log_path = args.log
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")

    server = Server(ts, args.venv.resolve(), args.models.resolve(), log_path, args.server_arg, grpc=args.grpc)
    child: subprocess.Popen | None = None

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    rc = 1
    t0 = time.monotonic()
    try:
        if not server.start(args.start_timeout):
            log(f"ERROR: tritonserver did not start; log {log_path}:\n{tail(log_path)}")
            tmp_log = False  # keep it
            return 1
        log(f"tritonserver ready at {server.url} in {time.monotonic() - t0:.1f} s (log {log_path})")
        if args.url_file:
            args.url_file.write_text(server.url + "\n")
        if not command:
            print(f"JITEMBED_TRITON_URL={server.url}", flush=True)
            if server.grpc:
                print(f"JITEMBED_TRITON_GRPC_URL=grpc://127.0.0.1:{server.grpc_port}", flush=True)
            while server.proc.poll() is None:
                time.sleep(0.5)
            log(f"tritonserver exited with {server.proc.returncode}")
            return 1
        env = dict(os.environ, JITEMBED_TRITON_URL=server.url)
        if server.grpc:
            env["JITEMBED_TRITON_GRPC_URL"] = f"grpc://127.0.0.1:{server.grpc_port}"
        t1 = time.monotonic()
        child = subprocess.Popen(command, env=env, preexec_fn=_kill_with_parent)  # dies with the launcher too
        try:
            rc = child.wait(timeout=args.timeout or None)
        except subprocess.TimeoutExpired:
            log(f"ERROR: {command[0]} still running after {args.timeout:.0f} s; killed")
            child.kill()
            child.wait()
            rc = 124
        log(f"{Path(command[0]).name} exited with {rc} after {time.monotonic() - t1:.1f} s")
        if rc != 0:
            log(f"tritonserver log tail ({log_path}):\n{tail(log_path)}")
            tmp_log = False
        elif server.proc.poll() is not None:
            log(f"ERROR: tritonserver died during the command (exit {server.proc.returncode}):\n{tail(log_path)}")
            tmp_log, rc = False, 1
        return rc
    except KeyboardInterrupt as e:
        log(f"interrupted ({e}); stopping")
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
            return 130
        return 0 if not command else 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        t2 = time.monotonic()
        server.stop()
        if server.proc is not None:
            log(f"tritonserver stopped in {time.monotonic() - t2:.1f} s")
        if tmp_log:
            log_path.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
