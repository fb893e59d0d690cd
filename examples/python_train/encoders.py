"""The exported encoders in this process (--mode inline, --verify): the repository's TorchScript model.pt files
(torch.jit.load) and the preprocessing jitembed-server applies before them, written as a PyTorch user writes it:
torchvision's PIL pipeline for images, as the model's config.pbtxt parameters configure it (image_resize,
image_normalize), and the sentencepiece package with T5's rules for captions (truncate to L - 1 ids, append EOS,
pad with 0; row 1 the attention mask) — what scripts/export_models.py computes its references with."""
import io
import os
import re

import numpy as np
import torch

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def read_config(model_dir):
    """The parts of config.pbtxt used here: the input dims and the string parameters."""
    text = open(os.path.join(model_dir, "config.pbtxt"), encoding="utf-8").read()
    params = dict(re.findall(r'key:\s*"([^"]+)"\s*value:\s*{\s*string_value:\s*"([^"]*)"', text))
    dims = [int(d) for d in re.search(r"input\s*\[.*?dims:\s*\[([^\]]*)\]", text, re.S).group(1).split(",")]
    return dims, params


def newest_version(model_dir, filename="model.pt"):
    versions = sorted(int(d) for d in os.listdir(model_dir) if d.isdigit() and os.path.isfile(os.path.join(model_dir, d, filename)))
    if not versions:
        raise FileNotFoundError(f"no <version>/{filename} under {model_dir}")
    return os.path.join(model_dir, str(versions[-1]), filename)


class ImageEncoder:
    """JPEG bytes -> [3, H, W] f32 (PIL + torchvision) -> the VAE encoder's latent."""

    def __init__(self, model_dir):
        from torchvision import transforms as T
        dims, p = read_config(model_dir)
        _, h, w = dims
        ops = []
        resize = p.get("image_resize", "stretch")
        if p.get("image_decode", "exact") != "exact":
            raise ValueError(f"{model_dir}: image_decode {p['image_decode']} is not reproduced here")
        if resize == "stretch":
            ops.append(T.Resize((h, w), interpolation=T.InterpolationMode.BILINEAR))
        else:  # shorter_side_crop
            ops += [T.Resize(max(h, w), interpolation=T.InterpolationMode.BILINEAR), T.CenterCrop((h, w))]
        ops.append(T.ToTensor())
        norm = p.get("image_normalize", "unit")
        if norm == "signed":
            ops.append(T.Normalize([0.5] * 3, [0.5] * 3))
        elif norm == "mean_std":
            mean = [float(v) for v in p.get("image_mean", ",".join(map(str, IMAGENET_MEAN))).split(",")]
            std = [float(v) for v in p.get("image_std", ",".join(map(str, IMAGENET_STD))).split(",")]
            ops.append(T.Normalize(mean, std))
        self.size = (h, w)
        self.transform = T.Compose(ops)
        self.module = torch.jit.load(newest_version(model_dir), map_location="cpu").eval()

    def preprocess(self, jpeg):
        """JPEG bytes -> [3, H, W] f32. (Pillow's resize to the image's own size is a copy: exact-size JPEGs are
        ToTensor + Normalize of the decoded pixels.)"""
        from PIL import Image
        return self.transform(Image.open(io.BytesIO(bytes(jpeg))).convert("RGB"))

    @torch.no_grad()
    def __call__(self, jpegs):
        x = torch.stack([self.preprocess(j) for j in jpegs])
        return self.module(x)


class TextEncoder:
    """UTF-8 caption -> [2, L] int64 (sentencepiece ids + EOS, padded with 0; attention mask) -> the T5 encoder's
    last hidden state [L, d_model]."""

    def __init__(self, model_dir):
        import sentencepiece as spm
        dims, p = read_config(model_dir)
        self.length = int(p.get("text_max_length", dims[-1]))
        if p.get("text_append_eos", "true") != "true" or p.get("text_truncation", "true") != "true":
            raise ValueError(f"{model_dir}: only T5's rules (truncation, EOS appended) are reproduced here")
        self.sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, p.get("sentencepiece_model", "spiece.model")))
        self.module = torch.jit.load(newest_version(model_dir), map_location="cpu").eval()

    def tokenize(self, text):
        ids = self.sp.encode(text)[: self.length - 1] + [self.sp.eos_id()]
        mask = [1] * len(ids) + [0] * (self.length - len(ids))
        ids = ids + [self.sp.pad_id()] * (self.length - len(ids))
        return torch.tensor([ids, mask], dtype=torch.int64)

    @torch.no_grad()
    def __call__(self, texts):
        return self.module(torch.stack([self.tokenize(t) for t in texts]))
