"""The jitembed embedding service as a Ray Serve deployment.

Ray carries the control plane (placement, fractional GPUs, autoscaling, health checks, restarts, rolling
updates); the data plane stays C++: each replica hosts a jitembed embedding server in its own process
(``jitembed.Server``, so Ray's GPU assignment applies and the server dies with the replica) on
``node_ip:port``, registers that address in the application's registry actor, and trainers' JIT clients talk
to the servers directly, following ``GET /<app>/endpoints``. Through Ray's HTTP proxy the deployment also
answers KServe v2 requests (``/<app>/v2/...``) by handing the raw request to the embedded server
(``Server.handle``): the server's own dynamic batcher is the only batching layer.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import logging
import os
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from . import _registry
from .autoscaling import LOAD_METRIC, autoscaling_config

logger = logging.getLogger("ray.serve")

# A 16x16 grey baseline JPEG (ffmpeg): the health probe's row for image models.
_PROBE_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAgAAAQABAAD//gAQTGF2YzU5LjM3LjEwMAD/2wBDAAgEBAQEBAUFBQUFBQYGBgYGBgYGBgYGBgYHBwcICAgH"
    "BwcGBgcHCAgICAkJCQgICAgJCQoKCgwMCwsODg4RERT/xABKAAEAAAAAAAAAAAAAAAAAAAAAAQEAAAAAAAAAAAAAAAAAAAAAEAEA"
    "AAAAAAAAAAAAAAAAAAAAEQEAAAAAAAAAAAAAAAAAAAAA/8AAEQgAEAAQAwEiAAIRAAMRAP/aAAwDAQACEQMRAD8AAA//2Q=="
)


def make_server(models: Sequence[Any], **options: Any):
    """The embedded server: ``jitembed.Server``, in this process (Ray's GPU assignment applies to it and it
    dies with the replica). ``JITEMBED_RAY_SERVER=subprocess`` runs the jitembed-server program as a child
    process instead (a development stand-in for trees without the compiled module; spec strings only)."""
    if os.environ.get("JITEMBED_RAY_SERVER") == "subprocess":
        from ._standin import SubprocessServer

        if any(not isinstance(m, str) for m in models) or options.get("model_repository"):
            raise RuntimeError("JITEMBED_RAY_SERVER=subprocess serves model specs only, not Python models or a repository")
        return SubprocessServer(models, **options)
    import jitembed

    return jitembed.Server(models=list(models), **options)


def replica_device() -> str:
    """Where this replica's Python models run: its first Ray-assigned GPU ("cuda:0": Ray sets
    CUDA_VISIBLE_DEVICES to the replica's GPUs) when it was given one and torch sees CUDA, else "cpu"."""
    if not ray.get_gpu_ids():
        return "cpu"
    try:
        import torch

        return "cuda:0" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def build_models(models: Sequence[Any], device: str) -> List[Any]:
    """Spec strings as they are; factories called here, in the replica (weights load on its node): with
    ``device=`` when they take it. A factory returns a jitembed.Model or a list of them."""
    import inspect

    out: List[Any] = []
    for m in models:
        if isinstance(m, str) or not callable(m):
            out.append(m)
            continue
        try:
            takes_device = "device" in inspect.signature(m).parameters
        except (TypeError, ValueError):
            takes_device = False
        made = m(device=device) if takes_device else m()
        out.extend(made if isinstance(made, (list, tuple)) else [made])
    return out


def _keep_serve_grpc_on_loopback() -> None:
    """On a loopback-only node, Serve 2.60's per-replica inter-deployment gRPC server still binds "[::]:0"
    (ray/serve/_private/replica.py, after the user constructor): bind it to 127.0.0.1 instead. Only called
    when this node's address is 127.0.0.1, where every peer reaches the replica on loopback anyway."""
    try:
        import ray.serve._private.replica as replica_module

        original = replica_module.add_port_to_grpc_server
        if getattr(original, "_jitembed_loopback", False):
            return

        def loopback(server, address):
            return original(server, "127.0.0.1:0" if address == "[::]:0" else address)

        loopback._jitembed_loopback = True
        replica_module.add_port_to_grpc_server = loopback
    except Exception as e:  # another Ray version: leave it as it is
        logger.warning("jitembed: could not keep Serve's replica gRPC server on loopback: %s", e)


def _model_name(spec: Any) -> str:
    return spec.split(":", 1)[0] if isinstance(spec, str) else spec.name


