#!/usr/bin/env python3
"""Builds real encoder architectures with seeded random weights and exports them into a Triton-layout model
repository (nothing is downloaded: no hub, no pretrained weights).

  python scripts/export_models.py --out DIR [--force] [--no-aoti]

Models (each <model>/config.pbtxt + <model>/1/model.pt or model.pt2, and <model>/reference/):
  vae_encoder, vae_encoder_aoti      diffusers AutoencoderKL's encoder (ResNet blocks, GroupNorm, mid-block
                                     attention): [3, 256, 256] f32 in [-1, 1] -> latent_dist.mean *
                                     scaling_factor, [4, 32, 32] f32
  t5_encoder, t5_encoder_aoti        transformers T5EncoderModel (small config) + spiece.model, a SentencePiece
                                     model trained here on a generated caption corpus: [2, L] int64 (row 0 the
                                     token ids, EOS appended, padded with 0; row 1 the attention mask) ->
                                     last_hidden_state [L, d_model] f32
  video_encoder                      the VAE applied per frame: [3, T, H, W] f32 in [-1, 1] -> [4, T, H/8, W/8]
TorchScript (`model.pt`, platform "pytorch_libtorch", torch.jit.trace) for every model; AOTInductor packages
(`model.pt2`, platform "torch_aoti", torch.export with a dynamic batch dim up to max_batch_size, compiled for
CPU by torch._inductor.aoti_compile_and_package) for the VAE and T5.
reference/: reference.json + raw little-endian arrays: a few input rows and the eager PyTorch output of each
(the C++ tests compare the exported files against them).
The export is cached: DIR/.export-stamp holds a hash of this script and the pinned package versions; a rerun
with the same hash and every file present returns at once. Exit 77 (skip) when torch, diffusers, transformers,
sentencepiece or protobuf is not installed. The T5 reference rows are checked to equal transformers' T5Tokenizer
on the same spiece.model.
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import time

PACKAGES = ["torch", "diffusers", "transformers", "sentencepiece", "protobuf", "numpy"]
SEED = 20240617
MAX_BATCH = 32
IMAGE = 256
VIDEO_FRAMES, VIDEO_SIZE = 4, 128
TEXT_LEN = 32
REF_ROWS = 4


def versions():
    out = {}
    for p in PACKAGES:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[p] = None
    return out


def stamp_of(no_aoti):
    h = hashlib.sha256()
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    h.update(json.dumps({"versions": versions(), "aoti": not no_aoti, "python": sys.version_info[:2]},
                        sort_keys=True).encode())
    return h.hexdigest()


# --- config.pbtxt (Triton's field names) --------------------------------------------------------------------
def pbtxt(name, platform, inputs, outputs, parameters, instance_kind="KIND_CPU"):
    def tensors(kind, ts):
        rows = []
        for n, dt, dims in ts:
            rows.append(f'  {{\n    name: "{n}"\n    data_type: {dt}\n    dims: [ {", ".join(str(d) for d in dims)} ]\n  }}')
        return f"{kind} [\n" + ",\n".join(rows) + "\n]\n"
    s = f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: {MAX_BATCH}\n'
    s += tensors("input", inputs) + tensors("output", outputs)
    s += f"instance_group [\n  {{\n    count: 1\n    kind: {instance_kind}\n  }}\n]\n"
    s += "dynamic_batching {\n  preferred_batch_size: [ 8, 32 ]\n  max_queue_delay_microseconds: 2000\n}\n"
    for k, v in parameters.items():
        s += f'parameters {{\n  key: "{k}"\n  value: {{ string_value: "{v}" }}\n}}\n'
    return s


def save_array(np, directory, stem, a):
    a = np.ascontiguousarray(a)
    names = {np.dtype("float32"): "float32", np.dtype("int64"): "int64"}
    fname = f"{stem}.{names[a.dtype]}"
    a.astype(a.dtype.newbyteorder("<"), copy=False).tofile(os.path.join(directory, fname))
    return {"file": fname, "dtype": names[a.dtype], "shape": list(a.shape)}


def write_reference(np, model_dir, x, y, extra=None):
    ref = os.path.join(model_dir, "reference")
    os.makedirs(ref, exist_ok=True)
    doc = {"about": "rows of INPUT__0 and eager PyTorch's OUTPUT__0 for them (raw little-endian arrays)",
           "input": save_array(np, ref, "input", x), "output": save_array(np, ref, "output", y)}
    if extra:
        doc.update(extra)
    with open(os.path.join(ref, "reference.json"), "w") as f:
        json.dump(doc, f, indent=2)


# --- the modules ----------------------------------------------------------------------------------------------
def build_vae(torch, diffusers):
    torch.manual_seed(SEED)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(16, 32, 64, 64), layers_per_block=1, norm_num_groups=16, sample_size=IMAGE)
    return vae.eval()


def make_modules(torch):  # torch.nn.Module subclasses, made once torch is imported
    class VaeEncoder(torch.nn.Module):
        """[N, 3, H, W] in [-1, 1] -> latent_dist.mean * scaling_factor, [N, 4, H/8, W/8]"""

        def __init__(self, vae):
            super().__init__()
            self.vae = vae
            self.scale = float(vae.config.scaling_factor)

        def forward(self, x):
            return self.vae.encode(x).latent_dist.mean * self.scale

    class VideoEncoder(torch.nn.Module):
        """[N, 3, T, H, W] -> the VAE per frame, [N, 4, T, H/8, W/8]"""

        def __init__(self, vae):
            super().__init__()
            self.enc = VaeEncoder(vae)

        def forward(self, x):
            n, c, t, h, w = x.shape
            frames = x.permute(0, 2, 1, 3, 4).reshape(n * t, c, h, w)
            z = self.enc(frames)
            return z.reshape(n, t, z.shape[1], z.shape[2], z.shape[3]).permute(0, 2, 1, 3, 4).contiguous()

    class T5Encoder(torch.nn.Module):
        """[N, 2, L] int64 (ids; attention mask) -> last_hidden_state [N, L, d_model]"""

        def __init__(self, t5):
            super().__init__()
            self.t5 = t5

        def forward(self, x):
            return self.t5(input_ids=x[:, 0], attention_mask=x[:, 1]).last_hidden_state

    return VaeEncoder, VideoEncoder, T5Encoder


# --- the caption corpus and the SentencePiece model --------------------------------------------------------
def caption_corpus(rng):
    subjects = ["a red fox", "an old lighthouse", "two children", "a wooden boat", "a snowy mountain", "a city street",
                "a bowl of ramen", "a golden retriever", "a vintage car", "a field of sunflowers", "a robot",
                "an astronaut", "a quiet library", "a stone bridge", "a neon sign", "a cup of coffee"]
    verbs = ["standing", "sleeping", "floating", "glowing", "running", "resting", "waiting", "shining"]
    places = ["at sunset", "in the rain", "under a starry sky", "on a foggy morning", "near the river",
              "in a busy market", "beside a lake", "in the desert", "on the beach", "in a dense forest"]
    styles = ["photograph", "oil painting", "watercolor", "35mm film", "digital art", "pencil sketch", "3d render"]
    extras = ["東京の夜景", "北京的街道", "서울의 카페", "🌅 sunrise", "🐶 dog", "🚀 rocket", "café crème", "naïve façade"]
    adjectives = ["bright", "dark", "misty", "colorful", "ancient", "modern", "tiny", "enormous", "cozy", "abandoned",
                  "crystal", "velvet", "rusty", "polished", "frozen", "tropical", "minimalist", "baroque", "cinematic",
                  "dramatic", "soft", "sharp", "detailed", "blurry", "surreal", "whimsical", "gloomy", "vibrant"]
    lights = ["golden hour light", "studio lighting", "backlit", "harsh shadows", "volumetric fog", "moonlight",
              "candlelight", "overcast sky", "long exposure", "shallow depth of field", "wide angle", "macro shot"]
    lines = []
    for _ in range(4000):
        s = (f"{rng.choice(adjectives)} {rng.choice(subjects)} {rng.choice(verbs)} {rng.choice(places)}, "
             f"{rng.choice(styles)}, {rng.choice(lights)}")
        if rng.random() < 0.15:
            s += ", " + rng.choice(extras)
        lines.append(s)
    return lines


def train_sentencepiece(spm, corpus_path, prefix):
    # T5's conventions: pad 0, eos 1, unk 2, no bos
    spm.SentencePieceTrainer.train(
        input=corpus_path, model_prefix=prefix, vocab_size=512, hard_vocab_limit=False, model_type="unigram", character_coverage=1.0,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2, seed_sentencepiece_size=100000)


def tokenize(np, sp, texts):
    rows = []
    for t in texts:
        ids = sp.encode(t)[: TEXT_LEN - 1] + [sp.eos_id()]
        mask = [1] * len(ids) + [0] * (TEXT_LEN - len(ids))
        ids = ids + [sp.pad_id()] * (TEXT_LEN - len(ids))
        rows.append([ids, mask])
    return np.asarray(rows, dtype=np.int64)


# --- export ---------------------------------------------------------------------------------------------------
def export_torchscript(torch, module, example, path):
    with torch.no_grad():
        traced = torch.jit.trace(module, (example,), check_trace=False)
    traced.save(path)


def export_aoti(torch, module, example, path):
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    with torch.no_grad():
        ep = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
        # The batch bounds out of the packages' input checks (on in the adapter by default,
        # AOTI_RUNTIME_CHECK_INPUTS=1; the fixed extents and dtypes stay checked): the lower bound would refuse
        # batch 1 ("expected it to be >= 2": export specializes sizes 0 and 1 away) and the upper bound Inductor
        # infers can be tighter than the Dim's max (15 for this VAE), though batches 1..32 run correctly. The
        # server bounds batches by max_batch_size.
        torch._inductor.aoti_compile_and_package(
            ep, package_path=path,
            inductor_configs={"aot_inductor.check_lowerbound": False, "aot_inductor.check_upperbound": False})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="model repository directory (created)")
    ap.add_argument("--force", action="store_true", help="export even when the stamp matches")
    ap.add_argument("--no-aoti", action="store_true", help="TorchScript only (AOTInductor compiles C++: slow)")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    stamp_file = os.path.join(out, ".export-stamp")
    stamp = stamp_of(args.no_aoti)
    if not args.force and os.path.isfile(stamp_file):
        with open(stamp_file) as f:
            listed = f.read().split("\n")
        if listed[0] == stamp and all(os.path.isfile(os.path.join(out, p)) for p in listed[1:] if p):
            print(f"export_models: {out} is up to date (stamp {stamp[:12]})")
            return 0
    missing = [p for p, v in versions().items() if v is None]
    if missing:
        print(f"export_models: skipped: {', '.join(missing)} not installed in {sys.executable} "
              f"(bash scripts/install-deps.sh torch)")
        return 77
    import random
    import numpy as np
    import torch
    import diffusers
    import transformers
    import sentencepiece as spm

    import warnings
    # torch.jit's deprecation notice, and the tracer's notes on shape asserts and on the fixed text length
    # (the traced graphs are checked against eager outputs at every batch size by the C++ tests)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    transformers.logging.set_verbosity_error()

    t0 = time.time()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    VaeEncoder, VideoEncoder, T5Encoder = make_modules(torch)
    if os.path.isdir(out):
        if os.listdir(out) and not os.path.isfile(stamp_file):
            print(f"export_models: {out} exists and is not an export of this script (no .export-stamp): "
                  "not overwriting it", file=sys.stderr)
            return 2
        shutil.rmtree(out)
    os.makedirs(out)
    with open(stamp_file, "w") as f:  # marks the directory as this script's until the real stamp replaces it
        f.write("incomplete\n")
    files = []

    def model_dir(name, config):
        d = os.path.join(out, name)
        os.makedirs(os.path.join(d, "1"), exist_ok=True)
        with open(os.path.join(d, "config.pbtxt"), "w") as f:
            f.write(config)
        return d

    gen = torch.Generator().manual_seed(SEED + 1)
    # VAE
    vae_enc = VaeEncoder(build_vae(torch, diffusers)).eval()
    x = torch.rand(REF_ROWS, 3, IMAGE, IMAGE, generator=gen) * 2 - 1
    with torch.no_grad():
        y = vae_enc(x)
    assert tuple(y.shape) == (REF_ROWS, 4, IMAGE // 8, IMAGE // 8), y.shape
    image_params = {"modality": "image", "image_resize": "stretch", "image_normalize": "signed"}
    for name, platform, fname in [("vae_encoder", "pytorch_libtorch", "model.pt"),
                                  ("vae_encoder_aoti", "torch_aoti", "model.pt2")]:
        if platform == "torch_aoti" and args.no_aoti:
            continue
        d = model_dir(name, pbtxt(name, platform, [("INPUT__0", "TYPE_FP32", [3, IMAGE, IMAGE])],
                                  [("OUTPUT__0", "TYPE_FP32", [4, IMAGE // 8, IMAGE // 8])], image_params))
        path = os.path.join(d, "1", fname)
        (export_aoti if platform == "torch_aoti" else export_torchscript)(torch, vae_enc, x[:2], path)
        write_reference(np, d, x.numpy(), y.numpy())
        files += [f"{name}/config.pbtxt", f"{name}/1/{fname}", f"{name}/reference/reference.json"]
        print(f"export_models: {name} ({time.time() - t0:.1f} s)", flush=True)

    # video: the VAE per frame (its own seeded copy)
    vid_enc = VideoEncoder(build_vae(torch, diffusers)).eval()
    xv = torch.rand(2, 3, VIDEO_FRAMES, VIDEO_SIZE, VIDEO_SIZE, generator=gen) * 2 - 1
    with torch.no_grad():
        yv = vid_enc(xv)
    d = model_dir("video_encoder", pbtxt("video_encoder", "pytorch_libtorch",
                                         [("INPUT__0", "TYPE_FP32", [3, VIDEO_FRAMES, VIDEO_SIZE, VIDEO_SIZE])],
                                         [("OUTPUT__0", "TYPE_FP32", [4, VIDEO_FRAMES, VIDEO_SIZE // 8, VIDEO_SIZE // 8])],
                                         {"modality": "video", "video_frames": VIDEO_FRAMES, "video_frame_stride": 1,
                                          "image_resize": "stretch", "image_normalize": "signed"}))
    export_torchscript(torch, vid_enc, xv, os.path.join(d, "1", "model.pt"))
    write_reference(np, d, xv.numpy(), yv.numpy())
    files += ["video_encoder/config.pbtxt", "video_encoder/1/model.pt", "video_encoder/reference/reference.json"]
    print(f"export_models: video_encoder ({time.time() - t0:.1f} s)", flush=True)

    # T5: corpus, SentencePiece, encoder
    rng = random.Random(SEED)
    work = os.path.join(out, ".work")
    os.makedirs(work)
    corpus = caption_corpus(rng)
    corpus_path = os.path.join(work, "captions.txt")
    with open(corpus_path, "w", encoding="utf-8") as f:
        f.write("\n".join(corpus) + "\n")
    train_sentencepiece(spm, corpus_path, os.path.join(work, "spiece"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "spiece.model"))
    cfg = transformers.T5Config(vocab_size=sp.get_piece_size(), d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=64,
                                dropout_rate=0.0, feed_forward_proj="relu", pad_token_id=0, eos_token_id=1)
    torch.manual_seed(SEED + 2)
    t5 = T5Encoder(transformers.T5EncoderModel(cfg).eval()).eval()
    texts = [corpus[0], corpus[1] + ", 東京の夜景 🌅", "a robot", " ".join(corpus[2:80])[:4000]]  # the last: 4,000 chars, truncated
    xt = torch.from_numpy(tokenize(np, sp, texts))
    # the same ids and mask as transformers' T5Tokenizer on this spiece.model (its SentencePiece conversion
    # needs protobuf): the C++ tokenizer is checked against these rows
    t5_tok = transformers.T5Tokenizer.from_pretrained(work, extra_ids=0)
    enc = t5_tok(texts, padding="max_length", max_length=TEXT_LEN, truncation=True)
    assert (np.asarray(enc["input_ids"]) == xt[:, 0].numpy()).all(), "T5Tokenizer ids differ from sentencepiece's"
    assert (np.asarray(enc["attention_mask"]) == xt[:, 1].numpy()).all(), "T5Tokenizer mask differs"
    with torch.no_grad():
        yt = t5(xt)
    text_params = {"modality": "text", "sentencepiece_model": "spiece.model", "text_max_length": TEXT_LEN,
                   "text_padding": "max_length", "text_truncation": "true", "text_append_eos": "true"}
    for name, platform, fname in [("t5_encoder", "pytorch_libtorch", "model.pt"),
                                  ("t5_encoder_aoti", "torch_aoti", "model.pt2")]:
        if platform == "torch_aoti" and args.no_aoti:
            continue
        d = model_dir(name, pbtxt(name, platform, [("INPUT__0", "TYPE_INT64", [2, TEXT_LEN])],
                                  [("OUTPUT__0", "TYPE_FP32", [TEXT_LEN, cfg.d_model])], text_params))
        shutil.copy(os.path.join(work, "spiece.model"), os.path.join(d, "spiece.model"))
        path = os.path.join(d, "1", fname)
        (export_aoti if platform == "torch_aoti" else export_torchscript)(torch, t5, xt[:2], path)
        write_reference(np, d, xt.numpy(), yt.numpy(), {"texts": texts})
        files += [f"{name}/config.pbtxt", f"{name}/1/{fname}", f"{name}/spiece.model", f"{name}/reference/reference.json"]
        print(f"export_models: {name} ({time.time() - t0:.1f} s)", flush=True)
    shutil.copy(corpus_path, os.path.join(out, "captions.txt"))
    shutil.rmtree(work)
    with open(stamp_file, "w") as f:
        f.write(stamp + "\n" + "\n".join(files) + "\n")
    print(f"export_models: wrote {len(files)} files into {out} in {time.time() - t0:.1f} s "
          f"(torch {torch.__version__}, diffusers {diffusers.__version__}, transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
