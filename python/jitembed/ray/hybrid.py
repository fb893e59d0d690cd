"""Hybrid training on Ray: examples/hybrid_parallel's vision-language model (a sequence-parallel vision encoder
feeding a tensor-parallel language model) with one Ray actor group per module, each actor running its rank as a
child process of the ``hybrid_parallel`` program (``--events``), restarted from the last checkpoint when an
actor dies.

    import ray
    from jitembed.ray.hybrid import HybridConfig, train
    ray.init(address=...)
    summary = train(HybridConfig.from_dict({"world": 4, "encoder": {"ranks": [0, 1]}, "llm": {"ranks": [2, 3]},
                                            "steps": 20, "checkpoint_dir": "/tmp/ck", "checkpoint_every": 5,
                                            "max_restarts": 1}))

    python -m jitembed.ray.hybrid --config run.json [--address 127.0.0.1:6379]   # no address: a loopback cluster

Ray places and supervises the ranks; the ranks talk to each other directly (Gloo over TCP, tcp_store
rendezvous hosted by rank 0's process), never through Ray's object store. docs/parallel.md "On Ray".
Importing this module imports no Ray: only train() and main() do.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

MODULES = ("encoder", "llm")  # the model's modules, in the order the binary names them (--encoder-ranks, --llm-ranks)
PLACEMENTS = ("collocated", "disjoint")
SCHEDULES = ("sequential", "1f1b")
BINARY_ENV = "JITEMBED_HYBRID_BIN"
# The model (examples/hybrid_parallel/model.hpp) has 4 attention heads in each module: Ulysses splits the
# encoder's heads over its group and Megatron the LM's, so a group's size must divide 4.
_MODEL_HEADS = 4


class HybridConfigError(ValueError):
    """A configuration that cannot run (raised before any actor starts)."""


class HybridRunError(RuntimeError):
    """The run failed: an actor or rank died with no restart left, or a bounded wait ran out."""


@dataclasses.dataclass
class ModuleGroup:
    """One module's actor group: the world ranks it holds (one actor each) and each actor's Ray resources."""

    ranks: List[int]
    num_cpus: float = 1.0
    num_gpus: float = 0.0  # fractional allowed (below 1), as Ray allows


def _default_group(ranks: List[int]) -> Callable[[], ModuleGroup]:
    return lambda: ModuleGroup(list(ranks))


@dataclasses.dataclass
class HybridConfig:
    world: int = 4
    encoder: ModuleGroup = dataclasses.field(default_factory=_default_group([0, 1]))
    llm: ModuleGroup = dataclasses.field(default_factory=_default_group([2, 3]))
    placement: str = "disjoint"  # disjoint: a placement group per module; collocated: one shared by both
    batch: int = 2
    microbatches: int = 1
    schedule: str = "sequential"
    in_flight: int = 2  # 1f1b: encoder microbatches in flight
    steps: int = 20
    lr: float = 0.01
    checkpoint_dir: Optional[str] = None
    checkpoint_every: int = 0
    resume: bool = False  # the first attempt too starts from the latest complete checkpoint
    max_restarts: int = 0
    timeout_s: float = 300.0  # one attempt's training, from the ranks' start to the last rank's exit
    start_timeout_s: float = 60.0  # placement groups ready; actors ready; rank 0's store address
    binary: Optional[str] = None  # hybrid_parallel; default: $JITEMBED_HYBRID_BIN
    pause_at_step: int = 0  # (tests) first attempt: every rank stops itself (SIGSTOP) once it has reported this step

    # --- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "HybridConfig":
        """From a plain dict (e.g. parsed JSON); modules as {"ranks": [...], "num_cpus": c, "num_gpus": g}."""
        if not isinstance(d, dict):
            raise HybridConfigError(f"hybrid config: expected an object, got {type(d).__name__}")
        _refuse_unknown_keys(d, cls, "")
        kw = dict(d)
        for m in MODULES:
            if m in kw:
                kw[m] = _group_of(m, kw[m])
        return cls(**kw)

    @classmethod
    def from_json(cls, path: str) -> "HybridConfig":
        try:
            with open(path) as f:
                d = json.load(f)
        except OSError as e:
            raise HybridConfigError(f"hybrid config: cannot read '{path}': {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise HybridConfigError(f"hybrid config: '{path}' is not JSON: {e}") from e
        return cls.from_dict(d)

    @classmethod
    def from_args(cls, argv: Optional[Sequence[str]] = None) -> "HybridConfig":
        """--config FILE (optional) then the flags given override its keys (see add_arguments)."""
        return cls.from_namespace(_parser().parse_args(argv))

    @classmethod
    def from_namespace(cls, a: argparse.Namespace) -> "HybridConfig":
        d: Dict[str, Any] = {}
        if a.config:
            d = dataclasses.asdict(cls.from_json(a.config))
        for key in ("world", "placement", "batch", "microbatches", "schedule", "in_flight", "steps", "lr",
                    "checkpoint_dir", "checkpoint_every", "max_restarts", "timeout_s", "binary"):
            v = getattr(a, key)
            if v is not None:
                d[key] = v
        if a.resume:
            d["resume"] = True
        for m in MODULES:
            g = dict(d.get(m) or dataclasses.asdict(getattr(cls(), m)))
            for key, arg in (("ranks", f"{m}_ranks"), ("num_cpus", f"{m}_cpus"), ("num_gpus", f"{m}_gpus")):
                v = getattr(a, arg)
                if v is not None:
                    g[key] = v
            d[m] = g
        return cls.from_dict(d)

    def groups(self) -> Dict[str, ModuleGroup]:
        return {m: getattr(self, m) for m in MODULES}

    def binary_path(self) -> str:
        return self.binary or os.environ.get(BINARY_ENV, "")

    # --- checks that need no Ray ----------------------------------------------------------------------------

    def validate(self) -> "HybridConfig":
        """Raises HybridConfigError naming the first problem; returns self."""

        def bad(msg: str):
            raise HybridConfigError("hybrid config: " + msg)

        if not isinstance(self.world, int) or not 1 <= self.world <= 16:
            bad(f"world {self.world!r} must be an integer in 1..16")
        owner: Dict[int, str] = {}
        for m, g in self.groups().items():
            if not g.ranks:
                bad(f"the {m} group has no ranks")
            for r in g.ranks:
                if not isinstance(r, int) or not 0 <= r < self.world:
                    bad(f"{m} rank {r!r} is outside the world (0..{self.world - 1})")
                if r in owner:
                    if owner[r] == m:
                        bad(f"rank {r} appears twice in the {m} group")
                    bad(f"rank {r} is in both the {owner[r]} and the {m} group (each rank is one actor of one group)")
                owner[r] = m
            if _MODEL_HEADS % len(g.ranks):
                bad(f"the {m} group has {len(g.ranks)} ranks: the model's {_MODEL_HEADS} attention heads need a group "
                    f"size that divides {_MODEL_HEADS} (1, 2 or 4)")
            for key in ("num_cpus", "num_gpus"):
                v = getattr(g, key)
                if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or math.isnan(v):
                    bad(f"{m} {key} {v!r} must be a number >= 0")
            if g.num_gpus > 1 and g.num_gpus != int(g.num_gpus):
                bad(f"{m} num_gpus {g.num_gpus}: a fraction of a GPU must be below 1 (Ray's rule)")
            if g.num_cpus == 0 and g.num_gpus == 0:
                bad(f"{m} asks for no resources (num_cpus and num_gpus 0): a placement group bundle cannot be empty")
        missing = [r for r in range(self.world) if r not in owner]
        if missing:
            bad(f"rank {missing[0]} is in no group (every rank of the world is an actor of one module's group)")
        if self.placement not in PLACEMENTS:
            bad(f"placement '{self.placement}' is not one of {', '.join(PLACEMENTS)}")
        if self.schedule not in SCHEDULES:
            bad(f"schedule '{self.schedule}' is not one of {', '.join(SCHEDULES)}")
        for key, lo, hi in (("batch", 1, 64), ("microbatches", 1, 64), ("steps", 1, 10000), ("checkpoint_every", 0, 10000),
                            ("max_restarts", 0, 100), ("pause_at_step", 0, 10000)):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                bad(f"{key} {v!r} must be an integer in {lo}..{hi}")
        if self.microbatches > self.batch:
            bad(f"microbatches {self.microbatches} > batch {self.batch}")
        if self.schedule == "1f1b" and (not isinstance(self.in_flight, int) or self.in_flight < 2):
            bad(f"in_flight {self.in_flight!r}: 1f1b needs at least 2 microbatches in flight")
        if not isinstance(self.lr, (int, float)) or not self.lr > 0:
            bad(f"lr {self.lr!r} must be > 0")
        for key in ("timeout_s", "start_timeout_s"):
            v = getattr(self, key)
            if not isinstance(v, (int, float)) or not 0 < v <= 86400:
                bad(f"{key} {v!r} must be in (0, 86400] seconds")
        if (self.max_restarts > 0 or self.checkpoint_every > 0 or self.resume) and not self.checkpoint_dir:
            bad("max_restarts, checkpoint_every and resume need checkpoint_dir")
        exe = self.binary_path()
        if not exe or not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            bad(f"binary '{exe}' is not an executable file (set binary, --binary or ${BINARY_ENV} to hybrid_parallel)")
        return self

    # --- what the actors are and need ---------------------------------------------------------------------

    def bundles(self) -> List[Dict[str, Any]]:
        """The placement groups: [{"name", "modules", "bundles": [{resource: amount}]}]; an actor's bundle is
        (placement group index, bundle index) from actor_slots()."""
        groups = self.groups()
        if self.placement == "disjoint":
            return [{"name": m, "modules": [m], "bundles": [_resources(g) for _ in g.ranks]} for m, g in groups.items()]
        # collocated: bundle i holds actor i of every group (e.g. one GPU shared by an encoder and an LM rank)
        n = max(len(g.ranks) for g in groups.values())
        bundles = []
        for i in range(n):
            b: Dict[str, float] = {}
            for g in groups.values():
                if i < len(g.ranks):
                    for k, v in _resources(g).items():
                        b[k] = b.get(k, 0) + v
            bundles.append(b)
        return [{"name": "collocated", "modules": list(groups), "bundles": bundles}]

    def actor_slots(self) -> Dict[int, Dict[str, Any]]:
        """rank -> {"module", "index" (in its group), "pg" (placement group index), "bundle"}."""
        out = {}
        for gi, (m, g) in enumerate(self.groups().items()):
            for i, r in enumerate(g.ranks):
                out[r] = {"module": m, "index": i, "pg": gi if self.placement == "disjoint" else 0, "bundle": i}
        return out

    def rank_args(self) -> List[str]:
        """The binary's arguments shared by every rank (the supervisor adds --host-store / --store, --resume)."""
        args = ["--events", "--world", str(self.world), "--encoder-ranks", ",".join(map(str, self.encoder.ranks)),
                "--llm-ranks", ",".join(map(str, self.llm.ranks)), "--batch", str(self.batch), "--microbatches",
                str(self.microbatches), "--schedule", self.schedule, "--in-flight", str(self.in_flight),
                "--steps", str(self.steps), "--lr", repr(float(self.lr))]
        if self.checkpoint_dir:
            args += ["--checkpoint-dir", os.path.abspath(self.checkpoint_dir), "--checkpoint-every",
                     str(self.checkpoint_every)]
        return args


