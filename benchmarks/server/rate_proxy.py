#!/usr/bin/env python3
"""A user-space rate-limiting TCP proxy: the link emulation of bench_wire_compression.py where `ip netns` / `tc`
(root) are missing. It listens on 127.0.0.1 and forwards every connection to one upstream address; each
direction (client -> server, server -> client) is one token bucket shared by all connections, like one htb
class per veth end: a rate in bits/s and a burst (256 KiB, as the netns setup's `burst 256k`). No added delay.

Two threads per connection (blocking recv / sendall release the GIL). A Python proxy has a ceiling of its own
(copies through user space); `--self-test` measures it unshaped and checks that a shaped transfer comes within
10% of the rate in each direction:

  python3 benchmarks/server/rate_proxy.py --self-test [--rates 1gbit,10gbit] [--mb 64]
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import socket
import sys
import threading
import time

CHUNK = 256 * 1024  # bytes per recv / send
BURST = 256 * 1024  # token bucket depth (bytes), at least; 1 ms of the rate when that is more (time.sleep's oversleep
#                    would otherwise lose credit at 10 Gb/s, where 256 KiB is 0.2 ms)


def burst_for(rate_bps: float | None) -> int:
    return BURST if rate_bps is None else max(BURST, int(rate_bps / 8 * 1e-3))


def parse_rate(s: str) -> float:
    """A tc-style rate ('1gbit', '10gbit', '500mbit', '100kbit', '1000000bit') in bits/s."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(|bit|kbit|mbit|gbit)\s*", s.lower())
    if not m:
        raise ValueError(f"rate '{s}': not NUMBER[bit|kbit|mbit|gbit]")
    return float(m.group(1)) * {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]


class TokenBucket:
    """Bytes at `rate_bps` / 8 per second with bursts of up to `burst` bytes (GCRA: a theoretical arrival time
    advanced by each send; a sender waits while it runs more than one burst ahead of the clock). rate_bps None:
    unlimited."""

    def __init__(self, rate_bps: float | None, burst: int | None = None):
        self.rate = None if rate_bps is None else rate_bps / 8.0  # bytes/s
        self.burst = burst_for(rate_bps) if burst is None else burst
        self.tat = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: int):
        if self.rate is None:
            return
        with self.lock:
            now = time.monotonic()
            self.tat = max(self.tat, now) + n / self.rate
            wait = self.tat - now - self.burst / self.rate
        if wait > 0:
            time.sleep(wait)


class RateProxy:
    """127.0.0.1:port -> upstream (host, port), each direction limited by its own TokenBucket. Use as a context
    manager or start() / stop(); set_rate() changes both directions' rate for the connections to come and the
    ones open."""

    def __init__(self, upstream: tuple[str, int], rate_bps: float | None, burst: int | None = None, port: int = 0):
        self.upstream = upstream
        self.up = TokenBucket(rate_bps, burst)    # client -> server
        self.down = TokenBucket(rate_bps, burst)  # server -> client
        self.listener = socket.create_server(("127.0.0.1", port), backlog=128)
        self.port = self.listener.getsockname()[1]
        self.stopping = False
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.bytes_up = 0
        self.bytes_down = 0
        self.acceptor = threading.Thread(target=self._accept, daemon=True, name="rate_proxy accept")

    def set_rate(self, rate_bps: float | None):
        self.up = TokenBucket(rate_bps)
        self.down = TokenBucket(rate_bps)

    def describe(self) -> str:
        rate = "unlimited" if self.up.rate is None else f"{self.up.rate * 8 / 1e9:g} Gb/s"
        return (f"user-space proxy (token bucket), {rate} per direction, burst {self.up.burst // 1024} KiB, "
                f"127.0.0.1:{self.port} -> {self.upstream[0]}:{self.upstream[1]}")

    def start(self):
        self.acceptor.start()
        return self

    def stop(self):
        self.stopping = True
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns.clear()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.upstream, timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = [c, u, 2]  # the sockets and how many pumps still use them
            with self.lock:
                self.conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u, True, pair), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, False, pair), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool, pair: list):
        pipe = _splice_pipe()
        buf = bytearray(CHUNK) if pipe is None else None
        view = memoryview(buf) if buf is not None else None
        try:
            while True:
                if pipe is not None:  # socket -> pipe -> socket in the kernel (the copy is what caps the proxy)
                    n = os.splice(src.fileno(), pipe[1], CHUNK)
                else:
                    n = src.recv_into(buf)
                if n == 0:
                    break
                (self.up if upstream else self.down).take(n)  # the bucket of now (set_rate swaps it)
                if pipe is not None:
                    left = n
                    while left:
                        left -= os.splice(pipe[0], dst.fileno(), left)
                else:
                    dst.sendall(view[:n])
                with self.lock:
                    if upstream:
                        self.bytes_up += n
                    else:
                        self.bytes_down += n
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)  # the other direction may still be answering
            except OSError:
                pass
            with self.lock:
                pair[2] -= 1
                last = pair[2] == 0
                if last:
                    self.conns = [s for s in self.conns if s is not pair[0] and s is not pair[1]]
            if pipe is not None:
                os.close(pipe[0])
                os.close(pipe[1])
            if last:
                pair[0].close()
                pair[1].close()


