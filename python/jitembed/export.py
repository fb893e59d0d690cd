"""python -m jitembed.export: a local diffusers / transformers folder (from_pretrained layout) -> one version of a
Triton-layout model repository (TorchScript or AOTInductor), checked against eager PyTorch (docs/models.md).

torch, transformers, diffusers and tokenizers are imported inside the functions: `import jitembed` works without
them. Nothing is downloaded (HF_HUB_OFFLINE, local_files_only).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import string
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: what each supported class exports: the outputs of its forward (in order), its modality
_KINDS = {
    "AutoencoderKL": ("image", ["latent"]),
    "CLIPTextModel": ("text", ["last_hidden_state", "pooler_output"]),
    "CLIPTextModelWithProjection": ("text", ["last_hidden_state", "text_embeds"]),
    "T5EncoderModel": ("text", ["last_hidden_state"]),
    "SiglipTextModel": ("text", ["last_hidden_state", "pooler_output"]),
}
#: transformers config.json model_type -> class, for folders whose config has no "architectures"
_MODEL_TYPES = {"clip_text_model": "CLIPTextModel", "t5": "T5EncoderModel", "siglip_text_model": "SiglipTextModel"}
#: other architectures whose weights hold one of the classes above (a full T5 checkpoint's encoder)
_ALIASES = {"T5ForConditionalGeneration": "T5EncoderModel", "T5Model": "T5EncoderModel"}

_DTYPES = {"f32": ("float32", "TYPE_FP32"), "bf16": ("bfloat16", "TYPE_BF16"), "f16": ("float16", "TYPE_FP16")}
#: verification tolerance per dtype on max|exported - eager| / max|eager| (one output, all rows of a batch);
#: bf16 / f16 exports also pass when no farther from the f32 result than eager in that dtype (export()).
#: Measured figures in docs/models.md: TorchScript 0, AOTInductor 1e-6 (f32) and ~1e-2 (bf16).
TOLERANCES = {"f32": 1e-4, "f16": 1e-2, "bf16": 3e-2}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")

#: captions the verification tokenizes: short and long (truncated), punctuation, case, non-Latin scripts, emoji
SAMPLE_CAPTIONS = [
    "a photograph of an astronaut riding a horse",
    "A RED fox, sleeping under a starry sky -- oil painting!",
    "two children on a wooden boat at sunset, 35mm film, golden hour light",
    "東京の夜景 and a café crème 🌅",
    "x",
    " ".join(["a misty mountain lake beside an old stone bridge with colorful lanterns"] * 20),
]


class ExportError(ValueError):
    """A folder, flag or repository that cannot be exported; the message says which and why."""


@dataclasses.dataclass
class Options:
    model: str
    out: str
    name: Optional[str] = None
    format: str = "torchscript"
    dtype: str = "f32"
    max_length: Optional[int] = None
    image_size: Optional[Tuple[int, int]] = None
    max_batch_size: int = 32
    idle_dispatch: bool = False
    outputs: Optional[List[str]] = None
    version: str = "1"
    tokenizer: Optional[str] = None
    latent_scaling: bool = True
    attention_mask: str = "auto"
    image_resize: str = "shorter_side_crop"
    force: bool = False


@dataclasses.dataclass
class Check:
    """One row of the verification table."""
    what: str
    detail: str
    max_abs: Optional[float] = None
    max_rel: Optional[float] = None
    tolerance: Optional[float] = None
    vs_f32: Optional[float] = None  # the export's max_rel against the f32 eager module (bf16 / f16 exports)
    eager_vs_f32: Optional[float] = None  # eager's in the export's dtype, against f32
    ok: bool = True


@dataclasses.dataclass
class Result:
    model_dir: str  # REPO/NAME
    model_file: str  # REPO/NAME/<version>/model.pt[2]
    config: str  # the config.pbtxt text
    checks: List[Check]
    kind: str

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


# --- the folder -----------------------------------------------------------------------------------------------
def detect_kind(model_dir: str) -> str:
    """The supported class a from_pretrained folder holds (its config.json), or ExportError."""
    cfg_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise ExportError(f"{model_dir}: no config.json (a diffusers or transformers from_pretrained folder is needed)")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise ExportError(f"{cfg_path}: not a JSON config ({e})") from e
    if not isinstance(cfg, dict):
        raise ExportError(f"{cfg_path}: not a JSON object")
    names = []
    if isinstance(cfg.get("_class_name"), str):
        names.append(cfg["_class_name"])
    if isinstance(cfg.get("architectures"), list):
        names += [a for a in cfg["architectures"] if isinstance(a, str)]
    if not names and isinstance(cfg.get("model_type"), str) and cfg["model_type"] in _MODEL_TYPES:
        names.append(_MODEL_TYPES[cfg["model_type"]])
    for n in names:
        n = _ALIASES.get(n, n)
        if n in _KINDS:
            return n
    said = ", ".join(names) or f"model_type {cfg.get('model_type')!r}"
    raise ExportError(f"{cfg_path}: {said} is not supported (supported: {', '.join(_KINDS)}"
                      f"{', ' + ', '.join(_ALIASES) + ' (the encoder)' if _ALIASES else ''})")


def tokenizer_dir(model_dir: str, given: Optional[str]) -> str:
    """Where the text model's tokenizer is: --tokenizer, the folder itself, or a diffusers pipeline's sibling
    (text_encoder -> tokenizer, text_encoder_2 -> tokenizer_2)."""
    files = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "spiece.model")
    if given:
        if not os.path.isdir(given):
            raise ExportError(f"--tokenizer {given}: not a directory")
        return given
    if any(os.path.isfile(os.path.join(model_dir, f)) for f in files):
        return model_dir
    base = os.path.basename(os.path.normpath(model_dir))
    if base.startswith("text_encoder"):
        sib = os.path.join(os.path.dirname(os.path.normpath(model_dir)), "tokenizer" + base[len("text_encoder"):])
        if any(os.path.isfile(os.path.join(sib, f)) for f in files):
            return sib
    raise ExportError(f"{model_dir}: no tokenizer (tokenizer.json, tokenizer_config.json, vocab.json or spiece.model) "
                      "in the folder or its pipeline sibling; pass --tokenizer DIR")


def _fast_tokenizer(tok_dir: str):
    """(the folder's own tokenizer through transformers, its tokenizer.json as a tokenizers.Tokenizer, the file
    bytes when tok_dir has one). A folder without tokenizer.json gets one: transformers' slow->fast conversion
    (AutoTokenizer(use_fast=True)), or for SigLIP's SentencePiece tokenizer, which has no converter there,
    _siglip_tokenizer_json."""
    import transformers
    from tokenizers import Tokenizer

    own = transformers.AutoTokenizer.from_pretrained(tok_dir, use_fast=True, local_files_only=True)
    path = os.path.join(tok_dir, "tokenizer.json")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            data = f.read()
        return own, Tokenizer.from_str(data.decode("utf-8")), data
    if getattr(own, "is_fast", False):
        fast = Tokenizer.from_str(own.backend_tokenizer.to_str())
    elif type(own).__name__ == "SiglipTokenizer":
        fast = _siglip_tokenizer_json(own)
    else:
        raise ExportError(f"{tok_dir}: {type(own).__name__} has no tokenizer.json and transformers cannot convert it "
                          "(write one with the tokenizers library)")
    # the configuration's text_* parameters truncate and pad: the file itself declares neither
    fast.no_truncation()
    fast.no_padding()
    return own, fast, None


def _siglip_tokenizer_json(slow):
    """SiglipTokenizer (SentencePiece, Python) as a tokenizer.json: its canonicalize_text (ASCII punctuation
    removed, lowercase, whitespace runs to one space, stripped) as normalizers before the SentencePiece ones,
    the Unigram model, EOS appended. Checked against the slow tokenizer on every verification caption."""
    from tokenizers import AddedToken, Regex, normalizers, processors
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    proto = import_protobuf().ModelProto()
    with open(slow.vocab_file, "rb") as f:
        proto.ParseFromString(f.read())
    # legacy=False: the dummy prefix only at the start of the text, as the slow tokenizer adds it
    tk = SpmConverter.build_tokenizer_from_spm_proto(proto, [(p.piece, p.score) for p in proto.pieces], legacy=False)
    if tk is None:
        raise ExportError(f"{slow.vocab_file}: SentencePiece model type not convertible to tokenizer.json")
    canon = [normalizers.Replace(Regex("[" + re.escape(string.punctuation) + "]"), "")]
    if getattr(slow, "do_lower_case", True):
        canon.append(normalizers.Lowercase())
    canon += [normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()]
    tk.normalizer = normalizers.Sequence(canon + ([tk.normalizer] if tk.normalizer is not None else []))
    eos, eos_id = str(slow.eos_token), int(slow.eos_token_id)
    tk.post_processor = processors.TemplateProcessing(single=["$A", eos], pair=["$A", eos, "$B", eos],
                                                      special_tokens=[(eos, eos_id)])
    specials = dict.fromkeys(str(t) for t in (slow.pad_token, slow.eos_token, slow.unk_token) if t is not None)
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False, lstrip=True, rstrip=True) for t in specials])
    return tk


def _encode_rows(fast, texts: Sequence[str], length: int, pad_id: int, pad_token: str):
    """[n, 2, L] int64 (ids; mask) as the configuration's text_* parameters ask: truncated to L (room kept for
    the special tokens), padded to L with pad_id."""
    import numpy as np
    from tokenizers import Tokenizer

    t = Tokenizer.from_str(fast.to_str())
    t.enable_truncation(max_length=length)
    t.enable_padding(length=length, pad_id=pad_id, pad_token=pad_token)
    enc = t.encode_batch(list(texts))
    return np.asarray([[e.ids, e.attention_mask] for e in enc], dtype=np.int64)


def _own_rows(own, texts: Sequence[str], length: int):
    import numpy as np

    enc = own(list(texts), padding="max_length", truncation=True, max_length=length)
    return np.asarray([[i, m] for i, m in zip(enc["input_ids"], enc["attention_mask"])], dtype=np.int64)


def weights_hash(model_dir: str, extra: bytes) -> str:
    """sha256 over the folder's weights and configs (relative path, size, bytes) and `extra` (the export
    flags and tokenizer): the config's `version` parameter, so new weights give new cache keys."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for fn in sorted(files):
            if not (fn.endswith(_WEIGHT_SUFFIXES) or fn.endswith(".json")):
                continue
            p = os.path.join(root, fn)
            h.update(os.path.relpath(p, model_dir).encode() + b"\0" + str(os.path.getsize(p)).encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    h.update(b"\0flags\0" + extra)
    return "sha256:" + h.hexdigest()[:32]


# --- config.pbtxt ---------------------------------------------------------------------------------------------
def config_pbtxt(name: str, platform: str, max_batch: int, inputs, outputs, parameters: Dict[str, str],
                 comment: Sequence[str] = ()) -> str:
    def quote(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def tensors(kind, ts):
        rows = [f"  {{\n    name: {quote(n)}\n    data_type: {dt}\n    dims: [ {', '.join(str(d) for d in dims)} ]\n  }}"
                for n, dt, dims in ts]
        return f"{kind} [\n" + ",\n".join(rows) + "\n]\n"

    s = "".join(f"# {line}\n" for line in comment)
    s += f"name: {quote(name)}\nplatform: {quote(platform)}\nmax_batch_size: {max_batch}\n"
    s += tensors("input", inputs) + tensors("output", outputs)
    s += "instance_group [\n  {\n    count: 1\n    kind: KIND_CPU\n  }\n]\n"
    s += "dynamic_batching {\n  max_queue_delay_microseconds: 2000\n}\n"
    for k, v in parameters.items():
        s += f"parameters {{\n  key: {quote(k)}\n  value: {{ string_value: {quote(str(v))} }}\n}}\n"
    return s


# --- the wrapper modules (made once torch is imported) ----------------------------------------------------------
def _wrappers(torch):
    class VaeEncoder(torch.nn.Module):
        """[N, 3, H, W] f32 in [-1, 1] -> latent_dist.mean [N, C, H/f, W/f] in the module's dtype, optionally
        (mean - shift_factor) * scaling_factor (diffusers' convention for what the denoiser sees)."""

        def __init__(self, vae, dtype, scale: Optional[float], shift: Optional[float]):
            super().__init__()
            self.vae = vae
            self.dtype = dtype
            self.scale = scale
            self.shift = shift

        def forward(self, x):
            z = self.vae.encode(x.to(self.dtype)).latent_dist.mean
            if self.shift is not None:
                z = z - self.shift
            if self.scale is not None:
                z = z * self.scale
            return z

    class TextEncoder(torch.nn.Module):
        """[N, 2, L] int64 (row 0 the ids, row 1 the attention mask) -> the chosen outputs of the model, in
        forward's order (one tensor when one is chosen)."""

        def __init__(self, model, outputs: List[str], use_mask: bool):
            super().__init__()
            self.model = model
            self.outputs = list(outputs)
            self.use_mask = use_mask

        def forward(self, x):
            if self.use_mask:
                out = self.model(input_ids=x[:, 0], attention_mask=x[:, 1])
            else:
                out = self.model(input_ids=x[:, 0])
            got = tuple(getattr(out, n) for n in self.outputs)
            return got[0] if len(got) == 1 else got

    return VaeEncoder, TextEncoder


def _as_tuple(out) -> tuple:
    if isinstance(out, (tuple, list)):
        return tuple(out)
    return (out,)


def _load(torch, kind: str, model_dir: str):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if kind == "AutoencoderKL":
        import diffusers

        diffusers.utils.logging.set_verbosity_error()  # its notes on accelerate and on casting with to()
        diffusers.utils.logging.disable_progress_bar()
        return diffusers.AutoencoderKL.from_pretrained(model_dir, local_files_only=True, torch_dtype=torch.float32,
                                                       low_cpu_mem_usage=False).eval()
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    cls = getattr(transformers, kind)
    return cls.from_pretrained(model_dir, local_files_only=True, dtype=torch.float32).eval()


def _trace_example(torch, rows, n: int):
    """n rows for tracing / export, cycled from the sample rows (padded and unpadded ones mixed: a graph traced
    on an all-ones mask alone could drop the mask)."""
    idx = [i % rows.shape[0] for i in range(n)]
    return rows[idx].contiguous()


def _compare(torch, got, want) -> Tuple[float, float]:
    a, b = got.detach().float().cpu(), want.detach().float().cpu()
    if a.shape != b.shape:
        return float("inf"), float("inf")
    if not torch.isfinite(a).all() or not torch.isfinite(b).all():
        return float("nan"), float("nan")
    max_abs = (a - b).abs().max().item() if a.numel() else 0.0
    scale = b.abs().max().item() if b.numel() else 0.0
    return max_abs, (max_abs / scale if scale > 0 else max_abs)


# --- the export -----------------------------------------------------------------------------------------------
def export(opts: Options, log=print) -> Result:
    """Exports opts.model into opts.out and verifies it; ExportError for bad input. The result's checks say
    whether the verification passed (the files are in place only when it did)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read when huggingface_hub is first imported
    import warnings

    with warnings.catch_warnings():
        # torch.jit's deprecation notice and the tracer's notes on the fixed shapes (the verification runs the
        # traced graph on other rows and batch sizes)
        warnings.simplefilter("ignore", FutureWarning)
        return _export(opts, log)


def _export(opts: Options, log) -> Result:
    if opts.format not in ("torchscript", "aoti"):
        raise ExportError(f"--format {opts.format!r}: not torchscript or aoti")
    if opts.dtype not in _DTYPES:
        raise ExportError(f"--dtype {opts.dtype!r}: not one of {', '.join(_DTYPES)}")
    if opts.max_batch_size < 1:
        raise ExportError(f"--max-batch-size {opts.max_batch_size}: must be >= 1")
    if not re.fullmatch(r"[1-9][0-9]{0,17}", str(opts.version)):
        raise ExportError(f"--version {opts.version!r}: a version is a positive integer (the directory name)")
    if opts.attention_mask not in ("auto", "yes", "no"):
        raise ExportError(f"--attention-mask {opts.attention_mask!r}: not auto, yes or no")
    if opts.image_resize not in ("shorter_side_crop", "stretch"):
        raise ExportError(f"--image-resize {opts.image_resize!r}: not shorter_side_crop or stretch")
    model_dir = os.path.abspath(opts.model)
    if not os.path.isdir(model_dir):
        raise ExportError(f"--model {opts.model}: not a directory")
    kind = detect_kind(model_dir)
    modality, available = _KINDS[kind]
    name = opts.name or os.path.basename(os.path.normpath(model_dir))
    if not _NAME.match(name):
        raise ExportError(f"model name {name!r}: use letters, digits, '_', '.', '-' (pass --name)")
    chosen = list(opts.outputs or available)
    for o in chosen:
        if o not in available:
            raise ExportError(f"--output {o!r}: {kind} has outputs {', '.join(available)}")
    if len(set(chosen)) != len(chosen):
        raise ExportError(f"--output lists an output twice: {', '.join(chosen)}")
    chosen = [o for o in available if o in chosen]  # forward's order
    if modality == "image" and (opts.max_length is not None):
        raise ExportError("--max-length applies to text encoders, not AutoencoderKL")
    if modality == "text" and opts.image_size is not None:
        raise ExportError(f"--image-size applies to AutoencoderKL, not {kind}")

    import torch
    import warnings

    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # inside export()'s catch_warnings
    torch_dtype = getattr(torch, _DTYPES[opts.dtype][0])
    out_type = _DTYPES[opts.dtype][1]
    VaeEncoder, TextEncoder = _wrappers(torch)
    gen = torch.Generator().manual_seed(20240617)
    log(f"jitembed.export: loading {kind} from {model_dir}")
    model = _load(torch, kind, model_dir)
    checks: List[Check] = []
    files: Dict[str, bytes] = {}  # extra files of REPO/NAME (tokenizer.json)
    flags: Dict[str, Any] = {"kind": kind, "format": opts.format, "dtype": opts.dtype, "outputs": chosen,
                             "max_batch_size": opts.max_batch_size}

    if modality == "image":
        cfg = model.config
        f = 2 ** (len(cfg.block_out_channels) - 1)
        if opts.image_size is not None:
            h, w = (int(v) for v in opts.image_size)
        else:
            s = cfg.sample_size
            h, w = (int(s), int(s)) if isinstance(s, int) else (int(s[0]), int(s[1]))
        if h < f or w < f or h % f or w % f:
            raise ExportError(f"--image-size {h} {w}: both must be positive multiples of the VAE's downsampling "
                              f"factor {f}")
        scale = float(cfg.scaling_factor) if opts.latent_scaling and getattr(cfg, "scaling_factor", None) is not None else None
        shift = float(cfg.shift_factor) if opts.latent_scaling and getattr(cfg, "shift_factor", None) is not None else None
        flags.update(image_size=[h, w], latent_scaling=opts.latent_scaling, scale=scale, shift=shift,
                     image_resize=opts.image_resize)
        sample = torch.rand(3, 3, h, w, generator=gen) * 2 - 1
        eager32 = VaeEncoder(model, torch.float32, scale, shift).eval()
        with torch.inference_mode():
            ref32 = _as_tuple(eager32(sample))
        wrapper = VaeEncoder(model.to(torch_dtype), torch_dtype, scale, shift).eval()
        inputs = [("INPUT__0", "TYPE_FP32", [3, h, w])]
        params = {"modality": "image", "image_resize": opts.image_resize, "image_normalize": "signed"}
        example = sample[:2].contiguous()
        samples = [sample[:1], sample[: min(3, opts.max_batch_size)]]
        detail_in = f"{h}x{w} images in [-1, 1]"
    else:
        tok_dir = tokenizer_dir(model_dir, opts.tokenizer)
        own, fast, data = _fast_tokenizer(tok_dir)
        mcfg = model.config
        positions = getattr(mcfg, "max_position_embeddings", None)
        length = opts.max_length
        if length is None:
            declared = getattr(own, "model_max_length", None)
            length = int(declared) if declared and declared < 1_000_000 else positions
            if length is None:
                raise ExportError(f"{tok_dir}: the tokenizer declares no model_max_length: pass --max-length")
        if length < 2:
            raise ExportError(f"--max-length {length}: must be >= 2")
        if positions is not None and length > positions:
            raise ExportError(f"--max-length {length}: {kind} has {positions} positions")
        pad_id = own.pad_token_id
        if pad_id is None:
            raise ExportError(f"{tok_dir}: the tokenizer has no pad token (pad_token_id): text_pad_id needs one")
        pad_token = str(own.pad_token)
        use_mask = {"auto": kind != "SiglipTextModel", "yes": True, "no": False}[opts.attention_mask]
        if data is None:
            data = fast.to_str(pretty=True).encode("utf-8")
        files["tokenizer.json"] = data
        flags.update(max_length=length, attention_mask=use_mask, tokenizer=hashlib.sha256(data).hexdigest())
        rows = _encode_rows(fast, SAMPLE_CAPTIONS, length, pad_id, pad_token)
        mine = _own_rows(own, SAMPLE_CAPTIONS, length)
        differ = [i for i in range(len(SAMPLE_CAPTIONS)) if not (rows[i] == mine[i]).all()]
        checks.append(Check("tokenizer.json", f"ids+mask of {len(SAMPLE_CAPTIONS)} captions vs {type(own).__name__}",
                            ok=not differ))
        if differ:
            checks[-1].detail += f": caption {differ[0]} differs ({SAMPLE_CAPTIONS[differ[0]][:40]!r})"
        sample = torch.from_numpy(rows)
        eager32 = TextEncoder(model, chosen, use_mask).eval()
        with torch.inference_mode():
            ref32 = _as_tuple(eager32(sample))
        wrapper = TextEncoder(model.to(torch_dtype), chosen, use_mask).eval()
        inputs = [("INPUT__0", "TYPE_INT64", [2, length])]
        params = {"modality": "text", "tokenizer": "tokenizer.json", "text_max_length": str(length),
                  "text_padding": "max_length", "text_truncation": "true", "text_pad_id": str(pad_id)}
        example = _trace_example(torch, sample, 2)
        samples = [sample[:1], sample[: opts.max_batch_size]]
        detail_in = f"{len(SAMPLE_CAPTIONS)} captions at L={length}"

    with torch.inference_mode():
        ref = _as_tuple(wrapper(sample))
    outputs = []
    for k, (o, t) in enumerate(zip(chosen, ref)):
        outputs.append((f"{o}__{k}", out_type, list(t.shape[1:])))
    tok_bytes = files.get("tokenizer.json", b"")
    version_tag = weights_hash(model_dir, json.dumps(flags, sort_keys=True).encode() + tok_bytes)
    params["version"] = version_tag
    platform = "torch_aoti" if opts.format == "aoti" else "pytorch_libtorch"
    comment = [f"written by python -m jitembed.export from {model_dir} ({kind})",
               "export flags: " + json.dumps({k: v for k, v in flags.items() if k != "tokenizer"}, sort_keys=True)]
    # serving, not results: outside the version hash. Triton's rule by default (a batch waits up to the queue
    # delay for max_batch_size rows), so that a trainer's closed loop of requests fills batches
    serving = {} if opts.idle_dispatch else {"idle_dispatch": "false"}
    config = config_pbtxt(name, platform, opts.max_batch_size, inputs, outputs, {**params, **serving}, comment)

    out_root = os.path.abspath(opts.out)
    final_dir = os.path.join(out_root, name)
    version_dir = os.path.join(final_dir, str(opts.version))
    fname = "model.pt2" if opts.format == "aoti" else "model.pt"
    cfg_path = os.path.join(final_dir, "config.pbtxt")
    if os.path.exists(version_dir) and os.listdir(version_dir) and not opts.force:
        raise ExportError(f"{version_dir} exists: pass --force to replace it, or another --version")
    if os.path.isfile(cfg_path) and not opts.force:
        with open(cfg_path, encoding="utf-8") as fh:
            if fh.read() != config:
                raise ExportError(f"{cfg_path} exists with another configuration (every version of a model shares "
                                  "it): pass --force to replace it, or another --name")
    os.makedirs(out_root, exist_ok=True)
    # staged in a directory the repository scanners skip (a leading dot), moved into place once verified
    stage = tempfile.mkdtemp(prefix=f".{name}.export-", dir=out_root)
    path = os.path.join(stage, fname)
    log(f"jitembed.export: exporting {kind} as {opts.format} ({opts.dtype}) to {path}")
    with torch.no_grad():
        if opts.format == "aoti":
            batch = torch.export.Dim("batch", min=1, max=max(2, opts.max_batch_size))
            ep = torch.export.export(wrapper, (example,), dynamic_shapes=({0: batch},))
            # as scripts/export_models.py: the bound checks would refuse batch 1 (export specializes 0 and 1
            # away) or cap below max_batch_size; the server bounds batches itself
            torch._inductor.aoti_compile_and_package(
                ep, package_path=path,
                inductor_configs={"aot_inductor.check_lowerbound": False, "aot_inductor.check_upperbound": False})
            loaded = torch._inductor.aoti_load_package(path)
        else:
            traced = torch.jit.trace(wrapper, (example,), check_trace=False)
            traced.save(path)
            loaded = torch.jit.load(path, map_location="cpu").eval()

    tol = TOLERANCES[opts.dtype]
    for x in samples:
        with torch.inference_mode():
            got = _as_tuple(loaded(x))
            want = _as_tuple(wrapper(x))
        n = x.shape[0]
        for k, (o, g, w) in enumerate(zip(outputs, got, want)):
            max_abs, max_rel = _compare(torch, g, w)
            c = Check(o[0], f"{list(g.shape)} {str(g.dtype).replace('torch.', '')}, batch {n}", max_abs, max_rel, tol)
            c.ok = max_rel <= tol
            if opts.dtype != "f32":
                # a compiled graph may keep f32 intermediates where eager rounds to the dtype (AOTInductor's
                # fused kernels), so it can be farther from eager than eager is from f32: it passes too when
                # it is no farther from the f32 result than eager in the dtype is
                c.vs_f32 = _compare(torch, g, ref32[k][:n])[1]
                c.eager_vs_f32 = _compare(torch, w, ref32[k][:n])[1]
                c.ok = c.ok or c.vs_f32 <= 1.25 * c.eager_vs_f32
            c.ok = c.ok and g.dtype == w.dtype
            checks.append(c)
        if len(got) != len(outputs):
            checks.append(Check("outputs", f"the export returned {len(got)} outputs, {len(outputs)} declared", ok=False))

    result = Result(final_dir, os.path.join(version_dir, fname), config, checks, kind)
    log(format_table(result, f"{opts.format}, {opts.dtype}, {detail_in}"))
    if not result.ok:
        log(f"jitembed.export: verification FAILED: the export is left in {stage} (not installed)")
        return result
    os.makedirs(final_dir, exist_ok=True)
    if os.path.isdir(version_dir):
        shutil.rmtree(version_dir)
    os.makedirs(version_dir)
    os.replace(path, os.path.join(version_dir, fname))
    for fn, b in files.items():
        with open(os.path.join(final_dir, fn), "wb") as fh:
            fh.write(b)
    with open(cfg_path, "w", encoding="utf-8") as fh:
        fh.write(config)
    shutil.rmtree(stage, ignore_errors=True)
    log(f"jitembed.export: wrote {result.model_file} and {cfg_path} (version {version_tag})")
    return result


def format_table(result: Result, about: str) -> str:
    def num(v):
        return "-" if v is None else f"{v:.2e}"

    head = ("output", "shape, dtype, rows", "max_abs", "max_rel", "tol_rel", "rel_vs_f32", "eager_vs_f32", "result")
    rows = [head] + [(c.what, c.detail, num(c.max_abs), num(c.max_rel), num(c.tolerance), num(c.vs_f32),
                      num(c.eager_vs_f32), "ok" if c.ok else "FAIL") for c in result.checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [f"jitembed.export: {result.kind} exported vs eager PyTorch ({about})"]
    lines += ["  " + "  ".join(v.ljust(widths[i]) for i, v in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines)


# --- command line ---------------------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m jitembed.export",
        description="Exports a local diffusers / transformers folder (AutoencoderKL, CLIPTextModel, "
                    "CLIPTextModelWithProjection, T5EncoderModel, SiglipTextModel) into a Triton-layout model "
                    "repository and checks it against eager PyTorch. Never downloads. Exit 0: exported and "
                    "verified; 1: verification failed (nothing installed); 2: bad input.")
    ap.add_argument("--model", required=True, help="from_pretrained folder (config.json + weights)")
    ap.add_argument("--out", required=True, help="model repository directory (created)")
    ap.add_argument("--name", help="model name (default: the folder's name)")
    ap.add_argument("--format", choices=["torchscript", "aoti"], default="torchscript",
                    help="torchscript: model.pt (pytorch_libtorch); aoti: model.pt2 (torch_aoti, CPU)")
    ap.add_argument("--dtype", choices=list(_DTYPES), default="f32", help="weights and outputs (inputs stay INT64 / FP32)")
    ap.add_argument("--max-length", type=int, help="text: L (default the tokenizer's model_max_length)")
    ap.add_argument("--image-size", type=int, nargs=2, metavar=("H", "W"), help="VAE: input size (default sample_size)")
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--idle-dispatch", action="store_true",
                    help="run a batch as soon as the model is idle (lowest latency at low load) instead of Triton's "
                         "rule, the default: every batch waits up to the 2 ms queue delay for max-batch-size rows")
    ap.add_argument("--output", action="append", dest="outputs", metavar="NAME",
                    help="an output to export (repeatable; default all: VAE latent; CLIP last_hidden_state and "
                         "pooler_output / text_embeds; T5 last_hidden_state; SigLIP last_hidden_state and pooler_output)")
    ap.add_argument("--version", default="1", help="version directory (default 1)")
    ap.add_argument("--tokenizer", help="text: tokenizer folder (default the model folder, or a pipeline's tokenizer*/)")
    ap.add_argument("--latent-scaling", action=argparse.BooleanOptionalAction, default=True,
                    help="VAE: (mean - shift_factor) * scaling_factor as the config gives them (default on)")
    ap.add_argument("--attention-mask", choices=["auto", "yes", "no"], default="auto",
                    help="text: pass row 1 as attention_mask (auto: yes for CLIP and T5, no for SigLIP)")
    ap.add_argument("--image-resize", choices=["shorter_side_crop", "stretch"], default="shorter_side_crop",
                    help="VAE: the served preprocessing's resize (default shorter_side_crop)")
    ap.add_argument("--force", action="store_true", help="replace an existing version / configuration")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    a = parser().parse_args(argv)
    opts = Options(model=a.model, out=a.out, name=a.name, format=a.format, dtype=a.dtype, max_length=a.max_length,
                   image_size=tuple(a.image_size) if a.image_size else None, max_batch_size=a.max_batch_size,
                   idle_dispatch=a.idle_dispatch,
                   outputs=a.outputs, version=a.version, tokenizer=a.tokenizer, latent_scaling=a.latent_scaling,
                   attention_mask=a.attention_mask, image_resize=a.image_resize, force=a.force)
    try:
        result = export(opts)
    except ExportError as e:
        print(f"jitembed.export: error: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"jitembed.export: error: {e.name or e} is not installed (pip install torch transformers diffusers "
              "tokenizers)", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
