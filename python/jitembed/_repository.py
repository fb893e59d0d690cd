"""The model repository's torch backends in Python: jitembed.Server(model_repository=DIR) reads each
config.pbtxt in C++ (the same parser, version policy and /v2/repository routes as jitembed-server) and hands
the TorchScript ("pytorch_libtorch") and AOTInductor ("torch_aoti") versions to open_model, which loads the
file with this process's torch and serves it as a jitembed.Model with the config's preprocessing. So a Ray
replica (jitembed.ray.build_app(model_repository=...)) loads the weights on its own node and device.

The parameters are jitembed-server's torch backend's (docs/models.md): the preprocessing ones, ``version``
and ``batch_transform`` (none only: u8 [H, W, 3] inputs need jitembed-server's LibTorch backend).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple

from ._model import Model


#: set by set_default_device: the device every torch model of a repository is put on (a Ray replica's GPU)
_default_device = None


def set_default_device(device) -> None:
    """Puts every repository torch model loaded from now on onto `device` ("cpu", "cuda:N"; None: the config's
    instance_group). A Ray replica sets its own GPU here."""
    global _default_device
    _default_device = device


def _position(name: str) -> int:
    """'OUTPUT__3' -> 3 (Triton's TorchScript naming: the position in forward's outputs); -1: no suffix."""
    head, sep, tail = name.rpartition("__")
    return int(tail) if sep and tail.isdigit() and len(tail) <= 6 else -1


def _ordered_outputs(cfg: Dict[str, Any]) -> List[Tuple[str, str, List[int]]]:
    outs = [(o[0], o[2], list(o[3])) for o in cfg["outputs"]]
    for o in cfg["outputs"]:
        if o[2] is None:
            raise ValueError(f"output '{o[0]}' data_type {o[1]} has no tensor type (a torch model returns tensors)")
    positions = [_position(name) for name, _, _ in outs]
    if all(p >= 0 for p in positions):
        outs = [o for _, o in sorted(zip(positions, outs), key=lambda t: t[0])]
    return outs


def open_model(cfg: Dict[str, Any]) -> Model:
    """One model version from the repository's backend_config (a dict, see python/src/server.cpp)."""
    import torch

    file = cfg["config_file"]
    kind = cfg["kind"]
    params = dict(cfg["parameters"])
    params.pop("version", None)
    if params.pop("batch_transform", "none") != "none":
        raise ValueError(f"{file}: parameters 'batch_transform': u8 [H, W, 3] inputs are served by jitembed-server's "
                         "LibTorch backend, not by the Python one")
    if len(cfg["inputs"]) != 1:
        raise ValueError(f"{file}: the {kind} backend takes exactly one input, the config declares {len(cfg['inputs'])}")
    if cfg["max_batch_size"] < 1:
        raise ValueError(f"{file}: max_batch_size 0 is not supported: set max_batch_size >= 1")
    name, _, in_type, in_dims = cfg["inputs"][0]
    if in_type is None:
        raise ValueError(f"{file}: input '{name}' has no tensor type")
    outputs = _ordered_outputs(cfg)
    device = _default_device or cfg["device"]
    default_file = "model.pt2" if kind == "torch_aoti" else "model.pt"
    path = os.path.join(cfg["version_dir"], cfg["model_filename"] or default_file)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model file {path}")
    module = None
    if kind == "torch_aoti":
        runner = torch._inductor.aoti_load_package(path)
        forward = runner
    else:
        module = torch.jit.load(path, map_location=device)
        module.eval()
        forward = module
    floating = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64}
    dtypes = [floating.get(t) for _, t, _ in outputs]  # None: not floating, returned as forward made it

    def run(x):
        with torch.inference_mode():
            out = forward(x)
        if isinstance(out, dict):
            out = tuple(out[n] for n, _, _ in outputs)
        if not isinstance(out, (tuple, list)):
            out = (out,)
        # floating outputs in the declared dtype, as jitembed-server's torch backend casts them
        return tuple(o.to(d) if d is not None and o.is_floating_point() and o.dtype != d else o for o, d in zip(out, dtypes))

    model_dir = os.path.dirname(os.path.abspath(cfg["version_dir"]))
    return Model(run, cfg["name"], version=cfg["parameters"].get("version", ""), inputs=(name, in_type, in_dims),
                 outputs=outputs, max_batch_size=cfg["max_batch_size"], preprocess=params, device=device,
                 module=module, base_dir=model_dir, tensor_type="torch")


__all__ = ["open_model"]
