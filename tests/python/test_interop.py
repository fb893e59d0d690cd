"""Interop with real Triton peers: tritonclient[http] and perf_analyzer against jitembed-server.

Run through run_interop.py (ctest python/interop_*), which sets JITEMBED_SERVER, JITEMBED_REFERENCE,
JITEMBED_INTEROP_WORK and JITEMBED_VENV. Embeddings must equal the C++ reference models (reference_embed)
run on the same bytes; errors must carry the server's status and message through tritonclient.
"""
import base64
import csv
import json
import os
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import interop_util

TOL = dict(rtol=1e-6, atol=1e-6)  # the server runs the same deterministic float code as the reference
TEXTS = ["a photo of a cat", "héllo wörld ☃ — UTF-8", "x", "a much longer caption " * 12]


def _env(name):
    v = os.environ.get(name)
    if not v:
        pytest.skip(f"{name} not set: run through run_interop.py (ctest -L python)")
    return v


@pytest.fixture(scope="session")
def work():
    w = _env("JITEMBED_INTEROP_WORK")
    os.makedirs(w, exist_ok=True)
    return w


@pytest.fixture(scope="session")
def ref(work):
    return interop_util.Reference(_env("JITEMBED_REFERENCE"), work)


@pytest.fixture(scope="session")
def server(work):
    s = interop_util.Server(_env("JITEMBED_SERVER"), log_path=os.path.join(work, "server.log"))
    yield s
    rc = s.stop()
    assert rc == 0, f"jitembed-server did not drain and exit 0 on SIGTERM (rc={rc}): {s.log_tail()}"


@pytest.fixture(scope="session")
def client(server):
    c = httpclient.InferenceServerClient(url=server.url, concurrency=8, network_timeout=60.0)
    yield c
    c.close()


@pytest.fixture(scope="session")
def jpeg(ref):
    return ref.make_jpeg(320, 240, 1)


@pytest.fixture(scope="session")
def mp4(ref):
    return ref.make_video(16, 64, 48)


def bytes_input(name, elements, binary=True):
    t = httpclient.InferInput(name, [len(elements), 1], "BYTES")
    t.set_data_from_numpy(np.array([[e] for e in elements], dtype=np.object_), binary_data=binary)
    return t


def infer(client, model, name, elements, outputs, binary_in=True, binary_out=True):
    req_out = [httpclient.InferRequestedOutput(o, binary_data=binary_out) for o in outputs]
    return client.infer(model, [bytes_input(name, elements, binary_in)], outputs=req_out)


def assert_rows_equal(result, output, refs):
    got = result.as_numpy(output)
    assert got is not None, f"output {output} missing"
    assert got.shape[0] == len(refs)
    for i, r in enumerate(refs):
        assert got[i].shape == r[output].shape, f"row {i}: {got[i].shape} != {r[output].shape}"
        assert got[i].dtype == r[output].dtype
        np.testing.assert_allclose(got[i], r[output], **TOL, err_msg=f"{output} row {i}")


# --- metadata ----------------------------------------------------------------------------------------


def test_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"]
    for model, inp in [("image-latent", "image"), ("video-latent", "video"), ("text-embed", "text")]:
        assert client.is_model_ready(model)
        md = client.get_model_metadata(model)
        assert md["name"] == model
        assert any(i["name"] == inp and i["datatype"] == "BYTES" for i in md["inputs"]), md
        cfg = client.get_model_config(model)
        assert cfg["name"] == model
        assert cfg["max_batch_size"] >= 1
        assert any(i["name"] == inp and i["data_type"] == "TYPE_STRING" for i in cfg["input"]), cfg


# --- embeddings equal the C++ reference -------------------------------------------------------------


@pytest.mark.parametrize("binary_out", [True, False], ids=["binary_out", "json_out"])
def test_image_latent(client, ref, jpeg, binary_out):
    small = ref.make_jpeg(64, 48, 2)  # another size: resized to the same bucket, so rows share a shape
    r = infer(client, "image-latent", "image", [jpeg, small], ["latent"], binary_out=binary_out)
    assert r.get_output("latent")["datatype"] == "FP32"
    assert_rows_equal(r, "latent", [ref.embed("image-latent", jpeg), ref.embed("image-latent", small)])


def test_image_latent_committed_seed(client, ref):
    with open(os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "jpeg", "baseline_420.jpg"), "rb") as f:
        data = f.read()
    r = infer(client, "image-latent", "image", [data], ["latent"])
    assert_rows_equal(r, "latent", [ref.embed("image-latent", data)])


