"""Discovery: a detached, named Ray actor that holds the live embedding servers of one Serve application.

Replicas register ``node_ip:port`` and heartbeat (at least every second); an entry not renewed for ``ttl_s``
(3 s) expires, so a replica that died without leaving drops out on its own. ``endpoints_text()`` renders the
JIT client's endpoint-list format (``http://host:port`` per line, ``#`` comments), which the deployment serves
at ``GET /<app>/endpoints`` and the C++ client follows with ``client_options.endpoints.url``.
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Tuple

import ray

#: Ray namespace of every jitembed registry actor (detached actors are looked up by namespace + name).
NAMESPACE = "jitembed"
DEFAULT_TTL_S = 3.0


def registry_name(app_name: str) -> str:
    return f"jitembed-registry-{app_name}"


class EndpointRegistry:
    """replica id -> (endpoint, last heartbeat on this actor's monotonic clock). Methods are cheap and
    synchronous: one Ray actor processes them one at a time, so no lock is needed."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S):
        self._ttl_s = float(ttl_s)
        self._entries: Dict[str, Tuple[str, float]] = {}
        self._left: Dict[str, float] = {}  # replicas that left on purpose: a late heartbeat must not re-add them

    def _expire(self) -> None:
        now = time.monotonic()
        for rid in [r for r, (_, seen) in self._entries.items() if now - seen > self._ttl_s]:
            del self._entries[rid]
        for rid in [r for r, t in self._left.items() if now - t > 60.0]:
            del self._left[rid]

    def register(self, replica_id: str, endpoint: str) -> None:
        self._left.pop(replica_id, None)
        self._entries[replica_id] = (endpoint, time.monotonic())

    def heartbeat(self, replica_id: str, endpoint: str) -> bool:
        """Renews (or re-adds, after an expiry) the entry; False once the replica has left."""
        if replica_id in self._left:
            return False
        self._entries[replica_id] = (endpoint, time.monotonic())
        return True

    def leave(self, replica_id: str) -> None:
        self._entries.pop(replica_id, None)
        self._left[replica_id] = time.monotonic()

    def endpoints(self) -> List[str]:
        self._expire()
        return sorted({e for e, _ in self._entries.values()})

    def entries(self) -> Dict[str, str]:
        self._expire()
        return {r: e for r, (e, _) in self._entries.items()}

    def endpoints_text(self) -> str:
        eps = self.endpoints()
        return "# jitembed endpoints (Ray Serve registry)\n" + "".join(f"http://{e}\n" for e in eps)

    def ttl_s(self) -> float:
        return self._ttl_s


def get_registry(app_name: str, ttl_s: float = DEFAULT_TTL_S, create: bool = True) -> Optional["ray.actor.ActorHandle"]:
    """The application's registry actor, created (detached, named, tiny) when missing and `create`."""
    name = registry_name(app_name)
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        if not create:
            return None
    actor = ray.remote(EndpointRegistry).options(
        name=name, namespace=NAMESPACE, lifetime="detached", get_if_exists=True, num_cpus=0, max_restarts=-1
    )
    return actor.remote(ttl_s)


def kill_registry(app_name: str) -> None:
    """Removes the detached registry (it outlives the Serve application otherwise)."""
    handle = get_registry(app_name, create=False)
    if handle is not None:
        ray.kill(handle)
