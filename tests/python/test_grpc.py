"""KServe v2 gRPC interop: tritonclient.grpc and `perf_analyzer -i grpc` against jitembed-server --grpc-port.

Run through run_interop.py (ctest python/interop_grpc). The gRPC answers must equal the HTTP answers
(bitwise: the same core computes both) and the C++ reference models; errors carry the status code the
errc maps to (INVALID_ARGUMENT, NOT_FOUND, DEADLINE_EXCEEDED, UNAUTHENTICATED) and the server's message.
"""
import json
import os
import queue
import subprocess
import csv

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import interop_util

# the session's work folder, reference models and captions: the HTTP interop suite's
from test_interop import TEXTS, TOL, _env, jpeg, ref, work  # noqa: E402,F401  (fixtures)


class GrpcServer(interop_util.Server):
    def __init__(self, binary, args=(), log_path=None):
        self.grpc_port = interop_util.free_port()
        super().__init__(binary, ["--grpc-port", str(self.grpc_port)] + list(args), log_path=log_path)
        self.grpc_url = f"127.0.0.1:{self.grpc_port}"
        # HTTP ready says nothing of the gRPC port: wait until it accepts connections itself (a client that
        # connected first got `Connection refused` on a loaded machine)
        interop_util.wait_for_port(self.grpc_port, self.proc, timeout=30.0)


def stop_ok(s):
    rc = s.stop()
    assert rc == 0, f"jitembed-server did not drain and exit 0 on SIGTERM (rc={rc}): {s.log_tail()}"


@pytest.fixture(scope="session")
def server(work):
    s = GrpcServer(_env("JITEMBED_SERVER"), log_path=os.path.join(work, "server_grpc.log"))
    yield s
    stop_ok(s)


@pytest.fixture(scope="session")
def gclient(server):
    c = grpcclient.InferenceServerClient(server.grpc_url)
    yield c
    c.close()


@pytest.fixture(scope="session")
def hclient(server):
    c = httpclient.InferenceServerClient(url=server.url)
    yield c
    c.close()


def g_input(name, elements):
    t = grpcclient.InferInput(name, [len(elements), 1], "BYTES")
    t.set_data_from_numpy(np.array([[e] for e in elements], dtype=np.object_))
    return t


def h_infer(hclient, model, name, elements, outputs):
    t = httpclient.InferInput(name, [len(elements), 1], "BYTES")
    t.set_data_from_numpy(np.array([[e] for e in elements], dtype=np.object_), binary_data=True)
    return hclient.infer(model, [t], outputs=[httpclient.InferRequestedOutput(o, binary_data=True) for o in outputs])


def test_health_metadata_config_stats(gclient, hclient):
    assert gclient.is_server_live() and gclient.is_server_ready()
    assert gclient.get_server_metadata().name == "jitembed"
    assert gclient.is_model_ready("text-embed")
    assert not gclient.is_model_ready("no-such-model")
    for model in ("image-latent", "video-latent", "text-embed"):
        g = gclient.get_model_metadata(model, as_json=True)
        h = hclient.get_model_metadata(model)
        assert g["name"] == h["name"] and g["versions"] == h["versions"] and g["platform"] == h["platform"]
        for key in ("inputs", "outputs"):
            assert [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in g[key]] == \
                   [(t["name"], t["datatype"], t["shape"]) for t in h[key]]
        gc = gclient.get_model_config(model, as_json=True)["config"]
        hc = hclient.get_model_config(model)
        assert gc["name"] == hc["name"] and gc["max_batch_size"] == hc["max_batch_size"]
        assert [o["name"] for o in gc["output"]] == [o["name"] for o in hc["output"]]
        assert gc["input"][0]["data_type"] == "TYPE_STRING"
    index = gclient.get_model_repository_index(as_json=True)
    assert sorted(m["name"] for m in index["models"]) == ["image-latent", "text-embed", "video-latent"]
    before = int(gclient.get_inference_statistics("text-embed", as_json=True)["model_stats"][0].get("inference_count", 0))
    gclient.infer("text-embed", [g_input("text", TEXTS[:2])])
    after = gclient.get_inference_statistics("text-embed", as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) == before + 2
    assert int(after["inference_stats"]["success"]["count"]) >= 1


