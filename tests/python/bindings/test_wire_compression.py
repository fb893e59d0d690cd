"""Compressed tensors on the wire from Python (net/kserve/compression.hpp): jitembed.Server's compression options
decide which outputs go compressed to a request that offers (seen in the raw response's tensor parameters), and
jitembed.Client's offer_compression / compress_on_loopback / compress_inputs change the bytes on the wire (counted
by a TCP relay in between) but not one bit of the results."""
import http.client
import json
import socket
import threading

import pytest

import jitembed

TEXT = "text-embed:text_dim=32,text_max_length=64"
ROWS = [f"a photo of thing number {i} on a table".encode() for i in range(32)]


class CountingRelay:
    """127.0.0.1:port -> the server, counting the bytes of each direction (the client sees a loopback address)."""

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = self.down = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            u = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(c, u, "up"), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c, "down"), daemon=True).start()

    def _pump(self, src, dst, direction):
        try:
            while True:
                b = src.recv(1 << 16)
                if not b:
                    break
                with self.lock:
                    setattr(self, direction, getattr(self, direction) + len(b))
                dst.sendall(b)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def counts(self):
        with self.lock:
            return self.up, self.down

    def close(self):
        self.listener.close()


def infer_json(rows, offer):
    hdr = {"inputs": [{"name": "text", "datatype": "BYTES", "shape": [len(rows)], "data": [r.decode() for r in rows]}],
           "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in ("sequence", "mask", "pooled")]}
    if offer:
        hdr["parameters"] = {"jitembed_compression": "zstd_shuffle"}
    return json.dumps(hdr).encode()


def output_params(body, header_length):
    return {o["name"]: o.get("parameters", {}) for o in json.loads(body[:int(header_length)])["outputs"]}


def test_server_compresses_what_its_options_allow():
    body = infer_json(ROWS, offer=True)
    headers = {"Content-Type": "application/json"}
    with jitembed.Server(models=[TEXT], preprocess_threads=1) as srv:  # defaults: >= 4096 bytes saving >= 10%
        status, h, resp = srv.handle("POST", "/v2/models/text-embed/infer", headers, body)
        assert status == 200
        p = output_params(resp, h["Inference-Header-Content-Length"])
        assert p["sequence"]["jitembed_compression"] == "zstd_shuffle"  # 32 x 64 x 32 fp32, mostly padding
        assert p["sequence"]["jitembed_raw_byte_size"] == 32 * 64 * 32 * 4
        assert p["sequence"]["binary_data_size"] < 0.9 * p["sequence"]["jitembed_raw_byte_size"]
        assert "jitembed_compression" not in p["mask"]  # 2 KiB: under compression_min_bytes
        status, h, resp = srv.handle("POST", "/v2/models/text-embed/infer", headers, infer_json(ROWS, offer=False))
        assert status == 200
        assert all("jitembed_compression" not in q for q in output_params(resp, h["Inference-Header-Content-Length"]).values())
    with jitembed.Server(models=[TEXT], preprocess_threads=1, compression_min_bytes=0, compression_min_saving=0.0,
                         compression_level=3) as srv:
        status, h, resp = srv.handle("POST", "/v2/models/text-embed/infer", headers, body)
        p = output_params(resp, h["Inference-Header-Content-Length"])
        assert p["mask"]["jitembed_compression"] == "zstd_shuffle"
        # the same over the socket (http.client: a raw request, nothing decompressed on the way)
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=20)
        c.request("POST", "/v2/models/text-embed/infer", body=body, headers=headers)
        r = c.getresponse()
        raw = r.read()
        assert r.status == 200
        q = output_params(raw, r.getheader("Inference-Header-Content-Length"))
        assert q["sequence"]["jitembed_compression"] == "zstd_shuffle" and q["mask"]["jitembed_compression"] == "zstd_shuffle"
        c.close()
    with jitembed.Server(models=[TEXT], preprocess_threads=1, compression_min_saving=1.0) as srv:  # 1: never
        status, h, resp = srv.handle("POST", "/v2/models/text-embed/infer", headers, body)
        assert all("jitembed_compression" not in q for q in output_params(resp, h["Inference-Header-Content-Length"]).values())


def test_client_offer_changes_the_wire_not_the_results():
    with jitembed.Server(models=[TEXT], preprocess_threads=1) as srv, \
            jitembed.Client(local_models=[TEXT], local_threads=1) as local:
        want = local.embed("text-embed", ROWS, input="text")
        relay = CountingRelay(srv.port)
        try:
            received = {}
            for label, kw in {"off": dict(offer_compression=False),
                              "offer, loopback skipped": dict(offer_compression=True),  # compress_on_loopback False
                              "on": dict(offer_compression=True, compress_on_loopback=True)}.items():
                with jitembed.Client(endpoints=[f"http://127.0.0.1:{relay.port}"], request_timeout_ms=20000, **kw) as c:
                    before = relay.counts()
                    r = c.embed("text-embed", ROWS, input="text")
                    received[label] = relay.counts()[1] - before[1]
                for name in want.outputs:
                    assert r[name].dtype == want[name].dtype and r[name].tobytes() == want[name].tobytes(), (label, name)
            assert received["on"] < 0.5 * received["off"], received  # the padded sequence output shrinks many times
            assert received["offer, loopback skipped"] > 0.9 * received["off"], received
        finally:
            relay.close()


def test_client_compress_inputs():
    rows = [(f"row {i}: " + "a long and repetitive caption " * 40).encode() for i in range(16)]
    with jitembed.Server(models=[TEXT], preprocess_threads=1) as srv, \
            jitembed.Client(local_models=[TEXT], local_threads=1) as local:
        want = local.embed("text-embed", rows, input="text")
        relay = CountingRelay(srv.port)
        try:
            sent = {}
            for on in (False, True):
                with jitembed.Client(endpoints=[f"http://127.0.0.1:{relay.port}"], request_timeout_ms=20000,
                                     offer_compression=False, compress_inputs=on, compression_min_bytes=0,
                                     compression_min_saving=0.05, compression_level=3) as c:
                    before = relay.counts()
                    r = c.embed("text-embed", rows, input="text")
                    sent[on] = relay.counts()[0] - before[0]
                for name in want.outputs:
                    assert r[name].tobytes() == want[name].tobytes(), (on, name)
            assert sent[True] < 0.5 * sent[False], sent
        finally:
            relay.close()


def test_compression_option_errors():
    with pytest.raises(jitembed.Error) as e:
        jitembed.Server(models=[TEXT], compression_min_saving=1.5)
    assert "compression_min_saving" in str(e.value)
    with pytest.raises(jitembed.Error) as e:
        jitembed.Client(local_models=[TEXT], compression_min_saving=-0.1)
    assert "compression_min_saving" in str(e.value)
