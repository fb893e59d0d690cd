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
(the C++ tests compare the exported files against them); and served.json (VAE and T5 models): raw inputs as a
user sends them (JPEG files at the model's input size, caption strings), the tensor the user's torchvision /
SentencePiece pipeline makes of each, and eager PyTorch's output for that tensor (what a served model is
compared with end to end).
.preprocess_reference/preprocess.json (a name the repository scanners skip): JPEGs of odd sizes and modes with
the decoded pixels (Pillow's libjpeg-turbo) and torchvision's output for several (size, resize, normalize)
settings, through PIL images (transforms.Resize + CenterCrop + ToTensor + Normalize, what most users write) and
through uint8 tensors (transforms.v2, antialias=True); and captions (CJK, emoji, 4,000 characters) with the
ids and masks of the sentencepiece package and of transformers' T5Tokenizer at two max lengths.
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

PACKAGES = ["torch", "torchvision", "pillow", "diffusers", "transformers", "sentencepiece", "protobuf", "numpy"]
SEED = 20240617
MAX_BATCH = 32
IMAGE = 256
VIDEO_FRAMES, VIDEO_SIZE = 4, 128
TEXT_LEN = 32
REF_ROWS = 4
SERVED_IMAGES = 8


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
    names = {np.dtype("float32"): "float32", np.dtype("int64"): "int64", np.dtype("uint8"): "uint8"}
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


# --- references for the C++ preprocessing (.preprocess_reference) and for served models (reference/served.json)
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def synthetic_image(np, rng, w, h, channels):
    """Smooth gradients, stripes and noise: content with edges, so resampling differences show."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    planes = []
    for c in range(channels):
        fx, fy, ph = rng.uniform(0.01, 0.2), rng.uniform(0.01, 0.2), rng.uniform(0, 6.28)
        p = 127.5 + 90 * np.sin(xx * fx + yy * fy + ph) + 30 * ((xx // 17 + yy // 23 + c) % 2) - 15
        p += rng.normal(0, 12, size=(h, w))
        planes.append(p)
    a = np.clip(np.stack(planes, axis=-1), 0, 255).astype(np.uint8)
    return a[:, :, 0] if channels == 1 else a


def write_preprocess_reference(np, torch, out, texts, sp, t5_tok):
    import io
    from PIL import Image
    import torchvision
    from torchvision import transforms as T
    from torchvision.transforms import v2
    d = os.path.join(out, ".preprocess_reference")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(SEED + 3)
    # (name, width, height, PIL mode)
    images = [("odd_300x200", 300, 200, "RGB"), ("tall_97x401", 97, 401, "RGB"), ("large_1024x768", 1024, 768, "RGB"),
              ("gray_64x80", 64, 80, "L"), ("exact_256x256", 256, 256, "RGB"), ("near_255x257", 255, 257, "RGB")]
    # (name, size [H, W] or shorter side, image_resize, image_normalize)
    settings = [("stretch_256_signed", [256, 256], "stretch", "signed"),
                ("crop_224_mean_std", [224, 224], "shorter_side_crop", "mean_std"),
                ("crop_256_unit", [256, 256], "shorter_side_crop", "unit"),
                ("stretch_128x96_unit", [128, 96], "stretch", "unit")]

    def pipeline(size, resize, normalize, tensor_path):
        ops = []
        if tensor_path:
            ops.append(v2.Resize(size if resize == "stretch" else size[0], antialias=True,
                                 interpolation=v2.InterpolationMode.BILINEAR))
            if resize == "shorter_side_crop":
                ops.append(v2.CenterCrop(size))
            ops.append(v2.ToDtype(torch.float32, scale=True))
        else:
            ops.append(T.Resize(size if resize == "stretch" else size[0], interpolation=T.InterpolationMode.BILINEAR))
            if resize == "shorter_side_crop":
                ops.append(T.CenterCrop(size))
            ops.append(T.ToTensor())
        if normalize == "signed":
            ops.append((v2 if tensor_path else T).Normalize([0.5] * 3, [0.5] * 3))
        elif normalize == "mean_std":
            ops.append((v2 if tensor_path else T).Normalize(IMAGENET_MEAN, IMAGENET_STD))
        return (v2 if tensor_path else T).Compose(ops)

    doc = {"about": "JPEGs, their decoded pixels (Pillow) and torchvision's [3, H, W] f32 for each setting, through "
                    "PIL images (transforms) and uint8 tensors (transforms.v2, antialias=True)",
           "torchvision": torchvision.__version__, "imagenet_mean": IMAGENET_MEAN, "imagenet_std": IMAGENET_STD,
           "settings": [{"name": n, "size": sz, "image_resize": r, "image_normalize": nm} for n, sz, r, nm in settings],
           "images": []}
    for name, w, h, mode in images:
        a = synthetic_image(np, rng, w, h, 1 if mode == "L" else 3)
        buf = io.BytesIO()
        Image.fromarray(a, mode).save(buf, format="JPEG", quality=90)
        with open(os.path.join(d, name + ".jpg"), "wb") as f:
            f.write(buf.getvalue())
        img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
        pixels = np.asarray(img)
        entry = {"name": name, "file": name + ".jpg", "width": w, "height": h, "mode": mode,
                 "decoded": save_array(np, d, name + ".decoded", pixels), "outputs": {}}
        as_tensor = torch.from_numpy(pixels.copy()).permute(2, 0, 1).contiguous()
        for sname, size, resize, normalize in settings:
            pil = pipeline(size, resize, normalize, False)(img)
            ten = pipeline(size, resize, normalize, True)(as_tensor)
            # image_decode "draft": Pillow's Image.draft to the size the resize makes (before the crop), then
            # the same PIL pipeline (what a user's loader does with draft() before transforms)
            if resize == "stretch":
                want = (size[1], size[0])
            else:
                s0 = size[0]
                want = (s0, int(s0 * h / w)) if w <= h else (int(s0 * w / h), s0)
            drafted = Image.open(io.BytesIO(buf.getvalue()))
            drafted.draft(drafted.mode, want)
            drafted = drafted.convert("RGB")
            draft = pipeline(size, resize, normalize, False)(drafted)
            entry["outputs"][sname] = {"pil": save_array(np, d, f"{name}.{sname}.pil", pil.numpy()),
                                       "tensor": save_array(np, d, f"{name}.{sname}.tensor", ten.numpy()),
                                       "pil_draft": save_array(np, d, f"{name}.{sname}.pil_draft", draft.numpy()),
                                       "draft_size": list(drafted.size)}
        doc["images"].append(entry)
    # captions: the sentencepiece package and T5Tokenizer, at the exported length and at 512 (no truncation of
    # most), T5's conventions (EOS appended, pad 0)
    doc["text"] = {"sentencepiece_model": "../t5_encoder/spiece.model", "cases": []}
    for max_len in (TEXT_LEN, 512):
        ids_sp = []
        for t in texts:
            ids = sp.encode(t)[: max_len - 1] + [sp.eos_id()]
            ids_sp.append(ids + [sp.pad_id()] * (max_len - len(ids)))
        enc = t5_tok(texts, padding="max_length", max_length=max_len, truncation=True)
        assert [list(r) for r in enc["input_ids"]] == ids_sp, f"T5Tokenizer and sentencepiece disagree at {max_len}"
        doc["text"]["cases"].append({"max_length": max_len, "texts": texts, "input_ids": ids_sp,
                                     "attention_mask": [list(r) for r in enc["attention_mask"]]})
    with open(os.path.join(d, "preprocess.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
    return [".preprocess_reference/preprocess.json"]


def served_images(np, torch, n, size):
    """n JPEGs at exactly size x size (no resize: torchvision's ToTensor + Normalize(0.5, 0.5) of the decoded
    pixels is the tensor), with that tensor."""
    import io
    from PIL import Image
    from torchvision import transforms as T
    rng = np.random.default_rng(SEED + 4)
    tf = T.Compose([T.ToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)])
    jpegs, xs = [], []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(synthetic_image(np, rng, size, size, 3), "RGB").save(buf, format="JPEG", quality=92)
        jpegs.append(buf.getvalue())
        xs.append(tf(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))
    return jpegs, torch.stack(xs)


def write_served_reference(np, model_dir, x, y, jpegs=None, texts=None):
    ref = os.path.join(model_dir, "reference")
    os.makedirs(ref, exist_ok=True)
    doc = {"about": "raw inputs as a user sends them, the tensor the user's pipeline makes of each (torchvision "
                    "ToTensor + Normalize(0.5, 0.5) of the decoded JPEG; SentencePiece ids + mask, EOS appended), "
                    "and eager PyTorch's output for it",
           "input": save_array(np, ref, "served_input", x), "output": save_array(np, ref, "served_output", y)}
    if jpegs is not None:
        doc["jpegs"] = []
        for i, b in enumerate(jpegs):
            with open(os.path.join(ref, f"served_{i}.jpg"), "wb") as f:
                f.write(b)
            doc["jpegs"].append(f"served_{i}.jpg")
    if texts is not None:
        doc["texts"] = texts
    with open(os.path.join(ref, "served.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=2)


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
    served_jpegs, xs = served_images(np, torch, SERVED_IMAGES, IMAGE)
    with torch.no_grad():
        ys = vae_enc(xs)
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
        write_served_reference(np, d, xs.numpy(), ys.numpy(), jpegs=served_jpegs)
        files += [f"{name}/config.pbtxt", f"{name}/1/{fname}", f"{name}/reference/reference.json",
                  f"{name}/reference/served.json"]
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
    served_texts = texts + [corpus[5], "北京的街道 в дождь 🌧️ — naïve café", "", "   leading and trailing spaces   ",
                            "a caption\nwith a newline and a tab\t", "🚀" * 40]
    xst = torch.from_numpy(tokenize(np, sp, served_texts))
    with torch.no_grad():
        yst = t5(xst)
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
        write_served_reference(np, d, xst.numpy(), yst.numpy(), texts=served_texts)
        files += [f"{name}/config.pbtxt", f"{name}/1/{fname}", f"{name}/spiece.model", f"{name}/reference/reference.json",
                  f"{name}/reference/served.json"]
        print(f"export_models: {name} ({time.time() - t0:.1f} s)", flush=True)
    files += write_preprocess_reference(np, torch, out, served_texts + [" ".join(corpus[100:300])[:4000]], sp, t5_tok)
    print(f"export_models: preprocessing references ({time.time() - t0:.1f} s)", flush=True)
    shutil.copy(corpus_path, os.path.join(out, "captions.txt"))
    shutil.rmtree(work)
    with open(stamp_file, "w") as f:
        f.write(stamp + "\n" + "\n".join(files) + "\n")
    print(f"export_models: wrote {len(files)} files into {out} in {time.time() - t0:.1f} s "
          f"(torch {torch.__version__}, diffusers {diffusers.__version__}, transformers {transformers.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
