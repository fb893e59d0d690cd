"""Client and Server from Python: an in-process jitembed.Server answers bitwise what the local-mode client
computes with the same reference models; embed_async futures; handle() without a socket; hot swap, stats,
drain and stop; timeout and unavailable errors."""
import concurrent.futures
import gc
import json
import socket
import time

import numpy as np
import pytest

import jitembed

TEXT = "text-embed:text_dim=32,text_max_length=16"
IMAGE = "image-latent:image_bucket=32"


@pytest.fixture(scope="module")
def server():
    with jitembed.Server(models=[TEXT, IMAGE], io_threads=1, preprocess_threads=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def remote(server):
    with jitembed.Client(endpoints=[f"http://{server.url}"], request_timeout_ms=20000) as c:
        yield c


@pytest.fixture(scope="module")
def local():
    with jitembed.Client(local_models=[TEXT, IMAGE], local_threads=1) as c:
        yield c


def caption_records(n):
    out = []
    for i in range(n):
        b = jitembed.RecordBuilder()
        b.add_text("caption", f"a photo of thing number {i} on a table")
        out.append(b.finish())
    return out


def image_records(jpeg_bytes, n):
    out = []
    for i in range(n):
        b = jitembed.RecordBuilder()
        b.add_image("image", jpeg_bytes)
        b.add_text("caption", f"image {i}")
        out.append(b.finish())
    return out


def assert_bitwise_equal(a, b):
    assert a.model_name == b.model_name  # (versions differ in form: "1" from a server, the fingerprint locally)
    assert list(a.outputs) == list(b.outputs)
    for name in a.outputs:
        x, y = a[name], b[name]
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes(), name


def test_server_basics(server):
    assert server.port > 0 and server.url == f"127.0.0.1:{server.port}"
    assert sorted(server.loaded()) == [("image-latent", "1"), ("text-embed", "1")]
    assert server.ready()


def test_embed_equals_local_reference(server, remote, local, jpeg_bytes):
    rows = caption_records(5)
    r = remote.embed("text-embed", rows)
    assert r.endpoint == f"http://{server.url}" and not r.row_errors
    assert r["pooled"].shape == (5, 32) and r["pooled"].dtype == np.float32
    assert_bitwise_equal(r, local.embed("text-embed", rows))
    imgs = image_records(jpeg_bytes, 2)
    assert_bitwise_equal(remote.embed("image-latent", imgs), local.embed("image-latent", imgs))
    # raw field bytes instead of records (input "text")
    assert_bitwise_equal(remote.embed("text-embed", [b"hello world"], input="text"),
                         local.embed("text-embed", [b"hello world"], input="text"))
    assert remote.identity("text-embed")["fingerprint"] == local.identity("text-embed")["fingerprint"]


def test_embed_token_id_arrays(remote, local):
    """Typed rows: an integer [N, L] array (ids a trainer tokenized itself) to text-embed's declared input 'tokens'
    (i32 [L]: its preprocessing makes a caption's byte codes its tokens) equals the captions sent as text, remote and
    local, whatever the array's dtype width, order or byte order; a float array needs input=."""
    captions = [b"a cat on a mat", b"two dogs here!", b"the sea, calm."]  # one length: one [3, 14] array
    ids = np.array([np.frombuffer(c, np.uint8) for c in captions], np.int32)
    for c in (remote, local):
        want = c.embed("text-embed", captions, input="text")
        assert_bitwise_equal(c.embed("text-embed", ids, input="tokens"), want)
        assert_bitwise_equal(c.embed("text-embed", ids.astype(">i4"), input="tokens"), want)  # made little-endian
        flipped = c.embed("text-embed", ids[::-1], input="tokens")  # a negative stride: copied in C order
        assert flipped["pooled"].tobytes() == want["pooled"][::-1].tobytes()
        with pytest.raises(jitembed.DtypeMismatchError):  # INT64 is not the declared INT32 (one row: its own error)
            c.embed("text-embed", ids[:1].astype(np.int64), input="tokens")
        with pytest.raises(jitembed.InvalidArgumentError, match="needs input="):
            c.embed("text-embed", ids.astype(np.float32))


def test_embed_async_futures(remote):
    rows = caption_records(8)
    futures = [remote.embed_async("text-embed", [row]) for row in rows]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    done, _ = concurrent.futures.wait(futures, timeout=30)
    assert len(done) == 8
    batch = remote.embed("text-embed", rows)
    for i, f in enumerate(futures):
        assert f.result()["pooled"].tobytes() == batch["pooled"][i : i + 1].tobytes()
    bad = remote.embed_async("no-such-model", rows[:1])
    e = bad.exception(timeout=30)
    assert isinstance(e, jitembed.NotFoundError) and isinstance(e, KeyError)


def test_handle_without_socket(server, remote):
    status, headers, body = server.handle("GET", "/v2/health/ready", {}, b"")
    assert status == 200
    status, headers, body = server.handle("GET", "/v2/models/text-embed", {}, b"")
    assert status == 200 and json.loads(body)["name"] == "text-embed"
    req = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["hello world"]}],
           "outputs": [{"name": "pooled"}]}
    status, headers, body = server.handle("POST", "/v2/models/text-embed/infer",
                                          {"Content-Type": "application/json"}, json.dumps(req).encode())
    assert status == 200, body
    out = json.loads(body)["outputs"][0]
    want = remote.embed("text-embed", [b"hello world"], input="text")["pooled"]
    assert out["shape"] == [1, 32]
    np.testing.assert_allclose(np.array(out["data"], dtype=np.float32), want.ravel(), rtol=1e-6)
    status, _, body = server.handle("GET", "/v2/models/nope", {}, b"")
    assert status == 404 and json.loads(body)["errc"] == "not_found"