def test_text_embed_equals_http_and_reference(gclient, hclient, ref):
    outputs = ["sequence", "mask", "pooled"]
    g = gclient.infer("text-embed", [g_input("text", [t.encode() for t in TEXTS])],
                      outputs=[grpcclient.InferRequestedOutput(o) for o in outputs])
    h = h_infer(hclient, "text-embed", "text", [t.encode() for t in TEXTS], outputs)
    refs = [ref.embed("text-embed", t.encode()) for t in TEXTS]
    for o in outputs:
        assert g.as_numpy(o).dtype == h.as_numpy(o).dtype
        assert np.array_equal(g.as_numpy(o), h.as_numpy(o)), o  # the same core: bitwise equal
        for i, r in enumerate(refs):
            np.testing.assert_allclose(g.as_numpy(o)[i], r[o], **TOL)


def test_image_latent_equals_http(gclient, hclient, jpeg):
    g = gclient.infer("image-latent", [g_input("image", [jpeg, jpeg])])
    h = h_infer(hclient, "image-latent", "image", [jpeg, jpeg], ["latent"])
    assert g.as_numpy("latent").shape[0] == 2
    assert np.array_equal(g.as_numpy("latent"), h.as_numpy("latent"))


def test_stream_infer(gclient, ref):
    results = queue.Queue()
    gclient.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for i, t in enumerate(TEXTS * 4):
            gclient.async_stream_infer("text-embed", [g_input("text", [t.encode()])], request_id=str(i),
                                       outputs=[grpcclient.InferRequestedOutput("pooled")])
        # a bad request in the stream answers an error and the stream goes on
        gclient.async_stream_infer("text-embed", [g_input("text", [b"\xff\xfe"])], request_id="bad")
        gclient.async_stream_infer("text-embed", [g_input("text", [b"after"])], request_id="after")
        got = {}
        errors = []
        for _ in range(len(TEXTS) * 4 + 2):
            result, error = results.get(timeout=30)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy("pooled")
    finally:
        gclient.stop_stream()
    assert len(errors) == 1 and "utf" in errors[0].lower(), errors
    assert "after" in got
    for i, t in enumerate(TEXTS * 4):
        np.testing.assert_allclose(got[str(i)][0], ref.embed("text-embed", t.encode())["pooled"], **TOL)


def test_unread_stream_stops_reading_instead_of_growing(server, gclient):
    """A client that writes a ModelStreamInfer stream and never reads its answers: the server reads at most
    its stream window (128) of requests, plus the answers the client's HTTP/2 receive window took, and waits (gRPC flow control), instead of running them all and
    queueing every answer. Once the client reads, every request is answered exactly once."""
    import grpc
    import struct
    import threading
    import time
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    total, window = 2000, 128
    def count():
        stats = gclient.get_inference_statistics("text-embed", as_json=True)["model_stats"][0]
        return int(stats.get("inference_count", 0))

    sent = [0]
    def requests():
        for i in range(total):
            text = f"unread {i}".encode()
            r = service_pb2.ModelInferRequest(model_name="text-embed", id=str(i))
            r.inputs.add(name="text", datatype="BYTES", shape=[1, 1])
            r.outputs.add(name="sequence")
            r.raw_input_contents.append(struct.pack("<I", len(text)) + text)
            sent[0] += 1
            yield r

    before = count()
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = stub.ModelStreamInfer(requests(), timeout=120)
        # the client reads nothing for a while: the server may run at most a window of requests
        deadline = time.monotonic() + 3.0
        ran = 0
        while time.monotonic() < deadline:
            ran = count() - before
            time.sleep(0.2)
        # answers already written into the client's HTTP/2 receive window have left the server: a little slack
        assert ran <= 2 * window, f"the server ran {ran} of {total} requests of a stream nobody reads (window {window})"
        assert ran >= 1
        ids = []
        for a in answers:
            assert a.error_message == "", a.error_message
            ids.append(a.infer_response.id)
    assert sorted(ids, key=int) == [str(i) for i in range(total)] and len(set(ids)) == total
    assert count() - before == total


