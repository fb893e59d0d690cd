"""A Ray Serve autoscaling policy on the embedding servers' own queue depth.

Trainers reach the replicas directly (``/<app>/endpoints``), so Ray's request counting sees no load and its
default policy would never scale. Each replica reports its server's admitted rows (queued + running,
``record_autoscaling_stats``); this policy sizes the deployment so each replica holds about
``target_rows_per_replica`` of them, with Serve's ``upscale_delay_s`` / ``downscale_delay_s`` as hysteresis.

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
        state = dict(ctx.policy_state or {})
        per_replica = (ctx.aggregated_metrics or {}).get(self.metric, {}) or {}
        total = float(sum(per_replica.values()))
        current = ctx.target_num_replicas
        lo, hi = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas
        want = min(max(self.desired(total, current), lo), hi)
        now = ctx.current_time
        cfg = ctx.config
        state["total_rows"] = total
        if want == current or now is None:
            state.pop("since", None)
            state.pop("direction", None)
            return current, state
        direction = "up" if want > current else "down"
        if state.get("direction") != direction:
            state["direction"], state["since"] = direction, now
        delay = cfg.upscale_delay_s if direction == "up" else cfg.downscale_delay_s
        if now - state["since"] >= delay:
            state.pop("since", None)
            state.pop("direction", None)
            return want, state
        return current, state


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
