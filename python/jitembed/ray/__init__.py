"""jitembed.ray: the jitembed embedding service on Ray Serve (pinned: ray[serve]==2.60.0).

    from ray import serve
    from jitembed.ray import build_app, autoscaling_config
    app = build_app(["text-embed"], autoscaling=autoscaling_config(min_replicas=1, max_replicas=8), num_gpus=0.5)
    serve.run(app, name="embed", route_prefix="/embed")
    # trainers: client_options.endpoints.url = "http://<head or any proxy node>:8000/embed/endpoints"

See docs/ray.md (multi-node guide) and examples/ray_serve/. Hybrid training with one actor group per module:
``jitembed.ray.hybrid`` (``HybridConfig``, ``train``; loaded on first use), docs/parallel.md "On Ray".
"""

from ._registry import EndpointRegistry, get_registry, kill_registry, registry_name
from .autoscaling import LOAD_METRIC, QueueDepthPolicy, autoscaling_config
from .deployment import EmbeddingDeployment, EmbeddingServer, build_app, kserve_bytes_request, make_server, probe

__all__ = [
    "EmbeddingDeployment", "EmbeddingServer", "EndpointRegistry", "LOAD_METRIC", "QueueDepthPolicy", "autoscaling_config",
    "build_app", "get_registry", "kill_registry", "kserve_bytes_request", "make_server", "probe", "registry_name",
    "HybridConfig", "train_hybrid",
]


def __getattr__(name):
    # jitembed.ray.hybrid is imported on first use only: `import jitembed.ray` costs what it did before
    if name in ("HybridConfig", "train_hybrid"):
        from . import hybrid

        return hybrid.HybridConfig if name == "HybridConfig" else hybrid.train
    raise AttributeError(f"module 'jitembed.ray' has no attribute '{name}'")