@pytest.mark.parametrize("binary_out", [True, False], ids=["binary_out", "json_out"])
def test_video_latent(client, ref, mp4, binary_out):
    r = infer(client, "video-latent", "video", [mp4], ["latent"], binary_out=binary_out)
    assert_rows_equal(r, "latent", [ref.embed("video-latent", mp4)])


@pytest.mark.parametrize("binary_in,binary_out", [(True, True), (False, False), (False, True)],
                         ids=["bin_in_bin_out", "json_in_json_out", "json_in_bin_out"])
def test_text_embed(client, ref, binary_in, binary_out):
    elements = [t.encode() for t in TEXTS] if binary_in else TEXTS
    outs = ["sequence", "mask", "pooled"]
    r = infer(client, "text-embed", "text", elements, outs, binary_in=binary_in, binary_out=binary_out)
    refs = [ref.embed("text-embed", t.encode()) for t in TEXTS]
    for o in outs:
        assert_rows_equal(r, o, refs)


def test_text_embed_default_outputs(client, ref):
    """No outputs requested: the server returns all of them (Triton's rule)."""
    r = client.infer("text-embed", [bytes_input("text", [b"default outputs"])])
    refs = [ref.embed("text-embed", b"default outputs")]
    for o in ["sequence", "mask", "pooled"]:
        assert_rows_equal(r, o, refs)


def test_concurrent_requests_batch_and_match(client, ref):
    """Many concurrent single-row requests (the server batches them): each equals its reference."""
    texts = [f"caption number {i} {'z' * (i % 7)}" for i in range(24)]
    refs = {t: ref.embed("text-embed", t.encode()) for t in texts}
    reqs = [client.async_infer("text-embed", [bytes_input("text", [t.encode()])],
                               outputs=[httpclient.InferRequestedOutput("pooled")]) for t in texts]
    for t, req in zip(texts, reqs):
        got = req.get_result(timeout=60).as_numpy("pooled")
        np.testing.assert_allclose(got[0], refs[t]["pooled"], **TOL)


# --- errors -----------------------------------------------------------------------------------------


def test_bad_jpeg_is_400_with_message(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "image-latent", "image", [b"this is not a jpeg"], ["latent"])
    assert e.value.status() == "400"
    assert "jpeg" in e.value.message().lower(), e.value.message()


