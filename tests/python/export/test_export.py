"""python -m jitembed.export on tiny seeded folders: the repository it writes (config.pbtxt contract, tokenizer.json,
version fingerprint), the exported modules against the models called directly, its verification and errors, and
the served round trip through jitembed.Server."""
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys

import fixtures
import numpy as np
import pytest
import torch

from jitembed import export as ex

SOURCE = os.path.dirname(os.path.abspath(ex.__file__))
# row 0 ids, row 1 mask, as the served text preprocessing makes them; captions that pad and one that truncates
CAPTIONS = ["a red fox sleeping at sunset", "Two children on a wooden boat, 35mm film!", "東京の夜景 🌅", "",
            " ".join(["an old lighthouse beside a lake in the rain"] * 12)]


def run_export(argv):
    """export.main(argv) in this process: (exit code, what it printed on stdout and stderr)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = ex.main(argv)
    return rc, buf.getvalue()


def parse_pbtxt(text):
    """The subset of config.pbtxt that export writes: scalars, tensors, parameters."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    cfg = {"name": re.search(r'^name: "([^"]*)"', body, re.M).group(1),
           "platform": re.search(r'^platform: "([^"]*)"', body, re.M).group(1),
           "max_batch_size": int(re.search(r"^max_batch_size: (\d+)", body, re.M).group(1))}
    for kind in ("input", "output"):
        block = re.search(rf"^{kind} \[(.*?)^\]", body, re.M | re.S).group(1)
        cfg[kind] = [(n, t, [int(d) for d in dims.split(",")]) for n, t, dims in re.findall(
            r'name: "([^"]*)"\s*data_type: (\w+)\s*dims: \[ ([^\]]*) \]', block)]
    cfg["parameters"] = dict(re.findall(r'key: "([^"]*)"\s*value: \{ string_value: "([^"]*)" \}', body))
    return cfg


def model_of(folder, cls):
    import transformers

    return getattr(transformers, cls).from_pretrained(folder, local_files_only=True).eval()


def served_rows(repo, name, texts):
    """[n, 2, L] as the configuration asks, through the tokenizer.json in the repository."""
    from tokenizers import Tokenizer

    cfg = parse_pbtxt(open(os.path.join(repo, name, "config.pbtxt")).read())["parameters"]
    t = Tokenizer.from_file(os.path.join(repo, name, cfg["tokenizer"]))
    length, pad = int(cfg["text_max_length"]), int(cfg["text_pad_id"])
    t.enable_truncation(max_length=length)
    t.enable_padding(length=length, pad_id=pad)
    return torch.tensor([[e.ids, e.attention_mask] for e in t.encode_batch(texts)], dtype=torch.int64)


@pytest.fixture(scope="module")
def repo(folders, tmp_path_factory):
    """Every folder exported (TorchScript, f32, defaults) into one repository, as the command line does."""
    out = str(tmp_path_factory.mktemp("repo"))
    logs = {}
    for name, folder in folders.items():
        rc, text = run_export(["--model", folder, "--out", out])
        assert rc == 0, text
        logs[name] = text
    return out, logs


# --- the repository ---------------------------------------------------------------------------------------------
def test_vae_config_and_module(folders, repo):
    out, logs = repo
    cfg = parse_pbtxt(open(os.path.join(out, "vae", "config.pbtxt")).read())
    assert cfg["name"] == "vae" and cfg["platform"] == "pytorch_libtorch" and cfg["max_batch_size"] == 32
    # 48 x 40 from the config's sample_size, 2 blocks: factor 2, 8 latent channels
    assert cfg["input"] == [("INPUT__0", "TYPE_FP32", [3, 48, 40])]
    assert cfg["output"] == [("latent__0", "TYPE_FP32", [8, 24, 20])]
    p = cfg["parameters"]
    assert {k: p[k] for k in ("modality", "image_resize", "image_normalize")} == {
        "modality": "image", "image_resize": "shorter_side_crop", "image_normalize": "signed"}
    assert re.fullmatch(r"sha256:[0-9a-f]{32}", p["version"])
    assert set(p) == {"modality", "image_resize", "image_normalize", "version", "idle_dispatch"}
    assert p["idle_dispatch"] == "false"  # Triton's batching rule: batches wait up to the 2 ms delay to fill
    assert "latent__0" in logs["vae"] and "FAIL" not in logs["vae"]
    # the module is the latent mean, shifted and scaled as the config says (shift 0.1, scale 0.5)
    import diffusers

    vae = diffusers.AutoencoderKL.from_pretrained(folders["vae"]).eval()
    x = torch.rand(3, 3, 48, 40, generator=torch.Generator().manual_seed(3)) * 2 - 1
    m = torch.jit.load(os.path.join(out, "vae", "1", "model.pt")).eval()
    with torch.inference_mode():
        want = (vae.encode(x).latent_dist.mean - 0.1) * 0.5
        got = m(x)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


TEXT = {  # name: (class, outputs, L, pad id source, mask passed)
    "clip": ("CLIPTextModel", ["last_hidden_state", "pooler_output"], 77, True),
    "clip_projection": ("CLIPTextModelWithProjection", ["last_hidden_state", "text_embeds"], 77, True),
    "t5": ("T5EncoderModel", ["last_hidden_state"], 32, True),
    "siglip": ("SiglipTextModel", ["last_hidden_state", "pooler_output"], 16, False),
}


@pytest.mark.parametrize("name", list(TEXT))
def test_text_config_tokenizer_and_module(folders, repo, name):
    import transformers

    out, logs = repo
    cls, outputs, length, masked = TEXT[name]
    cfg = parse_pbtxt(open(os.path.join(out, name, "config.pbtxt")).read())
    assert cfg["input"] == [("INPUT__0", "TYPE_INT64", [2, length])]
    model = model_of(folders[name], cls)
    dims = {"last_hidden_state": [length, 32], "pooler_output": [32 if cls == "CLIPTextModel" else 24],
            "text_embeds": [24]}
    assert cfg["output"] == [(f"{o}__{k}", "TYPE_FP32", dims[o]) for k, o in enumerate(outputs)]
    own = transformers.AutoTokenizer.from_pretrained(folders[name])
    p = cfg["parameters"]
    assert {k: v for k, v in p.items() if k != "version"} == {
        "modality": "text", "tokenizer": "tokenizer.json", "text_max_length": str(length),
        "text_padding": "max_length", "text_truncation": "true", "text_pad_id": str(own.pad_token_id),
        "idle_dispatch": "false"}
    tok_path = os.path.join(out, name, "tokenizer.json")
    if name == "clip":  # the folder's own tokenizer.json, byte for byte
        assert open(tok_path, "rb").read() == open(os.path.join(folders[name], "tokenizer.json"), "rb").read()
    else:  # made by the export (slow-only folders: vocab.json + merges.txt; spiece.model)
        assert not os.path.exists(os.path.join(folders[name], "tokenizer.json"))
    # the tokenizer.json gives the ids and mask the folder's own tokenizer gives (SigLIP's: the export's pipeline)
    many = CAPTIONS + fixtures.captions(200, seed=7)
    enc = own(many, padding="max_length", truncation=True, max_length=length)
    x = served_rows(out, name, many)
    assert x[:, 0].tolist() == enc["input_ids"] and x[:, 1].tolist() == enc["attention_mask"]
    x = x[: len(CAPTIONS)]
    assert x[-1, 1].all() and not x[3, 1].all()  # one truncated caption, one padded (the empty one)
    # the exported module is the model called directly (mask as the export says: SigLIP's none)
    m = torch.jit.load(os.path.join(out, name, "1", "model.pt")).eval()
    with torch.inference_mode():
        got = m(x)
        got = got if isinstance(got, tuple) else (got,)
        direct = model(input_ids=x[:, 0], attention_mask=x[:, 1]) if masked else model(input_ids=x[:, 0])
        for g, o in zip(got, outputs):
            torch.testing.assert_close(g, getattr(direct, o), rtol=0, atol=1e-5)
        if not masked:  # the mask would change SigLIP's result: ignoring it is a choice the test pins
            with_mask = model(input_ids=x[:, 0], attention_mask=x[:, 1]).last_hidden_state
            assert (with_mask - got[0]).abs().max() > 1e-3
    assert "tokenizer.json" in logs[name] and "FAIL" not in logs[name]


def test_output_subset_and_no_mask(folders, tmp_path):
    rc, text = run_export(["--model", folders["clip"], "--out", str(tmp_path), "--output", "pooler_output",
                           "--attention-mask", "no", "--max-length", "20", "--max-batch-size", "4"])
    assert rc == 0, text
    cfg = parse_pbtxt(open(tmp_path / "clip" / "config.pbtxt").read())
    assert cfg["output"] == [("pooler_output__0", "TYPE_FP32", [32])]
    assert cfg["input"] == [("INPUT__0", "TYPE_INT64", [2, 20])] and cfg["max_batch_size"] == 4
    x = served_rows(str(tmp_path), "clip", CAPTIONS[:3])
    m = torch.jit.load(str(tmp_path / "clip" / "1" / "model.pt"))
    model = model_of(folders["clip"], "CLIPTextModel")
    with torch.inference_mode():
        torch.testing.assert_close(m(x), model(input_ids=x[:, 0]).pooler_output, rtol=0, atol=1e-5)


def test_pipeline_layout(folders, tmp_path):
    """A diffusers pipeline's text_encoder_2/ finds its tokenizer in tokenizer_2/; the name is the folder's."""
    src = folders["clip_projection"]
    enc, tok = tmp_path / "pipe" / "text_encoder_2", tmp_path / "pipe" / "tokenizer_2"
    enc.mkdir(parents=True)
    tok.mkdir()
    for f in os.listdir(src):
        shutil.copy(os.path.join(src, f), tok if f in ("vocab.json", "merges.txt", "tokenizer_config.json") else enc)
    rc, text = run_export(["--model", str(enc), "--out", str(tmp_path / "repo"), "--output", "text_embeds"])
    assert rc == 0, text
    assert (tmp_path / "repo" / "text_encoder_2" / "tokenizer.json").is_file()
    rc, text = run_export(["--model", str(enc), "--out", str(tmp_path / "repo2"), "--tokenizer", str(tmp_path / "x")])
    assert rc == 2 and "--tokenizer" in text and "not a directory" in text
    shutil.rmtree(tok)
    rc, text = run_export(["--model", str(enc), "--out", str(tmp_path / "repo3")])
    assert rc == 2 and "no tokenizer" in text and "pass --tokenizer DIR" in text


def test_bf16(folders, tmp_path):
    """bf16 weights: INT64 input, BF16 outputs, the eager bf16 module's result; within ~1e-2 of f32."""
    rc, text = run_export(["--model", folders["t5"], "--out", str(tmp_path), "--dtype", "bf16", "--name", "t5_bf16"])
    assert rc == 0, text
    cfg = parse_pbtxt(open(tmp_path / "t5_bf16" / "config.pbtxt").read())
    assert cfg["input"] == [("INPUT__0", "TYPE_INT64", [2, 32])]
    assert cfg["output"] == [("last_hidden_state__0", "TYPE_BF16", [32, 32])]
    x = served_rows(str(tmp_path), "t5_bf16", CAPTIONS)
    m = torch.jit.load(str(tmp_path / "t5_bf16" / "1" / "model.pt"))
    model = model_of(folders["t5"], "T5EncoderModel")
    with torch.inference_mode():
        got = m(x)
        want32 = model(input_ids=x[:, 0], attention_mask=x[:, 1]).last_hidden_state
        want16 = model.to(torch.bfloat16)(input_ids=x[:, 0], attention_mask=x[:, 1]).last_hidden_state
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, want16, rtol=0, atol=0)
    assert (got.float() - want32).abs().max() / want32.abs().max() < ex.TOLERANCES["bf16"]
    assert re.search(r"last_hidden_state__0 .*bfloat16, batch 6 .*ok", text), text


