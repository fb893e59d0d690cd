#!/usr/bin/env python3
"""Real encoders served four ways, side by side in one run, the same module and the same JPEGs:
  (a) in-process eager PyTorch at the batch size = concurrency (the ceiling; preprocessed tensors, compute only;
      a_ts: the same with the TorchScript file the servers load),
  (b) jitembed-server --model-repository + the JIT client (bench_models_client, C++),
  (c) a real Triton (the nvidia-pytriton wheel's tritonserver, Python backend: triton_model.py, PIL +
      torchvision preprocessing, dynamic batching),
  (d) Ray Serve (ray_encoder.py: @serve.batch around the module, PIL + torchvision preprocessing),
  (p) jitembed.Server(model_repository=...) in a Python process (python_server.py): the same TorchScript file
      run by the Python torch as a jitembed.Model, HTTP / preprocessing / batching the same C++ as (b),
  (b_draft, light only) (b) with the config parameter image_decode: draft (Pillow's Image.draft before the resize:
      the JPEG decoded at a DCT scale of 1/2 .. 1/8, a few u8 levels from exact; the same server, its own model
      entry on the same model file).
(b), (c) and (d) load the same TorchScript file (model.pt) and are driven by the same C++ client (one JPEG per
request, closed loop at concurrency 1, 8, 32); (a) runs the eager nn.Module built by scripts/export_models.py's
code with the same seed (identical weights). Dynamic batching alike in the three servers: max batch 32, 2 ms
queue delay. Every server arm and (a) run on --server-cores (taskset; default core 0) with --threads torch
intra-op threads (OMP_NUM_THREADS and torch.set_num_threads; jitembed-server: OMP_NUM_THREADS) and the load
generator on --client-cores (default core 1). Arms run in short interleaved rounds (the order rotates), best
round kept; absolute numbers are noisy on a shared machine, the ratios are the figure.

Workloads:
  vae    the exported vae_encoder (diffusers AutoencoderKL encoder, 256x256 -> [4, 32, 32]) on 256x256 JPEGs
         (compute-bound). Target: b >= 0.9 a.
  light  vae_encoder_light, exported here (the same architecture at widths (8, 16, 16, 16), 128x128 ->
         [4, 16, 16]), on 640x480 JPEGs: shorter side to 128 + centre crop; the encoder costs about what
         decoding + resizing costs. Targets: b >= 1.3 c, b >= 3 d (and the same for b_draft); the Python model
         p >= 0.8 b and p >= 3 d (vae: p >= 0.9 b).
CPU per image: the server's process tree (user + system, warm-up included) beside the encoder's own (a's).

  .venv/bin/python benchmarks/models/bench_models.py [--quick] [--build build/release] [--workloads vae,light]
      [--arms a,b,b_draft,c,d] [--rounds R] [--seconds S]
--quick: one round, short windows (about 3 minutes); default: 2 rounds (about 10-15 minutes).
Prints a table, then one JSON object per result line.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(HERE))

MAX_BATCH, DELAY_US = 32, 2000
LIGHT = {"channels": (8, 16, 16, 16), "groups": 8, "size": 128, "jpeg": (640, 480), "images": 16}


def log(msg: str) -> None:
    print(f"bench_models: {msg}", file=sys.stderr, flush=True)


# --- models and images -----------------------------------------------------------------------------------------
def build_module(torch, workload: str):
    """The eager nn.Module: export_models.py's VaeEncoder around its AutoencoderKL, same seed as the export."""
    import diffusers
    import export_models as em

    VaeEncoder, _, _ = em.make_modules(torch)
    if workload == "vae":
        return VaeEncoder(em.build_vae(torch, diffusers)).eval()
    torch.manual_seed(em.SEED)
    ch = LIGHT["channels"]
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, down_block_types=("DownEncoderBlock2D",) * len(ch),
                                  up_block_types=("UpDecoderBlock2D",) * len(ch), block_out_channels=ch, layers_per_block=1,
                                  norm_num_groups=LIGHT["groups"], sample_size=LIGHT["size"])
    return VaeEncoder(vae.eval()).eval()


