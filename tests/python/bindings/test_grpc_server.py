"""KServe gRPC from Python: jitembed.Server(grpc_port=...) serves inference.GRPCInferenceService beside HTTP;
tritonclient.grpc and jitembed.Client(grpc://...) get bitwise what HTTP and local mode compute, with and
without the compression offer; stop() closes the gRPC port too. Skipped when the module was built without
gRPC (python/CMakeLists.txt: no libgrpc++-dev)."""
import numpy as np
import pytest

import jitembed

TEXT = "text-embed:text_dim=32,text_max_length=16"
IMAGE = "image-latent:image_bucket=32"
ROWS = [b"a cat", b"two dogs on a mat", b"a photo of a table"]


def start(**kw):
    try:
        return jitembed.Server(models=[TEXT, IMAGE], io_threads=1, preprocess_threads=1, grpc_port=0, **kw)
    except jitembed.Error as e:
        if "built without the grpc component" in str(e):
            pytest.skip(str(e))
        raise


@pytest.fixture(scope="module")
def server():
    with start() as srv:
        yield srv


@pytest.fixture(scope="module")
def local():
    with jitembed.Client(local_models=[TEXT, IMAGE], local_threads=1) as c:
        yield c


def assert_same(a, b):
    assert list(a.outputs) == list(b.outputs)
    for name in a.outputs:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape
        assert a[name].tobytes() == b[name].tobytes(), name


def test_grpc_port_and_url(server):
    assert isinstance(server.grpc_port, int) and server.grpc_port > 0 and server.grpc_port != server.port
    assert server.grpc_url == f"127.0.0.1:{server.grpc_port}"
    with jitembed.Server(models=[TEXT], preprocess_threads=1) as plain:
        assert plain.grpc_port is None and plain.grpc_url is None


def test_jitembed_client_over_grpc_equals_local(server, local, jpeg_bytes):
    url = f"grpc://{server.grpc_url}"
    for kw in ({}, {"compress_on_loopback": True}, {"compress_inputs": True, "compression_min_bytes": 0}):
        with jitembed.Client(endpoints=[url], request_timeout_ms=20000, **kw) as c:
            r = c.embed("text-embed", ROWS, input="text")
            assert r.endpoint == url
            assert_same(r, local.embed("text-embed", ROWS, input="text"))
            img = c.embed("image-latent", [jpeg_bytes, jpeg_bytes], input="image")
            assert_same(img, local.embed("image-latent", [jpeg_bytes, jpeg_bytes], input="image"))


def test_tritonclient_grpc(server, local):
    grpcclient = pytest.importorskip("tritonclient.grpc")
    c = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert c.is_server_live() and c.is_server_ready() and c.is_model_ready("text-embed")
        assert c.get_server_metadata().name == "jitembed"
        t = grpcclient.InferInput("text", [len(ROWS)], "BYTES")
        t.set_data_from_numpy(np.array(ROWS, dtype=np.object_))
        r = c.infer("text-embed", [t])
        want = local.embed("text-embed", ROWS, input="text")
        for name in want.outputs:
            got = r.as_numpy(name)
            assert got.shape == want[name].shape and got.tobytes() == want[name].tobytes(), name
        with pytest.raises(Exception) as e:
            c.infer("no-such-model", [t])
        assert "no-such-model" in str(e.value)
    finally:
        c.close()


def test_stop_closes_grpc(local):
    srv = start()
    url = f"grpc://{srv.grpc_url}"
    with jitembed.Client(endpoints=[url], request_timeout_ms=20000) as c:
        assert c.embed("text-embed", ROWS[:1], input="text")["pooled"].shape[0] == 1
    srv.stop()
    assert srv.grpc_port is None
    with jitembed.Client(endpoints=[url], request_timeout_ms=3000, max_attempts=1, connect_timeout_ms=1000) as c:
        with pytest.raises(jitembed.Error):
            c.embed("text-embed", ROWS[:1], input="text")


def test_grpc_option_errors():
    with pytest.raises(jitembed.Error) as e:
        jitembed.Server(models=[TEXT], grpc_port=70000)
    assert "grpc_port 70000" in str(e.value)
    with pytest.raises(jitembed.Error) as e:
        jitembed.Server(models=[TEXT], grpc_tls_cert="cert.pem", grpc_tls_key="key.pem")
    assert "need grpc_port" in str(e.value)