def test_aoti(folders, tmp_path):
    """AOTInductor (CPU) once, on the smallest model: a dynamic batch, verified, loadable."""
    rc, text = run_export(["--model", folders["siglip"], "--out", str(tmp_path), "--format", "aoti",
                           "--max-batch-size", "8"])
    assert rc == 0, text
    cfg = parse_pbtxt(open(tmp_path / "siglip" / "config.pbtxt").read())
    assert cfg["platform"] == "torch_aoti" and cfg["max_batch_size"] == 8
    path = tmp_path / "siglip" / "1" / "model.pt2"
    assert path.is_file() and not (tmp_path / "siglip" / "1" / "model.pt").exists()
    runner = torch._inductor.aoti_load_package(str(path))
    model = model_of(folders["siglip"], "SiglipTextModel")
    x = served_rows(str(tmp_path), "siglip", CAPTIONS)
    for n in (1, 5):
        with torch.inference_mode():
            got = runner(x[:n])
            want = model(input_ids=x[:n, 0])
        torch.testing.assert_close(got[0], want.last_hidden_state, rtol=0, atol=1e-4)
        torch.testing.assert_close(got[1], want.pooler_output, rtol=0, atol=1e-4)
    assert "aoti, f32" in text and "FAIL" not in text


# --- fingerprint, verification, errors -------------------------------------------------------------------------
def test_version_follows_weights_and_flags(folders, tmp_path):
    def params(folder, *flags):
        d = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        rc, text = run_export(["--model", folder, "--out", str(d), "--name", "v", *flags])
        assert rc == 0, text
        return parse_pbtxt(open(d / "v" / "config.pbtxt").read())["parameters"]

    def version(folder, *flags):
        return params(folder, *flags)["version"]

    base = version(folders["vae"])
    assert version(folders["vae"]) == base  # deterministic
    # a serving knob, not a result: the same version, the server's idle dispatch
    idle = params(folders["vae"], "--idle-dispatch")
    assert idle["version"] == base and "idle_dispatch" not in idle
    assert version(folders["vae"], "--no-latent-scaling") != base
    changed = tmp_path / "vae_changed"
    shutil.copytree(folders["vae"], changed)
    import diffusers

    vae = diffusers.AutoencoderKL.from_pretrained(str(changed))
    with torch.no_grad():
        vae.encoder.conv_in.bias.add_(1e-3)
    vae.save_pretrained(str(changed))
    assert version(str(changed)) != base


