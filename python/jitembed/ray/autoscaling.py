"""A Ray Serve autoscaling policy on the embedding servers' own queue depth.

Trainers reach the replicas directly (``/<app>/endpoints``), so Ray's request counting sees no load and its
default policy would never scale. Each replica reports its server's admitted rows (queued + running,
``record_autoscaling_stats``); this policy sizes the deployment so each replica holds about
``target_rows_per_replica`` of them. Serve applies the bounds and ``upscale_delay_s`` / ``downscale_delay_s``
(hysteresis) to its answer.

Serve pickles this module by value into its controller: it imports the standard library only.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

#: the per-replica metric (record_autoscaling_stats key) the policy reads
LOAD_METRIC = "jitembed_load_rows"


class QueueDepthPolicy:
    """policy_kwargs: target_rows_per_replica (default 16), metric (default LOAD_METRIC)."""

    def __init__(self, target_rows_per_replica: float = 16.0, metric: str = LOAD_METRIC):
        if target_rows_per_replica <= 0:
            raise ValueError("target_rows_per_replica must be > 0")
        self.target = float(target_rows_per_replica)
        self.metric = metric

    def desired(self, total_rows: float, current: int) -> int:
        if total_rows <= 0:
            return 0 if current == 0 else 1
        return max(1, math.ceil(total_rows / self.target))

    def __call__(self, ctx: Any) -> Tuple[int, Dict[str, Any]]:
        # Serve wraps a custom policy: it applies min/max replicas, the scaling factors and
        # upscale_delay_s / downscale_delay_s (hysteresis) to the number returned here.
        per_replica = (ctx.aggregated_metrics or {}).get(self.metric, {}) or {}
        total = float(sum(per_replica.values()))
        state = {"total_rows": total}
        if not per_replica:  # no report yet (replicas starting): keep the current target
            return ctx.target_num_replicas, state
        return self.desired(total, ctx.target_num_replicas), state


def autoscaling_config(min_replicas: int = 1, max_replicas: int = 4, target_rows_per_replica: float = 16.0,
                       upscale_delay_s: float = 2.0, downscale_delay_s: float = 30.0, metrics_interval_s: float = 0.5,
                       look_back_period_s: float = 2.0, initial_replicas: int | None = None) -> Dict[str, Any]:
    """The deployment's autoscaling_config dict with QueueDepthPolicy (shorter delays for tests)."""
    cfg: Dict[str, Any] = {
        "min_replicas": min_replicas,
        "max_replicas": max_replicas,
        "upscale_delay_s": upscale_delay_s,
        "downscale_delay_s": downscale_delay_s,
        "metrics_interval_s": metrics_interval_s,
        "look_back_period_s": look_back_period_s,
        "policy": {
            "policy_function": "jitembed.ray.autoscaling:QueueDepthPolicy",
            "policy_kwargs": {"target_rows_per_replica": target_rows_per_replica},
        },
    }
    if initial_replicas is not None:
        cfg["initial_replicas"] = initial_replicas
    return cfg