def _splice_pipe() -> tuple[int, int] | None:
    """A pipe of CHUNK bytes for os.splice (Linux, Python >= 3.10), or None: recv / send through a buffer."""
    if not hasattr(os, "splice"):
        return None
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, 1031, CHUNK)  # F_SETPIPE_SZ: one chunk in flight per direction
    except OSError:
        pass
    return r, w


def _measure(rate_bps: float | None, nbytes: int, direction: str) -> float:
    """Sends nbytes through a RateProxy in one direction ('up': client sends, 'down': server sends) and returns
    the achieved rate in bits/s, from the receiver's first to its last byte."""
    sink = socket.create_server(("127.0.0.1", 0))
    got = {}

    def serve():
        s, _ = sink.accept()
        if direction == "down":
            s.recv(1)  # the client's go
            _send(s, nbytes)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
        else:
            got.update(_receive(s))
        s.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with RateProxy(sink.getsockname(), rate_bps) as p:
        c = socket.create_connection(("127.0.0.1", p.port))
        if direction == "down":
            c.sendall(b"g")
            got.update(_receive(c))
        else:
            _send(c, nbytes)
        c.close()
        t.join(60)
    sink.close()
    if got.get("bytes") != nbytes:
        raise RuntimeError(f"self-test {direction}: received {got.get('bytes')} of {nbytes} bytes")
    return 8 * (nbytes - got["first_chunk"]) / (got["last"] - got["first"])


def _send(s: socket.socket, nbytes: int):
    block = memoryview(bytes(CHUNK))
    left = nbytes
    while left:
        n = min(left, CHUNK)
        s.sendall(block[:n])
        left -= n


def _receive(s: socket.socket) -> dict:
    buf = bytearray(CHUNK)
    total, first, last, first_chunk = 0, None, None, 0
    while True:
        n = s.recv_into(buf)
        if n == 0:
            break
        last = time.monotonic()
        if first is None:
            first, first_chunk = last, n  # the rate counts what arrived after the first chunk
        total += n
    return {"bytes": total, "first": first, "last": last, "first_chunk": first_chunk}


def self_test(rates: list[str], mb: float, tolerance: float = 0.10) -> bool:
    """The proxy's unshaped ceiling, then per rate and direction the achieved rate against the set one (within
    `tolerance`; a rate above 90% of the ceiling cannot be emulated here and fails). One JSON line per result."""
    ok = True
    ceiling = {d: _measure(None, int(mb * 4e6), d) for d in ("up", "down")}
    for d, bps in ceiling.items():
        print(json.dumps({"bench": "rate_proxy/ceiling", "direction": d, "gbit_per_s": round(bps / 1e9, 3)}), flush=True)
    for r in rates:
        bps = parse_rate(r)
        nbytes = int(max(mb * 1e6, bps / 8 * 0.5))  # at least half a second of traffic
        for d in ("up", "down"):
            got = _measure(bps, nbytes, d)
            err = got / bps - 1
            passed = abs(err) <= tolerance
            ok &= passed
            print(json.dumps({"bench": "rate_proxy/self_test", "rate": r, "direction": d, "mbytes": round(nbytes / 1e6, 1),
                              "achieved_gbit_per_s": round(got / 1e9, 3), "error": round(err, 4),
                              "tolerance": tolerance, "passed": passed}), flush=True)
            if not passed and bps > 0.9 * ceiling[d]:
                print(f"rate_proxy: {r} is above 90% of this machine's unshaped proxy ceiling "
                      f"({ceiling[d] / 1e9:.2f} Gb/s {d}): a user-space proxy cannot emulate it here", file=sys.stderr)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self-test", action="store_true", help="check the achieved rates (exit 1 when one is off by >10%%)")
    ap.add_argument("--rates", default="1gbit,10gbit")
    ap.add_argument("--mb", type=float, default=64, help="self-test: MB per transfer (at least half a second's worth)")
    ap.add_argument("--listen", type=int, default=0, help="serve: the local port (default ephemeral)")
    ap.add_argument("--upstream", help="serve: HOST:PORT to forward to (rate: the first of --rates)")
    a = ap.parse_args()
    if a.self_test:
        return 0 if self_test(a.rates.split(","), a.mb) else 1
    if not a.upstream:
        ap.error("--self-test or --upstream HOST:PORT")
    host, port = a.upstream.rsplit(":", 1)
    with RateProxy((host, int(port)), parse_rate(a.rates.split(",")[0]), port=a.listen) as p:
        print(p.describe(), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
