"""jitembed.torch: the prefetching JIT loader as PyTorch expects it.

``Loader`` is a ``torch.utils.data.IterableDataset`` around ``jitembed.Loader``: each ``for`` pass is one epoch
of this rank's share of the data set, each item one training step ``{field: Tensor[B, ...], "ids",
"indices", "failed", "epoch", "step"}``. Field tensors share the memory of the C++ collate (DLPack, no copy);
``pin_memory`` adds one copy into pinned host memory, ``device`` copies to an accelerator one step ahead on a
side stream. Ranks come from ``torch.distributed`` (or torchrun's environment); every rank runs the same
number of steps. ``state_dict`` / ``load_state_dict`` follow torchdata's ``StatefulDataLoader`` protocol.

Only this module imports torch: ``import jitembed`` works without it. Usage: docs/python.md (jitembed.torch).
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import IterableDataset

import jitembed

__all__ = ["Loader", "to_torch", "dist_rank", "as_is"]

#: the keys of a step that are not embedding fields
STEP_KEYS = ("ids", "indices", "failed", "epoch", "step", "dtypes")

_STATE_VERSION = 1


def dist_rank(rank: Optional[int] = None, world_size: Optional[int] = None) -> Tuple[int, int]:
    """(rank, world_size): each explicit argument wins; else ``torch.distributed`` when it is initialized, else
    torchrun's ``RANK`` / ``WORLD_SIZE`` environment variables, else 0 / 1."""
    r = w = None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        r, w = dist.get_rank(), dist.get_world_size()
    else:
        if "RANK" in os.environ:
            r = int(os.environ["RANK"])
        if "WORLD_SIZE" in os.environ:
            w = int(os.environ["WORLD_SIZE"])
    r = rank if rank is not None else (r if r is not None else 0)
    w = world_size if world_size is not None else (w if w is not None else 1)
    if w < 1 or not 0 <= r < w:
        raise ValueError(f"jitembed.torch: rank {r} is not in [0, world_size {w})")
    return r, w


def _tensor(a: Any, bf16: bool = False) -> Any:
    """A numpy array as a tensor sharing its memory (DLPack); None stays None. bf16: the array holds bf16 bits
    as uint16 (numpy has no bfloat16): the tensor is viewed as torch.bfloat16 (no copy)."""
    if a is None:
        return None
    t = torch.from_dlpack(a)
    return t.view(torch.bfloat16) if bf16 and t.dtype == torch.uint16 else t


def to_torch(step: Dict[str, Any], item_shapes: Optional[Dict[str, Tuple[torch.Size, torch.dtype]]] = None) -> Dict[str, Any]:
    """A ``jitembed.Loader`` step with tensors instead of numpy arrays, without copies (``torch.from_dlpack``):
    a stacked field becomes a ``Tensor[B, ...]`` sharing the collate's buffer, a per-sample list a list of
    tensors (None kept), ``indices`` an int64 tensor. A step without a successful sample already has typed
    ``[0, ...]`` arrays (from the model's metadata); where the client could not tell, ``item_shapes``
    ({field: (item shape, dtype)}, updated from stacked fields) turns the empty list into an empty
    ``Tensor[0, ...]`` of the field's last seen item shape."""
    out: Dict[str, Any] = {}
    dtypes = step.get("dtypes", {})
    for name, v in step.items():
        if name in STEP_KEYS:
            continue
        bf16 = dtypes.get(name) == "bf16"
        if isinstance(v, np.ndarray):
            t = _tensor(v, bf16)
            if item_shapes is not None:
                item_shapes[name] = (t.shape[1:], t.dtype)
            out[name] = t
        elif not v and item_shapes is not None and name in item_shapes:
            shape, dtype = item_shapes[name]
            out[name] = torch.empty((0, *shape), dtype=dtype)
        else:
            out[name] = [_tensor(a, bf16) for a in v]
    out["ids"] = step["ids"]
    out["indices"] = torch.from_dlpack(step["indices"])
    out["failed"] = step["failed"]
    out["epoch"] = step["epoch"]
    out["step"] = step["step"]
    return out


def as_is(step: Any) -> Any:
    """A ``collate_fn`` for ``DataLoader(loader, batch_size=None, collate_fn=as_is)``: the step unchanged. The
    default (``default_convert``) walks every value of every step for numpy arrays it would convert, of which
    a step has none (~50-100 us a step)."""
    return step


