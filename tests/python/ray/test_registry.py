"""The discovery registry's rules without Ray (the actor class is a plain class): register, heartbeat, expiry
after the TTL, leave (a late heartbeat does not re-add), and the client's endpoint-list format."""

from __future__ import annotations

import jitembed.ray._registry as registry_module
from jitembed.ray import EndpointRegistry


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_registry_expiry_leave_and_format(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(registry_module.time, "monotonic", clock)
    reg = EndpointRegistry(ttl_s=3.0)
    reg.register("r1", "127.0.0.1:9001")
    reg.register("r2", "127.0.0.1:9002")
    assert reg.endpoints() == ["127.0.0.1:9001", "127.0.0.1:9002"]
    # r1 keeps beating every second, r2 stops: r2 is gone once 3 s passed since its last beat.
    for _ in range(3):
        clock.t += 1.0
        assert reg.heartbeat("r1", "127.0.0.1:9001")
    assert reg.endpoints() == ["127.0.0.1:9001", "127.0.0.1:9002"]  # exactly 3 s: not yet expired
    clock.t += 0.5
    assert reg.endpoints() == ["127.0.0.1:9001"]
    # An expired replica that beats again is back (it was alive, only slow).
    assert reg.heartbeat("r2", "127.0.0.1:9002")
    assert reg.endpoints() == ["127.0.0.1:9001", "127.0.0.1:9002"]
    # A replica that left is not re-added by a heartbeat already in flight.
    reg.leave("r2")
    assert not reg.heartbeat("r2", "127.0.0.1:9002")
    assert reg.entries() == {"r1": "127.0.0.1:9001"}
    # The JIT client's endpoint-list format: http://host:port per line, # comments.
    lines = reg.endpoints_text().splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == ["http://127.0.0.1:9001"]
    # Two replicas behind one address (a restart reusing a port) are listed once.
    reg.register("r3", "127.0.0.1:9001")
    assert reg.endpoints() == ["127.0.0.1:9001"]