def test_truncated_mp4_is_400(client, mp4):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "video-latent", "video", [mp4[: len(mp4) // 3]], ["latent"])
    assert e.value.status() == "400", e.value.message()
    assert e.value.message()


def test_invalid_utf8_is_400(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "text-embed", "text", [b"ok \xff\xfe bad"], ["pooled"])
    assert e.value.status() == "400"
    assert "utf" in e.value.message().lower(), e.value.message()


def test_wrong_datatype_is_400(client):
    t = httpclient.InferInput("image", [1, 4], "FP32")
    t.set_data_from_numpy(np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        client.infer("image-latent", [t])
    assert e.value.status() == "400", e.value.message()


def test_unknown_model_is_404(client):
    with pytest.raises(InferenceServerException) as e:
        infer(client, "no-such-model", "text", [b"x"], ["pooled"])
    assert e.value.status() == "404"
    assert "no-such-model" in e.value.message(), e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no-such-model")
    assert e.value.status() == "404"


def test_unknown_version_is_404(client):
    with pytest.raises(InferenceServerException) as e:
        client.infer("text-embed", [bytes_input("text", [b"x"])], model_version="999")
    assert e.value.status() == "404", e.value.message()


def test_server_still_serves_after_errors(client, ref):
    r = infer(client, "text-embed", "text", [b"after errors"], ["pooled"])
    assert_rows_equal(r, "pooled", [ref.embed("text-embed", b"after errors")])


# --- system shared memory (Triton's extension) -------------------------------------------------------

TEXT_OUTPUTS = ["sequence", "mask", "pooled"]


def _shm_key(tag):
    return f"/jitembed-interop-{os.getpid()}-{tag}"


@pytest.fixture
def shm_regions(client):
    """Creates regions through tritonclient.utils.shared_memory; unregisters and destroys them afterwards."""
    import tritonclient.utils.shared_memory as shm
    made = []

    def make(name, byte_size):
        handle = shm.create_shared_memory_region(name, _shm_key(name), byte_size)
        made.append((name, handle))
        return handle

    yield make
    client.unregister_system_shared_memory()
    for _, handle in made:
        shm.destroy_shared_memory_region(handle)


def test_shared_memory_inputs_and_outputs_equal_a_normal_infer(client, shm_regions):
    import tritonclient.utils as utils
    import tritonclient.utils.shared_memory as shm
    normal = infer(client, "text-embed", "text", TEXTS, TEXT_OUTPUTS)
    expect = {o: normal.as_numpy(o) for o in TEXT_OUTPUTS}

    # The BYTES input as tritonclient serializes it (uint32-LE length + bytes per element).
    serialized = utils.serialize_byte_tensor(np.array([[t.encode()] for t in TEXTS], dtype=np.object_))
    in_size = utils.serialized_byte_size(serialized)
    in_handle = shm_regions("jit_in", in_size + 64)
    shm.set_shared_memory_region(in_handle, [serialized], offset=64)
    out_sizes = {o: expect[o].nbytes for o in TEXT_OUTPUTS}
    out_handle = shm_regions("jit_out", sum(out_sizes.values()) + 16)
    client.register_system_shared_memory("jit_in", _shm_key("jit_in"), in_size + 64)
    client.register_system_shared_memory("jit_out", _shm_key("jit_out"), sum(out_sizes.values()) + 16)

    status = client.get_system_shared_memory_status()
    assert sorted((r["name"], r["key"], int(r["byte_size"])) for r in status) == sorted(
        [("jit_in", _shm_key("jit_in"), in_size + 64), ("jit_out", _shm_key("jit_out"), sum(out_sizes.values()) + 16)])
    assert "system_shared_memory" in client.get_server_metadata()["extensions"]
    with pytest.raises(InferenceServerException, match="already in manager"):
        client.register_system_shared_memory("jit_in", _shm_key("jit_in"), 8)

    inp = httpclient.InferInput("text", [len(TEXTS), 1], "BYTES")
    inp.set_shared_memory("jit_in", in_size, offset=64)
    outputs, offsets, at = [], {}, 16
    for o in TEXT_OUTPUTS:
        ro = httpclient.InferRequestedOutput(o, binary_data=True)
        ro.set_shared_memory("jit_out", out_sizes[o], offset=at)
        offsets[o] = at
        at += out_sizes[o]
        outputs.append(ro)
    res = client.infer("text-embed", [inp], outputs=outputs)
    for o in TEXT_OUTPUTS:
        out = res.get_output(o)
        # As Triton answers over HTTP: name, datatype and shape; the bytes are in the region.
        assert out == {"name": o, "datatype": normal.get_output(o)["datatype"], "shape": list(expect[o].shape)}, out
        got = shm.get_contents_as_numpy(out_handle, expect[o].dtype, expect[o].shape, offset=offsets[o])
        np.testing.assert_array_equal(got, expect[o], err_msg=o)

    # Input from the region, outputs in the response body.
    res2 = client.infer("text-embed", [inp], outputs=[httpclient.InferRequestedOutput(o) for o in TEXT_OUTPUTS])
    for o in TEXT_OUTPUTS:
        np.testing.assert_array_equal(res2.as_numpy(o), expect[o], err_msg=o)

    # A region too small for an output: 400 naming it; an unregistered region: 400.
    small = httpclient.InferRequestedOutput("pooled", binary_data=True)
    small.set_shared_memory("jit_out", out_sizes["pooled"] - 1)
    with pytest.raises(InferenceServerException) as e:
        client.infer("text-embed", [inp], outputs=[small])
    assert e.value.status() == "400" and "do not fit shared_memory_byte_size" in e.value.message(), e.value
    client.unregister_system_shared_memory("jit_in")
    with pytest.raises(InferenceServerException) as e:
        client.infer("text-embed", [inp])
    assert e.value.status() == "400" and "shared memory region 'jit_in' is not registered" in e.value.message()
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["jit_out"]
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []


# --- perf_analyzer ----------------------------------------------------------------------------------


def run_perf_analyzer(server, work, model, data, tag, concurrency="1:8", extra=()):
    found = interop_util.find_perf_analyzer(os.environ.get("JITEMBED_VENV", ""))
    if found is None:
        pytest.skip("perf_analyzer not available")
    pa, env = found
    data_path = os.path.join(work, f"pa_{tag}.json")
    with open(data_path, "w") as f:
        json.dump(data, f)
    csv_path = os.path.join(work, f"pa_{tag}.csv")
    cmd = [pa, "-m", model, "-u", server.url, "-i", "http", "--concurrency-range", concurrency,
           "--input-data", data_path, "--measurement-interval", "500", "--max-trials", "3",
           "--stability-percentage", "999", "-f", csv_path] + list(extra)
    p = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert p.returncode == 0, f"perf_analyzer failed ({p.returncode}):\n{out[-4000:]}\nserver: {server.log_tail()}"
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    lo, hi = (int(x) for x in concurrency.split(":"))
    assert sorted(int(r["Concurrency"]) for r in rows) == list(range(lo, hi + 1)), rows
    for r in rows:
        assert float(r["Inferences/Second"]) > 0, r
    # perf_analyzer stops with "Thread [i] had error: ..." and a non-zero exit on any failed request.
    assert "had error" not in out, out[-4000:]
    return rows, out


def test_perf_analyzer_text_embed(server, work):
    data = {"data": [{"text": [t]} for t in TEXTS]}
    rows, _ = run_perf_analyzer(server, work, "text-embed", data, "text")
    print("perf_analyzer text-embed:", [(r["Concurrency"], r["Inferences/Second"]) for r in rows])


def test_perf_analyzer_image_latent(server, work, jpeg):
    # perf_analyzer takes "b64" as the tensor's serialized bytes: a BYTES element is uint32-LE length + bytes.
    data = {"data": [{"image": {"b64": base64.b64encode(struct.pack("<I", len(jpeg)) + jpeg).decode()}}]}
    rows, _ = run_perf_analyzer(server, work, "image-latent", data, "image")
    print("perf_analyzer image-latent:", [(r["Concurrency"], r["Inferences/Second"]) for r in rows])


# --- HTTPS: jitembed-server --tls-cert / --tls-key with tritonclient's TLS client -------------------------------


@pytest.fixture(scope="module")
def tls(work):
    files = interop_util.make_tls_files(work)
    if files is None:
        pytest.skip("no openssl CLI to make the test certificates (Debian: openssl)")
    ca, cert, key, wrong_ca = files
    s = interop_util.Server(_env("JITEMBED_SERVER"), args=["--tls-cert", cert, "--tls-key", key, "--model", "text-embed"],
                            log_path=os.path.join(work, "server_tls.log"), ca_file=ca)
    yield s, ca, wrong_ca
    rc = s.stop()
    assert rc == 0, f"jitembed-server (TLS) did not drain and exit 0 on SIGTERM (rc={rc}): {s.log_tail()}"


def test_tls_text_embed(tls, ref):
    s, ca, _ = tls
    c = httpclient.InferenceServerClient(url=s.url, ssl=True, ssl_options={"ca_certs": ca}, network_timeout=60.0)
    try:
        assert c.is_server_ready()
        outs = ["sequence", "mask", "pooled"]
        for _ in range(3):  # keep-alive over TLS
            r = infer(c, "text-embed", "text", [t.encode() for t in TEXTS], outs)
            refs = [ref.embed("text-embed", t.encode()) for t in TEXTS]
            for o in outs:
                assert_rows_equal(r, o, refs)
    finally:
        c.close()


def test_tls_wrong_ca_is_refused_and_server_unharmed(tls):
    s, ca, wrong_ca = tls
    bad = httpclient.InferenceServerClient(url=s.url, ssl=True, ssl_options={"ca_certs": wrong_ca}, network_timeout=10.0)
    with pytest.raises(Exception) as e:
        bad.is_server_ready()
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value) or "certificate verify failed" in str(e.value)
    bad.close()
    good = httpclient.InferenceServerClient(url=s.url, ssl=True, ssl_options={"ca_certs": ca}, network_timeout=10.0)
    assert good.is_server_ready()
    good.close()
def test_perf_analyzer_text_embed_system_shared_memory(server, work):
    # Inputs and outputs through regions perf_analyzer creates and registers (--shared-memory system).
    data = {"data": [{"text": [t]} for t in TEXTS]}
    rows, _ = run_perf_analyzer(server, work, "text-embed", data, "text_shm", concurrency="1:4",
                                extra=["--shared-memory", "system", "--output-shared-memory-size", str(1 << 20)])
    print("perf_analyzer text-embed (system shared memory):",
          [(r["Concurrency"], r["Inferences/Second"]) for r in rows])


@pytest.mark.parametrize("req_alg,resp_alg", [("gzip", "gzip"), ("deflate", "deflate"), ("gzip", None), (None, "deflate")])
def test_http_content_encoding_as_triton_accepts_it(client, ref, req_alg, resp_alg):
    """tritonclient's request_compression_algorithm / response_compression_algorithm: the same embeddings."""
    outs = ["pooled", "mask"]
    r = client.infer("text-embed", [bytes_input("text", [t.encode() for t in TEXTS])],
                     outputs=[httpclient.InferRequestedOutput(o, binary_data=True) for o in outs],
                     request_compression_algorithm=req_alg, response_compression_algorithm=resp_alg)
    refs = [ref.embed("text-embed", t.encode()) for t in TEXTS]
    for o in outs:
        assert_rows_equal(r, o, refs)
