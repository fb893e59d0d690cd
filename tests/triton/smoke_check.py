#!/usr/bin/env python3
"""Smoke check of the Triton test peer (run by run_tritonserver.py, which sets JITEMBED_TRITON_URL).

Infers rows through the real tritonserver with the JSON protocol and Triton's binary tensor extension,
hand-made with urllib (standard library only) and, when importable, with tritonclient.http; compares
every value exactly with the function of tests/triton/README.md recomputed here in plain Python.
Also: concurrent requests (dynamic batching must keep each request's rows in order), the FP16 model,
404 for an unknown model. Exit 0 when all hold; prints 'N passed, 0 failed'.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

URL = os.environ.get("JITEMBED_TRITON_URL", "")
DIM = 8
MODELS = {"jit_embed": ("FP32", 65521, 8), "jit_embed_fp16": ("FP16", 2039, 6)}
ROWS = [b"abc", b"", bytes(range(256)) * 3]  # 3 rows: text, empty, every byte value (768 bytes)

checks = {"passed": 0, "failed": 0}


def check(cond: bool, what: str) -> None:
    if cond:
        checks["passed"] += 1
    else:
        checks["failed"] += 1
        print(f"FAIL: {what}", flush=True)


def reference(row: bytes, modulus: int, scale_log2: int) -> list[float]:
    return [(sum(b * (i + 1 + j) for i, b in enumerate(row)) % modulus) / (1 << scale_log2) for j in range(DIM)]


def half_to_float(h: int) -> float:
    return struct.unpack("<e", struct.pack("<H", h))[0]


def post(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(URL + path, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def infer_json(model: str, rows: list[bytes]) -> list[list[float]]:
    body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [len(rows), 1], "datatype": "BYTES",
                                   "data": [r.decode("latin-1") for r in rows]}]}).encode()
    # JSON strings are UTF-8 on the wire: only pure-ASCII rows round-trip unchanged (callers ensure it)
    status, _, data = post(f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
    assert status == 200, (status, data[:300])
    out = json.loads(data)["outputs"][0]
    assert out["shape"] == [len(rows), DIM], out["shape"]
    flat = out["data"]
    return [flat[r * DIM:(r + 1) * DIM] for r in range(len(rows))]


def infer_binary(model: str, rows: list[bytes]) -> list[list[float]]:
    tensor = b"".join(struct.pack("<I", len(r)) + r for r in rows)
    header = json.dumps({
        "inputs": [{"name": "INPUT0", "shape": [len(rows), 1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(tensor)}}],
        "outputs": [{"name": "EMBEDDING", "parameters": {"binary_data": True}}],
    }).encode()
    status, headers, data = post(f"/v2/models/{model}/infer", header + tensor,
                                 {"Content-Type": "application/octet-stream",
                                  "Inference-Header-Content-Length": str(len(header))})
    assert status == 200, (status, data[:300])
    hlen = int({k.lower(): v for k, v in headers.items()}["inference-header-content-length"])
    meta = json.loads(data[:hlen])
    out = meta["outputs"][0]
    assert out["shape"] == [len(rows), DIM], out["shape"]
    raw = data[hlen:hlen + out["parameters"]["binary_data_size"]]
    if out["datatype"] == "FP32":
        flat = list(struct.unpack(f"<{len(rows) * DIM}f", raw))
    else:
        assert out["datatype"] == "FP16", out["datatype"]
        flat = [half_to_float(h) for h in struct.unpack(f"<{len(rows) * DIM}H", raw)]
    return [flat[r * DIM:(r + 1) * DIM] for r in range(len(rows))]


def compare(got: list[list[float]], rows: list[bytes], model: str, what: str) -> None:
    _, m, k = MODELS[model]
    check(len(got) == len(rows), f"{what}: {len(got)} rows for {len(rows)}")
    for r, row in enumerate(rows):
        want = reference(row, m, k)
        check(got[r] == want, f"{what}: row {r}: got {got[r]} want {want}")


def main() -> int:
    if not URL:
        print("smoke_check: JITEMBED_TRITON_URL is not set (run through run_tritonserver.py)")
        return 1
    ascii_rows = [b"abc", b"", b"hello triton" * 20]
    for model in MODELS:
        compare(infer_binary(model, ROWS), ROWS, model, f"{model} binary")
    compare(infer_json("jit_embed", ascii_rows), ascii_rows, "jit_embed", "jit_embed json")
    # Triton cannot send FP16 as JSON: 400 "sending FP16 data via JSON is not supported" (binary only)
    try:
        infer_json("jit_embed_fp16", ascii_rows)
        check(False, "jit_embed_fp16 json: expected HTTP 400 (FP16 as JSON is unsupported)")
    except AssertionError as e:
        check(e.args[0][0] == 400, f"jit_embed_fp16 json: {e}")

    # concurrent requests of 1..8 rows: the dynamic batcher merges them; each answer keeps its own rows
    reqs = [[bytes([(7 * n + r) % 256]) * (n + r + 1) for r in range(1 + n % 8)] for n in range(24)]
    with ThreadPoolExecutor(8) as pool:
        for n, got in enumerate(pool.map(lambda rows: infer_binary("jit_embed", rows), reqs)):
            compare(got, reqs[n], "jit_embed", f"concurrent request {n}")

    status, _, body = post("/v2/models/no_such_model/infer", b'{"inputs":[]}', {"Content-Type": "application/json"})
    check(status == 404, f"unknown model: HTTP {status} {body[:200]!r}")
    print(f"smoke_check: unknown model answers HTTP {status}: {body[:120].decode(errors='replace')}")
    status, _, _ = post("/v2/models/jit_embed/infer",
                        json.dumps({"inputs": [{"name": "INPUT0", "shape": [65, 1], "datatype": "BYTES",
                                                "data": ["x"] * 65}]}).encode(), {"Content-Type": "application/json"})
    check(status == 400, f"65 rows > max_batch_size 64: HTTP {status}")

    try:
        import numpy as np
        import tritonclient.http as httpclient
    except ImportError as e:
        print(f"smoke_check: tritonclient not importable ({e}); checked with urllib only")
    else:
        client = httpclient.InferenceServerClient(URL.removeprefix("http://"))
        for model, (dtype, m, k) in MODELS.items():
            for binary in ((True, False) if dtype == "FP32" else (True,)):
                rows = ROWS if binary else ascii_rows
                inp = httpclient.InferInput("INPUT0", [len(rows), 1], "BYTES")
                inp.set_data_from_numpy(np.array(rows, dtype=np.object_).reshape(-1, 1), binary_data=binary)
                out = httpclient.InferRequestedOutput("EMBEDDING", binary_data=binary)
                got = client.infer(model, [inp], outputs=[out]).as_numpy("EMBEDDING")
                want = np.array([reference(r, m, k) for r in rows], dtype=np.float32 if dtype == "FP32" else np.float16)
                check(got.dtype == want.dtype and got.shape == want.shape and bool((got == want).all()),
                      f"tritonclient {model} binary={binary}: {got} != {want}")
        client.close()
        print("smoke_check: tritonclient.http checks done")

    print(f"{checks['passed']} passed, {checks['failed']} failed")
    return 0 if checks["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
