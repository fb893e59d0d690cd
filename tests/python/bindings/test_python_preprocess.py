"""jitembed.Model(preprocess=callable): a Python function from one raw input (str for text models, bytes
otherwise) to the model's input item, run on the server's preprocessing threads: served outputs equal
fn(preprocess(raw)) computed here (HTTP, gRPC, records, in process); its name and version are in the preprocess
key; an exception is a 400 carrying its type and message; a wrong dtype / shape names the expected input; two
calls overlap (the GIL is held for the call only). Loopback only; every wait is bounded."""
import json
import threading

import numpy as np
import pytest

import jitembed

torch = pytest.importorskip("torch")

L = 8


def tokens(s):
    """The test's "tokenizer": code points (capped) and a mask, i64 [2, L]."""
    ids = [min(ord(c), 1000) for c in s[:L]]
    out = np.zeros((2, L), dtype=np.int64)
    out[0, :len(ids)] = ids
    out[1, :len(ids)] = 1
    return out


def encode(x):
    """The model: [n, 2, L] int64 -> [n, 4] f32 (a function of every token, so a wrong preprocess shows)."""
    ids, mask = x[:, 0].double(), x[:, 1].double()
    return torch.stack([(ids * mask).sum(1), ids[:, :4].sum(1), mask.sum(1), (ids * ids).sum(1).sqrt()], 1).float()


def text_model(prep=tokens, name="pp", version="1", **kw):
    kw.setdefault("preprocess_name", "codepoints")
    kw.setdefault("preprocess_version", "1")
    return jitembed.Model(encode, name, version, inputs=("text", "i64", [2, L]), outputs=[("y", "f32", [4])],
                          max_batch_size=4, preprocess=prep, **kw)


def expected(texts, prep=tokens):
    return encode(torch.from_numpy(np.stack([prep(t) for t in texts]))).numpy()


TEXTS = ["hello", "a photo of a cat on a mat", "zürich ☃"]


def test_served_outputs_equal_fn_of_preprocess():
    m = text_model()
    assert m.modality == "text" and m.preprocess_fn is tokens
    np.testing.assert_array_equal(m.preprocess("hello".encode()), tokens("hello"))
    with jitembed.Server(models=[m], preprocess_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        r = client.embed("pp", [t.encode() for t in TEXTS], input="text")
        np.testing.assert_array_equal(r["y"], expected(TEXTS))
        # records: the server feeds the callable the record's first text field
        recs = []
        for t in TEXTS:
            b = jitembed.RecordBuilder()
            b.add_text("caption", t)
            recs.append(b.finish())
        np.testing.assert_array_equal(client.embed("pp", recs)["y"], expected(TEXTS))
        # in process, the same
        np.testing.assert_array_equal(m([t.encode() for t in TEXTS])["y"], expected(TEXTS))
        assert client.identity("pp")["preprocess_key"] == m.preprocess_key


def test_over_grpc():
    try:
        server = jitembed.Server(models=[text_model()], preprocess_threads=1, grpc_port=0)
    except jitembed.Error as e:
        if "built without the grpc component" in str(e):
            pytest.skip(str(e))
        raise
    with server, jitembed.Client(endpoints=[f"grpc://{server.grpc_url}"], request_timeout_ms=20000) as client:
        np.testing.assert_array_equal(client.embed("pp", [t.encode() for t in TEXTS], input="text")["y"], expected(TEXTS))


def test_bytes_for_image_models_and_a_torch_result():
    def prep(raw: bytes):
        assert isinstance(raw, bytes)
        a = np.frombuffer(raw.ljust(12, b"\0")[:12], dtype=np.uint8).astype(np.float32).reshape(3, 2, 2)
        return torch.from_numpy(a / 255.0)

    m = jitembed.Model(lambda x: x.flatten(1)[:, :5] * 2, "img", inputs=("image", "f32", [3, 2, 2]),
                       outputs=[("y", "f32", [5])], preprocess=prep, preprocess_name="raw-bytes", preprocess_version="3")
    assert m.modality == "image"
    raws = [b"\x01\x02\x03", b"some raw bytes, not a JPEG"]
    with jitembed.Server(models=[m], preprocess_threads=1) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        got = client.embed("img", raws, input="image")["y"]
    want = torch.stack([prep(r) for r in raws]).flatten(1)[:, :5] * 2
    np.testing.assert_array_equal(got, want.numpy())


def test_the_identity_is_in_the_preprocess_key():
    a, b = text_model(), text_model(preprocess_version="2")
    c = text_model(preprocess_name="other")
    assert a.preprocess_key == "python-preprocess:codepoints@1;text;i64[2,8]"
    assert b.preprocess_key == "python-preprocess:codepoints@2;text;i64[2,8]"
    assert len({a.preprocess_key, b.preprocess_key, c.preprocess_key}) == 3
    assert a.fingerprint == b.fingerprint  # the weights' identity is not the preprocessing's
    # so the cache keys differ (a key is made of model, fingerprint, preprocess key and content)
    keys = {jitembed.cache_key("pp", m.fingerprint, m.preprocess_key, b"hello") for m in (a, b, c)}
    assert len(keys) == 3
    for m in (a, b):
        with jitembed.Server(models=[m], preprocess_threads=1) as server, \
                jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
            assert client.identity("pp")["preprocess_key"] == m.preprocess_key
    with pytest.raises(jitembed.InvalidArgumentError, match="needs preprocess_name and preprocess_version"):
        text_model(preprocess_version=None)
    with pytest.raises(jitembed.InvalidArgumentError, match="go with a preprocess callable"):
        jitembed.Model(encode, "x", inputs=("image", "f32", [3, 8, 8]), outputs=[("y", "f32", [1])],
                       preprocess={"modality": "image"}, preprocess_name="n")
    with pytest.raises(jitembed.InvalidArgumentError, match="modality 'audio'"):
        text_model(modality="audio")


def test_errors_are_400_with_the_exception_and_the_expected_input():
    mode = {"v": "ok"}

    def prep(s):
        if s == "boom" or mode["v"] == "raise":
            raise ValueError(f"cannot tokenize {s!r}")
        if mode["v"] == "dtype":
            return tokens(s).astype(np.float64)
        if mode["v"] == "shape":
            return tokens(s)[:, :4]
        if mode["v"] == "type":
            return object()
        return tokens(s)

    m = text_model(prep)
    with jitembed.Server(models=[m], preprocess_threads=1) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        # one row raises: that row fails (invalid_argument, the exception's type and message), the others are served
        r = client.embed("pp", [b"hello", b"boom", b"cat"], input="text")
        assert r.row_errors[0] is None and r.row_errors[2] is None
        assert r.row_errors[1][0] == "invalid_argument"
        assert "preprocess raised ValueError: cannot tokenize 'boom'" in r.row_errors[1][1]
        np.testing.assert_array_equal(r["y"][[0, 2]], expected(["hello", "cat"]))
        # over the wire: HTTP 400 with the message (a KServe error body)
        body = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["boom"]}]})
        status, _, resp = server.handle("POST", "/v2/models/pp/infer", {"Content-Type": "application/json"},
                                        body.encode())
        assert status == 400, (status, resp)
        assert "ValueError: cannot tokenize 'boom'" in json.loads(bytes(resp))["error"]
        cases = {"dtype": (jitembed.DtypeMismatchError, "preprocess returned f64 [2, 8], input 'text' is i64 [2, 8]"),
                 "shape": (jitembed.InvalidArgumentError, "preprocess returned i64 [2, 4], input 'text' is i64 [2, 8]"),
                 "type": (jitembed.InvalidArgumentError, "preprocess returned a object, not an array (input 'text' is")}
        for v, (cls, text) in cases.items():
            mode["v"] = v
            with pytest.raises(cls) as e:
                client.embed("pp", [b"hello"], input="text")
            assert text in str(e.value), (v, str(e.value))
        mode["v"] = "ok"  # the server is unharmed
        np.testing.assert_array_equal(client.embed("pp", [b"hello"], input="text")["y"], expected(["hello"]))