def _accelerator_available() -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        return bool(acc.is_available())
    return torch.cuda.is_available()


def _map_fields(step: Dict[str, Any], fn) -> None:
    """Applies fn to every field tensor of a converted step, in place (lists element-wise, None kept)."""
    for name, v in step.items():
        if name in STEP_KEYS:
            continue
        if isinstance(v, torch.Tensor):
            step[name] = fn(v)
        else:
            step[name] = [None if t is None else fn(t) for t in v]


def _field_tensors(step: Dict[str, Any]) -> Iterator[torch.Tensor]:
    for name, v in step.items():
        if name in STEP_KEYS:
            continue
        if isinstance(v, torch.Tensor):
            yield v
        else:
            yield from (t for t in v if t is not None)


class _End:
    """The end of an epoch, fetched ahead (device prefetch)."""


_END = _End()


class Loader(IterableDataset):
    """The JIT loader as a ``torch.utils.data.IterableDataset``: each ``for`` pass (or ``iter()``) is one epoch of
    this rank's share of ``data``, in steps of ``batch_size`` samples:

    ``{field: Tensor[B, ...], "ids": [str], "indices": int64 Tensor[B], "failed": [{"id", "index", "errc",
    "message"}], "epoch": int, "step": int}``

    where B counts the samples that succeeded: a failed sample's row is left out (never zero-filled) and the
    sample is listed in ``failed``. A field whose rows cannot be stacked (a sample without the field's kind,
    varying shapes) is a list of per-sample tensors (None for a sample without it). bf16 embeddings are
    torch.bfloat16 tensors (views of the step's uint16 numpy buffers, no copy).

    Memory: field tensors share the C++ collate's buffer (DLPack, no copy) and are the step's own (nothing else
    refers to it). ``pin_memory=True`` copies them once into pinned host memory (when no accelerator is
    present it warns and does not pin, as ``torch.utils.data.DataLoader`` does). ``device`` (e.g. ``"cuda"``)
    copies fields to that device: on CUDA the next step's copies are issued on a side stream while the
    current step is used, and the consumer's current stream waits on the copy's event before a step is
    handed out; ``"cpu"`` is a no-op. ``indices`` stays on the host.

    Ranks: ``rank`` / ``world_size`` win; else ``torch.distributed`` when initialized, else torchrun's
    ``RANK`` / ``WORLD_SIZE``, else 0 / 1. Ranks see disjoint samples covering the epoch and every rank runs
    ``len(loader)`` steps (the C++ epoch plan: a short rank's last step is smaller, possibly empty; no
    sample is repeated or dropped). ``seed`` must be the same on every rank.

    Failed samples: a step whose samples failed for the service (no endpoint answered, a timeout, a model not
    served: any errc but bad input) make up at least ``max_failed_fraction`` of it (default 1.0: only a step
    where every sample failed so) raises the first one's error (``jitembed.UnavailableError``, ...) naming the
    endpoints, instead of handing out a step without rows; ``fail_fast=True`` raises on the first failed
    sample (bad input too) and first waits ``ready_timeout_s`` (default 5 s) for an endpoint ready for each
    model, so a loader whose servers are down raises at construction, in seconds. A bad-input sample (a
    corrupt JPEG) is otherwise listed in ``failed``. An empty field (a short rank's last step) is a
    ``Tensor[0, ...]`` of the model output's declared dtype and item shape.

    Everything else (``samples_per_request``, ``requests_in_flight``, ``workers``, ``max_buffered``,
    ``order``, ``cache``, ``cache_compression``, ``request_timeout_ms``, ``resubmits``, ``fail_fast``,
    ``max_failed_fraction``, ``ready_timeout_s``) goes to ``jitembed.Loader``. Use it in this process: alone,
    or in ``DataLoader(loader, batch_size=None, num_workers=0)`` (the loader prefetches in its own C++ threads;
    iterating it in a DataLoader worker process, num_workers > 0, raises RuntimeError). One pass at a time.
    """

    def __init__(self, data: Any, client: "jitembed.Client", embeddings: Sequence[Any], *, batch_size: int = 32,
                 pin_memory: bool = False, device: Union[None, str, torch.device] = None, rank: Optional[int] = None,
                 world_size: Optional[int] = None, seed: int = 0, shuffle: bool = True, **loader_options: Any) -> None:
        super().__init__()
        for k, why in (("resume", "use load_state_dict()"), ("epoch", "use set_epoch()"), ("stack", "fields are always stacked")):
            if k in loader_options:
                raise TypeError(f"jitembed.torch.Loader: {k}= is not an option here ({why})")
        self.rank, self.world_size = dist_rank(rank, world_size)
        if not isinstance(data, jitembed.Dataset):
            data = jitembed.Dataset.open(os.fspath(data) if isinstance(data, (str, os.PathLike)) else [os.fspath(p) for p in data])
        self._data, self._client, self._embeddings = data, client, list(embeddings)
        self._options = dict(loader_options, batch_size=batch_size, rank=self.rank, world_size=self.world_size,
                             seed=seed, shuffle=shuffle)
        self.batch_size = batch_size
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not _accelerator_available():
            warnings.warn("jitembed.torch.Loader: pin_memory=True but no accelerator is available: tensors are not "
                          "pinned", UserWarning, stacklevel=2)
            self.pin_memory = False
        dev = None if device is None else torch.device(device)
        self.device: Optional[torch.device] = None if dev is None or dev.type == "cpu" else dev
        self._copy_stream = None
        if self.device is not None and self.device.type == "cuda":
            self._copy_stream = torch.cuda.Stream(device=self.device)
        # Fetch (and copy) one step ahead: on CUDA; the tests turn it on for host tensors to check the
        # bookkeeping (state_dict, a pass left early, set_epoch) without a GPU.
        self._lookahead = self._copy_stream is not None
        self._item_shapes: Dict[str, Tuple[torch.Size, torch.dtype]] = {}
        # A step (or the epoch's end) fetched ahead, its device copy in flight, and the loader's state from
        # before it was fetched: what state_dict() reports while it is pending (lookahead only).
        self._pending: Any = None
        self._pending_state: Optional[bytes] = None
        self._loader: Optional[jitembed.Loader] = None
        self._loader = jitembed.Loader(self._data, self._client, self._embeddings, **self._options)

    # --- the epoch -----------------------------------------------------------------------------------------
    def __len__(self) -> int:
        """Steps per epoch: the same on every rank."""
        return self._get().steps_per_epoch

    @property
    def samples_per_epoch(self) -> int:
        """This rank's share of the data set."""
        return self._get().samples_per_epoch

    @property
    def epoch(self) -> int:
        """The epoch the next step belongs to."""
        if isinstance(self._pending, dict):
            return self._pending["epoch"]
        return self._get().epoch

    def set_epoch(self, epoch: int) -> None:
        """Makes the next pass run epoch ``epoch`` (its own permutation of the data set, as
        ``DistributedSampler.set_epoch``). A loader already positioned in that epoch (at its start, or resumed
        or left mid-epoch) is kept, so ``set_epoch`` after ``load_state_dict`` continues the checkpoint; any
        other epoch restarts the loader there (its prefetched samples are dropped)."""
        if self._pending is _END:  # the last epoch's end was fetched already: the loader stands at the next one
            self._pending, self._pending_state = None, None
        if self.epoch == epoch:
            return
        self._restart(epoch=int(epoch))

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        if torch.utils.data.get_worker_info() is not None:
            # A DataLoader worker is a fork of this process: the copy of the loader there has none of its C++
            # threads (a client with local models then hangs) and every worker would deliver the whole epoch
            # again (num_workers=2: each sample twice). Forked workers never pickle it, so __getstate__ cannot
            # catch this: the worker's iter() is the first place that can.
            raise RuntimeError(
                "jitembed.torch.Loader cannot run in a DataLoader worker process (num_workers > 0): every worker "
                "would deliver the whole epoch again, and the loader's threads are not in the worker. Iterate it "
                "directly, or use DataLoader(loader, batch_size=None, num_workers=0): its own threads decode and "
                "prefetch")
        self._get()
        if self._lookahead:
            return self._iter_ahead()
        return self._iter_host()

    def _iter_host(self) -> Iterator[Dict[str, Any]]:
        loader = self._get()
        while True:
            try:
                raw = next(loader)
            except StopIteration:
                return
            step = self._convert(raw)
            if self.device is not None:
                _map_fields(step, lambda t: t.to(self.device, non_blocking=True))
            yield step

    def _fetch_ahead(self) -> Any:
        """The next step with its device copies issued on the side stream (and their event), or _END."""
        try:
            raw = next(self._get())
        except StopIteration:
            return _END
        step = self._convert(raw)
        event = None
        if self._copy_stream is not None:
            with torch.cuda.stream(self._copy_stream):
                _map_fields(step, lambda t: t.to(self.device, non_blocking=True))
                event = torch.cuda.Event()
                event.record(self._copy_stream)
        step["_event"] = event
        return step

    def _iter_ahead(self) -> Iterator[Dict[str, Any]]:
        # The step handed out and the one fetched ahead live in self._pending between yields, so a pass left
        # early (break) loses nothing: the next pass starts with the step fetched ahead.
        cur, self._pending, self._pending_state = self._pending, None, None
        if cur is None:
            cur = self._fetch_ahead()
        while cur is not _END:
            # One step ahead: the next step's copies run on the side stream while this step is used.
            self._pending_state = self._get().state()
            self._pending = self._fetch_ahead()
            event = cur.pop("_event")
            if event is not None:
                consumer = torch.cuda.current_stream(self.device)
                consumer.wait_event(event)
                for t in _field_tensors(cur):
                    t.record_stream(consumer)  # made on the side stream, used (and freed) on the consumer's
            yield cur
            cur, self._pending, self._pending_state = self._pending, None, None

    def _convert(self, raw: Dict[str, Any]) -> Dict[str, Any]:
        step = to_torch(raw, self._item_shapes)
        if self.pin_memory:
            _map_fields(step, lambda t: t.pin_memory())
        return step

    # --- checkpoints (torchdata's StatefulDataLoader protocol) -----------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """What has been handed out: ``load_state_dict`` on a loader over the same data set, rank, world size,
        seed, shuffle and batch size delivers exactly the rest of the epoch (each remaining sample once), then
        the following epochs. A plain dict of a bytes object and ints (torch.save-able)."""
        st = self._pending_state if self._pending is not None else self._get().state()
        return {"version": _STATE_VERSION, "loader": st, "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restarts the loader from a ``state_dict()``: the next pass continues its epoch. Raises
        ``jitembed.InvalidArgumentError`` (a ValueError) when it was taken with another rank, world size, seed,
        shuffle, batch size or data set size."""
        if state_dict.get("version") != _STATE_VERSION or not isinstance(state_dict.get("loader"), (bytes, bytearray)):
            raise ValueError("jitembed.torch.Loader.load_state_dict: not a state_dict() of this loader")
        self._restart(resume=bytes(state_dict["loader"]))

    def _restart(self, **extra: Any) -> None:
        old, self._loader = self._loader, None
        self._pending, self._pending_state = None, None
        if old is not None:
            old.close()
        self._loader = jitembed.Loader(self._data, self._client, self._embeddings, **self._options, **extra)

    # --- the rest --------------------------------------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        """``jitembed.Loader.stats()``: waits, cache hits, per-epoch throughput."""
        return self._get().stats()

    def close(self) -> None:
        """Stops prefetching and cancels what is in flight (idempotent); iterating then raises CancelledError."""
        self._pending, self._pending_state = None, None
        if self._loader is not None:
            self._loader.close()

    def _get(self) -> "jitembed.Loader":
        if self._loader is None:
            raise jitembed.CancelledError("jitembed.torch.Loader: closed")
        return self._loader

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> Dict[str, Any]:
        raise TypeError("jitembed.torch.Loader cannot be pickled: it prefetches in threads of this process "
                        "(use DataLoader(loader, batch_size=None, num_workers=0))")

    def __repr__(self) -> str:
        try:
            steps = f"{len(self)} steps per epoch"
        except jitembed.CancelledError:
            steps = "closed"
        return (f"<jitembed.torch.Loader rank {self.rank}/{self.world_size}, batch {self.batch_size}, {steps}, "
                f"device {self.device or 'cpu'}{', pinned' if self.pin_memory else ''}>")
