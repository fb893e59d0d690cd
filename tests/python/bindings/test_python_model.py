"""jitembed.Model: Python encoders served by jitembed.Server (C++ HTTP, batching, preprocessing; the call in
Python). Loopback only; every wait is bounded."""
import io
import threading
import time

import numpy as np
import pytest

import jitembed

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

SIZE = 32


def jpeg(seed, size=SIZE):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


class TinyEncoder(torch.nn.Module):
    """A VAE-encoder-shaped module: [n, 3, 32, 32] -> latent [n, 4, 8, 8] and a pooled [n, 4]."""

    def __init__(self, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.conv1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 4, 3, stride=2, padding=1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)

    def forward(self, x):
        with torch.inference_mode():
            z = self.conv2(torch.nn.functional.silu(self.conv1(x)))
            return {"latent": z, "pooled": z.mean(dim=(2, 3))}


def tiny_model(module=None, name="tiny", version="1", **kw):
    module = module if module is not None else TinyEncoder()
    return jitembed.Model(module, name, version, inputs=("image", "f32", [3, SIZE, SIZE]),
                          outputs=[("latent", "f32", [4, 8, 8]), ("pooled", "f32", [4])], max_batch_size=8,
                          preprocess={"modality": "image", "image_normalize": "signed"}, **kw)


def image_model(fn, name, outputs=(("y", "f32", [2]),), **kw):
    return jitembed.Model(fn, name, inputs=("image", "f32", [3, SIZE, SIZE]), outputs=list(outputs), max_batch_size=4,
                          preprocess={"modality": "image"}, **kw)


@pytest.fixture
def images():
    return [jpeg(i) for i in range(6)]