def prepare(work: Path, model_repo: Path) -> dict:
    """work/repo (jitembed repository: vae_encoder copied, vae_encoder_light exported), work/images/<workload>."""
    import io

    import numpy as np
    import torch
    import export_models as em
    from PIL import Image

    stamp = hashlib.sha256(json.dumps([LIGHT, torch.__version__, (HERE / "bench_models.py").stat().st_size]).encode()).hexdigest()
    repo = work / "repo"
    src = model_repo / "vae_encoder"
    if not (src / "1" / "model.pt").is_file():
        raise SystemExit(f"bench_models: no {src}/1/model.pt: run scripts/export_models.py --out {model_repo} "
                         "(or ctest -R models/export)")
    if (work / ".stamp").is_file() and (work / ".stamp").read_text() == stamp and (repo / "vae_encoder_light/1/model.pt").is_file():
        log(f"{work} is up to date")
    else:
        shutil.rmtree(work, ignore_errors=True)
        (repo / "vae_encoder" / "1").mkdir(parents=True)
        shutil.copy(src / "config.pbtxt", repo / "vae_encoder" / "config.pbtxt")
        shutil.copy(src / "1" / "model.pt", repo / "vae_encoder" / "1" / "model.pt")
        d = repo / "vae_encoder_light"
        (d / "1").mkdir(parents=True)
        s = LIGHT["size"]
        torch.manual_seed(em.SEED)
        m = build_module(torch, "light")
        import warnings
        warnings.filterwarnings("ignore")
        em.export_torchscript(torch, m, torch.rand(2, 3, s, s) * 2 - 1, str(d / "1" / "model.pt"))
        # images: the served 256x256 JPEGs of the export (vae), 640x480 synthetic photos (light)
        (work / "images" / "vae").mkdir(parents=True)
        for f in sorted((src / "reference").glob("served_*.jpg")):
            shutil.copy(f, work / "images" / "vae" / f.name)
        (work / "images" / "light").mkdir(parents=True)
        rng = np.random.default_rng(em.SEED + 7)
        w, h = LIGHT["jpeg"]
        for i in range(LIGHT["images"]):
            buf = io.BytesIO()
            Image.fromarray(em.synthetic_image(np, rng, w, h, 3), "RGB").save(buf, format="JPEG", quality=90)
            (work / "images" / "light" / f"img_{i:02d}.jpg").write_bytes(buf.getvalue())
        (work / ".stamp").write_text(stamp)
        log(f"exported vae_encoder_light and wrote the images into {work}")
    # the configs every run starts from (a run's u8 fallback rewrites them): the export's, and light's alike
    shutil.copy(src / "config.pbtxt", repo / "vae_encoder" / "config.pbtxt")
    s = LIGHT["size"]
    light_params = {"modality": "image", "image_resize": "shorter_side_crop", "image_normalize": "signed"}
    (repo / "vae_encoder_light" / "config.pbtxt").write_text(em.pbtxt(
        "vae_encoder_light", "pytorch_libtorch", [("INPUT__0", "TYPE_FP32", [3, s, s])], [("OUTPUT__0", "TYPE_FP32", [4, s // 8, s // 8])],
        light_params))
    # b_draft: the same module with image_decode draft
    dd = repo / "vae_encoder_light_draft"
    (dd / "1").mkdir(parents=True, exist_ok=True)
    shutil.copy(repo / "vae_encoder_light" / "1" / "model.pt", dd / "1" / "model.pt")
    (dd / "config.pbtxt").write_text(em.pbtxt(
        "vae_encoder_light_draft", "pytorch_libtorch", [("INPUT__0", "TYPE_FP32", [3, s, s])],
        [("OUTPUT__0", "TYPE_FP32", [4, s // 8, s // 8])], {**light_params, "image_decode": "draft"}))
    return {
        "vae": {"model": "vae_encoder", "file": repo / "vae_encoder/1/model.pt", "size": 256, "out": [4, 32, 32],
                "images": sorted((work / "images" / "vae").glob("*.jpg"))},
        "light": {"model": "vae_encoder_light", "draft_model": "vae_encoder_light_draft",
                  "file": repo / "vae_encoder_light/1/model.pt", "size": LIGHT["size"],
                  "out": [4, LIGHT["size"] // 8, LIGHT["size"] // 8], "images": sorted((work / "images" / "light").glob("*.jpg"))},
    }


def write_triton_repo(work: Path, wls: dict, threads: int) -> Path:
    tr = work / "triton"
    shutil.rmtree(tr, ignore_errors=True)
    for w in wls.values():
        d = tr / w["model"]
        (d / "1").mkdir(parents=True)
        shutil.copy(HERE / "triton_model.py", d / "1" / "model.py")
        params = {"model_file": str(w["file"]), "size": str(w["size"]), "threads": str(threads)}
        (d / "config.pbtxt").write_text(
            f'name: "{w["model"]}"\nbackend: "python"\nmax_batch_size: {MAX_BATCH}\n'
            'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
            f'output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, w["out"]))} ] }} ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
            f"dynamic_batching {{ preferred_batch_size: [ 8, {MAX_BATCH} ] max_queue_delay_microseconds: {DELAY_US} }}\n" +
            "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in params.items()))
    return tr


# --- processes: pinning, CPU time of a process tree -----------------------------------------------------------
def pinned(cores: str, cmd: list) -> list:
    return ["taskset", "-c", cores, *cmd]


def proc_cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime: every thread of the process
    except (OSError, IndexError, ValueError):
        return 0.0


def tree(roots: set) -> set:
    """roots and every descendant (by /proc/*/stat ppid)."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, grew = set(roots), True
    while grew:
        grew = False
        for c, pp in parent.items():
            if pp in out and c not in out:
                out.add(c)
                grew = True
    return out


def cmdline_pids(needle: str) -> set:
    out = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "cmdline").read_bytes().decode(errors="replace"):
                    out.add(int(p.name))
            except OSError:
                pass
    return out


def tree_cpu_s(roots_fn) -> float:
    return sum(proc_cpu_s(p) for p in tree(roots_fn()))


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def wait_for(pred, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise TimeoutError(f"bench_models: {what} not ready after {timeout_s:.0f} s")


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the arms ---------------------------------------------------------------------------------------------------
class Servers:
    """Starts (b), (c) and (d) once, pinned to the server cores; each answers url() and cpu_s() (its process tree)."""

    def __init__(self, args, work: Path, wls: dict):
        self.args, self.work, self.wls, self.procs, self.ray_ctx, self.ray = args, work, wls, {}, None, None
        self.env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        self.urls = {}

    def start(self, arms: list, fallback=None) -> None:
        """Starts the arms; when jitembed-server fails to load a model, calls fallback(reason) (which rewrites
        the configs, or raises) and starts it once more."""
        models = [w["model"] for w in self.wls.values()]  # every arm serves these
        jitembed_models = models + [w["draft_model"] for w in self.wls.values() if "draft_model" in w]  # (b) also b_draft's
        if "c" in arms:  # the slowest start (torch in every stub): first, in the background
            tr = write_triton_repo(self.work, self.wls, self.args.threads)
            url_file = self.work / "triton.url"
            url_file.unlink(missing_ok=True)
            self.procs["c"] = subprocess.Popen(pinned(self.args.server_cores, [
                "/usr/bin/python3", str(ROOT / "tests/triton/run_tritonserver.py"), "--venv", str(self.args.triton_venv),
                "--models", str(tr), "--url-file", str(url_file), "--log", str(self.work / "tritonserver.log"), "--start-timeout", "300",
                "--server-arg=--backend-config=python,shm-default-byte-size=16777216"]),
                stdout=subprocess.DEVNULL, env=self.env, start_new_session=True)
        if "b" in arms or "b_draft" in arms:
            reason = self.start_b(jitembed_models)
            if reason:
                if fallback is None:
                    raise SystemExit(f"bench_models: jitembed-server: {reason}")
                fallback(reason)
                self.stop_one("b")
                reason = self.start_b(jitembed_models)
                if reason:
                    raise SystemExit(f"bench_models: jitembed-server: {reason}")
        if "p" in arms:
            self.start_p(models)
        if "d" in arms:
            self.start_ray()
        if "c" in arms:
            wait_for(lambda: (self.work / "triton.url").is_file() or self.procs["c"].poll() is not None, 300, "tritonserver")
            if self.procs["c"].poll() is not None:
                raise SystemExit(f"bench_models: tritonserver failed; see {self.work / 'tritonserver.log'}")
            self.urls["c"] = (self.work / "triton.url").read_text().strip()
            wait_for(lambda: all(http_ok(f"{self.urls['c']}/v2/models/{m}/ready") for m in models), 300, "Triton's models")
            log(f"arm c ready at {self.urls['c']}")

    def start_b(self, models: list) -> str:
        """jitembed-server on the repository; '' when every model is ready, else why not."""
        port = free_port()
        with open(self.work / "jitembed-server.log", "ab") as logf:
            self.procs["b"] = subprocess.Popen(pinned(self.args.server_cores, [
                self.args.server, "--model-repository", str(self.work / "repo"), "--host", "127.0.0.1", "--port", str(port),
                "--io-threads", "1", "--preprocess-threads", "1"]), stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        self.urls["b"] = f"http://127.0.0.1:{port}"
        p = self.procs["b"]
        wait_for(lambda: p.poll() is not None or self.failed_models(models) or
                 all(http_ok(f"{self.urls['b']}/v2/models/{m}/ready") for m in models), 300, "jitembed-server")
        if p.poll() is not None:
            return f"exited with {p.returncode} (log {self.work / 'jitembed-server.log'})"
        reason = self.failed_models(models)
        if not reason:
            log(f"arm b ready at {self.urls['b']}")
        return reason

    def start_p(self, models: list) -> None:
        """jitembed.Server(model_repository=...) in a Python process (python_server.py)."""
        port = free_port()
        with open(self.work / "python-server.log", "ab") as logf:
            self.procs["p"] = subprocess.Popen(pinned(self.args.server_cores, [
                sys.executable, str(HERE / "python_server.py"), "--repo", str(self.work / "repo"), "--port", str(port),
                "--threads", str(self.args.threads)]), stdout=logf, stderr=subprocess.STDOUT, env=self.env)
        self.urls["p"] = f"http://127.0.0.1:{port}"
        p = self.procs["p"]
        wait_for(lambda: p.poll() is not None or all(http_ok(f"{self.urls['p']}/v2/models/{m}/ready") for m in models), 300,
                 "python_server")
        if p.poll() is not None:
            raise SystemExit(f"bench_models: python_server exited with {p.returncode} (log {self.work / 'python-server.log'})")
        log(f"arm p ready at {self.urls['p']}")

    def stop_one(self, arm: str) -> None:
        p = self.procs.pop(arm, None)
        if p and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def failed_models(self, models: list) -> str:
        """jitembed-server's repository index: the reasons of the models that failed to load."""
        try:
            req = urllib.request.Request(f"{self.urls['b']}/v2/repository/index", data=b"{}", method="POST")
            with urllib.request.urlopen(req, timeout=2) as r:
                index = json.loads(r.read())
        except Exception:
            return ""
        return "; ".join(e.get("reason", "") for e in index if e.get("name") in models and e.get("state") == "UNAVAILABLE")

    def start_ray(self) -> None:
        from jitembed.ray.local import local_cluster

        os.environ.update(OMP_NUM_THREADS=str(self.args.threads), MKL_NUM_THREADS=str(self.args.threads))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, cores(self.args.server_cores))  # Ray's processes inherit it (the raylet starts every worker)
        try:
            self.ray_ctx = local_cluster(num_cpus=4, object_store_mb=200)
            self.ray = self.ray_ctx.__enter__()
        finally:
            os.sched_setaffinity(0, mine)
        self.urls["d"] = f"http://{self.ray['http']}"
        log(f"arm d: Ray cluster up, Serve's proxy at {self.urls['d']}")

    def deploy_ray(self, wl: dict) -> None:
        from ray import serve
        import ray_encoder

        app = ray_encoder.Encoder.bind(wl["model"], str(wl["file"]), wl["size"], self.args.threads, wl["out"], MAX_BATCH, DELAY_US / 1e6)
        serve.run(app, name="bench_models", route_prefix="/", blocking=False)
        wait_for(lambda: http_ok(f"{self.urls['d']}/v2/models/{wl['model']}"), 300, f"Ray deployment of {wl['model']}")

    def cpu_s(self, arm: str) -> float:
        arm = "b" if arm == "b_draft" else arm  # one server
        if arm == "d":
            return tree_cpu_s(lambda: cmdline_pids(self.ray["temp_dir"]))
        p = self.procs.get(arm)
        return tree_cpu_s(lambda: {p.pid}) if p else 0.0

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.ray_ctx is not None:
            self.ray_ctx.__exit__(None, None, None)


def cores(spec: str) -> set:
    out = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


class Eager:
    """Arm (a): eager_worker.py, pinned to the server cores."""

    def __init__(self, args, wl_name: str, wl: dict):
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
        self.p = subprocess.Popen(pinned(args.server_cores, [sys.executable, str(HERE / "eager_worker.py"), wl_name, str(wl["file"]),
                                                              str(wl["size"]), str(args.threads), *map(str, wl["images"])]),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = json.loads(self.p.stdout.readline())

    def run(self, kind: str, batch: int, seconds: float, min_batches: int) -> dict:
        self.p.stdin.write(json.dumps({"kind": kind, "batch": batch, "seconds": seconds, "min_batches": min_batches}) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(timeout=30)


def drive(args, url: str, wl: dict, c: int, input_name: str, identity: bool, servers: Servers, arm: str) -> dict:
    model = wl["draft_model"] if arm == "b_draft" else wl["model"]
    cmd = [args.client, "--endpoint", url, "--model", model, "--input", input_name,
           "--concurrency", str(c), "--seconds", str(args.seconds), "--warmup-s", str(args.warmup), "--min-batches", str(args.min_batches),
           *sum((["--image", str(f)] for f in wl["images"]), [])]
    if identity:
        cmd.append("--identity")
    cpu0 = servers.cpu_s(arm)
    p = subprocess.run(pinned(args.client_cores, cmd), capture_output=True, text=True, timeout=900)
    cpu1 = servers.cpu_s(arm)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"failed": -1, "first_error": p.stderr[-800:], "images_per_s": 0.0}
    r = json.loads(lines[-1])
    r["server_cpu_ms_per_image"] = 1e3 * (cpu1 - cpu0) / max(1, r["completed_total"])
    return r


def u8_config(name: str, size: int, out: list) -> str:
    """jitembed-server without the preprocessing parameters (image_resize, image_normalize: the preprocess
    work): the reference JPEG preprocessing (decode + stretch to [H, W, 3] u8) and batch_transform nchw_signed."""
    return (f'name: "{name}"\nplatform: "pytorch_libtorch"\nmax_batch_size: {MAX_BATCH}\n'
            f'input [ {{ name: "INPUT__0" data_type: TYPE_UINT8 dims: [ {size}, {size}, 3 ] }} ]\n'
            f'output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ {", ".join(map(str, out))} ] }} ]\n'
            "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
            f"dynamic_batching {{ preferred_batch_size: [ 8, {MAX_BATCH} ] max_queue_delay_microseconds: {DELAY_US} }}\n"
            'parameters { key: "modality" value: { string_value: "image" } }\n'
            'parameters { key: "batch_transform" value: { string_value: "nchw_signed" } }\n')


def metadata(url: str, model: str) -> dict:
    with urllib.request.urlopen(f"{url}/v2/models/{model}", timeout=10) as r:
        return json.loads(r.read())


TARGETS = {"vae": [("b", "a", 0.9), ("p", "b", 0.9)],
           "light": [("b", "c", 1.3), ("b", "d", 3.0), ("b_draft", "c", 1.3), ("b_draft", "d", 3.0), ("p", "b", 0.8), ("p", "d", 3.0)]}
NAMES = {"a": "eager PyTorch (in-process)", "a_ts": "TorchScript (in-process)", "b": "jitembed-server + jit_client",
         "p": "jitembed.Server, Python torch",
         "b_draft": "jitembed, image_decode draft",
         "c": "Triton Python backend", "d": "Ray Serve @serve.batch"}


def report(results: list, arms: list, concs: list, wls: dict, info: dict, elapsed: float) -> None:
    best = {}
    for r in results:
        key = (r["workload"], r["arm"], r["concurrency"])
        if key not in best or r["images_per_s"] > best[key]["images_per_s"]:
            best[key] = r
    rows, ratios = [], []
    print(f"\n{'workload':<8} {'c':>3} {'arm':<30} {'images/s':>9} {'p50 ms':>9} {'p99 ms':>9} {'srv cpu ms/img':>14} "
          f"{'enc cpu ms/img':>14} {'vs a':>6} {'vs c':>6} {'vs d':>6}")
    for w in wls:
        for c in concs:
            enc = best.get((w, "a", c), {}).get("cpu_ms_per_image")
            for arm in arms:
                r = best.get((w, arm, c))
                if not r:
                    continue
                vs = {o: (r["images_per_s"] / best[(w, o, c)]["images_per_s"] if (w, o, c) in best and best[(w, o, c)]["images_per_s"] else None)
                      for o in ("a", "c", "d")}
                row = {"bench": f"models/{w}/{arm}/c{c}", "workload": w, "arm": arm, "what": NAMES[arm], "concurrency": c,
                       "images_per_s": round(r["images_per_s"], 2), "p50_ms": round(r.get("p50_ms", 0), 2), "p99_ms": round(r.get("p99_ms", 0), 2),
                       "measured": r.get("measured"), "failed": r.get("failed"),
                       "server_cpu_ms_per_image": round(r["server_cpu_ms_per_image"], 2) if "server_cpu_ms_per_image" in r else None,
                       "encoder_cpu_ms_per_image": round(enc, 2) if enc else None,
                       **{f"ratio_vs_{o}": round(v, 3) for o, v in vs.items() if v is not None and o != arm}}
                if arm in ("a", "a_ts"):
                    row["cpu_ms_per_image"] = round(r["cpu_ms_per_image"], 2)
                rows.append(row)
                f = lambda v: f"{v:6.2f}" if v is not None and v != 1.0 else "     -"  # noqa: E731
                srv = row["server_cpu_ms_per_image"] if row["server_cpu_ms_per_image"] is not None else row.get("cpu_ms_per_image", 0)
                print(f"{w:<8} {c:>3} {NAMES[arm]:<30} {row['images_per_s']:>9.2f} {row['p50_ms']:>9.1f} {row['p99_ms']:>9.1f} "
                      f"{srv:>14.2f} {(enc or 0):>14.2f} {f(vs['a'] if arm != 'a' else None)} {f(vs['c'] if arm != 'c' else None)} "
                      f"{f(vs['d'] if arm != 'd' else None)}")
            for x, y, t in TARGETS.get(w, []):
                if (w, x, c) in best and (w, y, c) in best and best[(w, y, c)]["images_per_s"]:
                    v = best[(w, x, c)]["images_per_s"] / best[(w, y, c)]["images_per_s"]
                    ratios.append({"bench": f"models/{w}/{x}_vs_{y}/c{c}", "goal": f"{w} c={c}: {x} >= {t} x {y}", "ratio": round(v, 3),
                                   "threshold": t, "pass": v >= t})
    print()
    for g in ratios:
        print(f"{g['goal']}: {g['ratio']} ({'pass' if g['pass'] else 'MISSED'})")
    print(f"\nrun: {json.dumps(info)} in {elapsed:.0f} s\n")
    for r in rows + ratios + [{"bench": "models/run", **info, "seconds_total": round(elapsed)}]:
        print(json.dumps(r))
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build/release", help="build tree (programs, model_repository)")
    ap.add_argument("--model-repository", type=Path, help="the exported repository (default BUILD/model_repository)")
    ap.add_argument("--server", help="jitembed-server (default BUILD/tools/jitembed-server)")
    ap.add_argument("--client", help="bench_models_client (default BUILD/benchmarks/models/bench_models_client)")
    ap.add_argument("--triton-venv", type=Path, default=Path(os.environ.get("JITEMBED_TRITON_VENV", ROOT / ".venv-triton")))
    ap.add_argument("--work", type=Path, help="scratch directory (default BUILD/bench_models)")
    ap.add_argument("--workloads", default="vae,light")
    ap.add_argument("--arms", help="a,a_ts,b,p,b_draft,c,d (default: all; --quick: a,b,p,b_draft,c,d)")
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 2; --quick 1)")
    ap.add_argument("--seconds", type=float, help="measured seconds per window, at least (default 3; --quick 1.5)")
    ap.add_argument("--warmup", type=float, default=0.5, help="warm-up seconds per window, at least")
    ap.add_argument("--min-batches", type=int, help="warm up and measure at least this many x concurrency images (default 2; --quick 1)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads in every arm")
    ap.add_argument("--server-cores", default="0", help="taskset cores of every server arm and of (a)")
    ap.add_argument("--client-cores", default="1", help="taskset cores of the load generator")
    ap.add_argument("--jitembed-config", choices=["auto", "exported", "u8"], default="auto",
                    help="jitembed-server's configs: the exported ones (image_resize, image_normalize), the u8 + batch_transform "
                         "fallback, or auto (exported when the server loads them)")
    ap.add_argument("--quick", action="store_true", help="one round, short windows (about 3 minutes)")
    args = ap.parse_args()
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.seconds = args.seconds or (1.5 if args.quick else 3.0)
    args.min_batches = args.min_batches or (1 if args.quick else 2)
    arms = (args.arms or ("a,b,p,b_draft,c,d" if args.quick else "a,a_ts,b,p,b_draft,c,d")).split(",")
    concs = [int(c) for c in args.concurrency.split(",")]
    args.server = args.server or str(args.build / "tools/jitembed-server")
    args.client = args.client or str(args.build / "benchmarks/models/bench_models_client")
    work = (args.work or args.build / "bench_models").resolve()
    t_start = time.monotonic()
    wls_all = prepare(work, (args.model_repository or args.build / "model_repository").resolve())
    wls = {k: wls_all[k] for k in args.workloads.split(",")}
    flavour = args.jitembed_config
    if flavour == "u8":
        for w in wls_all.values():
            for m in [w["model"]] + [w[k] for k in ("draft_model",) if k in w]:
                (work / "repo" / m / "config.pbtxt").write_text(u8_config(m, w["size"], w["out"]))
    servers = Servers(args, work, wls_all)
    results, info = [], {"server_cores": args.server_cores, "client_cores": args.client_cores, "torch_threads": args.threads,
                         "rounds": args.rounds, "seconds": args.seconds, "min_batches": args.min_batches}
    try:
        def fallback(reason: str) -> None:
            nonlocal flavour
            if flavour != "auto":
                raise SystemExit(f"bench_models: jitembed-server: {reason}")
            log(f"jitembed-server does not serve the exported configs ({reason}); "
                "falling back to the u8 + batch_transform configs")
            for w in wls_all.values():
                for m in [w["model"]] + [w[k] for k in ("draft_model",) if k in w]:
                    (work / "repo" / m / "config.pbtxt").write_text(u8_config(m, w["size"], w["out"]))
            flavour = "u8"

        servers.start(arms, fallback)
        if "b" in arms:
            info["jitembed_config"] = "exported" if flavour == "auto" else flavour
        log(f"servers up after {time.monotonic() - t_start:.0f} s")
        for wname, wl in wls.items():
            inputs = {}
            if "b" in arms or "b_draft" in arms:
                meta = metadata(servers.urls["b"], wl["model"])
                inputs["b"] = inputs["b_draft"] = inputs["p"] = meta["inputs"][0]["name"]
                servers.urls["b_draft"] = servers.urls["b"]
                info[f"{wname}_jitembed_preprocess_key"] = meta.get("parameters", {}).get("preprocess_key")
            eager = Eager(args, wname, wl) if ("a" in arms or "a_ts" in arms) else None
            if eager:
                info[f"{wname}_eager_vs_torchscript_max_abs"] = eager.info["eager_vs_torchscript_max_abs"]
            if "d" in arms:
                servers.deploy_ray(wl)
            for rnd in range(args.rounds):
                for ci, c in enumerate(concs):
                    k = (rnd + ci) % len(arms)
                    for arm in arms[k:] + arms[:k]:  # the order rotates: drift hits every arm alike
                        if arm == "b_draft" and "draft_model" not in wl:
                            continue
                        if arm in ("a", "a_ts"):
                            r = eager.run("eager" if arm == "a" else "ts", c, args.seconds, args.min_batches)
                        else:
                            r = drive(args, servers.urls[arm], wl, c, inputs.get(arm, "INPUT0"), arm not in ("b", "b_draft", "p"), servers, arm)
                        r.update(workload=wname, arm=arm, concurrency=c, round=rnd)
                        results.append(r)
                        log(f"{wname} c={c} {arm}: {r['images_per_s']:.1f} images/s p50 {r.get('p50_ms', 0):.1f} ms "
                            f"p99 {r.get('p99_ms', 0):.1f} ms failed {r.get('failed')}" + (f" ({r.get('first_error')})" if r.get("failed") else ""))
            if eager:
                eager.close()
    finally:
        servers.stop()
    report(results, arms, concs, wls, info, time.monotonic() - t_start)
    return 0 if all(r.get("failed") == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