def test_two_calls_overlap():
    """The GIL is held for the call only: two rows on two preprocessing threads are inside the callable at once
    (each waits, releasing the GIL, at a barrier only both together can pass) and sleep side by side."""
    barrier = threading.Barrier(2, timeout=10)
    inside, most = [0], [0]
    lock = threading.Lock()

    def prep(s):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            barrier.wait()  # raises BrokenBarrierError (the row fails) unless the other call is inside too
            import time
            time.sleep(0.2)  # in C, the GIL released
            return tokens(s)
        finally:
            with lock:
                inside[0] -= 1

    with jitembed.Server(models=[text_model(prep)], preprocess_threads=2, io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        futures = [client.embed_async("pp", [t.encode()], input="text") for t in ("one", "two")]
        got = [f.result(timeout=30)["y"] for f in futures]
    assert most[0] == 2
    np.testing.assert_array_equal(np.concatenate(got), expected(["one", "two"]))


def test_a_factory_with_a_preprocess_callable_pickles_as_ray_ships_it(tmp_path):
    """jitembed.ray.build_app ships Model factories to the replicas with cloudpickle (a Model itself holds C++
    state and is built in the replica): a factory whose Model has a preprocess callable, pickled by value here
    and called in a fresh process, serves fn(preprocess(raw))."""
    import subprocess
    import sys

    cloudpickle = pytest.importorskip("ray.cloudpickle")

    def factory(device="cpu"):
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

    (tmp_path / "factory.pkl").write_bytes(cloudpickle.dumps(factory))
    code = ("import pickle, sys, jitembed\n"
            "m = pickle.loads(open(sys.argv[1], 'rb').read())(device='cpu')\n"
            "with jitembed.Server(models=[m], preprocess_threads=1) as s, "
            "jitembed.Client(endpoints=[f'http://{s.url}']) as c:\n"
            "    print(c.embed('codepoints', [b'hello'], input='text')['y'].tolist())\n"
            "    print(m.preprocess_key)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "factory.pkl")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines() == ["[[104.0, 101.0, 108.0, 108.0]]", factory().preprocess_key]