def status_of(e):
    s = e.status()
    return s.split(".")[-1] if s else s


def test_errors_map_to_status_codes(gclient, jpeg):
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("no-such-model", [g_input("text", [b"x"])])
    assert status_of(e.value) == "NOT_FOUND" and "no-such-model" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("image-latent", [g_input("image", [b"not a jpeg"])])
    assert status_of(e.value) == "INVALID_ARGUMENT"
    t = grpcclient.InferInput("text", [1], "INT32")
    t.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("text-embed", [t])
    assert status_of(e.value) == "INVALID_ARGUMENT" and "BYTES" in e.value.message()
    # the server is unharmed
    assert gclient.infer("image-latent", [g_input("image", [jpeg])]).as_numpy("latent").shape[0] == 1


def test_cuda_shared_memory_calls_reach_the_server(gclient, hclient):
    """tritonclient's CUDA shared-memory calls over both protocols (Triton's wire fields: raw_handle bytes over
    gRPC, {"b64": ...} over HTTP): a handle that is no allocation is refused naming the region, whether the
    server has a CUDA backend (no GPU here: the device does not exist) or not (built without CUDA)."""
    import base64
    handle = base64.b64encode(b"\x5a" * 64)
    with pytest.raises(InferenceServerException) as e:
        gclient.register_cuda_shared_memory("c_bogus", handle, 0, 64)
    assert status_of(e.value) == "INVALID_ARGUMENT" and "CUDA shared memory" in e.value.message(), e.value
    with pytest.raises(InferenceServerException) as e:
        hclient.register_cuda_shared_memory("c_bogus", handle.decode(), 0, 64)
    assert e.value.status() == "400" and "CUDA shared memory" in e.value.message(), e.value
    assert gclient.get_cuda_shared_memory_status(as_json=True).get("regions", {}) == {}
    assert hclient.get_cuda_shared_memory_status() == []
    gclient.unregister_cuda_shared_memory()
    hclient.unregister_cuda_shared_memory("c_bogus")
    extensions = hclient.get_server_metadata()["extensions"]
    assert "system_shared_memory" in extensions
    assert ("cuda_shared_memory" in extensions) == ("built without CUDA" not in e.value.message())


