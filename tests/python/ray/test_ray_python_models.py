"""jitembed.ray with Python encoders: jitembed.Model factories called inside the replicas (weights built on the
replica's node; a Model with a Python preprocessing callable), fractional GPUs shared by two replicas (placement through ray.get_gpu_ids() on a cluster with one
logical GPU; no device behind it, so the models run on the CPU), and a replica hosting a Python VAE-style encoder
killed mid-run under the C++ JIT client, and under a torchrun-launched loop of two ranks over jitembed.torch.Loader:
every sample delivered exactly once.

The three tests share one application (vae_app: both factories, two replicas on half a GPU each), in this
order: the replica killed by the second test is replaced before it ends, and the third kills one again. Each
deployment of two replicas imports torch in two new Ray worker processes, tens of seconds on a loaded 2-core
machine."""

from __future__ import annotations

import contextlib

import pytest
import ray
from ray import serve

import jitembed.ray as jray
from conftest import eventually
from test_ray_serve import (SMALL, check_exactly_once, endpoints, kill_replica_with_rows_in_flight, replica_actor_names,
                            wait_endpoints)

SIZE = 32


def tiny_vae(device="cpu"):
    """A VAE-encoder-shaped torch module as a jitembed.Model, built where it is called (the replica)."""
    import time

    import torch

    import jitembed

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.SiLU(),
                              torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)).to(device).eval()

    def encode(x):
        time.sleep(0.01)  # a real encoder's time: rows stay in flight long enough to be killed with
        with torch.inference_mode():  # row by row: the same bits whatever batch a row is in (digests compared)
            return torch.cat([net(x[i:i + 1]) for i in range(x.shape[0])])

    return jitembed.Model(encode, "tiny_vae", inputs=("image", "f32", [3, SIZE, SIZE]),
                          outputs=[("latent", "f32", [4, SIZE // 4, SIZE // 4])], max_batch_size=8,
                          preprocess={"modality": "image", "image_normalize": "signed"}, device=device, module=net)


def codepoints(device="cpu"):
    """A jitembed.Model whose preprocessing is a Python callable (str -> i64 [2, 8]): it travels to the replica
    inside this factory's pickle, as Ray ships a factory."""
    import numpy as np

    import jitembed

    def tokens(text):
        ids = [min(ord(c), 1000) for c in text[:8]]
        out = np.zeros((2, 8), np.int64)
        out[0, :len(ids)], out[1, :len(ids)] = ids, 1
        return out

    return jitembed.Model(lambda x: x[:, 0, :4].float(), "codepoints", inputs=("text", "i64", [2, 8]),
                          outputs=[("y", "f32", [4])], preprocess=tokens, preprocess_name="codepoints",
                          preprocess_version="1", device=device)


def deploy(app: str, models, **kw):
    opts = dict(SMALL)
    opts.update(kw)
    serve.run(jray.build_app(models, **opts), name=app, route_prefix=f"/{app}", blocking=False)


def replica_infos(app: str, n: int):
    handle = serve.get_app_handle(app)
    seen = {}

    def more():
        info = handle.server_info.remote().result(timeout_s=10)
        seen[info["pid"]] = info
        return list(seen.values()) if len(seen) >= n else None

    return eventually(more, 60, f"server_info of {n} replicas", step_s=0.05)


@pytest.fixture(scope="module")
def vae_app(ray_cluster):
    """One application "pyvae" (tiny_vae and codepoints, two replicas with num_gpus 0.5) for the three tests;
    each waits for two registered endpoints, and a test that kills a replica waits for its replacement."""
    app = "pyvae"
    deploy(app, [tiny_vae, codepoints], num_replicas=2, num_gpus=0.5)
    yield app
    # The last test killed a replica and Serve is starting its replacement (torch imported in a new process: on
    # a loaded machine serve.delete waited 20 s for it): delete without waiting, end the replicas, then wait.
    serve.delete(app, _blocking=False)
    for name in replica_actor_names(app):
        with contextlib.suppress(Exception):
            ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    eventually(lambda: app not in serve.status().applications, 60, f"application {app} deleted")
    jray.kill_registry(app)


def test_python_model_factories_share_a_fractional_gpu(ray_cluster, vae_app):
    app = vae_app
    eps = wait_endpoints(ray_cluster, app, 2)
    infos = replica_infos(app, 2)
    assert all(i["gpu_ids"] == ["0"] for i in infos), infos  # both replicas on the one GPU
    assert all(i["device"] == "cpu" for i in infos)  # no CUDA behind the logical GPU
    assert all(["tiny_vae", "1"] in i["models"] and ["codepoints", "1"] in i["models"] for i in infos)
    # the Python preprocessing callable runs in each replica: fn(preprocess("hello")) = the first 4 code points
    import jitembed

    for ep in eps:
        with jitembed.Client(endpoints=[ep], request_timeout_ms=20000) as c:
            assert c.embed("codepoints", [b"hello"], input="text")["y"].tolist() == [[104, 101, 108, 108]]
            assert c.identity("codepoints")["preprocess_key"] == codepoints().preprocess_key


def test_replica_with_a_python_vae_killed_mid_run_every_sample_once(ray_cluster, vae_app, run_client):
    app = vae_app
    eps = wait_endpoints(ray_cluster, app, 2)
    url = f"http://{ray_cluster['http']}/{app}/endpoints"
    n = 240
    args = ["--model", "tiny_vae", "--input", "image", "--jpeg-size", str(SIZE), "--samples", str(n),
            "--rows-per-request", "2", "--concurrency", "8", "--timeout-ms", "60000"]
    run = run_client(["--endpoints-url", url] + args)
    victim = kill_replica_with_rows_in_flight(app, eps)
    summary, got = run.result(timeout_s=120)
    assert summary["failed"] == 0
    assert summary["retries"] > 0, "requests in flight on the killed replica were retried"
    # the reference: the same factory in a jitembed.Server of this process
    import jitembed

    with jitembed.Server(models=[tiny_vae()]) as srv:
        _, ref = run_client(["--endpoints", f"http://{srv.url}"] + args).result()
    check_exactly_once(got, n, ref)
    # Ray's restart registered a new replica (the next test kills one of two again)
    eventually(lambda: (lambda e: len(e) == 2 and victim not in e)(endpoints(ray_cluster, app)), 120,
               "the killed replica expired and its replacement registered")


def test_torchrun_loop_on_a_python_vae_with_a_replica_killed_mid_epoch(ray_cluster, vae_app, tmp_path):
    """Two torchrun ranks train-loop over jitembed.torch.Loader against the app; a replica dies mid-epoch: every
    sample reaches exactly one rank, none fails."""
    import io
    import json
    import os
    import pathlib
    import shutil
    import subprocess
    import sys
    import time

    import numpy as np
    from PIL import Image

    import jitembed

    app = vae_app
    eps = wait_endpoints(ray_cluster, app, 2)
    shard, n = str(tmp_path / "images.jems"), 96
    with jitembed.ShardWriter.create(shard) as w:
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(np.random.default_rng(i).integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8)).save(buf, format="JPEG")
            rb = jitembed.RecordBuilder()
            rb.add_image("image", buf.getvalue())
            w.append(rb, key=f"{i:04d}")
    torchrun = shutil.which("torchrun", path=str(pathlib.Path(sys.executable).parent))
    assert torchrun, "torchrun is installed with torch in .venv"
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               PYTHONPATH=os.pathsep.join([str(pathlib.Path(jitembed.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    url = f"http://{ray_cluster['http']}/{app}/endpoints"
    proc = subprocess.Popen([torchrun, "--nproc_per_node", "2", "--standalone", str(pathlib.Path(__file__).parent / "torchrun_loop.py"),
                             shard, url, "tiny_vae", str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        eventually(lambda: proc.poll() is not None or (tmp_path / "rank0.started").exists(), 120, "the loop's second step")
        kill_replica_with_rows_in_flight(app, eps)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2))
    assert not r0["failed"] and not r1["failed"]
    assert r0["steps"] == r1["steps"]
    assert r0["retries"] + r1["retries"] > 0, "requests in flight on the killed replica were retried"
    assert not set(r0["ids"]) & set(r1["ids"])
    assert sorted(r0["ids"] + r1["ids"]) == [f"images.jems#{i:04d}" for i in range(n)]  # every sample once