def test_failed_verification_installs_nothing(folders, tmp_path, monkeypatch):
    monkeypatch.setitem(ex.TOLERANCES, "f32", -1.0)  # no error can pass
    rc, text = run_export(["--model", folders["t5"], "--out", str(tmp_path)])
    assert rc == 1
    assert "FAIL" in text and "verification FAILED" in text
    assert not (tmp_path / "t5").exists()


@pytest.mark.parametrize("args, message", [
    (["--model", "{missing}"], "not a directory"),
    (["--model", "{unet}"], "UNet2DConditionModel is not supported"),
    (["--model", "{vae}", "--image-size", "47", "40"], "multiples of the VAE's downsampling factor 2"),
    (["--model", "{vae}", "--max-length", "16"], "--max-length applies to text encoders"),
    (["--model", "{clip}", "--output", "text_embeds"], "--output 'text_embeds': CLIPTextModel has outputs"),
    (["--model", "{clip}", "--max-length", "78"], "CLIPTextModel has 77 positions"),
    (["--model", "{clip}", "--version", "v2"], "a version is a positive integer"),
    (["--model", "{clip}", "--name", "a/b"], "model name 'a/b'"),
])
def test_bad_input(folders, tmp_path, args, message):
    unet = tmp_path / "unet"
    unet.mkdir()
    (unet / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    subst = dict(folders, missing=str(tmp_path / "nothing"), unet=str(unet))
    rc, text = run_export([a.format(**subst) for a in args] + ["--out", str(tmp_path / "repo")])
    assert rc == 2 and message in text, text


def test_existing_version_needs_force(folders, repo, tmp_path):
    out = tmp_path / "repo"
    assert run_export(["--model", folders["siglip"], "--out", str(out)])[0] == 0
    rc, text = run_export(["--model", folders["siglip"], "--out", str(out)])
    assert rc == 2 and "exists: pass --force" in text
    rc, text = run_export(["--model", folders["siglip"], "--out", str(out), "--max-length", "8", "--version", "2"])
    assert rc == 2 and "exists with another configuration" in text
    assert run_export(["--model", folders["siglip"], "--out", str(out), "--force"])[0] == 0
    assert sorted(os.listdir(out)) == ["siglip"]  # no staging directory left behind


def test_module_entry_point_without_torch_import():
    """python -m jitembed.export runs main(); importing the module imports no torch."""
    code = ("import sys, runpy, jitembed; jitembed.__path__.insert(0, sys.argv[1]); import jitembed.export; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "sys.argv = ['jitembed.export', '--model', '/nonexistent/folder', '--out', '/tmp/x']; "
            "runpy.run_module('jitembed.export', run_name='__main__')")
    p = subprocess.run([sys.executable, "-c", code, SOURCE], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "jitembed.export: error: --model /nonexistent/folder: not a directory" in p.stderr


# --- served round trip ------------------------------------------------------------------------------------------
def jpeg(w, h, seed):
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    a = np.stack([127 + 100 * np.sin(xx * 0.1 * (c + 1) + yy * 0.07) for c in range(3)], -1) + rng.normal(0, 10, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def test_served_vae(repo):
    """JPEG -> jitembed.Server's preprocessing (shorter_side_crop, signed) -> the exported VAE equals eager on
    torchvision's Resize(max(H, W)) + CenterCrop((H, W)) + ToTensor + Normalize(0.5, 0.5) of the decoded image
    (for a non-square H x W that zooms even an image of exactly W x H: the shorter side goes to max(H, W))."""
    import jitembed
    from PIL import Image
    from torchvision import transforms as T

    out, _ = repo
    images = [jpeg(40, 48, 1), jpeg(48, 48, 2), jpeg(100, 90, 3), jpeg(37, 120, 4)]
    tf = T.Compose([T.Resize(48), T.CenterCrop((48, 40)), T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    x = torch.stack([tf(Image.open(io.BytesIO(b)).convert("RGB")) for b in images])
    with torch.inference_mode():
        want = torch.jit.load(os.path.join(out, "vae", "1", "model.pt"))(x).numpy()
    with jitembed.Server(model_repository=out, io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        assert "vae" in dict(server.loaded())
        got = client.embed("vae", images, input="image")["latent__0"]
        version = parse_pbtxt(open(os.path.join(out, "vae", "config.pbtxt")).read())["parameters"]["version"]
        assert version in client.identity("vae")["fingerprint"]
    assert got.shape == (4, 8, 24, 20) and got.dtype == np.float32
    # Pillow's antialiased bilinear in C++: a few pixels may be 1 u8 level off (docs/models.md); 0 measured here
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2)
    assert np.abs(got - want).mean() < 1e-4


_UNSUPPORTED = re.compile(r"'(tokenizer|text_pad_id)' is not a parameter|needs sentencepiece_model|"
                          r"unknown parameter '(tokenizer|text_pad_id)'")


def text_served_unsupported(out, name):
    """The reason the serving side cannot take the tokenizer.json route yet, or None. Asked through
    jitembed.Model with the configuration's parameters: the preprocessing parser jitembed.Server's repository
    uses (its index 'reason' keeps only a traceback's first line)."""
    import jitembed

    cfg = parse_pbtxt(open(os.path.join(out, name, "config.pbtxt")).read())
    params = {k: v for k, v in cfg["parameters"].items() if k not in ("version", "idle_dispatch")}
    n, t, dims = cfg["input"][0]
    try:
        jitembed.Model(lambda x: x, name, inputs=(n, "i64", dims), outputs=[(o, "f32", d) for o, _, d in cfg["output"]],
                       preprocess=params, base_dir=os.path.join(out, name))
    except Exception as e:  # noqa: BLE001 - the message decides
        if _UNSUPPORTED.search(str(e)):
            return str(e)
        raise
    return None


@pytest.mark.parametrize("name", list(TEXT))
def test_served_text(repo, name):
    """Captions -> jitembed.Server's tokenizer.json preprocessing -> the exported encoder equals eager on the
    tokenizers library's ids; skipped while the server reports the tokenizer parameter unsupported."""
    import jitembed

    out, _ = repo
    why = text_served_unsupported(out, name)
    if why:
        pytest.skip(f"the server does not take the 'tokenizer' parameter yet: {why}")
    x = served_rows(out, name, CAPTIONS)
    with torch.inference_mode():
        want = torch.jit.load(os.path.join(out, name, "1", "model.pt"))(x)
    want = want if isinstance(want, tuple) else (want,)
    with jitembed.Server(model_repository=out, io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        status, _, body = server.handle("POST", "/v2/repository/index")
        assert name in dict(server.loaded()), body
        got = client.embed(name, [c.encode() for c in CAPTIONS], input="text")
    cfg = parse_pbtxt(open(os.path.join(out, name, "config.pbtxt")).read())
    for (o, _, _), w in zip(cfg["output"], want):
        np.testing.assert_allclose(got[o], w.numpy(), rtol=0, atol=1e-4)


def test_served_clip_equals_transformers_on_strings_ids_and_two_encoders(folders, repo, tmp_path):
    """The SDXL text path, end to end: two CLIP text encoders (CLIPTextModel and CLIPTextModelWithProjection,
    random weights) exported and served; captions as strings and as token ids (a trainer that tokenizes itself,
    `input_ids` + `attention_mask` over tritonclient) equal eager transformers on its own tokenizer's ids;
    jitembed.Client with an int64 / int32 ids array equals tritonclient's `input_ids` answer bitwise; and both
    encoders on one caption field, and on a tensor field of ids, through the loader, every sample once."""
    import jitembed
    import tritonclient.http as httpclient
    import transformers

    out, _ = repo
    why = text_served_unsupported(out, "clip")
    if why:
        pytest.skip(f"the server does not take the 'tokenizer' parameter yet: {why}")
    eager = {}
    for name, cls, output in (("clip", "CLIPTextModel", "pooler_output"),
                              ("clip_projection", "CLIPTextModelWithProjection", "text_embeds")):
        tok = transformers.AutoTokenizer.from_pretrained(folders[name])
        enc = tok(CAPTIONS, padding="max_length", max_length=77, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            r = model_of(folders[name], cls)(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])
        eager[name] = (enc, r.last_hidden_state.numpy(), getattr(r, output).numpy(), output)
    data = str(tmp_path / "captions.jems")
    with jitembed.ShardWriter.create(data) as w:
        for i, c in enumerate(CAPTIONS):
            b = jitembed.RecordBuilder()
            b.add_text("caption", c)
            b.add_tensor("input_ids", eager["clip"][0]["input_ids"][i].numpy())  # i64 [77]
            w.append(b, key=f"{i:02d}")
    with jitembed.Server(model_repository=out, io_threads=2) as server, \
            jitembed.Client(endpoints=[f"http://{server.url}"]) as client:
        h = httpclient.InferenceServerClient(url=server.url)
        for name, (enc, hidden, pooled, output) in eager.items():
            got = client.embed(name, [c.encode() for c in CAPTIONS], input="text")
            np.testing.assert_allclose(got["last_hidden_state__0"], hidden, rtol=0, atol=1e-4)
            np.testing.assert_allclose(got[output + "__1"], pooled, rtol=0, atol=1e-4)
            ids = httpclient.InferInput("input_ids", list(enc["input_ids"].shape), "INT64")
            ids.set_data_from_numpy(enc["input_ids"].numpy())
            mask = httpclient.InferInput("attention_mask", list(enc["attention_mask"].shape), "INT32")
            mask.set_data_from_numpy(enc["attention_mask"].numpy().astype(np.int32))
            res = h.infer(name, [ids, mask])
            # the same rows as the strings' (the server's tokenizer.json agrees with transformers' tokenizer)
            np.testing.assert_array_equal(res.as_numpy("last_hidden_state__0"), got["last_hidden_state__0"])
            np.testing.assert_allclose(res.as_numpy(output + "__1"), pooled, rtol=0, atol=1e-4)
            # the ids alone (the server's all-ones mask): jitembed's typed rows, INT64 and INT32, bitwise
            alone = h.infer(name, [ids])
            for a in (enc["input_ids"].numpy(), enc["input_ids"].numpy().astype(np.int32)):
                mine = client.embed(name, a)
                for o in ("last_hidden_state__0", output + "__1"):
                    np.testing.assert_array_equal(mine[o], alone.as_numpy(o))
        h.close()
        specs = [{"name": "clip_l", "model": "clip", "kind": "text", "output": "pooler_output__1"},
                 {"name": "clip_g", "model": "clip_projection", "kind": "text", "output": "text_embeds__1"}]
        loader = jitembed.Loader(jitembed.Dataset.open(data), client, specs, batch_size=2, shuffle=False, workers=1)
        seen = []
        for step in loader:
            assert step["failed"] == []
            for i, idx in enumerate(step["indices"]):
                seen.append(int(idx))
                np.testing.assert_allclose(step["clip_l"][i], eager["clip"][2][idx], rtol=0, atol=1e-4)
                np.testing.assert_allclose(step["clip_g"][i], eager["clip_projection"][2][idx], rtol=0, atol=1e-4)
        loader.close()
        assert sorted(seen) == list(range(len(CAPTIONS)))
        # the ids of a tensor field: the pooled output (at the end token: causal attention, so the padding the
        # all-ones mask lets in is never seen there) equals eager's with the mask
        ids_spec = [{"name": "clip_l", "model": "clip", "field": "input_ids", "output": "pooler_output__1"}]
        loader = jitembed.Loader(jitembed.Dataset.open(data), client, ids_spec, batch_size=2, shuffle=False, workers=1)
        seen = []
        for step in loader:
            assert step["failed"] == []
            for i, idx in enumerate(step["indices"]):
                seen.append(int(idx))
                np.testing.assert_allclose(step["clip_l"][i], eager["clip"][2][idx], rtol=0, atol=1e-4)
        loader.close()
        assert sorted(seen) == list(range(len(CAPTIONS)))
