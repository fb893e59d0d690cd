"""Shared fixtures of the jitembed binding tests (ctest label `python`, run by run_bindings.py)."""
import os
import pathlib
import shutil
import socket
import subprocess
import time

import numpy as np
import pytest

import jitembed

REPO = pathlib.Path(__file__).resolve().parents[3]
VECTORS = REPO / "tests" / "conformance" / "vectors"


@pytest.fixture(scope="session")
def vectors_dir():
    return VECTORS


@pytest.fixture(scope="session")
def inspect_tool():
    """jitembed-inspect (built by the C++ project; ctest passes it in JITEMBED_INSPECT)."""
    path = os.environ.get("JITEMBED_INSPECT") or shutil.which("jitembed-inspect")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("jitembed-inspect not built (set JITEMBED_INSPECT)")
    return path


@pytest.fixture(scope="session")
def rgb_image():
    """A smooth 96x128 RGB test image (compresses like a photo, unlike noise)."""
    y, x = np.mgrid[0:96, 0:128]
    img = np.stack([(x * 2) % 256, (y * 2) % 256, ((x + y) * 3) % 256], axis=-1).astype(np.uint8)
    return img


@pytest.fixture(scope="session")
def jpeg_bytes(rgb_image):
    return jitembed.encode_jpeg(rgb_image, quality=90)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    """A throwaway redis-server on a free loopback port (as tests/redis/redis_server.hpp starts one)."""
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed (scripts/install-deps.sh test installs it)")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:  # ready once it accepts a connection
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.02)
        yield port
    finally:
        proc.kill()
        proc.wait()
