"""jitembed.Model: a Python encoder (a torch.nn.Module, or any callable) served by jitembed.Server.

Everything but the call stays in C++: HTTP, admission, the built-in preprocessing of the model repository
(the same parameters as a config.pbtxt's, docs/models.md), dynamic batching, statistics and the cache
identity. The callable gets one batch as a torch tensor through DLPack without a copy (numpy when torch is
absent or ``tensor_type="numpy"``), holding the GIL only for the call, and returns torch tensors (CPU or GPU:
copied to the host once) or numpy arrays: one, a tuple in ``outputs`` order, or a dict by output name.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from . import _jitembed

TensorSpec = Union[Sequence[Any], Mapping[str, Any]]

#: torch / numpy dtype names -> jitembed dtype names
_DTYPE_NAMES = {
    "float32": "f32", "float": "f32", "float16": "f16", "half": "f16", "bfloat16": "bf16", "float64": "f64",
    "double": "f64", "int64": "i64", "long": "i64", "int32": "i32", "int": "i32", "int16": "i16", "int8": "i8",
    "uint8": "u8", "bool": "bool",
}


def _dtype_name(d: Any) -> str:
    name = str(d)
    for prefix in ("torch.", "<class 'numpy.", "numpy."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    name = name.rstrip("'>")
    return _DTYPE_NAMES.get(name, name)


def _tensor_spec(t: TensorSpec, what: str) -> tuple:
    if isinstance(t, Mapping):
        name, dtype, shape = t["name"], t.get("dtype", "f32"), t["shape"]
    else:
        if len(t) != 3:
            raise _jitembed.InvalidArgumentError(f"jitembed.Model: {what} {t!r} is not (name, dtype, shape)")
        name, dtype, shape = t
    return (str(name), _dtype_name(dtype), [int(d) for d in shape])


def _tensor_specs(ts: Union[TensorSpec, Iterable[TensorSpec]], what: str) -> list:
    if isinstance(ts, Mapping) or (isinstance(ts, (tuple, list)) and len(ts) == 3 and isinstance(ts[0], str)
                                   and not isinstance(ts[1], (tuple, list, Mapping))):
        return [_tensor_spec(ts, what)]
    return [_tensor_spec(t, what) for t in ts]


def _param(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def _module_of(fn: Any) -> Any:
    """The torch.nn.Module whose weights fn computes with: fn itself, or the module of a bound method."""
    try:
        import torch
    except ImportError:
        return None
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) else None


def state_dict_hash(module: Any) -> str:
    """A hash of a module's state_dict (names, dtypes, shapes and bytes of every tensor; other entries by
    repr), taken once: new weights give a new hash, hence new cache keys. 32 hex digits (BLAKE2b-128)."""
    import torch

    h = hashlib.blake2b(digest_size=16)
    for name, value in sorted(module.state_dict().items()):
        h.update(name.encode() + b"\0")
        if isinstance(value, torch.Tensor):
            t = value.detach().to("cpu").contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            if t.numel():
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


class Model(_jitembed._Model):
    """A Python encoder for jitembed.Server (and jitembed.ray.build_app).

    fn: called with one batch: a torch.Tensor [n, *input shape] (numpy with tensor_type="numpy") on
        ``device``; returns the outputs as torch tensors or numpy arrays [n, *output shape] in the declared
        dtypes: one (one output), a tuple in ``outputs`` order, or a dict by name. A torch.nn.Module is
        called as is (wrap it in torch.inference_mode() yourself if it needs more than its forward).
    name: the served model name; version: the served version label (URLs, metadata; default "1").
    inputs: the one preprocessed input as (name, dtype, shape) or {"name", "dtype", "shape"}: image
        f32 [3, H, W], video f32 [3, T, H, W], text i64 [2, L] (ids and attention mask).
    outputs: (name, dtype, shape) per output, the shape of one item (-1: any extent).
    preprocess: the model repository's preprocessing parameters (docs/models.md): modality, image_resize,
        image_normalize, image_mean, image_std, image_decode, video_frames, video_frame_stride,
        sentencepiece_model (a path; relative ones against base_dir), text_max_length, text_truncation, ...;
        or a Python callable from one raw input (bytes: a JPEG, a video container; str for text models) to the
        input item (numpy or torch, the declared input dtype and shape), run on the server's preprocessing
        threads (the GIL held for the call only). It then needs ``preprocess_name`` and ``preprocess_version``,
        its identity in the preprocess key (cache keys change with it: bump the version when the code changes),
        and ``modality`` ("image", "video" or "text": which field of a record it gets; default: "text" for an
        integer input, "video" for a rank-4 input, else "image"). Served through Ray, a Model is built by a
        factory inside each replica (jitembed.ray.build_app), so the callable travels in the factory's pickle.
        A callable that raises fails that row with InvalidArgumentError (HTTP 400) carrying the exception's
        type and message; an output of another dtype is DtypeMismatchError, of another shape
        InvalidArgumentError, both naming the expected input.
    instances: calls that may run at once (runner threads; torch releases the GIL inside its ops).
    device: "cpu" or "cuda[:N]": where the batch is put before the call.
    module: the torch.nn.Module whose state_dict() hash joins the fingerprint (default: fn when it is a
        module, or the module of a bound method); hash_weights=False leaves the weights out of it.
    """

    def __init__(self, fn: Callable[[Any], Any], name: str, version: str = "1", inputs: Any = None, outputs: Any = None,
                 max_batch_size: int = 32, preprocess: Union[None, Mapping[str, Any], Callable[[Any], Any]] = None, *,
                 instances: int = 1, device: str = "cpu", module: Any = None, hash_weights: bool = True,
                 max_queue_delay_us: int = 1000, preferred_batch_sizes: Sequence[int] = (), base_dir: Optional[str] = None,
                 tensor_type: Optional[str] = None, preprocess_name: Optional[str] = None,
                 preprocess_version: Optional[str] = None, modality: Optional[str] = None) -> None:
        if inputs is None or outputs is None:
            raise _jitembed.InvalidArgumentError(f"jitembed.Model '{name}': inputs and outputs must be declared")
        if tensor_type is None:
            try:
                import torch  # noqa: F401
                tensor_type = "torch"
            except ImportError:
                tensor_type = "numpy"
        if tensor_type not in ("torch", "numpy"):
            raise _jitembed.InvalidArgumentError(f"jitembed.Model '{name}': tensor_type {tensor_type!r} is not torch or numpy")
        module = module if module is not None else _module_of(fn)
        weights = state_dict_hash(module) if (hash_weights and module is not None) else ""
        #: the user's version and the weights' hash: the model fingerprint of every cache key
        fingerprint = f"python:{version}" + (f":sd-{weights}" if weights else "")
        in_specs = _tensor_specs(inputs, "input")
        preprocess_fn = None
        if callable(preprocess) and not isinstance(preprocess, Mapping):
            preprocess_fn, preprocess = preprocess, None
            if not preprocess_name or not preprocess_version:
                raise _jitembed.InvalidArgumentError(
                    f"jitembed.Model '{name}': a preprocess callable needs preprocess_name and preprocess_version "
                    "(its identity in the cache keys)")
            if modality is None:
                in_dtype, in_shape = in_specs[0][1], in_specs[0][2]
                modality = ("text" if in_dtype in ("i64", "i32", "i16", "i8", "u8") and len(in_shape) <= 2
                            else "video" if len(in_shape) == 4 else "image")
        elif preprocess_name is not None or preprocess_version is not None or modality is not None:
            raise _jitembed.InvalidArgumentError(
                f"jitembed.Model '{name}': preprocess_name, preprocess_version and modality go with a preprocess "
                "callable (with parameters, give 'modality' among them)")
        params = {str(k): _param(v) for k, v in (preprocess or {}).items()}
        super().__init__(fn, name, str(version), fingerprint, in_specs,
                         _tensor_specs(outputs, "output"), int(max_batch_size), params,
                         os.path.abspath(base_dir or os.getcwd()), str(device), tensor_type == "torch", int(instances),
                         int(max_queue_delay_us), [int(b) for b in preferred_batch_sizes], preprocess_fn,
                         str(preprocess_name or ""), str(preprocess_version or ""), str(modality or ""))
        self.fn = fn
        self.preprocess_fn = preprocess_fn
        self.weights_hash = weights

    def __repr__(self) -> str:
        return (f"jitembed.Model(name={self.name!r}, version={self.version!r}, modality={self.modality!r}, "
                f"fingerprint={self.fingerprint!r})")