def test_served_outputs_equal_the_module_called_directly(images):
    module = TinyEncoder()
    m = tiny_model(module)
    assert m.modality == "image" and m.version == "1"
    assert m.fingerprint.startswith("python:1:sd-") and m.fingerprint.endswith(jitembed.state_dict_hash(module))
    with jitembed.Server(models=[m]) as server, jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        r = client.embed("tiny", images, input="image")
        batch = torch.from_numpy(np.stack([m.preprocess(b) for b in images]))
        want = module(batch)
        np.testing.assert_allclose(r["latent"], want["latent"].numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(r["pooled"], want["pooled"].numpy(), rtol=0, atol=1e-5)
        # one row, one batch of one on both sides: bitwise
        one = client.embed("tiny", images[:1], input="image")
        np.testing.assert_array_equal(one["latent"], module(batch[:1])["latent"].numpy())
        # the in-process path (Model.__call__) runs the same preprocessing and call
        np.testing.assert_array_equal(m(images[:1])["latent"], one["latent"])
        # the cache identity is the Model's
        ident = client.identity("tiny")
        assert ident["fingerprint"] == m.fingerprint and ident["preprocess_key"] == m.preprocess_key


def test_the_fingerprint_follows_the_weights():
    a, b = TinyEncoder(seed=1), TinyEncoder(seed=1)
    assert tiny_model(a).fingerprint == tiny_model(b).fingerprint
    with torch.no_grad():
        b.conv1.bias[0] += 1e-3
    assert tiny_model(a).fingerprint != tiny_model(b).fingerprint
    assert tiny_model(a, version="2").fingerprint != tiny_model(a).fingerprint
    assert tiny_model(a, hash_weights=False).fingerprint == "python:1"


def test_a_numpy_callable_gets_numpy(images):
    seen = []

    def fn(x):
        seen.append(type(x))
        return (x.reshape(x.shape[0], -1)[:, :2] * 2).astype(np.float32)

    m = image_model(fn, "np", tensor_type="numpy")
    with jitembed.Server(models=[m]) as server, jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        r = client.embed("np", images[:2], input="image")
    assert seen and all(t is np.ndarray for t in seen)
    want = np.stack([m.preprocess(b).reshape(-1)[:2] * 2 for b in images[:2]])
    np.testing.assert_array_equal(r["y"], want)


def test_errors_name_the_exception_and_both_shapes(images):
    mode = {"v": "ok"}

    def fn(x):
        n = x.shape[0]
        if mode["v"] == "raise":
            raise ValueError("bad weights")
        if mode["v"] == "shape":
            return torch.zeros(n, 3)
        if mode["v"] == "dtype":
            return torch.zeros(n, 2, dtype=torch.float64)
        if mode["v"] == "count":
            return torch.zeros(n, 2), torch.zeros(n, 2)
        if mode["v"] == "type":
            return "not an array"
        return torch.zeros(n, 2)

    m = image_model(fn, "err")
    with jitembed.Server(models=[m]) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        assert client.embed("err", images[:1], input="image")["y"].shape == (1, 2)
        cases = {"raise": "the callable raised ValueError: bad weights",
                 "shape": "output 'y' is f32 [1, 3], declared f32 [1, 2]",
                 "dtype": "output 'y' is f64 [1, 2], declared f32 [1, 2]",
                 "count": "the callable returned 2 outputs, declared 1",
                 "type": "output 'y' is a str, not an array"}
        for v, text in cases.items():
            mode["v"] = v
            with pytest.raises(jitembed.ERROR_CLASSES["internal"]) as e:
                client.embed("err", images[:1], input="image")
            assert text in str(e.value), (v, str(e.value))
            assert not jitembed.is_retryable("internal")
        mode["v"] = "ok"  # the server is unharmed
        assert client.embed("err", images[:1], input="image")["y"].shape == (1, 2)


def test_bad_declarations_are_refused():
    with pytest.raises(jitembed.ERROR_CLASSES["invalid_argument"], match="not callable"):
        jitembed.Model(42, "x", inputs=("image", "f32", [3, 8, 8]), outputs=[("y", "f32", [1])])
    with pytest.raises(jitembed.ERROR_CLASSES["invalid_argument"], match="no built-in preprocessing"):
        jitembed.Model(lambda x: x, "x", inputs=("image", "u8", [8, 8, 3]), outputs=[("y", "f32", [1])],
                       preprocess={"modality": "image"})
    with pytest.raises(jitembed.ERROR_CLASSES["invalid_argument"], match="needs parameters 'modality'"):
        jitembed.Model(lambda x: x, "x", inputs=("image", "f32", [3, 8, 8]), outputs=[("y", "f32", [1])],
                       preprocess={"image_normalize": "signed"})
    with pytest.raises(jitembed.ERROR_CLASSES["invalid_argument"], match="image_normalize"):
        jitembed.Model(lambda x: x, "x", inputs=("image", "f32", [3, 8, 8]), outputs=[("y", "f32", [1])],
                       preprocess={"modality": "image", "image_normalize": "sideways"})
    with pytest.raises(jitembed.ERROR_CLASSES["invalid_argument"], match="needs parameters 'tokenizer'"):
        jitembed.Model(lambda x: x, "x", inputs=("text", "i64", [2, 8]), outputs=[("y", "f32", [1])],
                       preprocess={"modality": "text"})


def test_a_slow_model_does_not_hold_up_another(images):
    gate = threading.Event()

    def slow(x):
        gate.wait(10)  # releases the GIL, as torch ops do
        return torch.zeros(x.shape[0], 2)

    fast = tiny_model(name="fast")
    with jitembed.Server(models=[image_model(slow, "slow"), fast], io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        pending = client.embed_async("slow", images[:1], input="image")
        time.sleep(0.1)
        t0 = time.monotonic()
        for _ in range(5):
            assert client.embed("fast", images[:2], input="image")["latent"].shape == (2, 4, 8, 8)
        assert time.monotonic() - t0 < 2.0
        assert not pending.done()
        gate.set()
        assert pending.result(timeout=10)["y"].shape == (1, 2)


def test_an_overrunning_call_times_out_and_the_model_is_not_ready_until_it_returns(images):
    gate = threading.Event()
    entered = threading.Event()

    def slow(x):
        if x.abs().sum() > 0:  # not the warm-up's zeros
            entered.set()
            gate.wait(10)
        return torch.zeros(x.shape[0], 2)

    with jitembed.Server(models=[image_model(slow, "slow"), tiny_model(name="fast")]) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        t0 = time.monotonic()
        with pytest.raises(jitembed.ERROR_CLASSES["timeout"]):
            client.embed("slow", images[:1], input="image", timeout_ms=300)
        took = time.monotonic() - t0
        assert entered.is_set() and 0.25 < took < 3.0, took
        # the client's own timer may fire a moment before the server's deadline (counted from the request's
        # arrival): the model turns not ready at that deadline
        deadline = time.monotonic() + 2
        while server.status()["slow:1"]["ready"] and time.monotonic() < deadline:
            time.sleep(0.005)
        st = server.status()
        assert st["slow:1"]["ready"] is False and st["fast:1"]["ready"] is True
        status, _, _ = server.handle("GET", "/v2/models/slow/ready")
        assert status == 503
        assert client.embed("fast", images[:1], input="image")["latent"].shape == (1, 4, 8, 8)  # unaffected
        gate.set()
        deadline = time.monotonic() + 10
        while not server.status()["slow:1"]["ready"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.status()["slow:1"]["ready"] is True
        assert server.handle("GET", "/v2/models/slow/ready")[0] == 200
        assert client.embed("slow", images[:1], input="image")["y"].shape == (1, 2)


def test_instances_run_calls_at_once(images):
    def slow(x):
        time.sleep(0.4)  # releases the GIL
        return torch.zeros(x.shape[0], 2)

    m = jitembed.Model(slow, "par", inputs=("image", "f32", [3, SIZE, SIZE]), outputs=[("y", "f32", [2])],
                       max_batch_size=1, preprocess={"modality": "image"}, instances=2)
    assert m.instances == 2
    with jitembed.Server(models=[m], io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"], max_attempts=1) as client:
        t0 = time.monotonic()
        futures = [client.embed_async("par", [b], input="image") for b in images[:2]]
        for f in futures:
            f.result(timeout=10)
        assert time.monotonic() - t0 < 0.75  # two 0.4 s calls overlapped


def test_hot_swap_under_load_loses_nothing(images):
    old, new = TinyEncoder(seed=1), TinyEncoder(seed=2)
    failures, done, stop = [], [], threading.Event()
    with jitembed.Server(models=[tiny_model(old)], io_threads=2) as server:
        url = f"http://{server.url}"

        def load():
            with jitembed.Client(endpoints=[url]) as client:
                while not stop.is_set():
                    try:
                        client.embed("tiny", images[:3], input="image")
                        done.append(1)
                    except Exception as e:  # noqa: BLE001 -- every failure is the test's business
                        failures.append(repr(e))

        threads = [threading.Thread(target=load) for _ in range(2)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        before = len(done)
        server.load(tiny_model(new))  # the same version label: replaced in place
        time.sleep(0.3)
        stop.set()
        for t in threads:
            t.join(10)
        assert not failures, failures[:3]
        assert before > 0 and len(done) > before
        with jitembed.Client(endpoints=[url]) as client:
            assert client.identity("tiny")["fingerprint"] == tiny_model(new).fingerprint
            r = client.embed("tiny", images[:1], input="image")
            m = tiny_model(new)
            np.testing.assert_array_equal(r["latent"], new(torch.from_numpy(m.preprocess(images[0]))[None])["latent"].numpy())


def _repository():
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    repo = os.environ.get("JITEMBED_MODEL_REPOSITORY", os.path.join(root, "build", "release", "model_repository"))
    if not os.path.isfile(os.path.join(repo, "t5_encoder", "config.pbtxt")):
        pytest.skip(f"no exported model repository at {repo} (scripts/export_models.py --out DIR; ctest models/export)")
    return repo


def _served_reference(repo, model):
    import json
    import os

    ref = os.path.join(repo, model, "reference")
    meta = json.load(open(os.path.join(ref, "served.json")))
    out = np.fromfile(os.path.join(ref, meta["output"]["file"]), dtype=meta["output"]["dtype"]).reshape(meta["output"]["shape"])
    return meta, out


def test_a_model_repository_served_by_the_python_torch(tmp_path):
    """Server(model_repository=...): the exported TorchScript T5 and VAE run by this process's torch as
    jitembed.Model, with the configs' preprocessing, equal to eager PyTorch on the user's pipeline."""
    import os

    repo = _repository()
    with jitembed.Server(model_repository=repo, io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        loaded = dict(server.loaded())
        assert {"t5_encoder", "vae_encoder", "video_encoder"} <= set(loaded), loaded
        meta, want = _served_reference(repo, "t5_encoder")
        texts = [t.encode() for t in meta["texts"]]
        got = client.embed("t5_encoder", texts, input="text")["OUTPUT__0"]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
        ident = client.identity("t5_encoder")
        assert ident["fingerprint"] and "sentencepiece" in ident["preprocess_key"]
        meta, want = _served_reference(repo, "vae_encoder")
        ref = os.path.join(repo, "vae_encoder", "reference")
        images = [open(os.path.join(ref, f), "rb").read() for f in meta["jpegs"]]
        got = client.embed("vae_encoder", images, input="image")["OUTPUT__0"]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-3)
        # the repository routes load and unload from it
        status, _, body = server.handle("POST", "/v2/repository/index")
        assert status == 200 and b"t5_encoder" in body
        assert server.handle("POST", "/v2/repository/models/vae_encoder/unload")[0] == 200
        assert "vae_encoder" not in dict(server.loaded())
        assert server.handle("POST", "/v2/repository/models/vae_encoder/load")[0] == 200
        assert "vae_encoder" in dict(server.loaded())