def test_system_shared_memory_over_grpc(gclient):
    """Inputs read from and outputs written into regions made with tritonclient.utils.shared_memory, over gRPC."""
    import tritonclient.utils as utils
    import tritonclient.utils.shared_memory as shm
    outputs = ["sequence", "mask", "pooled"]
    normal = gclient.infer("text-embed", [g_input("text", [t.encode() for t in TEXTS])])
    expect = {o: normal.as_numpy(o) for o in outputs}
    serialized = utils.serialize_byte_tensor(np.array([[t.encode()] for t in TEXTS], dtype=np.object_))
    in_size = utils.serialized_byte_size(serialized)
    out_sizes = {o: expect[o].nbytes for o in outputs}
    key_in, key_out = f"/jitembed-grpc-{os.getpid()}-in", f"/jitembed-grpc-{os.getpid()}-out"
    h_in = shm.create_shared_memory_region("g_in", key_in, in_size + 32)
    h_out = shm.create_shared_memory_region("g_out", key_out, sum(out_sizes.values()))
    try:
        shm.set_shared_memory_region(h_in, [serialized], offset=32)
        gclient.register_system_shared_memory("g_in", key_in, in_size + 32)
        gclient.register_system_shared_memory("g_out", key_out, sum(out_sizes.values()))
        st = gclient.get_system_shared_memory_status(as_json=True)
        assert sorted(st["regions"]) == ["g_in", "g_out"] and st["regions"]["g_in"]["key"] == key_in
        with pytest.raises(InferenceServerException) as e:
            gclient.register_system_shared_memory("g_in", key_in, 8)
        assert status_of(e.value) == "INVALID_ARGUMENT" and "already in manager" in e.value.message()
        inp = grpcclient.InferInput("text", [len(TEXTS), 1], "BYTES")
        inp.set_shared_memory("g_in", in_size, offset=32)
        req_outs, offsets, at = [], {}, 0
        for o in outputs:
            ro = grpcclient.InferRequestedOutput(o)
            ro.set_shared_memory("g_out", out_sizes[o], offset=at)
            offsets[o], at = at, at + out_sizes[o]
            req_outs.append(ro)
        gclient.infer("text-embed", [inp], outputs=req_outs)
        for o in outputs:
            got = shm.get_contents_as_numpy(h_out, expect[o].dtype, expect[o].shape, offset=offsets[o])
            np.testing.assert_array_equal(got, expect[o], err_msg=o)
        # input from the region, outputs in the message
        r = gclient.infer("text-embed", [inp])
        for o in outputs:
            np.testing.assert_array_equal(r.as_numpy(o), expect[o], err_msg=o)
        gclient.unregister_system_shared_memory("g_in")
        with pytest.raises(InferenceServerException) as e:
            gclient.infer("text-embed", [inp])
        assert status_of(e.value) == "INVALID_ARGUMENT" and "'g_in' is not registered" in e.value.message()
    finally:
        gclient.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(h_in)
        shm.destroy_shared_memory_region(h_out)
    assert gclient.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}


def test_deadline_and_auth(work):
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write("s3cret\n")
    s = GrpcServer(_env("JITEMBED_SERVER"), ["--model", "text-embed:sleep_us=300000", "--auth-token-file", token_file],
                   log_path=os.path.join(work, "server_grpc_slow.log"))
    try:
        c = grpcclient.InferenceServerClient(s.grpc_url)
        auth = {"authorization": "Bearer s3cret"}
        assert c.is_server_live()  # health needs no token
        with pytest.raises(InferenceServerException) as e:
            c.get_model_metadata("text-embed")
        assert status_of(e.value) == "UNAUTHENTICATED"
        assert c.get_model_metadata("text-embed", headers=auth).name == "text-embed"
        # the KServe "timeout" parameter (microseconds): the server answers at the deadline
        with pytest.raises(InferenceServerException) as e:
            c.infer("text-embed", [g_input("text", [b"slow"])], headers=auth, timeout=50000)
        assert status_of(e.value) == "DEADLINE_EXCEEDED" and "deadline passed" in e.value.message()
        r = c.infer("text-embed", [g_input("text", [b"slow"])], headers=auth)
        assert r.as_numpy("pooled").shape[0] == 1
        c.close()
    finally:
        stop_ok(s)


def test_perf_analyzer_grpc(server, work):
    found = interop_util.find_perf_analyzer(os.environ.get("JITEMBED_VENV", ""))
    if found is None:
        pytest.skip("perf_analyzer not available")
    pa, env = found
    data_path = os.path.join(work, "pa_grpc.json")
    with open(data_path, "w") as f:
        json.dump({"data": [{"text": [t]} for t in TEXTS]}, f)
    shm_args = ["--shared-memory", "system", "--output-shared-memory-size", str(1 << 20)]
    for extra, tag in (([], "unary"), (["--streaming"], "stream"), (shm_args, "shm")):
        csv_path = os.path.join(work, f"pa_grpc_{tag}.csv")
        cmd = [pa, "-m", "text-embed", "-u", server.grpc_url, "-i", "grpc", "--concurrency-range", "1:4",
               "--input-data", data_path, "--measurement-interval", "500", "--max-trials", "3",
               "--stability-percentage", "999", "-f", csv_path] + extra
        p = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
        out = (p.stdout + p.stderr).decode(errors="replace")
        assert p.returncode == 0, f"perf_analyzer -i grpc {tag} failed ({p.returncode}):\n{out[-4000:]}\n{server.log_tail()}"
        assert "had error" not in out, out[-4000:]
        with open(csv_path) as f:
            rows = list(csv.DictReader(f))
        assert sorted(int(r["Concurrency"]) for r in rows) == [1, 2, 3, 4], rows
        assert all(float(r["Inferences/Second"]) > 0 for r in rows), rows
        print(f"perf_analyzer -i grpc {tag}:", [(r["Concurrency"], r["Inferences/Second"]) for r in rows])