def kserve_bytes_request(input_name: str, rows: Sequence[bytes], timeout_us: Optional[int] = None) -> Tuple[Dict[str, str], bytes]:
    """A KServe v2 request with one BYTES input [N, 1] in Triton's binary extension (headers, body)."""
    raw = b"".join(len(r).to_bytes(4, "little") + r for r in rows)
    header: Dict[str, Any] = {
        "inputs": [{"name": input_name, "shape": [len(rows), 1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(raw)}}],
        "parameters": {"binary_data_output": True},
    }
    if timeout_us:
        header["parameters"]["timeout"] = int(timeout_us)
    h = json.dumps(header).encode()
    return {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(h))}, h + raw


def probe(srv: Any, model: str, row: Optional[bytes] = None, deadline_ms: int = 2000) -> None:
    """The health probe: one row through the model's inference path with a deadline (the KServe `timeout`
    parameter: the server answers 504 at the deadline, whether the row is still queued or its batch is still
    running; a model whose batch overran a deadline is not ready until it returns). The row: `row`, else a text
    row or a 16x16 JPEG by the model's input; a model with neither (video) is checked by readiness.
    Raises RuntimeError naming the model and the answer."""
    status, _, body = srv.handle("GET", f"/v2/models/{model}", {}, b"")
    if status != 200:
        raise RuntimeError(f"health: model '{model}' metadata answered {status}: {body[:200]!r}")
    name = json.loads(body)["inputs"][0]["name"]
    if row is None:
        row = {"text": b"jitembed health probe", "image": _PROBE_JPEG}.get(name)
    if row is None:
        status, _, body = srv.handle("GET", f"/v2/models/{model}/ready", {}, b"")
    else:
        headers, req = kserve_bytes_request(name, [row], timeout_us=int(deadline_ms) * 1000)
        t0 = time.monotonic()
        status, _, body = srv.handle("POST", f"/v2/models/{model}/infer", headers, req)
        took = time.monotonic() - t0
        if status == 200 and took > deadline_ms / 1000.0:  # a row already running is not cut at the deadline
            raise RuntimeError(f"health: probe inference of '{model}' took {took:.2f} s (deadline {deadline_ms} ms)")
    if status != 200:
        raise RuntimeError(f"health: probe of '{model}' answered {status}: {body[:200]!r}")


