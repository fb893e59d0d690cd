"""The loader's traps (issue #32): jitembed.torch.Loader in DataLoader worker processes raises (each worker would
deliver the epoch again); a step whose samples all failed to reach a server raises naming the endpoints
(max_failed_fraction bounds it, fail_fast raises on the first failed sample and fails fast at construction when
the servers are down); Client.wait_ready; an empty step's fields are typed [0, ...] arrays from the model's
metadata, not only from a step seen before."""
import collections
import socket
import time

import numpy as np
import pytest

import jitembed

TEXT = "text-embed:text_dim=16,text_max_length=8"
CAPTION = [("caption", "text-embed", "text", "pooled")]
N = 21


def write_dataset(path, n, images=(), bad=(), jpeg=None):
    with jitembed.ShardWriter.create(str(path)) as w:
        for i in range(n):
            b = jitembed.RecordBuilder()
            b.add_text("caption", f"caption of sample {i}")
            if i in images:
                b.add_image("image", jpeg if i not in bad else b"\xff\xd8 not really a jpeg")
            w.append(b, key=f"{i:03d}")
    return str(path)


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("loader_failures") / "data.jems", N)


@pytest.fixture(scope="module")
def server():
    with jitembed.Server(models=[TEXT], io_threads=1, preprocess_threads=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def remote(server):
    with jitembed.Client(endpoints=[f"http://{server.url}"], request_timeout_ms=20000) as c:
        yield c


@pytest.fixture(scope="module")
def local():
    with jitembed.Client(local_models=[TEXT, "image-latent:image_bucket=32"], local_threads=1) as c:
        yield c


def closed_port():
    """A loopback port nothing listens on (bound, then released; connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_ids(n=N):
    return sorted(f"data.jems#{i:03d}" for i in range(n))


# --- jitembed.torch.Loader inside torch's DataLoader ----------------------------------------------------------

def test_dataloader_workers_raise_and_num_workers_0_delivers_each_sample_once(dataset_path, remote):
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitembed.torch")
    with jt.Loader(dataset_path, remote, CAPTION, batch_size=4, workers=1, rank=0, world_size=1) as ds:
        # before the fix: 42 samples, each twice (each forked worker ran the whole epoch)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, timeout=60)
        with pytest.raises(RuntimeError, match=r"DataLoader worker.*num_workers=0"):
            list(dl)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
        for epoch in range(2):
            ids = [i for s in dl for i in s["ids"]]
            assert collections.Counter(ids) == collections.Counter(all_ids()), epoch  # each exactly once


# --- failed steps ---------------------------------------------------------------------------------------------

def test_fail_fast_with_the_server_down_raises_at_construction_in_seconds(dataset_path):
    url = f"http://127.0.0.1:{closed_port()}"
    with jitembed.Client(endpoints=[url]) as c:  # the default 30 s request timeout
        t0 = time.monotonic()
        with pytest.raises(jitembed.UnavailableError) as e:
            jitembed.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, fail_fast=True)
        took = time.monotonic() - t0
        assert took < 8, took  # ready_timeout_s defaults to 5 s with fail_fast
        msg = str(e.value)
        assert "no endpoint ready for model 'text-embed'" in msg and url in msg and "last error" in msg
        torch = pytest.importorskip("torch")  # noqa: F841
        jt = pytest.importorskip("jitembed.torch")
        t0 = time.monotonic()
        with pytest.raises(jitembed.UnavailableError, match=url.replace(".", r"\.")):
            jt.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, fail_fast=True, ready_timeout_s=1.0,
                      rank=0, world_size=1)
        assert time.monotonic() - t0 < 4


def test_a_step_whose_samples_all_failed_to_reach_a_server_raises(dataset_path):
    url = f"http://127.0.0.1:{closed_port()}"
    with jitembed.Client(endpoints=[url], request_timeout_ms=1500, max_attempts=2) as c:
        loader = jitembed.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, resubmits=0)
        t0 = time.monotonic()
        with pytest.raises((jitembed.IoError, jitembed.UnavailableError, jitembed.TimeoutError)) as e:
            next(loader)  # before: a step of empty lists, every sample in "failed"
        assert time.monotonic() - t0 < 15
        msg = str(e.value)
        assert "step 0 of epoch 0: 4 of 4 samples failed (max_failed_fraction 1)" in msg, msg
        assert f"endpoints: {url}" in msg and "first error: sample 'data.jems#" in msg
        # tolerated: the step is handed out with its failures listed
        loader = jitembed.Loader(dataset_path, c, CAPTION, batch_size=4, workers=1, resubmits=0,
                                 max_failed_fraction=1.5)
        step = next(loader)
        assert step["ids"] == [] and len(step["failed"]) == 4
        assert {f["errc"] for f in step["failed"]} <= {"io_error", "unavailable", "timeout"}
        loader.close()


def test_max_failed_fraction_counts_service_failures(tmp_path, local, jpeg_bytes):
    # steps of 4: samples 0, 1 (step 0) and 4 (step 1) have an image, asked of a model nobody serves (not_found)
    path = write_dataset(tmp_path / "data.jems", 8, images={0, 1, 4}, jpeg=jpeg_bytes)
    specs = CAPTION + [("latent", "no-such-model", "image")]
    kw = dict(batch_size=4, shuffle=False, workers=1)
    with jitembed.Loader(path, local, specs, max_failed_fraction=0.5, **kw) as loader:
        with pytest.raises(jitembed.NotFoundError, match=r"step 0 of epoch 0: 2 of 4 samples failed "
                                                         r"\(max_failed_fraction 0\.5\); endpoints: local models"):
            next(loader)
        step = next(loader)  # 1 of 4 < 0.5: handed out
        assert step["step"] == 1 and [f["index"] for f in step["failed"]] == [4] and len(step["ids"]) == 3
    with jitembed.Loader(path, local, specs, **kw) as loader:  # default 1.0: a step fails only when all did
        steps = list(loader)
        assert [len(s["failed"]) for s in steps] == [2, 1]


def test_bad_input_fails_a_step_only_with_fail_fast(tmp_path, local, jpeg_bytes):
    path = write_dataset(tmp_path / "data.jems", 8, images=set(range(8)), bad={0, 1, 2, 3, 5}, jpeg=jpeg_bytes)
    specs = [("latent", "image-latent", "image")]
    kw = dict(batch_size=4, shuffle=False, workers=1)
    with jitembed.Loader(path, local, specs, **kw) as loader:  # a corrupt JPEG is the sample's own problem
        steps = list(loader)
        assert [len(s["failed"]) for s in steps] == [4, 1]
        assert {f["errc"] for s in steps for f in s["failed"]} == {"truncated"}  # the fake JPEG ends early
    with jitembed.Loader(path, local, specs, fail_fast=True, **kw) as loader:
        with pytest.raises(jitembed.TruncatedError, match=r"step 0 of epoch 0: 4 of 4 samples failed \(fail_fast\)"):
            next(loader)
        with pytest.raises(jitembed.TruncatedError, match=r"step 1 of epoch 0: 1 of 4 samples failed \(fail_fast\)"):
            next(loader)
    with pytest.raises(jitembed.InvalidArgumentError, match="max_failed_fraction"):
        jitembed.Loader(path, local, specs, max_failed_fraction=-0.1, **kw)


# --- readiness ------------------------------------------------------------------------------------------------

def test_wait_ready(server, remote, local):
    remote.wait_ready("text-embed", timeout_s=5)
    local.wait_ready(["text-embed", "image-latent"], timeout_s=1)
    with pytest.raises(jitembed.NotFoundError, match="local models do not serve 'nope'"):
        local.wait_ready("nope", timeout_s=1)
    t0 = time.monotonic()
    with pytest.raises(jitembed.TimeoutError, match=rf"no endpoint ready for model 'nope' within 300 ms "
                                                    rf"\(endpoints: http://{server.url}\)"):
        remote.wait_ready("nope", timeout_s=0.3)  # the server answers (404): reached, never ready
    assert time.monotonic() - t0 < 3
    url = f"http://127.0.0.1:{closed_port()}"
    with jitembed.Client(endpoints=[url]) as down:
        t0 = time.monotonic()
        with pytest.raises(jitembed.UnavailableError, match=r"within 500 ms \(endpoints: .*\); last error: "):
            down.wait_ready("text-embed", timeout_s=0.5)
        assert time.monotonic() - t0 < 3
    with pytest.raises(jitembed.InvalidArgumentError):
        remote.wait_ready("text-embed", timeout_s=0)


# --- empty fields ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["local", "remote"])
def test_empty_fields_have_the_models_dtype_and_rank(tmp_path, where, local, remote):
    # one sample over two ranks: rank 1's only step is empty, the first step this loader hands out
    path = write_dataset(tmp_path / "one.jems", 1)
    client = local if where == "local" else remote
    with jitembed.Loader(path, client, CAPTION, batch_size=4, workers=1, rank=1, world_size=2) as loader:
        step = next(loader)
        assert step["ids"] == [] and step["failed"] == []
        a = step["caption"]
        assert isinstance(a, np.ndarray) and a.shape == (0, 16) and a.dtype == np.float32
        assert step["dtypes"] == {"caption": "f32"}
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitembed.torch")
    with jt.Loader(path, client, CAPTION, batch_size=4, workers=1, rank=1, world_size=2) as ds:
        steps = list(ds)
        assert len(steps) == 1
        t = steps[0]["caption"]
        assert isinstance(t, torch.Tensor) and t.shape == (0, 16) and t.dtype == torch.float32


def test_empty_bf16_field_is_a_bfloat16_tensor(tmp_path):
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitembed.torch")
    path = write_dataset(tmp_path / "one.jems", 1)
    with jitembed.Client(local_models=[TEXT + ",output_dtype=bf16"], local_threads=1) as c, \
            jt.Loader(path, c, CAPTION, batch_size=2, workers=1, rank=1, world_size=2) as ds:
        t = next(iter(ds))["caption"]  # a view of uint16 bits, as a step with rows
        assert t.dtype == torch.bfloat16 and t.shape == (0, 16)