def _refuse_unknown_keys(d: Dict[str, Any], cls: type, prefix: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise HybridConfigError(f"hybrid config: unknown key '{prefix}{unknown[0]}' (known: {', '.join(sorted(known))})")


def _group_of(name: str, v: Any) -> ModuleGroup:
    if isinstance(v, ModuleGroup):
        return v
    if not isinstance(v, dict):
        raise HybridConfigError(f"hybrid config: {name} must be an object with ranks, num_cpus, num_gpus")
    _refuse_unknown_keys(v, ModuleGroup, name + ".")
    if "ranks" not in v:
        raise HybridConfigError(f"hybrid config: {name} lacks ranks")
    ranks = v["ranks"]
    if isinstance(ranks, str):
        try:
            ranks = [int(x) for x in ranks.split(",") if x.strip()]
        except ValueError as e:
            raise HybridConfigError(f"hybrid config: {name}.ranks '{v['ranks']}' is not a comma-separated list") from e
    if not isinstance(ranks, list):
        raise HybridConfigError(f"hybrid config: {name}.ranks must be a list of world ranks")
    return ModuleGroup(ranks=list(ranks), **{k: v[k] for k in ("num_cpus", "num_gpus") if k in v})


def _resources(g: ModuleGroup) -> Dict[str, float]:
    return {k: v for k, v in (("CPU", g.num_cpus), ("GPU", g.num_gpus)) if v > 0}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jitembed.ray.hybrid",
                                description="Train examples/hybrid_parallel's model with one Ray actor group per module.")
    p.add_argument("--config", help="a JSON file of HybridConfig's keys; the flags below override it")
    p.add_argument("--world", type=int)
    for m in MODULES:
        p.add_argument(f"--{m}-ranks", type=lambda s: [int(x) for x in s.split(",") if x], help="comma-separated")
        p.add_argument(f"--{m}-cpus", type=float)
        p.add_argument(f"--{m}-gpus", type=float)
    p.add_argument("--placement", choices=PLACEMENTS)
    p.add_argument("--batch", type=int)
    p.add_argument("--microbatches", type=int)
    p.add_argument("--schedule", choices=SCHEDULES)
    p.add_argument("--in-flight", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--checkpoint-dir")
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--max-restarts", type=int)
    p.add_argument("--timeout", dest="timeout_s", type=float)
    p.add_argument("--binary", help=f"hybrid_parallel (default ${BINARY_ENV})")
    p.add_argument("--address", help="an existing Ray cluster (ray.init address); default: a loopback cluster")
    p.add_argument("--summary-json", help="also write the summary as JSON here")
    return p


# --- the actor -------------------------------------------------------------------------------------------

class RankActor:
    """One world rank: runs ``hybrid_parallel --events`` as its child and keeps the child's JSON lines.

    The child gets JITEMBED_LAUNCHER_PID = this process, so it asks the kernel for SIGKILL when this process
    goes (PR_SET_PDEATHSIG, local_rank_of_this_process) and exits at once if it already has: a rank never
    outlives its actor, however the actor dies. (The death signal follows the thread that started the child:
    Ray runs a sync actor's methods on one long-lived thread.)
    """

    def __init__(self, rank: int, world: int, module: str):
        self.rank, self.world, self.module = rank, world, module
        self._proc: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()
        self._events: List[Dict[str, Any]] = []
        self._stderr: collections.deque = collections.deque(maxlen=40)
        self._readers: List[threading.Thread] = []

    def ready(self) -> Dict[str, Any]:
        import ray

        return {"pid": os.getpid(), "node": ray.util.get_node_ip_address(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def start(self, binary: str, args: List[str]) -> int:
        env = dict(os.environ)
        env.update({"JITEMBED_RANK": str(self.rank), "JITEMBED_WORLD_SIZE": str(self.world),
                    "JITEMBED_LAUNCHER_PID": str(os.getpid())})
        self._proc = subprocess.Popen([binary, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, env=env, text=True, bufsize=1)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for t in self._readers:
            t.start()
        return self._proc.pid

    def _read_stdout(self):
        for line in self._proc.stdout:
            try:
                ev = json.loads(line)
            except json.JSONDecodeError:
                self._stderr.append(line.rstrip())
                continue
            with self._lock:
                self._events.append(ev)

    def _read_stderr(self):
        for line in self._proc.stderr:
            self._stderr.append(line.rstrip())

    def poll(self) -> Dict[str, Any]:
        """The events since the last poll and, once the child has exited (all its output read), its exit code
        (negative: the signal) and the end of its stderr."""
        code = self._proc.poll() if self._proc else None
        if code is not None:
            for t in self._readers:
                t.join(timeout=5)
        with self._lock:
            events, self._events = self._events, []
        return {"rank": self.rank, "events": events, "exit": code,
                "stderr": "\n".join(self._stderr) if code not in (None, 0) else ""}

    def stop(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)


# --- the driver ------------------------------------------------------------------------------------------

class Run:
    """What on_step callbacks see: the attempt's actors by world rank (ray.kill one to test a restart)."""

    def __init__(self, config: HybridConfig):
        self.config = config
        self.actors: Dict[int, Any] = {}
        self.restarts = 0
        self.attempt = 0


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def progress_line(p: Dict[str, Any], steps: int) -> str:
    pk = p["peak_bytes"]
    return (f"hybrid: step {p['step']:>{len(str(steps))}}/{steps} loss {p['loss']:.6f} | {p['step_s'] * 1e3:.1f} ms "
            f"{p['tokens_per_s']:.0f} tok/s | peak encoder {_fmt_bytes(pk['encoder'])} llm {_fmt_bytes(pk['llm'])} "
            f"boundary {_fmt_bytes(pk['boundary'])} | boundary {_fmt_bytes(p['boundary_bytes'])}"
            + (f" (attempt {p['attempt'] + 1})" if p["attempt"] else ""))


def _check_resources(config: HybridConfig) -> None:
    """Fails (HybridConfigError) when the cluster can never hold the placement groups: a bundle larger than
    every node, or more in total than the cluster has. (What other work holds now is not checked here: it
    comes and goes; the placement groups then wait, up to start_timeout_s.)"""
    import ray

    pgs = config.bundles()
    need: Dict[str, float] = {}
    for pg in pgs:
        for b in pg["bundles"]:
            for k, v in b.items():
                need[k] = need.get(k, 0) + v
    total = ray.cluster_resources()
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    for pg in pgs:
        for i, b in enumerate(pg["bundles"]):
            if not any(all(node.get(k, 0) + 1e-9 >= v for k, v in b.items()) for node in nodes):
                raise HybridConfigError(f"hybrid config: too few resources: bundle {i} of placement group '{pg['name']}' "
                                        f"needs {_res(b)}, more than any node has")
    if any(total.get(k, 0) + 1e-9 < v for k, v in need.items()):
        raise HybridConfigError(f"hybrid config: too few resources: the groups need {_res(need)}; the cluster has "
                                f"{_res({k: total.get(k, 0) for k in need})}")


def _res(d: Dict[str, float]) -> str:
    return ", ".join(f"{v:g} {k}" for k, v in sorted(d.items())) or "nothing"


class _Attempt:
    """One start of every rank: actors, rendezvous, polling until every rank is done or one fails."""

    def __init__(self, config: HybridConfig, run: Run, pgs: List[Any], resume: bool, pause_at: int,
                 on_progress: Callable[[Dict[str, Any]], None]):
        self.c, self.run, self.pgs, self.resume, self.pause_at = config, run, pgs, resume, pause_at
        self.on_progress = on_progress
        self.slots = config.actor_slots()
        self.steps: Dict[int, Dict[int, Dict[str, Any]]] = collections.defaultdict(dict)  # step -> rank -> event
        self.done: Dict[int, Dict[str, Any]] = {}
        self.exits: Dict[int, int] = {}
        self.store = ""
        self.reported: List[Dict[str, Any]] = []
        self.info: Dict[int, Dict[str, Any]] = {}

    def fail(self, why: str):
        raise HybridRunError(why)

    def run_ranks(self) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor_cls = ray.remote(max_restarts=0, max_task_retries=0)(RankActor)
        for r in range(self.c.world):
            s = self.slots[r]
            g = self.c.groups()[s["module"]]
            self.run.actors[r] = actor_cls.options(
                num_cpus=g.num_cpus, num_gpus=g.num_gpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pgs[s["pg"]], placement_group_bundle_index=s["bundle"]),
            ).remote(r, self.c.world, s["module"])
        ranks = sorted(self.run.actors)
        try:
            infos = ray.get([self.run.actors[r].ready.remote() for r in ranks], timeout=self.c.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.fail(f"hybrid: the actors were not ready within {self.c.start_timeout_s:g} s")
        except ray.exceptions.RayActorError as e:
            self.fail(f"hybrid: an actor died while starting: {e}")
        self.info = dict(zip(ranks, infos))
        exe, args = self.c.binary_path(), self.c.rank_args() + (["--resume"] if self.resume else [])
        if self.pause_at:
            args += ["--pause-at-step", str(self.pause_at)]
        deadline = time.monotonic() + self.c.start_timeout_s
        self._call(0, "start", exe, args + ["--host-store"])
        while not self.store:  # rank 0's child hosts the tcp_store; its first line is the address
            self._poll_all([0])
            if time.monotonic() > deadline:
                self.fail(f"hybrid: rank 0 did not report its store address within {self.c.start_timeout_s:g} s")
            time.sleep(0.02)
        for r in ranks[1:]:
            self._call(r, "start", exe, args + ["--store", self.store])
        deadline = time.monotonic() + self.c.timeout_s
        while len(self.exits) < len(ranks):
            self._poll_all([r for r in ranks if r not in self.exits])
            if time.monotonic() > deadline:
                self.fail(f"hybrid: the ranks did not finish within {self.c.timeout_s:g} s (timeout_s)")
            time.sleep(0.03)
        missing = [r for r in ranks if r not in self.done]
        if missing:
            self.fail(f"hybrid: rank {missing[0]} exited without its final report")

    def _call(self, rank: int, method: str, *args):
        import ray

        try:
            return ray.get(getattr(self.run.actors[rank], method).remote(*args), timeout=self.c.start_timeout_s)
        except ray.exceptions.RayActorError as e:
            self.fail(f"hybrid: the actor of rank {rank} ({self.slots[rank]['module']}) died: {type(e).__name__}")
        except ray.exceptions.GetTimeoutError:
            self.fail(f"hybrid: the actor of rank {rank} did not answer {method} within {self.c.start_timeout_s:g} s")

    def _poll_all(self, ranks: List[int]) -> None:
        import ray

        refs = {r: self.run.actors[r].poll.remote() for r in ranks}
        for r, ref in refs.items():
            try:
                got = ray.get(ref, timeout=self.c.start_timeout_s)
            except ray.exceptions.RayActorError as e:
                self.fail(f"hybrid: the actor of rank {r} ({self.slots[r]['module']}) died: {type(e).__name__}")
            except ray.exceptions.GetTimeoutError:
                self.fail(f"hybrid: the actor of rank {r} did not answer within {self.c.start_timeout_s:g} s")
            for ev in got["events"]:
                self._event(r, ev)
            if got["exit"] is not None:
                self.exits[r] = got["exit"]
                if got["exit"] != 0:
                    how = f"signal {-got['exit']}" if got["exit"] < 0 else f"exit code {got['exit']}"
                    tail = got["stderr"].strip().splitlines()[-3:]
                    self.fail(f"hybrid: rank {r} ({self.slots[r]['module']}) ended with {how}"
                              + (": " + " / ".join(tail) if tail else ""))

    def _event(self, rank: int, ev: Dict[str, Any]) -> None:
        kind = ev.get("event")
        if kind == "store":
            self.store = ev["address"]
        elif kind == "done":
            self.done[rank] = ev
        elif kind == "step":
            s = ev["step"]
            self.steps[s][rank] = ev
            if len(self.steps[s]) == self.c.world:  # every rank ran step s (and saved its checkpoint)
                self.on_progress(self._aggregate(s))

    def _aggregate(self, s: int) -> Dict[str, Any]:
        evs = self.steps[s]
        loss = next(e["loss"] for r, e in sorted(evs.items()) if e["loss"] is not None)
        step_s = max(e["seconds"] for e in evs.values())  # the step ends when its slowest rank does
        tokens = next(iter(evs.values()))["tokens"]
        peaks = {k: max(e["peak_bytes"][k] for e in evs.values()) for k in ("encoder", "llm", "boundary")}
        return {"step": s, "loss": loss, "step_s": step_s, "tokens": tokens, "tokens_per_s": tokens / step_s if step_s else 0.0,
                "peak_bytes": peaks, "boundary_bytes": sum(e["boundary_sent"] for e in evs.values()),
                "attempt": self.run.attempt}

    def stop(self) -> None:
        """Kills every rank of the attempt, then every actor. A live actor kills its rank itself first (done
        when the call returns); a rank whose actor is gone already got SIGKILL from the kernel."""
        import ray

        refs = [a.stop.remote() for a in self.run.actors.values()]
        if refs:
            ray.wait(refs, num_returns=len(refs), timeout=10)
        for a in self.run.actors.values():
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.run.actors = {}


def _placement_groups(config: HybridConfig) -> List[Any]:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pgs = [placement_group(pg["bundles"], strategy="PACK") for pg in config.bundles()]
    try:
        ray.get([pg.ready() for pg in pgs], timeout=config.start_timeout_s)
    except ray.exceptions.GetTimeoutError:
        for pg in pgs:
            remove_placement_group(pg)
        raise HybridRunError(f"hybrid: the placement groups were not ready within {config.start_timeout_s:g} s "
                             f"(available now: {_res(ray.available_resources())})") from None
    return pgs


def train(config: HybridConfig, on_step: Optional[Callable[[Dict[str, Any], Run], None]] = None,
          log: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Trains config.steps steps on the connected Ray cluster (ray.init first) and returns the summary.

    Checks the config and the cluster's resources before any actor starts (HybridConfigError); creates the
    placement groups, then per attempt one actor per rank, rank 0's store, the ranks; prints a progress line
    per step (log, default print) and calls on_step(progress, run) once every rank has finished that step.
    When an actor or its rank dies, every actor is killed and the ranks start again with --resume (the latest
    complete checkpoint), up to max_restarts; then HybridRunError."""
    import ray
    from ray.util.placement_group import remove_placement_group

    config.validate()
    if not ray.is_initialized():
        raise HybridConfigError("hybrid: not connected to Ray (ray.init first; jitembed.ray.local.local_cluster for one machine)")
    _check_resources(config)
    log = log or (lambda s: print(s, flush=True))
    run = Run(config)
    per_step: Dict[int, Dict[str, Any]] = {}
    step_runs = 0
    failures: List[str] = []
    t0 = time.monotonic()

    def on_progress(p: Dict[str, Any]) -> None:
        nonlocal step_runs
        step_runs += 1
        per_step[p["step"]] = p  # a step run again after a restart replaces its first run
        log(progress_line(p, config.steps))
        if on_step:
            on_step(p, run)

    pgs = _placement_groups(config)
    attempt: Optional[_Attempt] = None
    try:
        while True:
            attempt = _Attempt(config, run, pgs, resume=config.resume or run.restarts > 0,
                               pause_at=config.pause_at_step if run.restarts == 0 else 0, on_progress=on_progress)
            try:
                attempt.run_ranks()
                break
            except HybridRunError as e:
                failures.append(str(e))
                attempt.stop()
                if run.restarts >= config.max_restarts:
                    raise HybridRunError(f"{e} (restarts: {run.restarts} of {config.max_restarts})") from None
                run.restarts += 1
                run.attempt += 1
                log(f"{e}; restart {run.restarts} of {config.max_restarts}: every actor again, --resume")
        summary = _summary(config, run, attempt, per_step, step_runs, failures, time.monotonic() - t0)
        log(summary_line(summary))
        return summary
    finally:
        if attempt is not None:
            attempt.stop()
        for pg in pgs:
            try:
                remove_placement_group(pg)
            except Exception:  # noqa: BLE001 - the cluster may be going away
                pass


def _summary(c: HybridConfig, run: Run, a: _Attempt, per_step: Dict[int, Dict[str, Any]], step_runs: int,
             failures: List[str], wall_s: float) -> Dict[str, Any]:
    lm0 = a.done[c.llm.ranks[0]]
    losses = lm0["losses"]  # every step's, the steps before the resume point from the checkpoint
    steps = [per_step[s] for s in sorted(per_step)]
    peaks = {k: max((p["peak_bytes"][k] for p in steps), default=0) for k in ("encoder", "llm", "boundary")}
    return {
        "bench": "hybrid_ray",
        "world": c.world,
        "placement": c.placement,
        "groups": {m: {"ranks": g.ranks, "num_cpus": g.num_cpus, "num_gpus": g.num_gpus,
                       "actors": [{"rank": r, **a.info.get(r, {})} for r in g.ranks]} for m, g in c.groups().items()},
        "batch": c.batch, "microbatches": c.microbatches, "schedule": c.schedule,
        "steps": c.steps,
        "losses": losses,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "restarts": run.restarts,
        "failures": failures,
        "resumed_from": max(d["resumed_from"] for d in a.done.values()),
        "step_runs": step_runs,
        "tokens_per_step": steps[0]["tokens"] if steps else 0,
        "tokens_per_s": statistics.median(p["tokens_per_s"] for p in steps) if steps else 0.0,
        "step_s_median": statistics.median(p["step_s"] for p in steps) if steps else 0.0,
        "peak_bytes": peaks,
        "boundary_bytes_per_step": steps[-1]["boundary_bytes"] if steps else 0,
        "per_step": steps,
        "digests": {str(r): d["digest"] for r, d in sorted(a.done.items())},
        "wall_s": wall_s,
    }


def summary_line(s: Dict[str, Any]) -> str:
    g = s["groups"]
    return (f"hybrid: {s['steps']} steps, encoder SP={len(g['encoder']['ranks'])} on ranks {g['encoder']['ranks']} -> "
            f"llm TP={len(g['llm']['ranks'])} on ranks {g['llm']['ranks']} ({s['placement']}), loss "
            f"{s['loss_first']:.6f} -> {s['loss_last']:.6f}, {s['tokens_per_s']:.0f} tok/s (median), peak encoder "
            f"{_fmt_bytes(s['peak_bytes']['encoder'])} llm {_fmt_bytes(s['peak_bytes']['llm'])} boundary "
            f"{_fmt_bytes(s['peak_bytes']['boundary'])}, boundary {_fmt_bytes(s['boundary_bytes_per_step'])}/step, "
            f"{s['restarts']} restart(s), {s['wall_s']:.1f} s")


def required_cluster(config: HybridConfig) -> Dict[str, int]:
    """Whole CPUs and logical GPUs a loopback cluster needs to hold config's placement groups."""
    need: Dict[str, float] = {}
    for pg in config.bundles():
        for b in pg["bundles"]:
            for k, v in b.items():
                need[k] = need.get(k, 0) + v
    return {"num_cpus": max(1, math.ceil(need.get("CPU", 0))), "num_gpus": math.ceil(need.get("GPU", 0))}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config = HybridConfig.from_namespace(args).validate()
    except HybridConfigError as e:
        print(e, file=sys.stderr)
        return 2
    import contextlib

    import ray

    if args.address:
        cluster = contextlib.nullcontext()
        ray.init(address=args.address, log_to_driver=False)
    else:
        from .local import local_cluster

        cluster = local_cluster(serve=False, **required_cluster(config))
    try:
        with cluster:
            summary = train(config)
    except (HybridConfigError, HybridRunError) as e:
        print(e, file=sys.stderr)
        return 1
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k not in ("per_step", "groups")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
