#!/usr/bin/env python3
"""Real encoder outputs for bench_wire_compression: raw little-endian tensors + manifest.json in a directory.

* vae_latent: the exported `vae_encoder` TorchScript (model repository of the build; random weights, as
  exported by the build) on N generated 256x256 JPEGs (examples/python_train/data.py: coloured shapes over
  a gradient), preprocessed as its config.pbtxt says (stretch, signed) -> [N, 4, 32, 32] f32; also cast to
  bf16 and f16 (what a trainer in bf16 would ask for).
* t5_sequence: the exported `t5_encoder` TorchScript on the images' captions (spiece.model, length 32)
  -> [N, 32, 64] f32.
* image-latent, text-embed sequence / pooled: the C++ reference models (jitembed.Server + jitembed.Client) on
  the same images and captions.

  .venv/bin/python benchmarks/server/wire_data.py OUT_DIR [--build build/release] [--images 32]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "examples" / "python_train"))


def generate(out: Path, repo: Path, images: int = 32) -> dict:
    import jitembed
    import torch
    import data as train_data  # examples/python_train/data.py

    warnings.filterwarnings("ignore", category=FutureWarning)
    out.mkdir(parents=True, exist_ok=True)
    train_data.ensure_data(str(out / "dataset"), images=images, size=256, seed=1)
    stems = sorted((out / "dataset" / "images").glob("*.jpg"))[:images]
    jpegs = [p.read_bytes() for p in stems]
    captions = [p.with_suffix(".txt").read_text() for p in stems]
    kinds = []

    def put(name, arr, source, dtype=None):
        arr = np.ascontiguousarray(arr)
        fname = f"{name}.bin"
        (out / fname).write_bytes(arr.tobytes())
        kinds.append({"name": name, "file": fname, "dtype": dtype or str(arr.dtype), "element_size": arr.dtype.itemsize,
                      "rows": int(arr.shape[0]), "shape": list(arr.shape), "source": source})

    torch.set_num_threads(2)
    vae_pre = jitembed.Model(lambda x: x, "vae_pre", inputs=("image", "f32", [3, 256, 256]),
                             outputs=[("o", "f32", [1])],
                             preprocess={"modality": "image", "image_resize": "stretch", "image_normalize": "signed"})
    x = torch.from_numpy(np.stack([np.asarray(vae_pre.preprocess(j)) for j in jpegs]))
    vae = torch.jit.load(str(repo / "vae_encoder" / "1" / "model.pt")).eval()
    with torch.inference_mode():
        lat = vae(x)
    put("vae_latent_f32", lat.numpy().astype(np.float32), "vae_encoder TorchScript (exported, random weights)")
    put("vae_latent_bf16", lat.to(torch.bfloat16).view(torch.int16).numpy(), "vae_encoder output cast to bf16", "bfloat16")
    put("vae_latent_f16", lat.numpy().astype(np.float16), "vae_encoder output cast to f16")

    t5_pre = jitembed.Model(lambda x: x, "t5_pre", inputs=("text", "i64", [2, 32]), outputs=[("o", "f32", [1])],
                            preprocess={"modality": "text", "sentencepiece_model": str(repo / "t5_encoder" / "spiece.model"),
                                        "text_max_length": "32", "text_padding": "max_length",
                                        "text_truncation": "true", "text_append_eos": "true"})
    tok = torch.from_numpy(np.stack([np.asarray(t5_pre.preprocess(c.encode())) for c in captions]))
    t5 = torch.jit.load(str(repo / "t5_encoder" / "1" / "model.pt")).eval()
    with torch.inference_mode():
        emb = t5(tok)
    put("t5_sequence_f32", emb.numpy().astype(np.float32), "t5_encoder TorchScript (exported, random weights)")

    with jitembed.Server(models=["image-latent", "text-embed"]) as srv, \
            jitembed.Client(endpoints=[f"http://{srv.url}"]) as cl:
        il = cl.embed("image-latent", jpegs, input="image")
        te = cl.embed("text-embed", [c.encode() for c in captions], input="text")
        put("ref_image_latent_f32", np.asarray(il["latent"]), "reference image-latent (C++)")
        put("ref_text_sequence_f32", np.asarray(te["sequence"]), "reference text-embed sequence (C++)")
        put("ref_text_pooled_f32", np.asarray(te["pooled"]), "reference text-embed pooled (C++)")
    manifest = {"images": images, "kinds": kinds}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "release")
    ap.add_argument("--images", type=int, default=32)
    a = ap.parse_args()
    m = generate(a.out, a.build / "model_repository", a.images)
    for k in m["kinds"]:
        print(k["name"], k["shape"], k["dtype"], file=sys.stderr)


if __name__ == "__main__":
    main()
