"""Helpers shared by the interop tests and run_interop.py: start/stop jitembed-server, find perf_analyzer,
run the C++ reference program (reference_embed)."""
import glob
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np

NP_DTYPES = {"f32": np.float32, "f64": np.float64, "u8": np.uint8, "i32": np.int32, "i64": np.int64,
             "f16": np.float16}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_perf_analyzer(venv):
    """(path, env) of a perf_analyzer that runs here, or None.

    The PyPI "perf-analyzer" wheels need glibc 2.38 (Debian 12 has 2.36); scripts/install-deps.sh puts the
    binary of tritonclient 2.47 (built for glibc <= 2.35) under <venv>/perf_analyzer/bin, which needs
    libcudart.so.12 (PyPI nvidia-cuda-runtime-cu12, found here) and libb64 (Debian libb64-0d)."""
    candidates = [os.environ.get("PERF_ANALYZER", ""), os.path.join(venv, "bin", "perf_analyzer"),
                  os.path.join(venv, "perf_analyzer", "bin", "perf_analyzer")]
    env = dict(os.environ)
    libdirs = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cuda_runtime", "lib"))
    if libdirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libdirs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    for c in candidates:
        if not c or not os.access(c, os.X_OK):
            continue
        try:
            p = subprocess.run([c, "--version"], env=env, capture_output=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if p.returncode == 0 and b"Perf Analyzer Version" in p.stdout + p.stderr:
            return c, env
    return None


def wait_for_port(port, proc=None, timeout=30.0):
    """Until 127.0.0.1:port accepts a TCP connection (or `proc` exits, or the timeout passes: RuntimeError)."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process exited with {proc.returncode} before port {port} listened")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")
            time.sleep(0.05)


class Server:
    """jitembed-server on a free loopback port; stop() sends SIGTERM and expects exit 0."""

    def __init__(self, binary, args=(), log_path=None, ready_timeout=30.0, ca_file=None):
        """ca_file: the server serves HTTPS (args hold --tls-cert / --tls-key); readiness is checked over TLS
        against this CA."""
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        scheme = "https" if ca_file else "http"
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self.log_path = log_path
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(self.port)] + list(args),
                                     stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jitembed-server exited with {self.proc.returncode} before ready: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{scheme}://{self.url}/v2/health/ready", timeout=2, context=context) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"jitembed-server not ready after {ready_timeout} s: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self):
        if not self.log_path:
            return ""
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout=20.0):
        """SIGTERM (drain) and wait; returns the exit code (kills and returns None on timeout)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        if self._log is not subprocess.DEVNULL:
            self._log.close()
        return self.proc.returncode


def make_tls_files(work):
    """A CA and a server certificate it signs (SAN IP:127.0.0.1, DNS:localhost), PEM, made with the openssl CLI
    in work/tls; returns (ca, cert, key, wrong_ca) or None when there is no openssl CLI."""
    import shutil
    exe = shutil.which("openssl")
    if not exe:
        return None
    d = os.path.join(work, "tls")
    os.makedirs(d, exist_ok=True)
    p = lambda n: os.path.join(d, n)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run = lambda *a: subprocess.run([exe, *a], check=True, capture_output=True)
    run("req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"), "-days", "30", "-subj", "/CN=jitembed test CA")
    run("req", "-x509", *ec, "-keyout", p("wrong_ca.key"), "-out", p("wrong_ca.pem"), "-days", "30", "-subj", "/CN=another CA")
    run("req", *ec, "-keyout", p("server.key"), "-out", p("server.csr"), "-subj", "/CN=localhost")
    with open(p("ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\n"
                "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n")
    run("x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"), "-CAcreateserial",
        "-out", p("server.pem"), "-days", "30", "-extfile", p("ext.cnf"))
    return p("ca.pem"), p("server.pem"), p("server.key"), p("wrong_ca.pem")


class Reference:
    """The C++ reference models (tests/python/reference_embed.cpp), run on a file."""

    def __init__(self, binary, work):
        self.binary = binary
        self.work = work
        self._n = 0

    def _run(self, *args):
        p = subprocess.run([self.binary] + [str(a) for a in args], capture_output=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(f"reference_embed {' '.join(map(str, args))}: {p.stderr.decode(errors='replace')}")

    def make_jpeg(self, width, height, seed):
        path = os.path.join(self.work, f"img_{width}x{height}_{seed}.jpg")
        self._run("make-jpeg", width, height, seed, path)
        with open(path, "rb") as f:
            return f.read()

    def make_video(self, frames, width, height):
        path = os.path.join(self.work, f"clip_{frames}_{width}x{height}.mp4")
        self._run("make-video", frames, width, height, path)
        with open(path, "rb") as f:
            return f.read()

    def embed(self, model, data):
        """{output name: np.ndarray} of the reference model on raw bytes."""
        self._n += 1
        inp = os.path.join(self.work, f"ref_in_{self._n}.bin")
        prefix = os.path.join(self.work, f"ref_out_{self._n}")
        with open(inp, "wb") as f:
            f.write(data)
        self._run("embed", model, inp, prefix)
        with open(prefix + ".json") as f:
            meta = json.load(f)
        out = {}
        for o in meta["outputs"]:
            with open(o["file"], "rb") as f:
                out[o["name"]] = np.frombuffer(f.read(), dtype=NP_DTYPES[o["dtype"]]).reshape(o["shape"])
        return out