class EmbeddingServer:
    """One replica: an embedding server, its registry entry and heartbeat, health probe, load metric, drain.

    models: model specs as ``jitembed-server --model`` takes them (``NAME[:k=v,...]``) and factories of
        jitembed.Model (Python encoders), called in the replica with ``device=`` (replica_device) when they take it.
    model_repository: a Triton-style model repository directory on the replica's node, served beside them
        (its TorchScript / AOTInductor models by this replica's torch, on its GPU when it has one).
    server_options: passed to ``jitembed.Server`` (io_threads, preprocess_threads, ...); host/port are chosen
        here (this node's IP, an ephemeral port).
    heartbeat_s / registry_ttl_s: registry heartbeat period and expiry (≤ 1 s, 3 s).
    health_model / health_row / health_deadline_ms: the probe of check_health (default: the first model, a
        small row of its modality, 2 s).
    leave_grace_s: on shutdown, how long the replica keeps serving after leaving the registry (clients poll
        the endpoints URL every 250 ms by default), before its server answers 503 and drains.
    """

    def __init__(self, models: Sequence[Any], server_options: Optional[Dict[str, Any]] = None, heartbeat_s: float = 0.5,
                 registry_ttl_s: float = _registry.DEFAULT_TTL_S, health_model: Optional[str] = None,
                 health_row: Optional[bytes] = None, health_deadline_ms: int = 2000, leave_grace_s: float = 1.0,
                 drain_timeout_s: float = 20.0, registry_app: Optional[str] = None,
                 model_repository: Optional[str] = None):
        ctx = serve.get_replica_context()
        self._app = registry_app or ctx.app_name or "jitembed"
        self._replica_id = str(getattr(ctx.replica_id, "unique_id", ctx.replica_id))
        self._node_ip = ray.util.get_node_ip_address()
        if self._node_ip == "127.0.0.1":
            _keep_serve_grpc_on_loopback()
        opts = dict(server_options or {})
        opts.update(host=self._node_ip, port=0)
        self._gpu_ids = [str(g) for g in ray.get_gpu_ids()]
        self._device = replica_device()
        built = build_models(models, self._device)
        if model_repository:
            from .. import _repository

            _repository.set_default_device(self._device)
            opts["model_repository"] = model_repository
        self._srv = make_server(built, **opts)
        self._endpoint = f"{self._node_ip}:{self._srv.port}"
        first = _model_name(built[0]) if built else next(iter(sorted(n for n, _ in self._srv.loaded())), None)
        if first is None:
            raise RuntimeError("jitembed replica: no model loaded (models and the repository are empty or failed)")
        self._health_model = health_model or first
        self._health_row = health_row
        self._health_deadline_ms = int(health_deadline_ms)
        self._leave_grace_s = float(leave_grace_s)
        self._drain_timeout_s = float(drain_timeout_s)
        self._heartbeat_s = min(float(heartbeat_s), 1.0)
        self._versions: Dict[str, str] = {}  # model -> version loaded through user_config
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="jitembed-handle")
        self._leaving = threading.Event()
        self._registry = _registry.get_registry(self._app, ttl_s=registry_ttl_s)
        ray.get(self._registry.register.remote(self._replica_id, self._endpoint), timeout=30)
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="jitembed-heartbeat", daemon=True)
        self._heartbeat.start()
        logger.info("jitembed replica %s serves %s on %s (device %s)", self._replica_id, [_model_name(m) for m in built],
                    self._endpoint, self._device)

    # -- discovery ----------------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._leaving.wait(self._heartbeat_s):
            try:
                if not ray.get(self._registry.heartbeat.remote(self._replica_id, self._endpoint), timeout=self._heartbeat_s * 4):
                    return
            except Exception as e:  # the registry restarts (max_restarts=-1): keep beating
                logger.warning("jitembed registry heartbeat failed: %s", e)
                try:
                    self._registry = _registry.get_registry(self._app)
                except Exception:
                    pass

    def server_info(self) -> Dict[str, Any]:
        """Where this replica's server runs: {"endpoint", "pid" (this replica's process), "in_process", "gpu_ids"
        (ray.get_gpu_ids()), "device" (where its Python models run), "models" (loaded (name, version))}."""
        return {"endpoint": self._endpoint, "pid": os.getpid(), "in_process": not hasattr(self._srv, "_proc"),
                "gpu_ids": self._gpu_ids, "device": self._device, "models": [list(m) for m in self._srv.loaded()]}

    # -- HTTP through Ray's proxy -------------------------------------------------------------------------
    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        root = request.scope.get("root_path", "") or ""
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        if path in ("/endpoints", "/endpoints/"):
            text = await self._registry.endpoints_text.remote()
            return Response(text, media_type="text/plain")
        target = path + (("?" + request.url.query) if request.url.query else "")
        body = await request.body()
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "inference-header-content-length", "authorization")}
        loop = asyncio.get_running_loop()
        status, out_headers, out_body = await loop.run_in_executor(self._pool, self._srv.handle, request.method, target, headers, body)
        keep = {k: v for k, v in out_headers.items() if k.lower() in ("content-type", "inference-header-content-length", "retry-after")}
        return Response(content=out_body, status_code=status, headers=keep)

    # -- health -------------------------------------------------------------------------------------------
    def check_health(self) -> None:
        """Raises unless a one-row inference answers 200 within the deadline (readiness alone only says the
        server is not shutting down)."""
        if self._leaving.is_set():
            return  # shutting down: Serve is stopping this replica anyway
        probe(self._srv, self._health_model, self._health_row, self._health_deadline_ms)

    # -- autoscaling --------------------------------------------------------------------------------------
    def record_autoscaling_stats(self) -> Dict[str, float]:
        # Server.status(): counters read under the service's locks, no statistics JSON rendered and parsed.
        # Admitted rows (decode to response) already include the queued ones.
        status = self._srv.status()
        inflight = sum(float(s.get("inflight_rows", 0)) for s in status.values())
        queued = sum(float(s.get("queued_rows", 0)) for s in status.values())
        return {LOAD_METRIC: inflight, "jitembed_queued_rows": queued}

    # -- in-place model updates ---------------------------------------------------------------------------
    def reconfigure(self, user_config: Dict[str, Any]) -> None:
        """user_config ``{"models": [{"name": N, "version": V, "spec": "N:k=v,..."}]}``: each entry whose
        version differs from the loaded one is hot-swapped in (``Server.load``: warm-up, switch, drain; with
        the server's version policy, latest 1 by default, the old version is unloaded)."""
        for m in (user_config or {}).get("models", []):
            name, version = m["name"], str(m.get("version", "1"))
            if self._versions.get(name) == version:
                continue
            if any(n == name and v == version for n, v in self._srv.loaded()):
                self._versions[name] = version
                continue
            self._srv.load(name, version=version, spec=m.get("spec"))
            self._versions[name] = version
            logger.info("jitembed replica %s loaded %s version %s", self._replica_id, name, version)

    def loaded(self) -> List[Tuple[str, str]]:
        return list(self._srv.loaded())

    # -- drain ---------------------------------------------------------------------------------------------
    def _inflight_rows(self) -> float:
        try:
            return sum(float(s.get("inflight_rows", 0)) for s in self._srv.status().values())
        except Exception:
            return 0.0

    async def __del__(self):
        """Scale-down and restarts: leave the registry, keep serving while clients drop this endpoint
        (leave_grace_s), then readiness and new requests 503, in-flight requests finish, the server stops."""
        if self._leaving.is_set():
            return
        self._leaving.set()
        try:
            await self._registry.leave.remote(self._replica_id)
        except Exception as e:
            logger.warning("jitembed replica %s could not leave the registry: %s", self._replica_id, e)
        await asyncio.sleep(self._leave_grace_s)
        self._srv.begin_drain()
        deadline = time.monotonic() + self._drain_timeout_s
        while self._inflight_rows() > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.get_running_loop().run_in_executor(None, self._srv.stop)
        self._pool.shutdown(wait=False)