def test_tensor_model_from_a_repository_serves_its_declared_input(work):
    """A Triton user's repository: a TorchScript model with INPUT__0 TYPE_FP32 [3, 16, 16] and no preprocessing
    parameters is served with exactly that input, over gRPC and HTTP, equal to eager PyTorch."""
    torch = pytest.importorskip("torch")
    repo = os.path.join(work, "tensor_repo")
    os.makedirs(os.path.join(repo, "pooled", "1"), exist_ok=True)

    class Pool(torch.nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3)) * 2.0 + 1.0

    torch.jit.script(Pool()).save(os.path.join(repo, "pooled", "1", "model.pt"))
    with open(os.path.join(repo, "pooled", "config.pbtxt"), "w") as f:
        f.write('platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
                'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 16, 16 ] } ]\n'
                'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n')
    s = GrpcServer(_env("JITEMBED_SERVER"), ["--model-repository", repo], log_path=os.path.join(work, "server_tensor.log"))
    try:
        x = np.random.default_rng(3).standard_normal((4, 3, 16, 16)).astype(np.float32)
        want = x.mean(axis=(2, 3)) * 2.0 + 1.0
        g = grpcclient.InferenceServerClient(s.grpc_url)
        meta = g.get_model_metadata("pooled", as_json=True)
        assert [(i["name"], i["datatype"], [int(d) for d in i["shape"]]) for i in meta["inputs"]] == \
            [("INPUT__0", "FP32", [-1, 3, 16, 16])]
        gi = grpcclient.InferInput("INPUT__0", list(x.shape), "FP32")
        gi.set_data_from_numpy(x)
        np.testing.assert_allclose(g.infer("pooled", [gi]).as_numpy("OUTPUT__0"), want, rtol=1e-5, atol=1e-5)
        h = httpclient.InferenceServerClient(url=s.url)
        hi = httpclient.InferInput("INPUT__0", list(x.shape), "FP32")
        hi.set_data_from_numpy(x)
        np.testing.assert_allclose(h.infer("pooled", [hi]).as_numpy("OUTPUT__0"), want, rtol=1e-5, atol=1e-5)
        cfg = h.get_model_config("pooled")
        assert cfg["input"][0]["name"] == "INPUT__0" and cfg["input"][0]["data_type"] == "TYPE_FP32"
        # raw bytes are refused, naming the declared input
        bi = httpclient.InferInput("image", [1, 1], "BYTES")
        bi.set_data_from_numpy(np.array([[b"\xff\xd8"]], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="INPUT__0"):
            h.infer("pooled", [bi])
        # Triton refuses a request with both contents and raw_input_contents (one would be dropped silently)
        from tritonclient.grpc import service_pb2
        req = service_pb2.ModelInferRequest(model_name="pooled")
        t = req.inputs.add(name="INPUT__0", datatype="FP32", shape=[1, 3, 16, 16])
        t.contents.fp32_contents.extend(x[0].ravel().tolist())
        req.raw_input_contents.append(x[0].tobytes())
        with pytest.raises(Exception, match="contents must not be set"):
            g._client_stub.ModelInfer(req)
        g.close()
        h.close()
    finally:
        stop_ok(s)