def test_load_unload_stats_drain_stop():
    srv = jitembed.Server(models=["text-embed:text_dim=8,text_max_length=8"], io_threads=1, preprocess_threads=1)
    c = jitembed.Client(endpoints=[f"http://{srv.url}"], max_attempts=1, hedge=False, request_timeout_ms=10000)
    rows = caption_records(3)
    c.embed("text-embed", rows)
    st = srv.stats()["text-embed:1"]
    assert st["rows"] == 3 and st["requests_success"] == 1 and st["requests_failed"] == 0
    assert st["queued_rows"] == 0 and st["inflight_rows"] == 0
    srv.load("text-embed", version="2", spec="text-embed:text_dim=8,text_max_length=8")
    assert ("text-embed", "2") in srv.loaded()
    assert c.embed("text-embed", rows, version="2").model_version == "2"
    with pytest.raises(jitembed.NotFoundError):
        srv.load("no-such-model")
    with pytest.raises(jitembed.InvalidArgumentError):
        srv.load("text-embed", spec="text-embed:instances=0")
    srv.unload("text-embed")
    assert srv.loaded() == []
    srv.load("text-embed", spec="text-embed:text_dim=8,text_max_length=8")
    assert srv.loaded() == [("text-embed", "1")]
    srv.begin_drain()
    assert not srv.ready()
    with pytest.raises(jitembed.UnavailableError) as info:
        c.embed("text-embed", rows)
    assert isinstance(info.value, ConnectionError)
    srv.stop()
    srv.stop()  # idempotent
    assert srv.stopped
    c.close()


def test_stats_show_queue_and_admitted_rows():
    # one row per batch, each batch 200 ms: of three requests one runs and two wait in the queue
    spec = "text-embed:text_dim=8,text_max_length=8,sleep_us=200000,max_batch_size=1"
    with jitembed.Server(models=[spec], preprocess_threads=1) as srv, \
            jitembed.Client(endpoints=[f"http://{srv.url}"], hedge=False) as c:
        futures = [c.embed_async("text-embed", caption_records(1)) for _ in range(3)]
        deadline, peak = time.monotonic() + 20, {}
        while time.monotonic() < deadline:  # poll the state (no sleep): all three admitted, some queued
            st = srv.status()["text-embed:1"]
            if st["inflight_rows"] == 3 and st["queued_rows"] >= 1:
                peak = st
                break
        assert peak, "the three requests were never admitted with some of them queued"
        for f in futures:
            f.result(timeout=30)
        st = srv.stats()["text-embed:1"]
        assert st["inflight_rows"] == 0 and st["queued_rows"] == 0
        assert st["requests_success"] == 3 and st["rows"] == 3 and st["batches"] == 3
        # status() is stats() without the Triton statistics fields, same values
        status = srv.status()["text-embed:1"]
        assert set(status) == {"name", "version", "queued_rows", "running_rows", "inflight_rows", "max_inflight_rows",
                               "requests_success", "requests_failed", "rejected_admission", "ready"}
        assert all(st[k] == v for k, v in status.items())
        assert peak["queued_rows"] + peak["running_rows"] <= 3


def test_timeout_error():
    with jitembed.Server(models=["text-embed:text_dim=8,text_max_length=8,sleep_us=400000"], preprocess_threads=1) as srv:
        with jitembed.Client(endpoints=[f"http://{srv.url}"], max_attempts=1, hedge=False) as c:
            with pytest.raises(jitembed.TimeoutError) as info:
                c.embed("text-embed", caption_records(1), timeout_ms=50)
            assert isinstance(info.value, TimeoutError) and info.value.errc == "timeout"
            # Future.cancel() of a pending request cancels it in the client
            f = c.embed_async("text-embed", caption_records(1))
            assert f.cancel() and f.cancelled()
            deadline = time.monotonic() + 10
            while c.stats()["cancelled"] < 1 and time.monotonic() < deadline:
                pass
            assert c.stats()["cancelled"] == 1


def test_busy_port_and_gc_stop():
    srv = jitembed.Server(models=["text-embed:text_dim=8,text_max_length=8"], preprocess_threads=1)
    port = srv.port
    with pytest.raises(jitembed.IoError):
        jitembed.Server(models=["text-embed"], port=port)
    del srv
    gc.collect()  # garbage collection stops the server: nothing listens on its port any more
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
