#!/usr/bin/env python3
"""python_train: the main job jitembed is for, in PyTorch. A small text-conditioned diffusion transformer is
trained with DDP (gloo, CPU) on the latents of the exported diffusers VAE (vae_encoder: [3, 256, 256] in [-1, 1]
-> [4, 32, 32]) conditioned on the exported T5 encoder's hidden states (t5_encoder: [2, 32] int64 -> [32, 64]).

  --mode jit (default)  the embeddings come just in time from jitembed-server (rank 0 starts one on a free
                        loopback port serving --model-repository unless --endpoints is given) through the
                        prefetching jitembed.torch.Loader: the step only waits when the service falls behind.
  --mode inline         the baseline: the training step computes its batch's embeddings itself with the same
                        encoders in this process (torch.jit.load of the repository's model.pt + torchvision /
                        sentencepiece preprocessing as the repository configures it).

Both modes see the same batches in the same order (jitembed's epoch plan) and draw the same noise per sample (from
seed, epoch and sample index), so the same --seed gives the same per-epoch losses up to the embeddings' own
difference (the served VAE latents differ from in-process ones by up to ~4e-7 when the server batches the rows
differently; see README.md). --checkpoint / --stop-after-steps / --resume checkpoint mid-epoch: model, optimizer,
RNG states, each rank's loader state and the epoch's partial sums.

    torchrun --nproc_per_node 2 --standalone examples/python_train/train.py --mode jit --epochs 3

Ends with a summary table, an HTML report (--report) and one JSON line (also written to --json).
"""
import argparse
import datetime
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import data as data_gen  # noqa: E402
import report  # noqa: E402
import sources  # noqa: E402
from model import DiT  # noqa: E402

warnings.filterwarnings("ignore", message=".*torch.jit.load.*is deprecated.*")