#: The Serve deployment (options and bind() arguments: see build_app and EmbeddingServer).
EmbeddingDeployment = serve.deployment(
    EmbeddingServer,
    name="jitembed",
    max_ongoing_requests=64,
    health_check_period_s=2.0,
    health_check_timeout_s=10.0,
    graceful_shutdown_wait_loop_s=0.5,
    graceful_shutdown_timeout_s=30.0,
    ray_actor_options={"num_cpus": 0.25},
)


def build_app(models: Sequence[Any] = (), *, model_repository: Optional[str] = None, num_replicas: Optional[int] = None, autoscaling: Optional[Dict[str, Any]] = None,
              num_gpus: float = 0.0, num_cpus: float = 0.25, user_config: Optional[Dict[str, Any]] = None,
              max_ongoing_requests: int = 64, health_check_period_s: float = 2.0, health_check_timeout_s: float = 10.0,
              code_version: str = "1", **replica_kwargs: Any) -> serve.Application:
    """The application to ``serve.run(app, name=APP, route_prefix=f"/{APP}")``.

    num_replicas or autoscaling (``autoscaling.autoscaling_config(...)`` keys: min/max replicas,
    target_rows_per_replica, delays) — with neither, 1 replica. num_gpus may be fractional (0.25: four
    replicas per GPU). replica_kwargs go to EmbeddingServer (server_options, heartbeat_s, leave_grace_s, ...).

    models: spec strings (built-in models) and factories of jitembed.Model (Python encoders: called inside each
    replica, so weights load on the replica's node; ``factory(device=...)`` gets the replica's device, "cuda:0"
    with num_gpus > 0 on a GPU node, else "cpu"); model_repository: a repository directory on the nodes.
    Several encoders share a GPU through fractional num_gpus.

    code_version: the deployment's version. ``serve.run`` of an application whose deployment has no version
    gives it a random one, which makes every redeploy a rolling restart; with a fixed version a redeploy that
    changes only ``user_config`` reconfigures the running replicas in place (the hot swap) and one that
    changes only ``num_replicas`` scales. Change it to roll the replicas (new code, new models list).
    """
    opts: Dict[str, Any] = {
        "ray_actor_options": {"num_cpus": num_cpus, "num_gpus": num_gpus},
        "max_ongoing_requests": max_ongoing_requests,
        "health_check_period_s": health_check_period_s,
        "health_check_timeout_s": health_check_timeout_s,
    }
    if autoscaling is not None:
        opts["autoscaling_config"] = autoscaling if "policy" in autoscaling else autoscaling_config(**autoscaling)
    else:
        opts["num_replicas"] = num_replicas or 1
    if user_config is not None:
        opts["user_config"] = user_config
    # Serve 2.60 reserves `version` in options() to itself (_internal); it is what makes in-place updates
    # possible from serve.run (the declarative config path sets it the same way).
    opts["version"] = f"jitembed-{code_version}"
    opts["_internal"] = True
    if not models and not model_repository:
        raise ValueError("build_app: neither models nor model_repository")
    if model_repository:
        replica_kwargs["model_repository"] = str(model_repository)
    return EmbeddingDeployment.options(**opts).bind(list(models), **replica_kwargs)
