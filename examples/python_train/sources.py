"""Where a rank's batches come from. Both sources follow jitembed's epoch plan (client/epoch_plan.hpp: the
permutation from (seed, epoch), rank r's strided share, the same step sizes on every rank), so both modes see the
same batches in the same order.

  jit     jitembed.torch.Loader (train.py's make_source): the embeddings come from the service, prefetched (and
          cached with a cache); state_dict() / load_state_dict();
  inline  InlineSource (here; state() / resume=): the same steps, each batch's embeddings computed in the call by the encoders in this
          process (the baseline: the training step waits for them)."""
import json

import numpy as np
import torch

from data import MASK, splitmix64  # core/splitmix64.hpp


def epoch_permutation(n, seed, epoch, shuffle=True):
    """loader::epoch_permutation: Fisher-Yates with splitmix64 and Lemire's multiply-shift draw."""
    p = list(range(n))
    if not shuffle or n < 2:
        return p
    state = splitmix64((seed ^ splitmix64((epoch ^ 0x6A69746C6F616472) & MASK)) & MASK)
    for i in range(n - 1, 0, -1):
        state = splitmix64(state)
        j = (state * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


class EpochPlan:
    """loader::epoch_plan: rank r's j-th sample is perm[j * W + r]; every rank runs ceil(ceil(N/W) / B) steps."""

    def __init__(self, n, world, rank, batch, seed, epoch, shuffle=True):
        self.n, self.world, self.rank, self.batch = n, world, rank, batch
        self.perm = epoch_permutation(n, seed, epoch, shuffle)

    def count(self):
        return (self.n - self.rank + self.world - 1) // self.world if self.n > self.rank else 0

    def steps(self):
        return ((self.n + self.world - 1) // self.world + self.batch - 1) // self.batch

    def step_indices(self, k):
        lo = k * self.batch
        hi = min(lo + self.batch, self.count())
        return [self.perm[j * self.world + self.rank] for j in range(lo, hi)]


def raw_inputs(sample, kinds):
    """{kind: value} of a dataset sample: its first field of each kind ('image': the encoded bytes, 'text': the
    caption str), as the loader picks the field an embedding of that kind reads."""
    names = {}
    for f in sample.fields():
        names.setdefault(f["kind"], f["name"])
    missing = [k for k in kinds if k not in names]
    if missing:
        raise KeyError(f"sample {sample.id} has no {' / '.join(missing)} field")
    d = sample.to_dict()
    return {k: d[names[k]] for k in kinds}


class InlineSource:
    """The baseline: the loader's plan replayed here, each step's embeddings computed in next() by `encoders`
    ({name: callable(list of raw field values) -> tensor [n, ...]}, reading the sample's first field of kind
    `kinds[name]`). Iterating it
    runs the rest of the current epoch, like jitembed.Loader; state() / resume= as the loader's (a JSON
    (epoch, step) here)."""

    def __init__(self, dataset, encoders, kinds, batch_size, rank=0, world_size=1, seed=0, shuffle=True, resume=None):
        self.ds, self.encoders, self.kinds = dataset, encoders, kinds
        self.batch, self.rank, self.world, self.seed, self.shuffle = batch_size, rank, world_size, seed, shuffle
        self.epoch, self.step = 0, 0
        if resume is not None:
            st = json.loads(bytes(resume).decode())
            self.epoch, self.step = st["epoch"], st["step"]
        self.plan = EpochPlan(len(dataset), world_size, rank, batch_size, seed, self.epoch, shuffle)
        self.ended = False

    def state(self):
        return json.dumps({"epoch": self.epoch, "step": self.step}).encode()

    def stats(self):
        return {}

    def __iter__(self):
        return self

    def __next__(self):
        if self.step == self.plan.steps():
            self.epoch += 1
            self.step = 0
            self.plan = EpochPlan(len(self.ds), self.world, self.rank, self.batch, self.seed, self.epoch, self.shuffle)
            raise StopIteration
        idx = self.plan.step_indices(self.step)
        records = [self.ds[i] for i in idx]
        out = {"ids": [r.id for r in records], "indices": np.asarray(idx, dtype=np.int64), "failed": [],
               "epoch": self.epoch, "step": self.step}
        raw = [raw_inputs(r, set(self.kinds.values())) for r in records]
        for name, enc in self.encoders.items():
            out[name] = enc([d[self.kinds[name]] for d in raw]) if raw else None
        self.step += 1
        return out

    def close(self):
        pass


def to_torch(step, names):
    """A step's numpy fields as torch tensors (no copy: the stacked arrays are fresh and writable): the inline
    source's; jitembed.torch.Loader's steps hold tensors already and pass through."""
    out = dict(step)
    for n in names:
        v = step.get(n)
        if v is not None and not isinstance(v, torch.Tensor):
            out[n] = torch.from_numpy(np.asarray(v))
    return out
