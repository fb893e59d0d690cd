#!/usr/bin/env python3
"""Compressed tensors on the wire (zstd_shuffle, net/kserve/compression.hpp): codec figures on real encoder
outputs, then samples/s end to end through an emulated 1 Gb/s and 10 Gb/s link, offer on vs off.

1. codec: benchmarks/server/wire_data.py makes real outputs (exported vae_encoder / t5_encoder TorchScript on
   32 generated images and their captions, the reference models), and `bench_wire_compression codec` runs
   codec::compress_for_wire / decompress_from_wire (the server's and the client's code) on them: ratio,
   compress and decompress GB/s per tensor kind, per row and per 32-row request.
2. fetch: jitembed-server (in network namespace `wbns`, reached over a veth pair) serves a model repository
   made here: per kind a TorchScript module that answers row i with stored real row i (the request's rows are
   32 distinct uniform 8x8 JPEGs whose grey level names the row, so the server's work is the wire, not an
   encoder; the served bytes are checked against the stored tensors first). The link is shaped with
   `tc htb rate 1gbit` / `10gbit` on both veth ends (netem is not in this kernel; htb is a rate limit with no
   added delay). `bench_wire_compression fetch` (C++ jit_client, --rows rows per request, --concurrency in
   flight) is the load generator: offer_compression on vs off, interleaved rounds, best round kept; plus the
   same on plain loopback (the client inside the namespace, 127.0.0.1).
   Targets (issue #20): at 1 Gb/s compressed samples/s >= 0.9 x ratio x uncompressed samples/s (ratio: the
   codec's measured ratio at the request's row count); on loopback offer on costs <= 5% vs off.

   Where netem or the privilege is missing (no `ip` / `tc`, not root, or the namespace setup fails) the
   benchmark uses a user-space rate-limiting proxy, which it names (table and JSON "shaping"):
   benchmarks/server/rate_proxy.py on 127.0.0.1, one token bucket per direction at the link rate, between the
   client and a jitembed-server on 127.0.0.1 (the client told compress_on_loopback: the proxy's port stands
   for a remote link). --shaping netns|proxy forces one (auto: netns when it can be set up). The proxy has a
   ceiling of its own (`python3 benchmarks/server/rate_proxy.py --self-test` measures it and checks the rates
   within 10%); a busy machine may not reach 10 Gb/s through it.

Needs a jitembed-server built with LibTorch; root (ip netns, tc) for the netns shaping. Cleans the namespace
up on exit.

  .venv/bin/python benchmarks/server/bench_wire_compression.py --bench-bin build/bench/benchmarks/server/bench_wire_compression
      [--build build/release] [--kinds vae_latent_f32,vae_latent_bf16] [--rounds 2] [--seconds 3]
      [--shaping auto|netns|proxy]

Prints tables, then one JSON object per result line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))  # wire_data, rate_proxy

NS = "wbns"
HOST_IF, NS_IF = "wbv0", "wbv1"
HOST_IP, NS_IP = "10.77.0.1", "10.77.0.2"
DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}

import rate_proxy  # noqa: E402  (HERE is on sys.path)


def netns_unavailable() -> str | None:
    """Why the netns shaping cannot run here (None: it may)."""
    for tool in ("ip", "tc"):
        if not shutil.which(tool):
            return f"no `{tool}` (iproute2)"
    if os.geteuid() != 0:
        return "not root (ip netns, tc need CAP_NET_ADMIN)"
    return None


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def netns_up():
    netns_down()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
    sh("ip", "link", "set", NS_IF, "netns", NS)
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", HOST_IF)
    sh("ip", "link", "set", HOST_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/24", "dev", NS_IF)
    sh("ip", "netns", "exec", NS, "ip", "link", "set", NS_IF, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
    for pre in ([], ["ip", "netns", "exec", NS]):
        dev = HOST_IF if not pre else NS_IF
        sh(*pre, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        sh(*pre, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "1gbit")


def set_rate(rate):
    for pre, dev in (([], HOST_IF), (["ip", "netns", "exec", NS], NS_IF)):
        sh(*pre, "tc", "class", "change", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", rate,
           "burst", "256k", "cburst", "256k")


def netns_down():
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "link", "del", HOST_IF, check=False)


def make_repository(data_dir: Path, kinds: list[str], repo: Path):
    """A model repository for jitembed-server: per kind a TorchScript module that answers a batch of n rows
    with the first n stored real tensors (the rows' 8x8 JPEGs are decoded and ignored), so the server's
    work is the wire, not an encoder."""
    import numpy as np
    import torch

    manifest = json.loads((data_dir / "manifest.json").read_text())
    by_name = {k["name"]: k for k in manifest["kinds"]}
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    pdt = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}

    class Stored(torch.nn.Module):
        def __init__(self, t):
            super().__init__()
            self.register_buffer("stored", t)

        def forward(self, x):
            # row i of the request is a uniform 8x8 JPEG of grey 8 * i + 4: it picks stored row i
            grey = x.mean(dim=[1, 2, 3]) * 255.0
            idx = torch.clamp(torch.round((grey - 4.0) / 8.0), 0, self.stored.shape[0] - 1).to(torch.long)
            return self.stored[idx]

    for name in kinds:
        k = by_name[name]
        raw = np.fromfile(data_dir / k["file"], dtype=np.uint8)
        t = torch.frombuffer(bytearray(raw.tobytes()), dtype=tdt[k["dtype"]]).reshape(k["shape"]).clone()
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        torch.jit.script(Stored(t)).save(str(repo / name / "1" / "model.pt"))
        dims = ", ".join(str(d) for d in k["shape"][1:])
        (repo / name / "config.pbtxt").write_text(f"""name: "{name}"
platform: "pytorch_libtorch"
max_batch_size: {k["shape"][0]}
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: {pdt[k["dtype"]]} dims: [ {dims} ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "modality" value: {{ string_value: "image" }} }}
parameters {{ key: "image_resize" value: {{ string_value: "stretch" }} }}
""")


def infer_raw(host, port, kind, row_files, offer):
    """One KServe binary request of the rows (http.client): (output bytes, its parameters)."""
    import http.client
    import struct
    rows = [Path(f).read_bytes() for f in row_files]
    binary = b"".join(struct.pack("<I", len(r)) + r for r in rows)
    hdr = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [len(rows)],
                       "parameters": {"binary_data_size": len(binary)}}],
           "outputs": [{"name": "OUTPUT__0", "parameters": {"binary_data": True}}]}
    if offer:
        hdr["parameters"] = {"jitembed_compression": "zstd_shuffle"}
    h = json.dumps(hdr).encode()
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("POST", f"/v2/models/{kind}/infer", body=h + binary,
              headers={"Inference-Header-Content-Length": str(len(h)), "Content-Type": "application/octet-stream"})
    r = c.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"check {kind}: HTTP {r.status} {body[:500]!r}")
    hl = int(r.getheader("Inference-Header-Content-Length"))
    out = json.loads(body[:hl])["outputs"][0]
    return body[hl:], out.get("parameters", {})


def wait_ready(srv, port, log, in_ns=True, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if srv.poll() is not None:
            raise RuntimeError(f"jitembed-server exited {srv.returncode}: {log.read_text()[-2000:]}")
        probe = [sys.executable, "-c",
                 f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/v2/health/ready', timeout=2)"]
        p = subprocess.run((["ip", "netns", "exec", NS] if in_ns else []) + probe, capture_output=True)
        if p.returncode == 0:
            return
        time.sleep(0.3)
    raise RuntimeError(f"jitembed-server not ready: {log.read_text()[-2000:]}")


def fetch(bench_bin, url, kind, row_files, offer, a, label, in_ns=False, on_loopback=False):
    cmd = [str(bench_bin), "fetch", "--url", url, "--model", kind, "--input", "image"]
    for f in row_files:
        cmd += ["--row-file", str(f)]
    if on_loopback:  # the proxy's 127.0.0.1 port stands for a remote link: offer there too
        cmd += ["--compress-on-loopback", "1"]
    cmd += ["--rows", str(a.rows), "--offer", "1" if offer else "0", "--concurrency", str(a.concurrency),
           "--seconds", str(a.seconds), "--warmup", "1", "--label", label]
    if in_ns:
        cmd = ["ip", "netns", "exec", NS] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 2 * a.seconds)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"fetch {label} failed ({p.returncode}): {p.stdout[-2000:]} {p.stderr[-2000:]}")
    j = json.loads(lines[-1])
    if j["errors"]:
        raise RuntimeError(f"fetch {label}: {j['errors']} failed requests, first: {j.get('first_error')}")
    return j


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "release", help="its model_repository is used")
    ap.add_argument("--bench-bin", type=Path, default=None, help="bench_wire_compression (default: BUILD/benchmarks/server/)")
    ap.add_argument("--server-bin", type=Path, default=None, help="jitembed-server (default: BUILD/tools/)")
    ap.add_argument("--data", type=Path, default=None, help="wire_data.py output (default: generated in a temp dir)")
    ap.add_argument("--kinds", default="vae_latent_f32,vae_latent_bf16", help="kinds served end to end")
    ap.add_argument("--links", default="1gbit,10gbit,loopback")
    ap.add_argument("--rows", type=int, default=32, help="rows per request")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per arm (best kept: the shaped link stalls now and then on a loaded machine)")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--shaping", choices=("auto", "netns", "proxy"), default="auto",
                    help="netns: veth + tc htb (root); proxy: the user-space rate-limiting proxy (rate_proxy.py); "
                         "auto: netns when it can be set up, else the proxy")
    a = ap.parse_args()
    kinds = a.kinds.split(",")

    server_bin = a.server_bin or a.build / "tools" / "jitembed-server"
    bench_bin = a.bench_bin or a.build / "benchmarks" / "server" / "bench_wire_compression"
    if not bench_bin.exists():
        sys.exit(f"bench_wire_compression.py: {bench_bin} not built")
    tmp = Path(tempfile.mkdtemp(prefix="bench_wire_"))
    data = a.data
    if data is None:
        import wire_data
        data = tmp / "data"
        wire_data.generate(data, a.build / "model_repository", 32)

    # 1. codec
    p = subprocess.run([str(bench_bin), "codec", "--data", str(data), "--frame-rows", "1", "--frame-rows", str(a.rows)],
                       capture_output=True, text=True, check=True)
    codec_lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    print(p.stdout.split("\nbench ")[0].rstrip() + "\n", flush=True)
    ratio = {j["kind"]: j["ratio"] for j in codec_lines if j["frame_rows"] == min(a.rows, 32)}

    # 2. fetch through the shaped link
    import numpy as np
    import jitembed
    row_files = []
    for i in range(32):  # distinct rows (identical rows would be computed once and answered alike)
        row_files.append(tmp / f"row{i:02d}.jpg")
        row_files[-1].write_bytes(jitembed.encode_jpeg(np.full((8, 8, 3), 8 * i + 4, np.uint8), quality=95))
    port = 18931
    results, every = {}, {}
    srv = None
    proxy = None
    shaping = {}  # link -> how it was emulated (table and JSON)
    use_netns = a.shaping == "netns"
    if a.shaping == "auto":
        why = netns_unavailable()
        if why is None:
            try:
                netns_up()
                use_netns = True
            except (subprocess.CalledProcessError, OSError) as e:
                why = f"netns setup failed: {getattr(e, 'stderr', '') or e}".strip()
                netns_down()
        if not use_netns:
            print(f"bench_wire_compression: {why}: shaping with the user-space rate-limiting proxy (rate_proxy.py)",
                  file=sys.stderr, flush=True)
    server_host = NS_IP if use_netns else "127.0.0.1"
    try:
        if a.shaping == "netns":
            netns_up()
        make_repository(data, kinds, tmp / "repository")
        log = open(tmp / "server.log", "w")
        serve = [str(server_bin), "--host", "0.0.0.0" if use_netns else "127.0.0.1", "--port", str(port),
                 "--model-repository", str(tmp / "repository"), "--max-queue-delay-us", "0"]
        srv = subprocess.Popen((["ip", "netns", "exec", NS] if use_netns else []) + serve,
                               stdout=log, stderr=subprocess.STDOUT)
        wait_ready(srv, port, tmp / "server.log", in_ns=use_netns)
        if not use_netns:
            proxy = rate_proxy.RateProxy(("127.0.0.1", port), None).start()
        wire_ratio = {}
        for kind in kinds:  # the rows answer the stored real tensors, distinct, byte for byte
            k = next(k for k in json.loads((data / "manifest.json").read_text())["kinds"] if k["name"] == kind)
            raw, _ = infer_raw(server_host, port, kind, row_files[:k["rows"]], False)
            if raw != (data / k["file"]).read_bytes():
                raise RuntimeError(f"check {kind}: the served rows are not the stored tensors")
            packed, params = infer_raw(server_host, port, kind, row_files[:a.rows], True)
            wire_ratio[kind] = params.get("jitembed_raw_byte_size", len(packed)) / len(packed)
            print(f"bench_wire_compression: {kind}: served rows == stored rows; one {a.rows}-row response "
                  f"{params.get('jitembed_raw_byte_size', len(packed))} -> {len(packed)} bytes on the wire "
                  f"({params.get('jitembed_compression', 'raw')}, ratio {wire_ratio[kind]:.3f})", file=sys.stderr, flush=True)
        for link in a.links.split(","):
            if link == "loopback":
                url = f"http://127.0.0.1:{port}"
                shaping[link] = "loopback in the namespace" if use_netns else "loopback (no proxy)"
            elif use_netns:
                set_rate(link)
                url = f"http://{NS_IP}:{port}"
                shaping[link] = "veth + tc htb (no netem)"
            else:
                proxy.set_rate(rate_proxy.parse_rate(link))
                url = f"http://127.0.0.1:{proxy.port}"
                shaping[link] = proxy.describe()
            for kind in kinds:
                for r in range(a.rounds):
                    for offer in ((True, False) if r % 2 == 0 else (False, True)):
                        j = fetch(bench_bin, url, kind, row_files, offer, a, f"{link} {kind}",
                                  in_ns=use_netns and link == "loopback", on_loopback=not use_netns and link != "loopback")
                        k = (link, kind, offer)
                        every.setdefault(k, []).append(j["samples_per_s"])
                        if k not in results or j["samples_per_s"] > results[k]["samples_per_s"]:
                            results[k] = j
                        print(f"bench_wire_compression: round {r + 1} {link:8s} {kind:16s} offer={int(offer)} "
                              f"{j['samples_per_s']:9.0f} samples/s {j['output_mb_per_s']:8.1f} MB/s (raw)",
                              file=sys.stderr, flush=True)
    finally:
        if proxy is not None:
            proxy.stop()
        if srv is not None:
            srv.send_signal(signal.SIGTERM)
            try:
                srv.wait(10)
            except subprocess.TimeoutExpired:
                srv.kill()
        if use_netns:
            netns_down()

    lines = [j for j in codec_lines]
    for link in a.links.split(","):
        print(f"shaping {link}: {shaping[link]}")
    print(f"{'link':9s} {'kind':16s} {'ratio':>6s} {'off samples/s':>14s} {'on samples/s':>13s} {'on/off':>7s} "
          f"{'target':>8s}  verdict")
    for link in a.links.split(","):
        for kind in kinds:
            on, off = results[(link, kind, True)], results[(link, kind, False)]
            got = on["samples_per_s"] / off["samples_per_s"]
            if link == "1gbit":
                target = 0.9 * ratio[kind]
            elif link == "loopback":
                target = 0.95
            else:
                target = None
            verdict = "" if target is None else ("met" if got >= target else "MISSED")
            print(f"{link:9s} {kind:16s} {ratio[kind]:6.3f} {off['samples_per_s']:14.0f} {on['samples_per_s']:13.0f} "
                  f"{got:7.3f} {('>= %.3f' % target) if target else '':>8s}  {verdict}")
            line = {"bench": "wire_compression/fetch_ratio", "link": link, "kind": kind, "codec_ratio": round(ratio[kind], 4),
                    "served_response_ratio": round(wire_ratio[kind], 4),
                    "samples_per_s_offer_off": round(off["samples_per_s"], 1),
                    "samples_per_s_offer_on": round(on["samples_per_s"], 1), "on_over_off": round(got, 4),
                    "raw_mb_per_s_off": round(off["output_mb_per_s"], 1), "raw_mb_per_s_on": round(on["output_mb_per_s"], 1),
                    "rounds_off": [round(x) for x in every[(link, kind, False)]],
                    "rounds_on": [round(x) for x in every[(link, kind, True)]],
                    "rows_per_request": a.rows, "concurrency": a.concurrency,
                    "shaping": shaping[link]}
            if target:
                line.update({"target": round(target, 4), "target_met": got >= target})
            lines.append(line)
    print()
    for l in lines:
        print(json.dumps(l))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