LATENT, CAPTION = "latent", "caption"
KINDS = {LATENT: "image", CAPTION: "text"}  # the sample field each embedding reads


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["jit", "inline"], default="jit",
                    help="jit: embeddings from the service, prefetched; inline: computed in the step")
    ap.add_argument("--data", default="", help="data directory (images with same-stem .txt captions, .jems shards); "
                                               "default: generated under --out")
    ap.add_argument("--images", type=int, default=64, help="generated images (256x256 JPEG + caption)")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8, help="samples per step, all ranks together")
    ap.add_argument("--seed", type=int, default=1, help="seed of the data, the model and the noise")
    ap.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    ap.add_argument("--width", type=int, default=128, help="DiT hidden size")
    ap.add_argument("--depth", type=int, default=3, help="DiT blocks")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of each rank (torch.set_num_threads)")
    ap.add_argument("--endpoints", default="", help="comma-separated server URLs; default: start a local jitembed-server")
    ap.add_argument("--model-repository", default=os.environ.get("JITEMBED_MODEL_REPOSITORY",
                                                                 os.path.join(ROOT, "build", "release", "model_repository")),
                    help="the exported encoders (scripts/export_models.py --out DIR)")
    ap.add_argument("--image-model", default="vae_encoder")
    ap.add_argument("--text-model", default="t5_encoder")
    ap.add_argument("--server-bin", default="", help="jitembed-server (default: on PATH, else build/release/tools)")
    ap.add_argument("--server-threads", type=int, default=1,
                    help="intra-op threads of the server started here (OMP_NUM_THREADS of its LibTorch)")
    ap.add_argument("--server-cpus", default="", help="pin the server started here to these CPUs (taskset -c LIST)")
    ap.add_argument("--samples-per-request", type=int, default=4, help="loader: samples per embed request")
    ap.add_argument("--requests-in-flight", type=int, default=4, help="loader: requests in flight per rank")
    ap.add_argument("--cache-dir", default="", help="LMDB embedding cache (kept across runs; jit mode)")
    ap.add_argument("--no-shuffle", dest="shuffle", action="store_false")
    ap.add_argument("--verify", action="store_true",
                    help="jit: compare every delivered embedding with the encoders run in this process")
    ap.add_argument("--verify-tolerance", type=float, default=1e-6, help="--verify: max abs difference allowed")
    ap.add_argument("--checkpoint", default="", help="checkpoint file: written at each epoch end and at --stop-after-steps")
    ap.add_argument("--resume", default="", help="continue from this checkpoint")
    ap.add_argument("--stop-after-steps", type=int, default=0,
                    help="stop after this many steps in all (a mid-epoch checkpoint with --checkpoint)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "python_train_out"), help="output directory")
    ap.add_argument("--report", default="", help="HTML report (default: OUT/report-MODE.html)")
    ap.add_argument("--json", default="", help="also write the JSON result line to this file")
    ap.add_argument("--no-progress", dest="progress", action="store_false")
    return ap.parse_args(argv)


# --- distributed set-up -------------------------------------------------------------------------------------------
def init_distributed():
    """torchrun's environment, or a world of one (no torchrun) on a free loopback port."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                                timeout=datetime.timedelta(minutes=5))
    else:
        dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
    return dist.get_rank(), dist.get_world_size()


def broadcast(obj, src=0):
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


# --- the embedding server -----------------------------------------------------------------------------------------
def find_server(flag):
    for c in [flag, shutil.which("jitembed-server"), os.path.join(ROOT, "build", "release", "tools", "jitembed-server")]:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("jitembed-server not found (pass --server-bin, put it on PATH, or build build/release)")


def _die_with_parent():
    """In the server's child before exec: SIGTERM when this rank dies (torchrun kills the ranks with SIGKILL / SIGTERM
    when one fails, and no finally block runs then), so no server outlives its trainer."""
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ServerProcess:
    """jitembed-server on a free loopback port (--port 0): its URL read from the "listening on" line, stopped with
    SIGTERM (it drains and exits 0). As examples/jit_train_demo/server_process.hpp."""

    def __init__(self, binary, args, threads, timeout=180.0, log=None, cpus=""):
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        pin = ["taskset", "-c", cpus] if cpus else []
        self.p = subprocess.Popen(pin + [binary, "--host", "127.0.0.1", "--port", "0"] + args, stdout=subprocess.PIPE,
                                  stderr=log or subprocess.DEVNULL, env=env, text=True, preexec_fn=_die_with_parent)
        deadline, seen = time.monotonic() + timeout, ""
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise TimeoutError(f"{binary} did not report its port within {timeout:.0f} s")
            if not sel.select(left):
                continue
            line = self.p.stdout.readline()
            if not line:
                rc = self.p.wait()
                raise RuntimeError(f"{binary} exited before listening (status {rc}): {seen}")
            seen += line
            if "listening on " in line:
                self.url = line.split("listening on ", 1)[1].strip()
                break
        sel.close()
        # keep reading what it prints later, so a full pipe never blocks it
        import threading
        self.drain = threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True)
        self.drain.start()

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


# --- the batch sources (the one place that makes them) -------------------------------------------------------------
def make_source(o, ds, rank, world, client, resume_state):
    """The rank's batches: an iterable over the rest of the current epoch (the next iteration starts the next one)
    whose steps hold torch tensors, with a checkpoint (source_state). Each step: {latent: Tensor[n, 4, 32, 32],
    caption: Tensor[n, 32, 64], ids, indices, failed, epoch, step}. jit: jitembed.torch.Loader (the C++ collate's
    buffers through DLPack, no copy; state_dict() / load_state_dict() as torchdata's StatefulDataLoader has them)."""
    per_rank = o.batch // world
    if o.mode == "jit":
        import jitembed
        import jitembed.torch as jt
        kw = {}
        if o.cache_dir:
            kw["cache"] = jitembed.TieredCache([jitembed.MemoryCache(byte_budget=256 << 20), jitembed.LmdbCache(o.cache_dir)])
        loader = jt.Loader(ds, client, [(LATENT, o.image_model, KINDS[LATENT]), (CAPTION, o.text_model, KINDS[CAPTION])],
                           batch_size=per_rank, samples_per_request=min(o.samples_per_request, per_rank),
                           requests_in_flight=o.requests_in_flight, workers=2,
                           max_buffered=max(4 * per_rank, o.samples_per_request * o.requests_in_flight),
                           rank=rank, world_size=world, seed=o.seed, shuffle=o.shuffle, **kw)
        if resume_state is not None:
            loader.load_state_dict(resume_state)
        return loader
    enc = local_encoders(o)
    return sources.InlineSource(ds, enc, KINDS, per_rank, rank=rank, world_size=world,
                                seed=o.seed, shuffle=o.shuffle, resume=resume_state)


def source_state(src):
    """The rank's loader checkpoint, given back to make_source() as resume_state."""
    return src.state_dict() if hasattr(src, "state_dict") else bytes(src.state())


def next_step(it):
    """The next step of the source (torch tensors), or None at the end of the epoch."""
    try:
        step = next(it)
    except StopIteration:
        return None
    return sources.to_torch(step, (LATENT, CAPTION))


_local = None


def local_encoders(o):
    global _local
    if _local is None:
        import encoders
        _local = {LATENT: encoders.ImageEncoder(os.path.join(o.model_repository, o.image_model)),
                  CAPTION: encoders.TextEncoder(os.path.join(o.model_repository, o.text_model))}
    return _local


# --- the noise of one sample ---------------------------------------------------------------------------------------
def sample_noise(seed, epoch, index, shape):
    """(noise level a, eps) of one sample, from (seed, epoch, dataset index): the same in every mode and rank layout."""
    h = hashlib.blake2b(f"{seed}:{epoch}:{index}".encode(), digest_size=8).digest()
    g = torch.Generator().manual_seed(int.from_bytes(h, "little") & ((1 << 63) - 1))
    a = 0.02 + 0.96 * torch.rand((), generator=g).item()
    return a, torch.randn(shape, generator=g)


def rng_states():
    return {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_states(s):
    torch.set_rng_state(s["torch"])
    random.setstate(s["python"])
    np.random.set_state(s["numpy"])


# --- the run -------------------------------------------------------------------------------------------------------
def run(o):
    rank, world = init_distributed()
    torch.set_num_threads(o.threads)
    if o.batch % world:
        raise ValueError(f"--batch {o.batch} is not a multiple of the {world} ranks")
    import jitembed
    t_setup = time.perf_counter()
    if o.mode == "inline" or o.verify or not o.endpoints:  # the encoders run here, or the server started here serves them
        for m in (o.image_model, o.text_model):
            if not os.path.isfile(os.path.join(o.model_repository, m, "config.pbtxt")):
                raise FileNotFoundError(f"no model '{m}' in {o.model_repository}: export the repository "
                                        f"(python scripts/export_models.py --out DIR) and pass --model-repository DIR")

    ckpt = torch.load(o.resume, map_location="cpu", weights_only=False) if o.resume else None
    if ckpt and (ckpt["world"] != world or ckpt["batch"] != o.batch or ckpt["seed"] != o.seed):
        raise ValueError(f"--resume {o.resume}: taken with {ckpt['world']} ranks, batch {ckpt['batch']}, seed "
                         f"{ckpt['seed']}; this run has {world}, {o.batch}, {o.seed}")

    # Data: --data as given, or the generated set (rank 0 makes it on first run).
    if not o.data:
        o.data = os.path.join(o.out, f"data-{o.images}i-seed{o.seed}")
        if rank == 0:
            t = time.perf_counter()
            if data_gen.ensure_data(o.data, images=o.images, seed=o.seed):
                print(f"generated {o.images} images with captions in {o.data} ({time.perf_counter() - t:.1f} s)", file=sys.stderr)
        dist.barrier()
    ds = jitembed.Dataset.open(o.data)
    if len(ds) == 0:
        raise FileNotFoundError(f"no samples under {o.data}")

    rec = report.RunRecord()
    rec.mode, rec.ranks, rec.data_dir, rec.dataset_size, rec.batch = o.mode, world, o.data, len(ds), o.batch
    rec.models = f"{o.image_model}, {o.text_model}" + (f" served at {o.endpoints}" if o.mode == "jit" and o.endpoints
                                                       else f" from {o.model_repository}")
    rec.resumed_from = o.resume or None

    # jit: the server (rank 0 starts it unless --endpoints), its URL to every rank, one client per rank.
    server, client = None, None
    if o.mode == "jit":
        endpoints = [e for e in o.endpoints.split(",") if e]
        if not endpoints:
            url, err = None, None
            if rank == 0:
                try:
                    server = ServerProcess(find_server(o.server_bin), ["--model-repository", o.model_repository],
                                           o.server_threads, cpus=o.server_cpus)
                    url = server.url
                except Exception as e:  # noqa: BLE001 - every rank must learn that it failed
                    err = f"{type(e).__name__}: {e}"
            url, err = broadcast((url, err))
            if err:
                raise RuntimeError(f"starting jitembed-server: {err}")
            endpoints = [url]
            rec.endpoints = f"a local jitembed-server ({url}, {o.server_threads} intra-op thread(s))"
        else:
            rec.endpoints = ",".join(endpoints)
        client = jitembed.Client(endpoints=endpoints)
    reference = local_encoders(o) if (o.verify and o.mode == "jit") else None

    # Model, optimizer (the same initial weights on every rank and in every mode: seeded, then DDP broadcasts).
    torch.manual_seed(o.seed)
    net = DiT(d=o.width, depth=o.depth)
    rec.parameters = sum(p.numel() for p in net.parameters())
    model = DDP(net)
    opt = torch.optim.AdamW(model.parameters(), lr=o.lr, weight_decay=0.0)
    start_epoch, global_step, partial = 0, 0, None
    if ckpt:
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        set_rng_states(ckpt["rng"][rank])
        start_epoch, global_step, partial = ckpt["epoch"], ckpt["global_step"], ckpt["partial"]
        rec.epochs = list(ckpt["epochs"])
    src = make_source(o, ds, rank, world, client, ckpt["loader"][rank] if ckpt else None)
    if ckpt and getattr(src, "epoch", start_epoch) != start_epoch:
        raise RuntimeError(f"resumed loader is in epoch {src.epoch}, the checkpoint in {start_epoch}")

    dist.barrier()
    t0 = time.perf_counter()
    if rank == 0 and o.progress:
        print(f"[{o.mode} ddp{world}] set-up {t0 - t_setup:.1f} s", file=sys.stderr)
    last_progress, stopped = -1.0, False

    for epoch in range(start_epoch, o.epochs):
        # the epoch's sums (restored mid-epoch from the checkpoint)
        acc = dict(partial) if partial else {"sse": 0.0, "values": 0, "samples": 0, "stall_s": 0.0, "seconds": 0.0,
                                            "train_s": 0.0, "steps": 0, "failed": 0, "ids": []}
        partial = None
        ep_t0 = time.perf_counter()
        my_ids = []
        it = iter(src)
        while True:
            w0 = time.perf_counter()
            step = next_step(it)
            stall = time.perf_counter() - w0
            if step is None:
                break
            if o.mode == "jit":
                want = sources.EpochPlan(len(ds), world, rank, o.batch // world, o.seed, step["epoch"],
                                         o.shuffle).step_indices(step["step"])
                got = [int(i) for i in step["indices"]] + [int(f["index"]) for f in step["failed"]]
                if sorted(got) != sorted(want):
                    raise RuntimeError(f"rank {rank}: loader step {step['step']} of epoch {step['epoch']} delivered "
                                       f"samples {got}, the epoch plan says {want}")
            my_ids += list(step["ids"])
            failed = len(step["failed"])
            for f in step["failed"][:3]:
                print(f"rank {rank}: sample {f['id']} failed: {f['errc']}: {f['message']}", file=sys.stderr)
            verified = mismatches = 0
            max_abs = 0.0
            if reference is not None and len(step["ids"]):
                raw = [sources.raw_inputs(ds[int(i)], KINDS.values()) for i in step["indices"]]
                for name, kind in KINDS.items():
                    d = (step[name] - reference[name]([r[kind] for r in raw])).abs().flatten(1).amax(1)
                    max_abs = max(max_abs, d.max().item())
                    mismatches += int((d > o.verify_tolerance).sum())
                verified = len(step["ids"])

            t1 = time.perf_counter()
            n = len(step["ids"])
            if n:
                z, text = step[LATENT], step[CAPTION]
                noise = [sample_noise(o.seed, epoch, int(i), z.shape[1:]) for i in step["indices"]]
                a = torch.tensor([x[0] for x in noise], dtype=torch.float32)
                eps = torch.stack([x[1] for x in noise])
                zt = a.sqrt().view(-1, 1, 1, 1) * z + (1 - a).sqrt().view(-1, 1, 1, 1) * eps
                pred = model(zt, a, text)
                err = (pred - eps).pow(2)
                loss = err.mean()
                sse = err.detach().double().sum().item()
            else:  # a rank without samples this step (a short last step) still joins DDP's gradient all-reduce:
                # a forward through DDP on one zero sample, its loss times 0 (zero gradients from this rank)
                loss = model(torch.zeros(1, 4, 32, 32), torch.full((1,), 0.5), torch.zeros(1, 32, net.text_proj.in_features)).sum() * 0
                sse = 0.0
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sums = torch.tensor([sse, float(n * (z[0].numel() if n else 0)), float(n), float(failed), float(verified),
                                 float(mismatches)], dtype=torch.float64)
            dist.all_reduce(sums)
            mx = torch.tensor([stall, max_abs], dtype=torch.float64)  # the step waited for the slowest rank's batch
            dist.all_reduce(mx, op=dist.ReduceOp.MAX)
            train = time.perf_counter() - t1
            stall = mx[0].item()
            acc["sse"] += sums[0].item()
            acc["values"] += int(sums[1].item())
            acc["samples"] += int(sums[2].item())
            acc["failed"] += int(sums[3].item())
            acc["stall_s"] += stall
            acc["train_s"] += train
            acc["steps"] += 1
            rec.verified_samples += int(sums[4].item())
            rec.verify_mismatches += int(sums[5].item())
            if reference is not None:
                rec.verify_max_abs = max(rec.verify_max_abs or 0.0, mx[1].item())
            global_step += 1
            if rank == 0:
                now = time.perf_counter() - t0
                rec.steps.append({"t_end": now, "stall_s": stall, "train_s": train, "epoch": epoch, "samples": int(sums[2].item())})
                rec.stall_s += stall
                rec.train_s += train
                if o.progress and now - last_progress >= 0.1:
                    last_progress = now
                    total = sum(s["samples"] for s in rec.steps)
                    print(f"\r[{o.mode} ddp{world}] epoch {epoch + 1}/{o.epochs} step {step['step'] + 1}  "
                          f"{total / max(now, 1e-9):7.1f} samples/s  stall {100 * rec.stall_s / max(now, 1e-9):5.1f}%  "
                          f"loss {acc['sse'] / max(acc['values'], 1):.4f}   ", end="", file=sys.stderr, flush=True)
            if o.stop_after_steps and global_step >= o.stop_after_steps:
                stopped = True
                break

        # every rank's delivered ids of the epoch (duplicates / losses over all ranks)
        all_ids = [None] * world
        dist.all_gather_object(all_ids, my_ids)
        acc["ids"] = acc["ids"] + [i for ids in all_ids for i in ids]
        acc["seconds"] += time.perf_counter() - ep_t0
        if stopped:
            partial = acc
            break
        reqs = hits = lookups = 0
        if o.mode == "jit":  # the loader's own per-epoch counters (its prefetch of the next epoch is not this one's)
            ep = [e for e in src.stats()["epochs"] if e["epoch"] == epoch]
            counts = torch.tensor([sum(e["requests"] for e in ep), sum(e["cache_hits"] for e in ep),
                                   sum(e["cache_hits"] + e["cache_misses"] for e in ep)], dtype=torch.int64)
            dist.all_reduce(counts)
            reqs, hits, lookups = (int(v) for v in counts)
        distinct = set(acc["ids"])
        rec.duplicated_samples += len(acc["ids"]) - len(distinct)
        rec.lost_samples += len(ds) - len(distinct)
        rec.failed_samples += acc["failed"]
        rec.epochs.append({"loss": acc["sse"] / max(acc["values"], 1), "samples": acc["samples"], "seconds": acc["seconds"],
                           "stall_s": acc["stall_s"], "train_s": acc["train_s"], "steps": acc["steps"], "embed_requests": reqs, "cache_hits": hits, "cache_lookups": lookups})
        if o.checkpoint:
            save_checkpoint(o, rank, world, net, opt, src, epoch + 1, global_step, None, rec.epochs)

    if stopped and o.checkpoint:
        save_checkpoint(o, rank, world, net, opt, src, epoch, global_step, partial, rec.epochs)
    rec.wall_s = time.perf_counter() - t0
    rec.samples = sum(s["samples"] for s in rec.steps)  # this run's (a resumed run's wall time is its own)
    if client is not None:
        cs = client.stats()
        totals = torch.tensor([cs["requests"], cs["retries"], cs["hedges"]], dtype=torch.int64)
        dist.all_reduce(totals)
        rec.embed_requests, rec.retries, rec.hedges = (int(v) for v in totals)
    src.close()
    dist.barrier()
    if client is not None:
        client.close()
    if server is not None:
        rc = server.stop()
        if rc != 0:
            rec.notes.append(f"jitembed-server exited with status {rc}")
    ok = rec.lost_samples == 0 and rec.duplicated_samples == 0 and rec.failed_samples == 0 and rec.verify_mismatches == 0
    if stopped:
        rec.notes.append(f"stopped after step {global_step} (epoch {epoch + 1}, mid-epoch)"
                         + (f"; checkpoint {o.checkpoint}" if o.checkpoint else ""))
    if rank == 0:
        if o.progress:
            print(file=sys.stderr)
        j = report.to_json(rec)
        print(report.summary_table(rec), end="")
        os.makedirs(o.out, exist_ok=True)
        path = o.report or os.path.join(o.out, f"report-{o.mode}.html")
        report.write_html_report(path, rec, j)
        print(f"  report: {path}")
        line = json.dumps(j)
        print(line, flush=True)
        if o.json:
            with open(o.json, "w") as f:
                f.write(line + "\n")
    # every rank tears the process group down together, after rank 0's report: a rank whose gloo context goes
    # while a peer still holds its pairs was seen to abort at exit (std::terminate, once in CI)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


def save_checkpoint(o, rank, world, net, opt, src, epoch, global_step, partial, epochs):
    """Rank 0 writes model, optimizer, every rank's RNG and loader state, and where the run stands (atomically)."""
    loader_states = [None] * world
    dist.all_gather_object(loader_states, source_state(src))
    rngs = [None] * world
    dist.all_gather_object(rngs, rng_states())
    if rank == 0:
        ck = {"model": net.state_dict(), "optimizer": opt.state_dict(), "rng": rngs, "loader": loader_states,
              "epoch": epoch, "global_step": global_step, "partial": partial, "epochs": list(epochs), "world": world,
              "batch": o.batch, "seed": o.seed, "mode": o.mode}
        tmp = o.checkpoint + ".tmp"
        torch.save(ck, tmp)
        os.replace(tmp, o.checkpoint)
    dist.barrier()


def main(argv=None):
    o = parse_args(argv)
    try:
        return run(o)
    except Exception as e:  # noqa: BLE001
        print(f"\npython_train: error: {type(e).__name__}: {e}", file=sys.stderr)
        if os.environ.get("PYTHON_TRAIN_TRACEBACK"):
            raise
        return 2


if __name__ == "__main__":
    rc = main()
    # Leave without the interpreter's finalization: under torchrun a rank of the inline mode (no jitembed threads
    # at all: torch, gloo and sentencepiece only) aborted in it, after its work and report were done and the
    # process group destroyed ("terminate called without an active exception", no Python frame; 2 of ~60 CI
    # runs, never reproduced by hand). Everything worth keeping is written and flushed by then.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
